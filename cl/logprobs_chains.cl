/* Logprobs of few rows (psr_logprobs_chains): psr_logprobs_partial's
 * results, bit for bit, from groups of four work-items per lane. Needs
 * logprobs.cl before it.
 *
 * Why: at one row a call has 8 super-blocks, so psr_logprobs_partial runs
 * 8 groups of 256 work-items, one per SM, and each work-item's chain of 64
 * exps, 64 compares and the bound's steps is the call's time
 * (docs/benchmarks.md). A lane's four exp chains (verify.cl: one per token
 * c = 0..3 of each step) do not depend on one another, so here each chain
 * has a work-item: work-item g of the group holds chain g % 4 of lane g /
 * 4, the tokens base + g + 1024 k (k = 0..15), a quarter of the chain.
 * The lane's max is the four chains' maxima merged, its sum (s_0 + s_1) +
 * (s_2 + s_3) as verify.cl adds it, each s_c in order of k: the same
 * arithmetic in the same order, so the same bits. The block's top-N is a
 * set (value descending, index ascending), found here with the segment
 * bound over 32 segments of 32 work-items.
 *
 * Compiled where the host passes -DPSR_LP_CHAINS=1: devices whose groups
 * may hold 1024 work-items (lib/kernels.c).
 */
#ifndef PSR_LP_CHAINS
#define PSR_LP_CHAINS 0
#endif
#if PSR_LP_CHAINS

#define PSR_LPC_WG (4 * PSR_LANES) /* work-items per group: one per chain */
#define PSR_LPC_SEGMENTS 32
#define PSR_LPC_STEPS PSR_SB_STEPS /* tokens per work-item */
/* Under the exact bound at most top_n work-items' tokens are candidates;
 * room for 4 times as many, for the segment bound's. */
#define PSR_LPC_CANDIDATES (PSR_MAX_TOP_N * PSR_LPC_STEPS * 4)

typedef struct psr_lpc_locals {
    float cmax[PSR_LPC_WG], csum[PSR_LPC_WG]; /* each chain's max and sum */
    float lm[PSR_LANES], ls[PSR_LANES];       /* each lane's (max, sum) */
    float bv[PSR_LPC_WG];                     /* each work-item's best */
    uint bi[PSR_LPC_WG];
    float sv[PSR_LPC_SEGMENTS]; /* each segment's best */
    uint si[PSR_LPC_SEGMENTS];
    float tau_v;
    uint tau_i, count, beat;
    float cv[PSR_LPC_CANDIDATES]; /* the block's candidates */
    uint ci[PSR_LPC_CANDIDATES];
} psr_lpc_locals;

/* The segment bound: segment s is the work-items s, s + 32, ..., so that
 * the 32 work-items scanning them read neighbouring words. Its best, then
 * the top_n-th best of the 32 segments' bests (or no bound, -inf, with
 * fewer owners than top_n). Starts with a barrier, after the bests are
 * stored. */
inline void psr_lpc_tau_segments(uint top_n, uint g, __local psr_lpc_locals *l, float *tau_v, uint *tau_i)
{
    barrier(CLK_LOCAL_MEM_FENCE);
    if (g < PSR_LPC_SEGMENTS) {
        float v = -INFINITY;
        uint i = PSR_LP_NONE;
        for (uint j = g; j < PSR_LPC_WG; j += PSR_LPC_SEGMENTS)
            if (psr_lp_first(l->bv[j], l->bi[j], v, i))
                v = l->bv[j], i = l->bi[j];
        l->sv[g] = v;
        l->si[g] = i;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (g < PSR_LPC_SEGMENTS) {
        float v = l->sv[g];
        uint i = l->si[g], place = 0, owners = 0;
        for (uint d = 0; d < PSR_LPC_SEGMENTS; d++) {
            owners += l->si[d] != PSR_LP_NONE;
            place += psr_lp_first(l->sv[d], l->si[d], v, i);
        }
        if (g == 0 && owners < top_n) {
            l->tau_v = -INFINITY;
            l->tau_i = PSR_LP_NONE;
        }
        if (owners >= top_n && i != PSR_LP_NONE && place == top_n - 1) {
            l->tau_v = v;
            l->tau_i = i;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    *tau_v = l->tau_v;
    *tau_i = l->tau_i;
}

__kernel __attribute__((reqd_work_group_size(PSR_LPC_WG, 1, 1)))
void psr_logprobs_chains(__global const psr_logit_t *logits, ulong logits_offset, ulong row_stride,
                         uint vocab, uint nsb, __global const int *row_request, uint requests,
                         __global const float *temperatures, uint raw, __global const int *tokens,
                         uint top_n, __global float2 *lse_out, __global uint *beat_out,
                         __global float *top_v, __global uint *top_i, __global const float *cuts,
                         __global float *token_value)
{
    __local psr_lpc_locals l;
    uint row = get_group_id(0) / nsb, sb = get_group_id(0) % nsb, g = get_local_id(0);
    psr_lp_scaling sc = psr_lp_scaling_of(row_request, requests, temperatures, raw, cuts, row);
    __global const psr_logit_t *src = logits + logits_offset + (ulong)row * row_stride;
    float tv = psr_lp_token_value(src, tokens[row], vocab, sc);
    uint first = sb * PSR_SB + g; /* this chain's token at k = 0 */

    /* The chain's values (past the row -inf, which adds 0 to a sum and
     * beats nothing), its max, how many beat the sampled token, its best. */
    float x[PSR_LPC_STEPS];
#pragma unroll
    for (uint k = 0; k < PSR_LPC_STEPS; k++) {
        uint i = first + k * PSR_LPC_WG;
        x[k] = i < vocab ? psr_lp_value(psr_load_logit(src, i), sc.divide, sc.t, sc.r, sc.cut) : -INFINITY;
    }
    float cm = -INFINITY, bv = -INFINITY;
    uint beat = 0, bi = first < vocab ? first : PSR_LP_NONE;
#pragma unroll
    for (uint k = 0; k < PSR_LPC_STEPS; k++) {
        cm = fmax(cm, x[k]);
        beat += x[k] > tv;
        if (x[k] > bv) /* increasing tokens: only a larger value is better */
            bv = x[k], bi = first + k * PSR_LPC_WG;
    }
    l.cmax[g] = cm;
    if (g == 0)
        l.count = 0, l.beat = 0;
    barrier(CLK_LOCAL_MEM_FENCE);

    /* The lane's max, then this chain's exp sum against it, in order of k. */
    uint lane0 = g & ~3u;
    float m = fmax(fmax(l.cmax[lane0], l.cmax[lane0 + 1]), fmax(l.cmax[lane0 + 2], l.cmax[lane0 + 3]));
    float s = 0.0f;
#pragma unroll
    for (uint k = 0; k < PSR_LPC_STEPS; k++)
        s += psr_lse_term(x[k], m);
    l.csum[g] = s;
    if (beat)
        atomic_add(&l.beat, beat);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (g < PSR_LANES) {
        l.lm[g] = fmax(fmax(l.cmax[4 * g], l.cmax[4 * g + 1]), fmax(l.cmax[4 * g + 2], l.cmax[4 * g + 3]));
        l.ls[g] = psr_lane_sum((float4)(l.csum[4 * g], l.csum[4 * g + 1], l.csum[4 * g + 2], l.csum[4 * g + 3]));
    }
    float2 part = psr_lse_tree(g, PSR_LPC_WG, l.lm, l.ls, false); /* its barriers publish l.beat */
    ulong at = (ulong)row * nsb + sb;
    if (g == 0) {
        beat_out[at] = l.beat;
        lse_out[at] = part;
        if (sb == 0)
            token_value[row] = tv;
    }
    if (top_n == 0) /* uniform */
        return;

    /* The block's top-N: candidates under the segment bound, or, where
     * they overflow (many ties), under the exact one, where they fit. */
    l.bv[g] = bv;
    l.bi[g] = bi;
    for (uint kind = 0; kind < 2; kind++) { /* uniform */
        float tau_v;
        uint tau_i;
        if (kind == 0)
            psr_lpc_tau_segments(top_n, g, &l, &tau_v, &tau_i);
        else
            psr_lp_tau_sorted(bv, bi, top_n, g, PSR_LPC_WG, l.bv, l.bi, &tau_v, &tau_i);
        if (tau_i == PSR_LP_NONE) /* no bound: every token of the row qualifies */
            tau_i = vocab - 1;
#pragma unroll
        for (uint k = 0; k < PSR_LPC_STEPS; k++) {
            uint i = first + k * PSR_LPC_WG;
            if (!psr_after(x[k], i, tau_v, tau_i)) {
                uint slot = atomic_inc(&l.count);
                if (slot < PSR_LPC_CANDIDATES) {
                    l.cv[slot] = x[k];
                    l.ci[slot] = i;
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        bool fits = l.count <= PSR_LPC_CANDIDATES; /* the same for every work-item */
        barrier(CLK_LOCAL_MEM_FENCE);         /* all have read it before it is reset */
        if (fits)
            break;
        if (g == 0)
            l.count = 0; /* the exact bound's sort orders this before its gather */
    }
    psr_lp_write_top(l.cv, l.ci, min(l.count, (uint)PSR_LPC_CANDIDATES), top_n, g, PSR_LPC_WG, top_v, top_i,
                     at);
}

#endif
