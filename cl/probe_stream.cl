/* Known-answer kernels of the random stream, for the tests and psr
 * verify: raw Philox, a draw's words, and per-token uniforms. Only the
 * test-only "stream" set builds them. */
#include "stream.cl"

/* Raw Philox4x32-10 for known-answer tests: 6 words in (ctr0..3, key0..1),
 * 4 words out per case. */
#if !defined(PSR_ONE_KERNEL) || defined(PSR_ONLY_psr_philox_kat)
__kernel void psr_philox_kat(__global const uint *in, __global uint *out, uint n)
{
    uint i = get_global_id(0);
    if (i >= n)
        return;
    philox4x32_ctr_t ctr = {{in[6 * i], in[6 * i + 1], in[6 * i + 2], in[6 * i + 3]}};
    philox4x32_key_t key = {{in[6 * i + 4], in[6 * i + 5]}};
    philox4x32_ctr_t r = philox4x32_R(10, ctr, key);
    for (int k = 0; k < 4; k++)
        out[4 * i + k] = r.v[k];
}
#endif

/* Stream words of (seed, pos) pairs: draw's 4 words and u32 of word 0. */
#if !defined(PSR_ONE_KERNEL) || defined(PSR_ONLY_psr_stream_words)
__kernel void psr_stream_words(__global const long *seeds, __global const long *positions,
                               uint n, __global uint *words, __global uint *u32_bits)
{
    uint i = get_global_id(0);
    if (i >= n)
        return;
    uint4 w = psr_draw((ulong)seeds[i], (ulong)positions[i]);
    vstore4(w, i, words);
    u32_bits[i] = as_uint(psr_u32(w.x));
}
#endif

/* Per-token uniforms: the row key, the fp32 uniform and (USE_FP64) the
 * fp64 uniform's bits of token tokens[i] in row (seeds[i], positions[i]). */
#if !defined(PSR_ONE_KERNEL) || defined(PSR_ONLY_psr_token_uniforms)
__kernel void psr_token_uniforms(__global const long *seeds, __global const long *positions,
                                 __global const uint *tokens, uint n, __global uint *row_keys,
                                 __global uint *u32_bits, __global ulong *u64_bits)
{
    uint i = get_global_id(0);
    if (i >= n)
        return;
    uint key = psr_row_key((ulong)seeds[i], (ulong)positions[i]);
    uint2 w = psr_token_words(key, tokens[i]);
    row_keys[i] = key;
    u32_bits[i] = as_uint(psr_u32(w.x));
#if USE_FP64
    u64_bits[i] = as_ulong(psr_u64(w.x, w.y));
#else
    u64_bits[i] = 0;
#endif
}
#endif
