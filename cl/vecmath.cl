/* Lane-parallel copies of the token stream and the noise (classic fp32,
 * wide-tail and fp64), for the
 * sampler's vector path (PSR_VEC lanes per work-item; CPU devices, where
 * PoCL does not vectorise the scalar loop across work-items). Every lane
 * computes the same operations, in the same order, as the scalar
 * psr_token_words, psr_noise and psr_scale, so with PSR_DETERMINISTIC=1
 * each lane's bits equal theirs (tests/test_gumbel.c checks it on a
 * million tokens). Fast math uses the vector native logs, whose last bits
 * may differ from the scalar ones.
 *
 * PSR_VEC is 0 (off)
 * or 16 (AVX-512's width; narrower units split each vector).
 */

#include "stream.cl"
#include "detmath.cl"
#ifndef PSR_VEC
#define PSR_VEC 0
#endif

#if PSR_VEC
#if PSR_VEC != 16
#error "PSR_VEC must be 0 or 16"
#endif
/* Clang (PoCL) warns that 16-lane vector arguments change the calling
 * convention on CPUs without AVX-512, and prints the count to the app's
 * stderr. A program is compiled whole, so no call crosses that boundary. */
#ifdef __clang__
#pragma clang diagnostic ignored "-Wpsabi"
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

/* The largest lane of lanes that are never NaN: a compare and a select
 * per halving (one max instruction on x86), where fmax must also pass
 * over NaN. */
inline float psr_vmax_finite(psr_vfloat v)
{
    float8 m8 = select(v.lo, v.hi, v.hi > v.lo);
    float4 m4 = select(m8.lo, m8.hi, m8.hi > m8.lo);
    float2 m2 = select(m4.lo, m4.hi, m4.hi > m4.lo);
    return m2.y > m2.x ? m2.y : m2.x;
}

/* Whether some lane of a mask is set: an or of its halves. */
inline bool psr_vany_nonzero(psr_vint c)
{
    int8 m8 = c.lo | c.hi;
    int4 m4 = m8.lo | m8.hi;
    int2 m2 = m4.lo | m4.hi;
    return (m2.x | m2.y) != 0;
}

/* Whether some lane of v reaches `bar` (a NaN lane never does): a
 * compare and an or of the masks, about half what psr_vmax's NaN-aware
 * halving costs a step on PoCL. */
inline bool psr_vany_at_least(psr_vfloat v, float bar)
{
    return psr_vany_nonzero(v >= bar);
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

/* Words 0 and 1 of philox4x32_10(ctr = {token, 0, 0, 0}, key = {row_key,
 * 0}) per lane: psr_token_words(row_key, token), word 1 in *w1 (the fp32
 * noise reads only word 0, and the compiler drops what word 1 costs). */
inline psr_vuint psr_vtoken_words(uint row_key, psr_vuint tokens, psr_vuint *w1)
{
    /* Rounds 0, 1 and 9 by hand: round 0 multiplies a zero and leaves
     * counter word 0 equal to the key, so round 1's first product is the
     * row's, one scalar multiply; words 0 and 1 need one product of the
     * last round. */
    psr_vuint t_hi, t_lo = psr_vmulhilo(tokens, PHILOX_M4x32_0, &t_hi);
    uint k0 = row_key + PHILOX_W32_0, k1 = PHILOX_W32_1;
    psr_vuint hi1, lo1 = psr_vmulhilo(t_hi, PHILOX_M4x32_1, &hi1);
    ulong key_product = (ulong)row_key * PHILOX_M4x32_0;
    psr_vuint c0 = hi1 ^ k0, c1 = lo1, c2 = (uint)(key_product >> 32) ^ t_lo ^ k1;
    psr_vuint c3 = (uint)key_product;
    PSR_PHILOX_ROUNDS_FROM_2(psr_vuint, psr_vmulhilo, 9, c0, c1, c2, c3, k0, k1);
    psr_vuint last_hi;
    *w1 = psr_vmulhilo(c2, PHILOX_M4x32_1, &last_hi);
    return last_hi ^ c1 ^ (k0 + PHILOX_W32_0);
}

/* psr_u32 per lane: s ^ (s >> 31) is ~s for negative s. */
inline psr_vfloat psr_vu32(psr_vuint w)
{
    psr_vint s = psr_as_vint(w);
    s = s ^ (s >> 31);
    return fmax(psr_convert_vfloat(s) * 0x1.fffffep-32f, (psr_vfloat)0x1.fffffep-32f);
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
inline void psr_vlog1p_neg_split(psr_vfloat u, psr_vint *e, psr_vfloat *f)
{
    psr_vfloat m;
    psr_vsplit(1.0f - u, &m, e);
    psr_vint small = u <= 0x1.2bec34p-2f, mid = u <= 0.5f;
    *f = select(select(m - 1.0f, 1.0f - 2.0f * u, mid), -u, small);
    *e = select(select(*e, (psr_vint)(-1), mid), (psr_vint)(0), small);
}

inline psr_vfloat psr_vdet_log1p_neg(psr_vfloat u)
{
    psr_vint e;
    psr_vfloat f;
    psr_vlog1p_neg_split(u, &e, &f);
    return psr_vlog_join(e, f);
}

PSR_DEFINE_EXP_REDUCED(psr_vexp_reduced, psr_vfloat)
PSR_DEFINE_DET_RECIP(psr_vdet_recip, float16, uint16)

/* psr_det_exp_neg per lane (0 where y <= -87 or NaN). Inlined: as a call
 * its 16 lanes went through memory both ways (top-p's masses and the race
 * 5-10% slower). */
__attribute__((always_inline)) inline psr_vfloat psr_vdet_exp_neg(psr_vfloat y)
{
    psr_vfloat k = rint(fmax(y, -87.0f) * 0x1.715476p+0f); /* lanes below -87 (or NaN) give 0 below */
    psr_vfloat r = fma(-k, (psr_vfloat)PSR_LN2_HI, y);
    r = fma(-k, (psr_vfloat)PSR_LN2_LO, r);
    psr_vfloat scale = psr_as_vfloat(psr_as_vuint(convert_int16(k) + 127) << 23);
    return select((psr_vfloat)(0.0f), psr_vexp_reduced(r) * scale, y > -87.0f);
}

/* 1 + clz(v) per lane. Without AVX-512's vector lzcnt, clz is a chain of
 * byte lookups; the exponent of v as a float serves instead, v's low 8
 * bits cleared from 256 up so that the conversion is exact: 32 -
 * floor(log2 v), 33 for 0, and 1 where the top bit is set. */
inline psr_vint psr_vclz1(psr_vuint v)
{
#if defined(__AVX512CD__) || !defined(__x86_64__)
    return psr_as_vint(clz(v)) + 1;
#else
    psr_vuint exact = select(v, v & 0xffffff00u, v >= 256u);
    psr_vint e = psr_as_vint((psr_as_vuint(psr_convert_vfloat(psr_as_vint(exact))) >> 23) & 0xffu) - 127;
    return select(min(32 - e, 33), (psr_vint)(1), psr_as_vint(v) < 0);
#endif
}

/* 1 + clz of the 64-bit lanes (hi << 32) | lo: 65 for 0. */
inline psr_vint psr_vclz1_64(psr_vuint hi, psr_vuint lo)
{
    return select(psr_vclz1(hi), 32 + psr_vclz1(lo), hi == 0u);
}

/* 1 + clz(rest - 2048) for rest = 2^64 - 1 - bits, in 32-bit halves; in
 * *tiny whether rest < 4096 (u rounds to nearly 1: no cheap bound). */
inline psr_vint psr_vrest_clz1(psr_vuint w0, psr_vuint w1, psr_vint *tiny)
{
    psr_vuint lo = ~w0, hi = ~w1;
    *tiny = (hi == 0u) & (lo < 4096u);
    return psr_vclz1_64(hi - (psr_as_vuint(lo < 2048u) & 1u), lo - 2048u);
}

/* 1 + clz(2^64 - bits), 2^64 - bits taken as 0 for bits = 0, in 32-bit
 * halves. */
inline psr_vint psr_vneg_clz1(psr_vuint w0, psr_vuint w1)
{
    return psr_vclz1_64(~w1 + (psr_as_vuint(w0 == 0u) & 1u), ~w0 + 1u);
}

/* Noise values and their sums: double16 with fp64 noise (comparisons
 * give psr_vacc_mask), else psr_vfloat. */
#if USE_FP64
typedef double16 psr_vacc;
typedef long16 psr_vacc_mask;
#define psr_to_vacc convert_double16
#define psr_to_vacc_mask convert_long16 /* a lane mask of int16 for psr_vacc */
/* The largest of lanes that are never NaN (scores, bounds), as
 * psr_vmax_finite. */
inline double psr_vmax_acc(psr_vacc v)
{
    double8 m8 = select(v.lo, v.hi, v.hi > v.lo);
    double4 m4 = select(m8.lo, m8.hi, m8.hi > m8.lo);
    double2 m2 = select(m4.lo, m4.hi, m4.hi > m4.lo);
    return m2.y > m2.x ? m2.y : m2.x;
}
#else
typedef psr_vfloat psr_vacc;
typedef psr_vint psr_vacc_mask;
#define psr_to_vacc(x) (x)
#define psr_to_vacc_mask(m) (m)
#define psr_vmax_acc psr_vmax_finite
#endif

/* The three noises of gumbel.cl per lane from a token's two words, each
 * with its psr_noise_bound and PSR_NOISE_MAX, a value no noise of that
 * kind exceeds (a block whose best scaled logit is that far below the
 * floor needs no Philox). */
#if USE_FP64
#if PSR_DETERMINISTIC
#define PSR_SEED_FLOORS 0
#define PSR_NOISE_MAX 710.0 /* u rounded to 1: -log of psr_det_log_d(-0) */
#else
#define PSR_SEED_FLOORS 0
#define PSR_NOISE_MAX INFINITY /* native logs: u rounded to 1 gives +inf */
#endif
PSR_DEFINE_DET_LOG_D(psr_vdet_log_d, double16, long16, ulong16)

inline psr_vacc psr_vnoise_bound(psr_vuint w0, psr_vuint w1)
{
    psr_vint tiny, k = psr_vrest_clz1(w0, w1, &tiny); /* 1 - u >= 2^-k */
    return select(convert_double16(k) * 0x1.62e42fefa39efp-1 + 1e-6, (psr_vacc)INFINITY,
                  convert_long16(tiny));
}

inline psr_vacc psr_vu64(psr_vuint w0, psr_vuint w1)
{
    return fmax(convert_double16(upsample(w1, w0)) * 0x1p-64, (psr_vacc)DBL_MIN);
}

inline psr_vacc psr_vnoise(psr_vuint w0, psr_vuint w1)
{
    psr_vacc u = psr_vu64(w0, w1);
#if PSR_DETERMINISTIC
    return -psr_vdet_log_d(-psr_vdet_log_d(u));
#else
    return -log(-log(u));
#endif
}

/* The race's E and the k of E >= 2^-k (psr_race_e, psr_race_e_shift). */
inline psr_vacc psr_vrace_e(psr_vuint w0, psr_vuint w1)
{
    return 0.0 - psr_vdet_log_d(psr_vu64(w0, w1)); /* as psr_race_e: +0 where u is 1 */
}
inline psr_vint psr_vrace_e_shift(psr_vuint w0, psr_vuint w1)
{
    psr_vint tiny, k = psr_vrest_clz1(w0, w1, &tiny);
    return select(k, (psr_vint)1100, tiny);
}
#elif USE_WIDE
#define PSR_SEED_FLOORS 0
#define PSR_NOISE_MAX 46.0f /* the bound is at most 65 ln 2 + 1e-3 */

inline psr_vacc psr_vnoise_bound(psr_vuint w0, psr_vuint w1)
{
    return psr_convert_vfloat(psr_vneg_clz1(w0, w1)) * 0x1.62e430p-1f + 1e-3f;
}

/* psr_wide_e: -log1p(-v) where the top bit is set, else -log(u); both are
 * e * ln 2 + log1p(f), so each lane picks its (e, f) and one polynomial
 * serves. */
inline psr_vfloat psr_vwide_e(psr_vuint w0, psr_vuint w1)
{
    ulong16 bits = upsample(w1, w0);
    psr_vint top = convert_int16(as_long16(bits) < 0L);
    psr_vfloat v = psr_convert_vfloat(~bits + 1UL) * 0x1p-64f;
    psr_vfloat u = fmax(psr_convert_vfloat(bits) * 0x1p-64f, (psr_vfloat)0x1p-64f);
    psr_vint ev, eu;
    psr_vfloat fv, mu;
    psr_vlog1p_neg_split(v, &ev, &fv);
    psr_vsplit(u, &mu, &eu);
    return -psr_vlog_join(select(eu, ev, top), select(mu - 1.0f, fv, top));
}

inline psr_vacc psr_vnoise(psr_vuint w0, psr_vuint w1)
{
    return -psr_vdet_log(psr_vwide_e(w0, w1));
}

inline psr_vacc psr_vrace_e(psr_vuint w0, psr_vuint w1)
{
    return psr_vwide_e(w0, w1);
}
inline psr_vint psr_vrace_e_shift(psr_vuint w0, psr_vuint w1)
{
    return psr_vneg_clz1(w0, w1);
}
#else
/* Only this noise's largest value is small enough for a floor from the
 * row's largest logit to skip blocks of a peaked row (gumbel.cl's
 * psr_seed_floor); the others' pass would cost every row and skip none. */
#define PSR_SEED_FLOORS 1
#define PSR_NOISE_MAX 23.0f /* the bound is at most 33 ln 2 + 1e-3 */

inline psr_vacc psr_vnoise_bound(psr_vuint w0, psr_vuint w1)
{
    (void)w1;
    psr_vint s = psr_as_vint(w0);
    psr_vuint folded = psr_as_vuint(s ^ (s >> 31));
    return psr_convert_vfloat(psr_vclz1(folded)) * 0x1.62e430p-1f + 1e-3f;
}

inline psr_vacc psr_vnoise(psr_vuint w0, psr_vuint w1)
{
    (void)w1;
    psr_vfloat u = psr_vu32(w0);
#if PSR_DETERMINISTIC
    return -psr_vdet_log(-psr_vdet_log1p_neg(u));
#else
    return -native_log(-log1p(-u));
#endif
}

inline psr_vacc psr_vrace_e(psr_vuint w0, psr_vuint w1)
{
    (void)w1;
    return -psr_vdet_log1p_neg(psr_vu32(w0));
}
inline psr_vint psr_vrace_e_shift(psr_vuint w0, psr_vuint w1)
{
    (void)w1;
    psr_vint s = psr_as_vint(w0);
    return psr_vclz1(psr_as_vuint(s ^ (s >> 31)));
}
#endif

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
