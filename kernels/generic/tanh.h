/* tanh.h -- the tanh softcap uses, compiled per ISA */
#ifndef SDPA_TANH_H
#define SDPA_TANH_H

#include <math.h>
#include <stddef.h>

/* placeholder: libm's tanhf (to be replaced by the vectorised one) */
#define SDPA_TANH_MAX_ULP 2.0
static inline void sdpa_tanh_f32(const float *x, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] = tanhf(x[i]);
}

#endif /* SDPA_TANH_H */
