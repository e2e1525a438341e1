/* Lane-parallel copies of the token stream and the fp32 noise, for the
 * sampler's vector path (PSR_VEC lanes per work-item; CPU devices, where
 * PoCL does not vectorise the scalar loop across work-items). Every lane
 * computes the same operations, in the same order, as the scalar
 * psr_token_words, psr_noise and psr_scale, so each lane's bits equal
 * theirs (tests/test_gumbel.c checks it on a million tokens).
 *
 * Needs philox.h, stream.cl and detmath.cl before it. PSR_VEC is 0 (off)
 * or 16 (AVX-512's width; narrower units split each vector).
 */
#ifndef PSR_VEC
#define PSR_VEC 0
#endif

#if PSR_VEC
#if PSR_VEC != 16
#error "PSR_VEC must be 0 or 16"
#endif
typedef float16 psr_vfloat;
typedef uint16 psr_vuint;
typedef int16 psr_vint;
#define psr_vload vload16
#define psr_vstore vstore16
#define psr_vload_half vload_half16
#define psr_convert_vfloat convert_float16
#define psr_convert_vuint convert_uint16
#define psr_as_vfloat as_float16
#define psr_as_vuint as_uint16
#define psr_as_vint as_int16
#define PSR_LANE_IDS ((psr_vuint)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15))

/* The largest lane, by halving. */
inline float psr_vmax(psr_vfloat v)
{
    float8 m8 = fmax(v.lo, v.hi);
    float4 m4 = fmax(m8.lo, m8.hi);
    float2 m2 = fmax(m4.lo, m4.hi);
    return fmax(m2.x, m2.y);
}

/* a * m per lane: the low halves returned, the high halves in *hi. PoCL
 * splits a vector mul_hi into scalar multiplies; this form takes the
 * 64-bit products of the even and the odd lanes separately (two vpmuludq
 * on AVX-512), whatever the byte order. */
inline psr_vuint psr_vmulhilo(psr_vuint a, uint m, psr_vuint *hi)
{
    ulong8 pairs = as_ulong8(a);
    ulong8 low = (pairs & 0xffffffffUL) * (ulong)m;
    ulong8 high = (pairs >> 32) * (ulong)m;
    *hi = as_uint16((low >> 32) | (high & 0xffffffff00000000UL));
    return as_uint16((low & 0xffffffffUL) | (high << 32));
}

/* Word 0 of philox4x32_10(ctr = {token, 0, 0, 0}, key = {row_key, 0}) per
 * lane: psr_token_words(row_key, token).x. */
inline psr_vuint psr_vtoken_word(uint row_key, psr_vuint tokens)
{
    psr_vuint c0 = tokens, c1 = 0, c2 = 0, c3 = 0;
    uint k0 = row_key, k1 = 0;
    for (int round = 0; round < 10; round++) {
        if (round > 0) {
            k0 += PHILOX_W32_0;
            k1 += PHILOX_W32_1;
        }
        psr_vuint hi0, hi1;
        psr_vuint lo0 = psr_vmulhilo(c0, PHILOX_M4x32_0, &hi0);
        psr_vuint lo1 = psr_vmulhilo(c2, PHILOX_M4x32_1, &hi1);
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    return c0;
}

/* psr_u32 per lane: s ^ (s >> 31) is ~s for negative s. */
inline psr_vfloat psr_vu32(psr_vuint w)
{
    psr_vint s = psr_as_vint(w);
    s = s ^ (s >> 31);
    return fmax(psr_convert_vfloat(s) * 0x1.fffffep-32f, (psr_vfloat)0x1.fffffep-32f);
}

/* The noise bound of psr_noise_bound (gumbel.cl) per lane. */
inline psr_vfloat psr_vnoise_bound(psr_vuint w)
{
    psr_vint s = psr_as_vint(w);
    psr_vuint folded = psr_as_vuint(s ^ (s >> 31));
    return psr_convert_vfloat(psr_as_vint(clz(folded)) + 1) * 0x1.62e430p-1f + 1e-3f;
}

PSR_DEFINE_LOG1P_REDUCED(psr_vlog1p_reduced, psr_vfloat)

/* x = m * 2^e with m in [sqrt(1/2), sqrt(2)), as psr_det_log reduces it. */
inline void psr_vsplit(psr_vfloat x, psr_vfloat *m, psr_vint *e)
{
    psr_vuint bits = psr_as_vuint(x);
    *e = psr_as_vint((bits >> 23) & 0xffu) - 127;
    *m = psr_as_vfloat((bits & 0x007fffffu) | 0x3f800000u);
    psr_vint big = *m > 0x1.6a09e6p+0f;
    *m = select(*m, *m * 0.5f, big);
    *e = select(*e, *e + 1, big);
}

/* e * ln 2 + log1p(f), rounded as psr_det_log rounds it. */
inline psr_vfloat psr_vlog_join(psr_vint e, psr_vfloat f)
{
    psr_vfloat q = psr_vlog1p_reduced(f);
    psr_vfloat fe = psr_convert_vfloat(e);
    return fma(fe, (psr_vfloat)PSR_LN2_HI, fma(fe, (psr_vfloat)PSR_LN2_LO, q));
}

inline psr_vfloat psr_vdet_log(psr_vfloat x)
{
    psr_vfloat m;
    psr_vint e;
    psr_vsplit(x, &m, &e);
    return psr_vlog_join(e, m - 1.0f);
}

/* psr_det_log1p_neg per lane. Its three cases differ only in (e, f) of
 * e * ln 2 + log1p(f): (0, -u), (-1, 1 - 2u) and the split of 1 - u; with
 * e = 0 the two fmas return log1p(f) unchanged, as the first case does. */
inline psr_vfloat psr_vdet_log1p_neg(psr_vfloat u)
{
    psr_vfloat m;
    psr_vint e;
    psr_vsplit(1.0f - u, &m, &e);
    psr_vint small = u <= 0x1.2bec34p-2f, mid = u <= 0.5f;
    psr_vfloat f = select(select(m - 1.0f, 1.0f - 2.0f * u, mid), -u, small);
    e = select(select(e, (psr_vint)(-1), mid), (psr_vint)(0), small);
    return psr_vlog_join(e, f);
}

/* psr_noise (fp32, not wide) per lane. */
inline psr_vfloat psr_vnoise(psr_vuint w)
{
    psr_vfloat u = psr_vu32(w);
#if PSR_DETERMINISTIC
    return -psr_vdet_log(-psr_vdet_log1p_neg(u));
#else
    return -native_log(-log1p(-u));
#endif
}

/* psr_scale per lane. */
inline psr_vfloat psr_vscale(psr_vfloat x, float t, float r)
{
#if PSR_DETERMINISTIC
    psr_vfloat xr = x * r;
    psr_vfloat rem = fma(-xr, (psr_vfloat)t, x);
    psr_vfloat q = fma(rem, (psr_vfloat)r, xr);
    return select(q, xr, isinf(xr));
#else
    return x / t;
#endif
}
#endif
