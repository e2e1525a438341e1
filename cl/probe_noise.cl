/* Noise probes, for the tests and psr verify: the noise of given tokens
 * (scalar and vector paths, for the bit-exactness tests) and the
 * lower-tail census of the noise options. Only the test-only "noise" set
 * builds them, with the sampler's build options. */
#include "tokens.cl"

/* Noise of (seed, pos, token) triples, for the bit-exactness tests. */
#if !defined(PSR_ONE_KERNEL) || defined(PSR_ONLY_psr_gumbel_noise_kat)
__kernel void psr_gumbel_noise_kat(__global const long *seeds, __global const long *positions,
                                   __global const uint *tokens, uint n, __global psr_acc_t *noise)
{
    uint i = get_global_id(0);
    if (i >= n)
        return;
    uint key = psr_row_key((ulong)seeds[i], (ulong)positions[i]);
    noise[i] = psr_noise(psr_token_words(key, tokens[i]));
}
#endif

#if PSR_VEC_PATH
/* The vector path's noise and bound of tokens first .. first + 16 * n - 1
 * of row key `key`, 16 per work-item, for the bit-exactness tests. */
#if !defined(PSR_ONE_KERNEL) || defined(PSR_ONLY_psr_gumbel_vnoise_kat)
__kernel void psr_gumbel_vnoise_kat(uint key, uint first, uint n, __global psr_acc_t *noise,
                                    __global psr_acc_t *bound)
{
    uint i = get_global_id(0);
    if (i >= n)
        return;
    psr_vuint w1, w0 = psr_vtoken_words(key, (psr_vuint)(first + PSR_VEC * i) + PSR_LANE_IDS, &w1);
    psr_vstore(psr_vnoise(w0, w1), i, noise);
    psr_vstore(psr_vnoise_bound(w0, w1), i, bound);
}
#endif

/* The bounds' counts of leading zeros, for their exactness test: for
 * each of the first n * 16 words (hi) and the word n * 16 places on (lo),
 * psr_vclz1(hi), psr_vclz1_64(hi, lo), and of the two words (w0 = lo, w1
 * = hi) psr_vrest_clz1 and its `tiny`, and psr_vneg_clz1; out holds the
 * five, n * 16 each. */
#if !defined(PSR_ONE_KERNEL) || defined(PSR_ONLY_psr_vclz_kat)
__kernel void psr_vclz_kat(__global const uint *words, uint n, __global int *out)
{
    uint i = get_global_id(0);
    if (i >= n)
        return;
    psr_vuint hi = psr_vload(i, words), lo = psr_vload(n + i, words);
    psr_vint tiny, rest = psr_vrest_clz1(lo, hi, &tiny);
    psr_vstore(psr_vclz1(hi), i, out);
    psr_vstore(psr_vclz1_64(hi, lo), n + i, out);
    psr_vstore(rest, 2 * n + i, out);
    psr_vstore(tiny, 3 * n + i, out);
    psr_vstore(psr_vneg_clz1(lo, hi), 4 * n + i, out);
}
#endif
#endif

/* Lower-tail census of the noise option this program was built with:
 * counts[0] += draws with E < 2^-24, counts[1] += draws with E < 2^-32,
 * where E is the exponential variate behind the Gumbel noise (g = -log E).
 * Draw k of work-item i is token i * per_item + k of the row key `key`.
 * top_slice = 1 keeps only the words whose 64-bit uniform lies in its top
 * 2^-32 (w1 = 0xffffffff): the draws that should give E < 2^-32. */
#if !defined(PSR_ONE_KERNEL) || defined(PSR_ONLY_psr_tail_count)
__kernel void psr_tail_count(uint key, uint per_item, uint top_slice, __global uint *counts)
{
    __local uint l24, l32;
    if (get_local_id(0) == 0)
        l24 = l32 = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    uint c24 = 0, c32 = 0;
    for (uint k = 0; k < per_item; k++) {
        uint2 w = psr_token_words(key, (uint)get_global_id(0) * per_item + k);
        if (top_slice)
            w.y = 0xffffffffu;
#if USE_FP64
        double e = -psr_det_log_d(psr_u64(w.x, w.y));
        c24 += e < 0x1p-24;
        c32 += e < 0x1p-32;
#elif USE_WIDE
        float e = psr_wide_e(w);
        c24 += e < 0x1p-24f;
        c32 += e < 0x1p-32f;
#else
        float e = -psr_det_log1p_neg(psr_u32(w.x));
        c24 += e < 0x1p-24f;
        c32 += e < 0x1p-32f;
#endif
    }
    atomic_add(&l24, c24);
    atomic_add(&l32, c32);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (get_local_id(0) == 0) {
        atomic_add(&counts[0], l24);
        atomic_add(&counts[1], l32);
    }
}
#endif
