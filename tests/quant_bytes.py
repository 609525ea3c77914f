#!/usr/bin/env python3
# quant_bytes.py -- derives tests/quant_bytes.h, the fixed blocks test_quant.c checks
#
# Not part of the build: it documents how the expected bytes and values were derived, from the
# formulas sdpa.h publishes alone, in binary32 arithmetic emulated with Python floats: every
# operation is done in double and rounded to float by struct. That is exact for products of two
# floats and innocuous for sums and quotients (double has more than 2 * 24 + 2 bits). f16 and
# its rounding are struct's 'e' format (nearest even; overflow raises).
#
#     python3 tests/quant_bytes.py > tests/quant_bytes.h
import random
import struct
from fractions import Fraction

QK = 32
IQ4NL = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113]


def f32(x):
    return struct.unpack('<f', struct.pack('<f', x))[0]


def f16_bits(x):
    try:
        return struct.unpack('<H', struct.pack('<e', x))[0]
    except OverflowError:
        raise ValueError('scale over the f16 range')


def f16_value(h):
    return struct.unpack('<e', struct.pack('<H', h))[0]


def recip(d):  # "x / d" is x times the f32 reciprocal; 0 where d is 0; None where it overflows
    if d == 0.0:
        return 0.0
    r = 1.0 / d
    return None if abs(r) > 3.4028234663852886e38 else f32(r)


def first_amax(x):  # the first element of largest magnitude, signed
    amax, m = 0.0, 0.0
    for v in x:
        if amax < abs(v):
            amax, m = abs(v), v
    return m


def pack(n, qh):  # nibbles (element i < 16 low, 16 + i high nibble of byte i), 5th bits as u32
    qs = bytes((n[i] & 15) | (n[16 + i] & 15) << 4 for i in range(16))
    if not qh:
        return qs
    h = sum(((v >> 4) & 1) << i for i, v in enumerate(n))
    return struct.pack('<I', h) + qs


def q8_0(x):
    d = f32(max(abs(v) for v in x) / 127.0)
    idv = recip(d)
    t = [f32(v * idv) for v in x] if idv is not None else [0.0] * QK
    q = [int(abs(v) + 0.5) * (1 if v >= 0 else -1) for v in t]  # half away from zero
    return struct.pack('<H', f16_bits(d)) + bytes(v & 255 for v in q)


def qx_0(x, bits):  # q4_0, q5_0: d = m / -2^(bits-1), n = min(top, trunc(x / d + 2^(bits-1) + 0.5))
    half, top = 1 << (bits - 1), (1 << bits) - 1
    d = f32(first_amax(x) / -half)
    idv = recip(d)
    n = [0] * QK if idv is None else [min(top, int(f32(f32(v * idv) + (half + 0.5)))) for v in x]
    return struct.pack('<H', f16_bits(d)) + pack(n, bits == 5)


def qx_1(x, bits):  # q4_1, q5_1: d = (hi - lo) / top, m = lo, n = trunc((x - lo) / d + 0.5)
    top = (1 << bits) - 1
    lo, hi = x[0], x[0]
    for v in x[1:]:
        lo = v if v < lo else lo
        hi = v if v > hi else hi
    d = f32(f32(hi - lo) / top)
    idv = recip(d)
    n = [0] * QK if idv is None else [int(f32(f32(f32(v - lo) * idv) + 0.5)) for v in x]
    if bits == 4:
        n = [min(15, v) for v in n]
    return struct.pack('<HH', f16_bits(d), f16_bits(lo)) + pack(n, bits == 5)


def nearest(v):  # the index of the nearest table value, the upper one on a tie
    if v <= IQ4NL[0]:
        return 0
    if v >= IQ4NL[15]:
        return 15
    k = max(i for i in range(15) if IQ4NL[i] <= v)
    return k if v - IQ4NL[k] < IQ4NL[k + 1] - v else k + 1


def iq4_nl(x):
    if max(abs(v) for v in x) < f32(1e-15):
        return struct.pack('<H', f16_bits(0.0)) + bytes(16)
    idv = f32(1.0 / f32(first_amax(x) / -127.0))
    n, sqx, sq2 = [], 0.0, 0.0
    for v in x:
        n.append(nearest(f32(idv * v)))
        q = float(IQ4NL[n[-1]])
        wq = f32(f32(v * v) * q)
        sqx = f32(sqx + f32(wq * v))
        sq2 = f32(sq2 + f32(wq * q))
    d = f32(sqx / sq2) if sq2 > 0 else 0.0
    return struct.pack('<H', f16_bits(d)) + pack(n, False)


def values(t, b):  # d n exactly, or d n + m rounded once (exact in double, then to float)
    d = f16_value(struct.unpack('<H', b[0:2])[0])
    m = f16_value(struct.unpack('<H', b[2:4])[0]) if t in ('q4_1', 'q5_1') else None
    qs = b[{'q8_0': 2, 'q4_0': 2, 'q4_1': 4, 'q5_0': 6, 'q5_1': 8, 'iq4_nl': 2}[t]:]
    qh = struct.unpack('<I', b[2:6] if t == 'q5_0' else b[4:8])[0] if t in ('q5_0', 'q5_1') else 0
    out = []
    for i in range(QK):
        if t == 'q8_0':
            out.append(d * struct.unpack('<b', b[2 + i:3 + i])[0])
            continue
        n = (qs[i] if i < 16 else qs[i - 16] >> 4) & 15 | ((qh >> i) & 1) << 4
        n = {'q4_0': n - 8, 'q5_0': n - 16, 'iq4_nl': IQ4NL[n & 15]}.get(t, n)
        out.append(f32(d * n + m) if m is not None else f32(d * n))
    return out


CODECS = {'q8_0': q8_0, 'q4_0': lambda x: qx_0(x, 4), 'q4_1': lambda x: qx_1(x, 4),
          'q5_0': lambda x: qx_0(x, 5), 'q5_1': lambda x: qx_1(x, 5), 'iq4_nl': iq4_nl}
CNAME = {'q8_0': 'Q8', 'q4_0': 'Q4', 'q4_1': 'Q41', 'q5_0': 'Q50', 'q5_1': 'Q51', 'iq4_nl': 'IQ4'}

rng = random.Random(26)
mid = [(IQ4NL[k] + IQ4NL[k + 1]) / 2 for k in range(15)]
# the blocks every type is given, then one of ties per type (None: every type)
INPUTS = [
    ('ramp', None, [(i - 10) * 0.125 for i in range(QK)]),
    ('negative largest magnitude first, +3 later', None,
     [-3.0 if i == 3 else 3.0 if i == 20 else ((i * 7) % 13 - 6) * 0.1875 for i in range(QK)]),
    ('constant', None, [0.375] * QK),
    ('zeros', None, [0.0] * QK),
    ('negative zeros', None, [-0.0] * QK),
    ('subnormal: 1 / d overflows', None, [f32(((i % 5) - 2) * 1e-39) for i in range(QK)]),
    ('largest |x| 1e-15: d rounds to an f16 0', None,
     [f32(1e-15)] + [f32(f32(1e-15) * (i - 16) / 16) for i in range(1, QK)]),
    ('largest |x| below 1e-15', None,
     [f32(0.99e-15)] + [f32(f32(0.99e-15) * (i - 16) / 16) for i in range(1, QK)]),
    ('random in (-1, 1)', None, [f32(rng.uniform(-1, 1)) for _ in range(QK)]),
    ('minimum -60000, spread 2', None, [-60000.0 + i * 0.0625 for i in range(QK)]),
    ('ties: d = 1, x / d = n + 0.5', 'q8_0',
     [127.0] + [(1 if i % 2 else -1) * ((i * 5) % 40 + 0.5) for i in range(1, QK)]),
    ('ties: d = 1, x / d + 8.5 an integer', 'q4_0',
     [-8.0] + [(i % 15) - 6.5 for i in range(1, QK - 1)] + [8.0]),
    ('ties: d = 1, (x - lo) / d + 0.5 an integer', 'q4_1',
     [-3.0 if i == 5 else 12.0 if i == 9 else -3.0 + (i % 15) + 0.5 for i in range(QK)]),
    ('ties: d = 1, x / d + 16.5 an integer', 'q5_0',
     [-16.0] + [((i * 3) % 31) - 14.5 for i in range(1, QK - 1)] + [16.0]),
    ('ties: d = 1, (x - lo) / d + 0.5 an integer', 'q5_1',
     [-3.0 if i == 5 else 28.0 if i == 9 else -3.0 + (i % 31) + 0.5 for i in range(QK)]),
    ('ties between table values: -127 first, x halfway', 'iq4_nl',
     [-127.0, 127.0] + mid + [float(v) for v in IQ4NL[:15]]),
]


def cfloat(v):  # a decimal where one short is the value exactly, else the exact hex form
    s = repr(float(v))
    if len(s) <= 12 and 'e' not in s and Fraction(s) == Fraction(v) and s != '-0.0':
        return s + 'f'
    mant, exp = float(v).hex().split('p')
    return mant.rstrip('0').rstrip('.') + 'p' + exp + 'f'


def row(items):  # one block's array on one line, so that the rows do not repeat line shapes
    return '{' + ', '.join(items) + '}'


print('/* quant_bytes.h -- test_quant.c\'s fixed blocks: inputs, expected bytes and values */')
print('/* Generated by tests/quant_bytes.py from the formulas of sdpa.h; do not edit. */')
print('/* clang-format off */')
print('static const qb_input qb_inputs[] = {')
for name, only, x in INPUTS:
    assert len(x) == QK and all(f32(v) == v for v in x), name
    xs = row([cfloat(v) for v in x])
    print('    {"%s", %s, %s},' % (name, CNAME[only] if only else 'F32', xs))
print('};')
print('static const qb_case qb_cases[] = {')
for t in CODECS:
    for k, (name, only, x) in enumerate(INPUTS):
        if only not in (None, t):
            continue
        b = CODECS[t](x)
        y = values(t, b)
        bs = row(['0x%02x' % c for c in b])
        ys = row([cfloat(v) for v in y])
        print('    {%s, %d, %d, %s, %s},' % (CNAME[t], k, len(b), bs, ys))
print('};')
print('/* clang-format on */')
