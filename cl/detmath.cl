/* Deterministic math for the noise (docs/stream.md).
 *
 * Every function here is built only from operations OpenCL requires to be
 * correctly rounded: + - * and fma in fp32, and also / in fp64. With
 * FP_CONTRACT OFF the compiler may not fuse or reorder them, so every
 * conformant device computes the same bits, and lib/oracle/stream.c computes the
 * same bits on the host. Inputs on the noise path are positive and normal.
 */
#pragma OPENCL FP_CONTRACT OFF

#define PSR_CAT2(a, b) a##b
#define PSR_CAT(a, b) PSR_CAT2(a, b)

/* ln 2 split so that e * PSR_LN2_HI is exact for |e| < 2^10. */
#define PSR_LN2_HI 0x1.62e000p-1f
#define PSR_LN2_LO 0x1.0bfbe8p-15f

/* log1p(f) for f in [sqrt(1/2) - 1, sqrt(2) - 1]: f + f^2 * P(f), with P a
 * degree-8 least-squares fit of (log1p(f) - f) / f^2 (max error 0.7 ulp).
 * A macro defines `T name(T f)`, so that the vector path (vecmath.cl)
 * evaluates the very same polynomial on float16. */
#define PSR_DEFINE_LOG1P_REDUCED(name, T)                                                   \
    inline T name(T f)                                                                      \
    {                                                                                       \
        T p = (T)(-0x1.321a4cp-4f);                                                         \
        p = fma(p, f, (T)(0x1.068b2ap-3f));                                                 \
        p = fma(p, f, (T)(-0x1.0f9b0cp-3f));                                                \
        p = fma(p, f, (T)(0x1.22bf86p-3f));                                                 \
        p = fma(p, f, (T)(-0x1.5424e0p-3f));                                                \
        p = fma(p, f, (T)(0x1.999fc2p-3f));                                                 \
        p = fma(p, f, (T)(-0x1.000422p-2f));                                                \
        p = fma(p, f, (T)(0x1.555558p-2f));                                                 \
        p = fma(p, f, (T)(-0x1.fffff8p-2f));                                                \
        T f2 = f * f;                                                                       \
        return fma(f2, p, f);                                                               \
    }
PSR_DEFINE_LOG1P_REDUCED(psr_log1p_reduced, float)

/* Natural log of a positive normal float: x = m * 2^e, m in [sqrt(1/2), sqrt(2)). */
inline float psr_det_log(float x)
{
    uint bits = as_uint(x);
    int e = (int)((bits >> 23) & 0xffu) - 127;
    float m = as_float((bits & 0x007fffffu) | 0x3f800000u);
    if (m > 0x1.6a09e6p+0f) {
        m = m * 0.5f;
        e = e + 1;
    }
    float q = psr_log1p_reduced(m - 1.0f); /* m - 1 is exact */
    float fe = (float)e;
    return fma(fe, PSR_LN2_HI, fma(fe, PSR_LN2_LO, q));
}

/* log1p(-u) for u in (0, 1), with every reduction exact:
 *   u <= 1 - sqrt(1/2): the polynomial at -u;
 *   u <= 1/2:           log(1 - u) = -ln 2 + log1p(1 - 2u), and 1 - 2u is exact;
 *   u > 1/2:            log(1 - u), 1 - u exact (Sterbenz). */
inline float psr_det_log1p_neg(float u)
{
    if (u <= 0x1.2bec34p-2f)
        return psr_log1p_reduced(-u);
    if (u <= 0.5f)
        return fma(-1.0f, PSR_LN2_HI, fma(-1.0f, PSR_LN2_LO, psr_log1p_reduced(1.0f - 2.0f * u)));
    return psr_det_log(1.0f - u);
}

/* e^r for |r| <= ln 2 / 2 by its Taylor series to r^7 (error under 0.1
 * ulp); a macro defines `T name(T r)` for float and (vecmath.cl) float16. */
#define PSR_DEFINE_EXP_REDUCED(name, T)                                                     \
    inline T name(T r)                                                                      \
    {                                                                                       \
        T p = (T)(0x1.a01a02p-13f); /* 1/7! */                                              \
        p = fma(p, r, (T)(0x1.6c16c2p-10f)); /* 1/6! */                                     \
        p = fma(p, r, (T)(0x1.111112p-7f));  /* 1/5! */                                     \
        p = fma(p, r, (T)(0x1.555556p-5f));  /* 1/4! */                                     \
        p = fma(p, r, (T)(0x1.555556p-3f));  /* 1/3! */                                     \
        p = fma(p, r, (T)(0.5f));                                                           \
        p = fma(p, r, (T)(1.0f));                                                           \
        return fma(p, r, (T)(1.0f));                                                        \
    }
PSR_DEFINE_EXP_REDUCED(psr_exp_reduced, float)

/* e^y for y <= 0 (0 below about -87, where the result would be
 * subnormal): y = k ln 2 + r with |r| <= ln 2 / 2, then e^r, scaled by an
 * exact power of two. */
inline float psr_det_exp_neg(float y)
{
    if (!(y > -87.0f))
        return 0.0f;
    float k = rint(y * 0x1.715476p+0f);
    float r = fma(-k, PSR_LN2_HI, y);
    r = fma(-k, PSR_LN2_LO, r);
    return psr_exp_reduced(r) * as_float((uint)((int)k + 127) << 23);
}

/* 2^z for z <= 0, the log-sum-exp's term (cl/verify.cl): 0 for NaN and
 * at or below -125 (the result stays normal, so no device flushes it);
 * else z = k + f with k = rint(z) and f = z - k exact, |f| <= 1/2, and
 * 2^f by a degree-5 fit with 2^0 exactly 1 (within 2.9 ulp), scaled by
 * 2^k. Cheaper than psr_det_exp_neg: no ln 2 reduction, a shorter
 * polynomial; a sum of exps needs no more. k comes from adding 1.5 * 2^23,
 * which rounds z to an integer as rint does (to nearest, ties to even)
 * and leaves k in the low bits, so the scaling is an integer add: the
 * same bits as rint and a multiply by 2^k, without the conversions (a
 * quarter-rate instruction class on NVIDIA). Only for z <= 0 (above, the
 * shift wraps), and only without -cl-fast-relaxed-math or
 * -cl-unsafe-math-optimizations, which may fold (z + C) - C to z. */
inline float psr_det_exp2_neg(float z)
{
    if (!(z > -125.0f))
        return 0.0f;
    float kk = z + 0x1.8p23f;
    float f = z - (kk - 0x1.8p23f);
    float p = 0x1.5bba14p-10f;
    p = fma(p, f, 0x1.3cea88p-7f);
    p = fma(p, f, 0x1.c6b752p-5f);
    p = fma(p, f, 0x1.ebf9bcp-3f);
    p = fma(p, f, 0x1.62e42ap-1f);
    p = fma(p, f, 1.0f);
    /* p * 2^k: k's bits shift into the exponent (unsigned, so the shift
     * and the add wrap mod 2^32 instead of overflowing). */
    return as_float(as_uint(p) + (as_uint(kk) << 23));
}

/* 1/b for a positive normal b, within 1 ulp: a bit-trick seed and four
 * Newton steps, each residual computed exactly by fma. A macro defines
 * `T name(T b)` for T = float and (vecmath.cl) float16, U its uint type. */
#define PSR_DEFINE_DET_RECIP(name, T, U)                                                    \
    inline T name(T b)                                                                      \
    {                                                                                       \
        T y = PSR_CAT(as_, T)((U)0x7ef311c3u - PSR_CAT(as_, U)(b));                         \
        for (int i = 0; i < 4; i++) {                                                       \
            T r = fma(-b, y, (T)(1.0f));                                                    \
            y = fma(y, r, y);                                                               \
        }                                                                                   \
        return y;                                                                           \
    }
PSR_DEFINE_DET_RECIP(psr_det_recip, float, uint)

/* 1/T for a temperature T > 0: above 2^126 the reciprocal would be
 * subnormal (zero where denormals flush), so it is 2^-126 there, and
 * infinite logits stay infinite when scaled (lib/oracle/stream.c: the same). */
inline float psr_temp_recip(float t)
{
    return psr_det_recip(fmin(t, 0x1p126f));
}

/* a / b given r = psr_det_recip(b): one fma correction of a * r. */
inline float psr_det_div(float a, float b, float r)
{
    float q = a * r;
    float rem = fma(-q, b, a);
    return fma(rem, r, q);
}

#if PSR_WITH_FP64
#define PSR_LN2_HI_D 0x1.62e42fee00000p-1
#define PSR_LN2_LO_D 0x1.a39ef35793c76p-33

/* Natural log of a positive normal double, from log1p(f) = 2 atanh(s),
 * s = f / (2 + f), |s| < 0.172: the series converges by s^2 < 0.03 a term.
 * A macro defines `T name(T x)` for T = double and (vecmath.cl) double16;
 * I and U are the signed and unsigned integers of T's size and shape. */
#define PSR_DEFINE_DET_LOG_D(name, T, I, U)                                                 \
    inline T name(T x)                                                                      \
    {                                                                                       \
        U bits = PSR_CAT(as_, U)(x);                                                        \
        I e = PSR_CAT(as_, I)((bits >> 52) & 0x7ffUL) - 1023;                               \
        T m = PSR_CAT(as_, T)((bits & 0x000fffffffffffffUL) | 0x3ff0000000000000UL);        \
        T m0 = m;                                                                           \
        m = m0 > 0x1.6a09e667f3bcdp+0 ? m0 * 0.5 : m0;                                      \
        e = m0 > 0x1.6a09e667f3bcdp+0 ? e + 1 : e;                                          \
        T f = m - 1.0;                                                                      \
        T s = f / (2.0 + f);                                                                \
        T z = s * s;                                                                        \
        T q = (T)(1.0 / 19.0);                                                              \
        q = fma(q, z, (T)(1.0 / 17.0));                                                     \
        q = fma(q, z, (T)(1.0 / 15.0));                                                     \
        q = fma(q, z, (T)(1.0 / 13.0));                                                     \
        q = fma(q, z, (T)(1.0 / 11.0));                                                     \
        q = fma(q, z, (T)(1.0 / 9.0));                                                      \
        q = fma(q, z, (T)(1.0 / 7.0));                                                      \
        q = fma(q, z, (T)(1.0 / 5.0));                                                      \
        q = fma(q, z, (T)(1.0 / 3.0));                                                      \
        T two_s = 2.0 * s;                                                                  \
        T l = fma(two_s * z, q, two_s);                                                     \
        T de = PSR_CAT(convert_, T)(e);                                                     \
        return fma(de, (T)PSR_LN2_HI_D, fma(de, (T)PSR_LN2_LO_D, l));                       \
    }
PSR_DEFINE_DET_LOG_D(psr_det_log_d, double, long, ulong)
#endif
