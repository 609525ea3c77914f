/* decode.c -- a consumer of the installed libsdpa: one GQA decode step, checked against double */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sdpa.h>

#define STR2(x) #x
#define STR(x)  STR2(x)

enum { HQ = 8, HKV = 2, N = 300, D = 64 };

int main(void)
{
    /* the header and the library it links must be the same version */
    const char *want =
        STR(SDPA_VERSION_MAJOR) "." STR(SDPA_VERSION_MINOR) "." STR(SDPA_VERSION_PATCH);
    if (strcmp(sdpa_version(), want) != 0) {
        fprintf(stderr, "version mismatch: header %s, library %s\n", want, sdpa_version());
        return 1;
    }
    static float q[HQ * D], k[HKV * N * D], v[HKV * N * D], o[HQ * D];
    unsigned s = 12345;
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
        s = s * 1103515245u + 12345u, k[i] = (float)((s >> 9) % 2001) / 1000.0f - 1.0f;
        s = s * 1103515245u + 12345u, v[i] = (float)((s >> 9) % 2001) / 1000.0f - 1.0f;
    }
    for (size_t i = 0; i < sizeof q / sizeof *q; i++)
        s = s * 1103515245u + 12345u, q[i] = (float)((s >> 9) % 2001) / 1000.0f - 1.0f;
    sdpa_params p;
    memset(&p, 0, sizeof p);
    p.batch = 1, p.q_heads = HQ, p.kv_heads = HKV, p.q_len = 1, p.kv_len = N, p.head_dim = D;
    sdpa_tensor tq = {q, SDPA_F32, HQ * D, D, D}, to = {o, SDPA_F32, HQ * D, D, D};
    sdpa_tensor tk = {k, SDPA_F32, HKV * N * D, N * D, D},
                tv = {v, SDPA_F32, HKV * N * D, N * D, D};
    const sdpa_status st = sdpa_forward(&p, &tq, &tk, &tv, &to);
    if (st != SDPA_OK) {
        fprintf(stderr, "sdpa_forward: %s\n", sdpa_status_str(st));
        return 1;
    }
    double worst = 0;
    for (size_t h = 0; h < HQ; h++) {
        const float *kh = k + h / (HQ / HKV) * N * D, *vh = v + h / (HQ / HKV) * N * D;
        double sc[N], mx = -INFINITY, l = 0;
        for (size_t j = 0; j < N; j++) {
            double d = 0;
            for (size_t c = 0; c < D; c++) d += (double)q[h * D + c] * kh[j * D + c];
            sc[j] = d / sqrt((double)D);
            if (sc[j] > mx) mx = sc[j];
        }
        for (size_t j = 0; j < N; j++) l += (sc[j] = exp(sc[j] - mx));
        for (size_t c = 0; c < D; c++) {
            double acc = 0;
            for (size_t j = 0; j < N; j++) acc += sc[j] * vh[j * D + c];
            const double err = fabs(acc / l - o[h * D + c]);
            if (!(err <= worst)) worst = err;
        }
    }
    printf("sdpa %s on %s: decode of %d keys, max |error| %.3g\n", sdpa_version(),
           sdpa_impl_name(sdpa_active()), N, worst);
    return worst < 1e-5 ? 0 : 1;
}
