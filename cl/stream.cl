/* The vLLM-compatible random stream (docs/stream.md).
 *
 * Build-time defines:
 *   IS_DRAFTING  1: row keys use the draft salt (pos + 2^30)
 *   USE_FP64     1: fp64 uniforms (needs cl_khr_fp64)
 *   PSR_FP64_AT_RUN_TIME  1: the fp64 helpers without USE_FP64, for
 *                programs that choose the noise at run time (filter.cl)
 */
#include "random123/philox.h"
#include "psr_shared.h"

#pragma OPENCL FP_CONTRACT OFF

#ifndef IS_DRAFTING
#define IS_DRAFTING 0
#endif
#ifndef USE_FP64
#define USE_FP64 0
#endif
#ifndef PSR_FP64_AT_RUN_TIME
#define PSR_FP64_AT_RUN_TIME 0
#endif
#define PSR_WITH_FP64 (USE_FP64 || PSR_FP64_AT_RUN_TIME)

/* The host refuses fp64 variants on devices without fp64; this check
 * keeps a hand-built program honest too. */
#if PSR_WITH_FP64
#if defined(cl_khr_fp64)
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#elif !defined(__opencl_c_fp64)
#error "USE_FP64=1 (or PSR_FP64_AT_RUN_TIME=1) needs a device with cl_khr_fp64"
#endif
#endif

/* Draft rows shift their position by 2^30 so the draft and target streams
 * never share a Philox counter for positions below 2^30. */
#ifdef PSR_TEST_DISABLE_DRAFT_SALT
#define PSR_DRAFT_SALT 0UL /* test only: the control that shows why the salt exists */
#else
#define PSR_DRAFT_SALT (1UL << PSR_DRAFT_SALT_BITS)
#endif

/* philox4x32_10(ctr = {lo(offset), hi(offset), 0, 0}, key = {lo(seed), hi(seed)}). */
inline uint4 psr_draw(ulong seed, ulong offset)
{
    philox4x32_ctr_t ctr = {{(uint)offset, (uint)(offset >> 32), 0u, 0u}};
    philox4x32_key_t key = {{(uint)seed, (uint)(seed >> 32)}};
    philox4x32_ctr_t r = philox4x32_R(10, ctr, key);
    return (uint4)(r.v[0], r.v[1], r.v[2], r.v[3]);
}

/* fp32 uniform in (0, 1) from one word, as Triton's tl_rand32: fold the
 * sign with ~s (not -s-1 overflow), scale by 2^-31 rounded down. */
inline float psr_u32(uint w)
{
    int s = as_int(w);
    if (s < 0)
        s = ~s;
    return fmax((float)s * 0x1.fffffep-32f, 0x1.fffffep-32f);
}

#if PSR_WITH_FP64
/* fp64 uniform in (0, 1] from two words: all 64 bits, floored at DBL_MIN. */
inline double psr_u64(uint w0, uint w1)
{
    ulong bits = ((ulong)w1 << 32) | (ulong)w0;
    return fmax((double)bits * 0x1p-64, DBL_MIN);
}
#endif

/* Key of one row: word 0 of the draw at the row's position, salted on
 * the draft stream (`drafting`: the variant's IS_DRAFTING, or a call's
 * argument where one program serves both streams). */
inline uint psr_row_key_on(ulong seed, ulong pos, uint drafting)
{
    return psr_draw(seed, pos + (drafting ? PSR_DRAFT_SALT : 0UL)).x;
}

inline uint psr_row_key(ulong seed, ulong pos)
{
    return psr_row_key_on(seed, pos, IS_DRAFTING);
}

/* a * m: the low word, the high word in *hi (mul_hi where the tuning
 * chose it, as Random123's rounds in psr_draw do; on NVIDIA, PTX's
 * mul.wide gives both halves in one instruction). */
inline uint psr_mulhilo(uint a, uint m, uint *hi)
{
#if PSR_MUL_WIDE_PTX
    ulong p;
    asm("mul.wide.u32 %0, %1, %2;" : "=l"(p) : "r"(a), "r"(m));
    *hi = (uint)(p >> 32);
    return (uint)p;
#elif R123_USE_MULHILO32_MULHI_INTRIN
    *hi = mul_hi(a, m);
    return a * m;
#else
    ulong p = (ulong)a * m;
    *hi = (uint)(p >> 32);
    return (uint)p;
#endif
}

/* Rounds 2 to end - 1 of philox4x32_10 on the counter words c0..c3 (of
 * type T: one word, or vectors of them in cl/vecmath.cl) with the key
 * words k0, k1 of round 1, through mulhilo(a, m, &hi). */
#define PSR_PHILOX_ROUNDS_FROM_2(T, mulhilo, end, c0, c1, c2, c3, k0, k1) \
    for (int round = 2; round < end; round++) {                              \
        k0 += PHILOX_W32_0;                                                  \
        k1 += PHILOX_W32_1;                                                  \
        T h0_, h1_;                                                          \
        T l0_ = mulhilo(c0, PHILOX_M4x32_0, &h0_);                           \
        T l1_ = mulhilo(c2, PHILOX_M4x32_1, &h1_);                           \
        c0 = h1_ ^ c1 ^ k0;                                                  \
        c1 = l1_;                                                            \
        c2 = h0_ ^ c3 ^ k1;                                                  \
        c3 = l0_;                                                            \
    }

/* The two noise words of one token of a row: words 0 and 1 of
 * psr_draw(row_key, token), that is philox4x32_10 with counter {token, 0,
 * 0, 0} and key {row_key, 0}. Rounds 0 and 1 by hand: round 0 multiplies
 * a zero and leaves counter word 0 equal to the key, so one of round 1's
 * products is the row's, the same for every token (a multiply of 18 per
 * token saved where the compiler would not see it). */
inline uint2 psr_token_words(uint row_key, uint token)
{
    uint t_hi, t_lo = psr_mulhilo(token, PHILOX_M4x32_0, &t_hi);
    uint k_hi, k_lo = psr_mulhilo(row_key, PHILOX_M4x32_0, &k_hi);
    uint k0 = row_key + PHILOX_W32_0, k1 = PHILOX_W32_1;
    uint hi1, lo1 = psr_mulhilo(t_hi, PHILOX_M4x32_1, &hi1);
    uint c0 = hi1 ^ k0, c1 = lo1, c2 = k_hi ^ t_lo ^ k1, c3 = k_lo;
    PSR_PHILOX_ROUNDS_FROM_2(uint, psr_mulhilo, 10, c0, c1, c2, c3, k0, k1);
    return (uint2)(c0, c1);
}
