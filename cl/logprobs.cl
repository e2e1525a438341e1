/* Logprobs of sampled tokens (docs/api.md, "Logprobs"). Needs verify.cl
 * (and what it needs) before it: the same super-blocks and log-sum-exp
 * order, so a logprob is the same bits on every device and in
 * lib/oracle_logprobs.c.
 *
 * psr_logprobs_partial: per (row, super-block): the (max, sum) of the
 *   log-sum-exp, how many tokens beat the sampled one, and the block's
 *   top-N tokens (value descending, index ascending).
 * psr_logprobs_split: the same with each super-block split over
 *   PSR_LP_SPLIT groups, group g taking lanes g, g + PSR_LP_SPLIT, ...,
 *   for launches of few rows (a GPU's other compute units would idle).
 *   Each group's lanes merge by the steps of the lane tree that stay
 *   within them; the finish takes the tree's last steps, so the bits are
 *   the same.
 * psr_logprobs_finish: per row: the log-sum-exp, the sampled token's
 *   logprob and rank, and the row's top-N merged from its blocks' lists.
 * Values are logits / T ("processed"; T = 0 counts as 1) or the logits
 * themselves (raw); NaN counts as -inf.
 */

#define PSR_MAX_TOP_N 20
/* Top-N candidates of a block: at most N work-items' tokens reach the
 * exact bound (below), so this many always fit. */
#define PSR_LP_CANDIDATES (PSR_MAX_TOP_N * 16 * PSR_LPT * 4)
/* The cheap bound first: the N-th best of the maxima of 32 segments of
 * work-items (1: on; 0: only the exact bound, for comparison). */
#ifndef PSR_LP_SEGMENT_TAU
#define PSR_LP_SEGMENT_TAU 1
#endif
#define PSR_LP_SEGMENTS 32
/* The first bound a group of wg work-items takes (0: the segments). */
#define PSR_LP_FIRST_BOUND(wg) (PSR_LP_SEGMENT_TAU && (wg) >= 2 * PSR_LP_SEGMENTS ? 0u : 1u)
#define PSR_LP_NONE 0xffffffffu
/* Groups a super-block is split over by psr_logprobs_split. */
#define PSR_LP_SPLIT 8
/* Most lists a row's merge takes (super-blocks x split, lib/logprobs.c). */
#define PSR_LP_LISTS 128
/* Candidates a work-item of the merge holds. */
#define PSR_LP_HOLD ((PSR_LP_LISTS * PSR_MAX_TOP_N + PSR_VWG - 1) / PSR_VWG)

/* Bounds tau on a block's top_n-th token, from each work-item's best
 * (bv, bi): top_n distinct tokens come at or before tau (value
 * descending, index ascending), so the block's top_n do too. With fewer
 * owners than top_n, tau is -inf (every token qualifies). Both use lbv and
 * lbi, and start with no barrier, so the caller's writes before the call
 * (lcount[0]) are ordered before the candidates are counted.
 *
 * The segment bound: the top_n-th best of 32 segment maxima, a few
 * barriers and a looser tau. Uses lm[0] and lcount[1] too. */
inline void psr_lp_tau_segments(float bv, uint bi, uint top_n, uint lid, uint wg, __local float *lbv,
                                __local uint *lbi, __local float *lm, __local uint *lcount,
                                float *tau_v, uint *tau_i)
{
    lbv[lid] = bv;
    lbi[lid] = bi;
    const uint stride = wg / PSR_LP_SEGMENTS, count = PSR_LP_SEGMENTS;
    for (uint s = stride / 2; s > 0; s >>= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if ((lid & (stride - 1)) < s && lbi[lid + s] != PSR_LP_NONE &&
            (lbi[lid] == PSR_LP_NONE || psr_better(lbv[lid + s], lbi[lid + s], lbv[lid], lbi[lid]))) {
            lbv[lid] = lbv[lid + s];
            lbi[lid] = lbi[lid + s];
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    /* Work-item c < count ranks entry c * stride among the count entries. */
    float mv = -INFINITY;
    uint mi = PSR_LP_NONE, place = 0, owners = 0;
    if (lid < count) {
        mv = lbv[lid * stride];
        mi = lbi[lid * stride];
        for (uint d = 0; d < count; d++) {
            uint di = lbi[d * stride];
            owners += di != PSR_LP_NONE;
            place += di != PSR_LP_NONE && psr_better(lbv[d * stride], di, mv, mi);
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0 && owners < top_n) {
        lm[0] = -INFINITY;
        lcount[1] = PSR_LP_NONE;
    }
    if (owners >= top_n && mi != PSR_LP_NONE && place == top_n - 1) {
        lm[0] = mv;
        lcount[1] = mi;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    *tau_v = lm[0];
    *tau_i = lcount[1];
}

/* Does (av, ai) come before (bv, bi): value descending, index ascending,
 * no token (PSR_LP_NONE) last? */
inline bool psr_lp_first(float av, uint ai, float bv, uint bi)
{
    return ai != PSR_LP_NONE && (bi == PSR_LP_NONE || psr_better(av, ai, bv, bi));
}

/* The exact bound: the top_n-th best of the wg work-items' bests, so at
 * most top_n work-items' tokens reach it. A bitonic sort of the bests,
 * best first and no token last: log2(wg) (log2(wg) + 1) / 2 rounds of one
 * compare-exchange (on the H200 a quarter faster overall than each
 * work-item ranking its best against all the others). Tokens are distinct,
 * so the order is total. The result goes through lm[0] and lcount[1]. */
#if PSR_USE_SHUFFLE
/* Each work-item holds its place's entry in registers: rounds between
 * places under 32 apart are warp shuffles, the others go through local
 * memory, two buffers in turn (lbv, lbi and xv, xi), so each takes one
 * barrier. */
inline void psr_lp_tau_sorted(float bv, uint bi, uint top_n, uint lid, uint wg, __local float *lbv,
                              __local uint *lbi, __local float *xv, __local uint *xi, __local float *lm,
                              __local uint *lcount, float *tau_v, uint *tau_i)
{
    float v = bv;
    uint i = bi;
    bool second = false;
    for (uint size = 2; size <= wg; size <<= 1)
        for (uint span = size >> 1; span > 0; span >>= 1) {
            float ov;
            uint oi;
            if (span >= PSR_WARP) {
                __local float *wv = second ? xv : lbv;
                __local uint *wi = second ? xi : lbi;
                second = !second;
                wv[lid] = v;
                wi[lid] = i;
                barrier(CLK_LOCAL_MEM_FENCE);
                ov = wv[lid ^ span];
                oi = wi[lid ^ span];
            } else {
                ov = as_float(psr_shfl_xor(as_uint(v), span));
                oi = psr_shfl_xor(i, span);
            }
            /* The pair's lower place takes the first of the two where the
             * block of `size` sorts best first, else the other. */
            bool lower = (lid & span) == 0;
            bool upper_first = lower ? psr_lp_first(ov, oi, v, i) : psr_lp_first(v, i, ov, oi);
            if (upper_first == ((lid & size) == 0)) {
                v = ov;
                i = oi;
            }
        }
    if (lid == top_n - 1) {
        lm[0] = v;
        lcount[1] = i;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    bool enough = top_n <= wg && lcount[1] != PSR_LP_NONE;
    *tau_v = enough ? lm[0] : -INFINITY;
    *tau_i = enough ? lcount[1] : PSR_LP_NONE;
}
#else
inline void psr_lp_tau_sorted(float bv, uint bi, uint top_n, uint lid, uint wg, __local float *lbv,
                              __local uint *lbi, __local float *xv, __local uint *xi, __local float *lm,
                              __local uint *lcount, float *tau_v, uint *tau_i)
{
    lbv[lid] = bv;
    lbi[lid] = bi;
    for (uint size = 2, span = 1; size <= wg;) {
        barrier(CLK_LOCAL_MEM_FENCE);
        uint other = lid ^ span;
        if (other > lid) {
            float av = lbv[lid], ov = lbv[other];
            uint ai = lbi[lid], oi = lbi[other];
            if (psr_lp_first(ov, oi, av, ai) == ((lid & size) == 0)) {
                lbv[lid] = ov;
                lbi[lid] = oi;
                lbv[other] = av;
                lbi[other] = ai;
            }
        }
        if (span == 1) {
            size <<= 1;
            span = size >> 1;
        } else {
            span >>= 1;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    bool enough = top_n <= wg && lbi[top_n - 1] != PSR_LP_NONE;
    *tau_v = enough ? lbv[top_n - 1] : -INFINITY;
    *tau_i = enough ? lbi[top_n - 1] : PSR_LP_NONE;
}
#endif

/* Value of a token for ordering: NaN is -inf, and so is a scaled logit
 * below the row's filter threshold `cut` (-inf: no filter). */
inline float psr_lp_value(float x, bool divide, float t, float r, float cut)
{
    float v = divide ? psr_scale(x, t, r) : x; /* NaN stays NaN */
    return v >= cut ? v : -INFINITY;           /* and fails this test */
}

inline float4 psr_lp_values(float4 x, bool divide, float t, float r, float cut)
{
    return (float4)(psr_lp_value(x.s0, divide, t, r, cut), psr_lp_value(x.s1, divide, t, r, cut),
                    psr_lp_value(x.s2, divide, t, r, cut), psr_lp_value(x.s3, divide, t, r, cut));
}

/* The filter threshold of a row (filter.cl), applied to processed
 * logprobs of rows sampled at T > 0, as the sampler applies it. */
inline float psr_lp_cut(__global const float *cuts, uint row, bool raw, float t)
{
    if (!cuts || raw || !(isnormal(t) && t > 0.0f))
        return -INFINITY;
    float c = cuts[2 * row]; /* filter.cl's output: two floats per row */
    return isnan(c) ? -INFINITY : c; /* bad filter values: psr_sample flags the row */
}

/* Is (v, i) after (pv, pi) in the order value descending, index ascending? */
inline bool psr_after(float v, uint i, float pv, uint pi)
{
    return v < pv || (v == pv && i > pi);
}

/* The locals of a block's pass (psr_lp_block). */
typedef struct psr_lp_block_locals {
    float ls[2 * PSR_LANES]; /* the lanes' sums, then their maxima */
    float lm[1], lbv[PSR_VWG]; /* lm: the segment bound's tau */
    uint lbi[PSR_VWG], lcount[2]; /* beats or candidates; the bound's index */
    float lcv[PSR_LP_CANDIDATES]; /* the block's candidates */
    uint lci[PSR_LP_CANDIDATES];
} psr_lp_block_locals;

/* The locals of a row's merge (psr_lp_row), for up to PSR_LP_LISTS
 * blocks (lib/logprobs.c). */
typedef struct psr_lp_row_locals {
    float sv[PSR_LP_LISTS * PSR_MAX_TOP_N]; /* the candidates that can place */
    uint si[PSR_LP_LISTS * PSR_MAX_TOP_N];
    float2 parts[PSR_LP_LISTS]; /* the blocks' log-sum-exp partials */
    uint beats[PSR_LP_LISTS];
    float ev[PSR_LP_LISTS]; /* every list's first entries (psr_lp_row) */
    uint ei[PSR_LP_LISTS];
    float lse, heads_v;
    uint tau_key, tau_i, heads_i, count; /* the bounds (psr_ordered, index); survivors */
} psr_lp_row_locals;

/* One block's pass: super-block sb of a row (psr_logprobs_partial), or,
 * with split > 1, the part g of it that holds lanes g, g + split, ...
 * (psr_logprobs_split), over a group of PSR_VWG / split work-items. Work-
 * item lid's lane j is the group's lane m = lid + j wg, the super-block's
 * lane g + split m. Results go to block `at` = (row nsb + sb) split + g.
 * split is a constant where the kernels inline this. */
inline void psr_lp_block(__global const psr_logit_t *logits, ulong logits_offset, ulong row_stride,
                         uint vocab, uint nsb, __global const int *row_request, uint requests,
                         __global const float *temperatures, uint raw, __global const int *tokens,
                         uint top_n, __global float2 *lse_out, __global uint *beat_out,
                         __global float *top_v, __global uint *top_i, __global const float *cuts,
                         uint row, uint sb, uint split, uint g, uint lid, __local psr_lp_block_locals *l)
{
    __local float *ls = l->ls, *lm = l->lm, *lbv = l->lbv, *lcv = l->lcv;
    __local uint *lbi = l->lbi, *lcount = l->lcount, *lci = l->lci;
    const uint wg = PSR_VWG / split, lanes = PSR_LANES / split;
    int req = row_request ? row_request[row] : (int)row;
    float t = !raw && req >= 0 && req < (int)requests ? temperatures[req] : 1.0f;
    bool divide = isnormal(t) && t > 0.0f && t != 1.0f;
    float r = divide ? psr_temp_recip(t) : 1.0f;
    float cut = psr_lp_cut(cuts, row, raw, t);
    uint base = sb * PSR_SB;
    bool full = base + PSR_SB <= vocab;
    __global const psr_logit_t *src = logits + logits_offset + (ulong)row * row_stride;
    bool aligned = ((size_t)src & (4 * sizeof(psr_logit_t) - 1)) == 0;
    int tok = tokens[row];
    float tv = tok >= 0 && (uint)tok < vocab ? psr_lp_value(psr_load_logit(src, (ulong)tok), divide, t, r, cut)
                                             : INFINITY; /* nothing beats it: rank 0 later */

/* The first token of work-item lid's lane j. */
#define PSR_LP_LANE_START(j) (base + 4 * (g + split * (lid + (j) * wg)))
    uint steps[PSR_LPT];
    for (uint j = 0; j < PSR_LPT; j++)
        steps[j] = full ? PSR_SB_STEPS : psr_steps_left(PSR_LP_LANE_START(j), vocab);
#if PSR_LPT == 1
    /* GPUs: the lane's values stay in registers for every pass below. */
    float4 v[PSR_SB_STEPS];
    if (full && aligned) {
#pragma unroll
        for (uint k = 0; k < PSR_SB_STEPS; k++)
            v[k] = psr_load4_aligned(src, PSR_LP_LANE_START(0) + k * 4 * PSR_LANES);
    } else {
#pragma unroll
        for (uint k = 0; k < PSR_SB_STEPS; k++)
            if (k < steps[0])
                v[k] = psr_load4(src, PSR_LP_LANE_START(0) + k * 4 * PSR_LANES, vocab, aligned);
    }
#pragma unroll
    for (uint k = 0; k < PSR_SB_STEPS; k++)
        if (k < steps[0])
            v[k] = psr_lp_values(v[k], divide, t, r, cut);
#define PSR_LP_VALUES(j, k, i) v[k]
/* Every loop over a lane's steps has the constant bound PSR_SB_STEPS and
 * stops at the lane's steps[j]; on GPUs it unrolls, so v[k] keeps a
 * constant index (indexed at run time, v would live in memory, not
 * registers). CPUs do not unroll: PoCL's build would take 5x as long. */
#else
    /* CPUs: several lanes per work-item, read again for each pass. */
#define PSR_LP_VALUES(j, k, i) psr_lp_values(psr_load4(src, i, vocab, aligned), divide, t, r, cut)
#endif

    /* Pass 1: each lane's max and how many tokens beat the sampled one;
     * pass 2: the lane's exp sums against its max (verify.cl's order). */
    if (lid == 0)
        lcount[0] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    uint beat = 0;
    for (uint j = 0; j < PSR_LPT; j++) {
        float wm = -INFINITY;
#if PSR_LPT == 1
#pragma unroll
#endif
        for (uint k = 0; k < PSR_SB_STEPS; k++) {
            if (k >= steps[j])
                break;
            uint i = PSR_LP_LANE_START(j) + k * 4 * PSR_LANES;
            float4 x = PSR_LP_VALUES(j, k, i);
            wm = fmax(wm, psr_max4(x));
            beat += (x.s0 > tv) + (x.s1 > tv) + (x.s2 > tv) + (x.s3 > tv);
            /* past the row's end the values are -inf: they beat nothing */
        }
        float4 lane = (float4)(0.0f);
#if PSR_LPT == 1
#pragma unroll
#endif
        for (uint k = 0; k < PSR_SB_STEPS; k++) {
            if (k >= steps[j])
                break;
            uint i = PSR_LP_LANE_START(j) + k * 4 * PSR_LANES;
            lane += psr_exp_terms(PSR_LP_VALUES(j, k, i), wm);
        }
        ls[PSR_LANES + lid + j * wg] = wm;
        ls[lid + j * wg] = psr_lane_sum(lane);
    }
    if (beat)
        atomic_add(&lcount[0], beat);
    /* The group's lanes, merged by the lane tree's steps s >= split (its
     * barriers publish lcount). */
    float2 part = psr_lse_tree_of(lid, ls + PSR_LANES, ls, lanes, wg);
    ulong at = ((ulong)row * nsb + sb) * split + g;
    if (lid == 0) {
        beat_out[at] = lcount[0];
        lse_out[at] = part;
    }

    /* Pass 3: the block's top-N. A bound tau (psr_lp_tau_*) leaves as
     * candidates only the tokens at or before it. They are gathered in
     * local memory, first under the cheap bound; if they overflow it, again
     * under the exact one, under which they always fit. Each candidate is
     * then placed by how many candidates beat it. */
    if (top_n > 0) { /* uniform */
        float bv = -INFINITY;
#if PSR_LPT == 1
        /* One lane, visited in increasing token order: only a larger value
         * is better. Past the row the values are -inf and never are. */
        uint bi = PSR_LP_LANE_START(0) < vocab ? PSR_LP_LANE_START(0) : PSR_LP_NONE;
#pragma unroll
        for (uint k = 0; k < PSR_SB_STEPS; k++) {
            if (k >= steps[0])
                break;
            uint i = PSR_LP_LANE_START(0) + k * 4 * PSR_LANES;
            float4 x = PSR_LP_VALUES(0, k, i);
            float xs[4] = {x.s0, x.s1, x.s2, x.s3};
            for (uint c = 0; c < 4; c++)
                if (xs[c] > bv)
                    bv = xs[c], bi = i + c;
        }
#else
        uint bi = PSR_LP_NONE;
        for (uint j = 0; j < PSR_LPT; j++)
            for (uint k = 0; k < steps[j]; k++) {
                uint i = PSR_LP_LANE_START(j) + k * 4 * PSR_LANES;
                float4 x = PSR_LP_VALUES(j, k, i);
                float xs[4] = {x.s0, x.s1, x.s2, x.s3};
                for (uint c = 0; c < 4; c++)
                    if (i + c < vocab && (bi == PSR_LP_NONE || psr_better(xs[c], i + c, bv, bi)))
                        bv = xs[c], bi = i + c;
            }
#endif
        if (lid == 0)
            lcount[0] = 0; /* the candidates */
        for (uint kind = PSR_LP_FIRST_BOUND(wg); kind < 2; kind++) { /* uniform */
            float tau_v;
            uint tau_i;
            if (kind == 0)
                psr_lp_tau_segments(bv, bi, top_n, lid, wg, lbv, lbi, lm, lcount, &tau_v, &tau_i);
            else
                psr_lp_tau_sorted(bv, bi, top_n, lid, wg, lbv, lbi, lcv, lci, lm, lcount, &tau_v, &tau_i);
            /* No bound (every token qualifies): the row's last token bounds
             * it, so tokens past the row (-inf) never qualify. */
            if (tau_i == PSR_LP_NONE)
                tau_i = vocab - 1;
            for (uint j = 0; j < PSR_LPT; j++)
#if PSR_LPT == 1
#pragma unroll
#endif
                for (uint k = 0; k < PSR_SB_STEPS; k++) {
                    if (k >= steps[j])
                        break;
                    uint i = PSR_LP_LANE_START(j) + k * 4 * PSR_LANES;
                    float4 x = PSR_LP_VALUES(j, k, i);
                    float xs[4] = {x.s0, x.s1, x.s2, x.s3};
                    for (uint c = 0; c < 4; c++)
                        if (!psr_after(xs[c], i + c, tau_v, tau_i)) {
                            uint slot = atomic_inc(&lcount[0]);
                            if (slot < PSR_LP_CANDIDATES) {
                                lcv[slot] = xs[c];
                                lci[slot] = i + c;
                            }
                        }
                }
            barrier(CLK_LOCAL_MEM_FENCE);
            bool fits = lcount[0] <= PSR_LP_CANDIDATES; /* the same for every work-item */
            barrier(CLK_LOCAL_MEM_FENCE); /* all have read it before it is reset */
            if (fits)
                break;
            if (kind == 0 && lid == 0)
                lcount[0] = 0; /* the exact bound counts afresh (it always fits) */
        }
        uint cands = min(lcount[0], (uint)PSR_LP_CANDIDATES); /* the bound keeps it far below */
        for (uint c = lid; c < cands; c += wg) {
            uint at_place = 0;
            for (uint d = 0; d < cands; d++)
                at_place += psr_better(lcv[d], lci[d], lcv[c], lci[c]);
            if (at_place < top_n) {
                top_v[at * top_n + at_place] = lcv[c];
                top_i[at * top_n + at_place] = lci[c];
            }
        }
        for (uint n = cands + lid; n < top_n; n += wg) /* fewer tokens than top_n */
            top_i[at * top_n + n] = 0xffffffffu;
    }
#undef PSR_LP_VALUES
#undef PSR_LP_LANE_START
}

__kernel __attribute__((reqd_work_group_size(PSR_VWG, 1, 1)))
void psr_logprobs_partial(__global const psr_logit_t *logits, ulong logits_offset, ulong row_stride,
                          uint vocab, uint nsb, __global const int *row_request, uint requests,
                          __global const float *temperatures, uint raw, __global const int *tokens,
                          uint top_n, __global float2 *lse_out, __global uint *beat_out,
                          __global float *top_v, __global uint *top_i, __global const float *cuts)
{
    __local psr_lp_block_locals l;
    psr_lp_block(logits, logits_offset, row_stride, vocab, nsb, row_request, requests, temperatures, raw,
                 tokens, top_n, lse_out, beat_out, top_v, top_i, cuts, get_group_id(0) / nsb,
                 get_group_id(0) % nsb, 1, 0, get_local_id(0), &l);
}

#if PSR_VWG % PSR_LP_SPLIT == 0
/* psr_logprobs_partial's work over PSR_LP_SPLIT times as many groups, each
 * 1 / PSR_LP_SPLIT as wide: groups (row, super-block, g) in that order. */
__kernel __attribute__((reqd_work_group_size(PSR_VWG / PSR_LP_SPLIT, 1, 1)))
void psr_logprobs_split(__global const psr_logit_t *logits, ulong logits_offset, ulong row_stride,
                        uint vocab, uint nsb, __global const int *row_request, uint requests,
                        __global const float *temperatures, uint raw, __global const int *tokens,
                        uint top_n, __global float2 *lse_out, __global uint *beat_out,
                        __global float *top_v, __global uint *top_i, __global const float *cuts)
{
    __local psr_lp_block_locals l;
    uint group = get_group_id(0), block = group / PSR_LP_SPLIT;
    psr_lp_block(logits, logits_offset, row_stride, vocab, nsb, row_request, requests, temperatures, raw,
                 tokens, top_n, lse_out, beat_out, top_v, top_i, cuts, block / nsb, block % nsb,
                 PSR_LP_SPLIT, group % PSR_LP_SPLIT, get_local_id(0), &l);
}
#endif

/* Reads a block's result that another group of the launch may have
 * stored (`published`: past the unit's cache), else a plain load. */
inline float psr_lp_read_f(__global const float *p, bool published)
{
    return published ? *(volatile __global const float *)p : *p;
}

inline uint psr_lp_read_u(__global const uint *p, bool published)
{
    return published ? *(volatile __global const uint *)p : *p;
}

/* A row's log-sum-exp from its super-blocks' (max, sum) at parts[0],
 * parts[stride], ...: psr_row_lse_of's arithmetic in its order. */
inline float psr_lp_lse_local(__local const float2 *parts, uint nsb, uint stride)
{
    float big = -INFINITY;
    for (uint sb = 0; sb < nsb; sb++)
        big = fmax(big, parts[sb * stride].x);
    if (isinf(big))
        return big;
    float sum = 0.0f;
    for (uint sb = 0; sb < nsb; sb++)
        sum += parts[sb * stride].y * psr_lse_term(parts[sb * stride].x, big);
    return big + psr_det_log(sum);
}

/* One row's merge of its nsb x split blocks (psr_logprobs_finish),
 * `published` when the blocks ran in the same launch. Every load is issued
 * first: a work-item's share of the candidates into registers, each
 * block's partials by a work-item of its own (one work-item's volatile
 * loads go one after another).
 *
 * The top-N: any top_n of the row's tokens bound its top_n: these come at
 * or before the worst of them. Two such bounds, the better taken as tau:
 * the best of the lists' last entries (a list holds top_n tokens at or
 * before it; tight when one block holds the row's best), and the top_n-th
 * best of the lists' first p entries, p = ceil(top_n / lists) (tight when
 * the row's best are spread over many lists, as with split blocks). Only
 * candidates at or before tau can place; each is placed by how many of
 * them beat it (a token that beats one of them is one of them, or its
 * block's list is full of tokens that do, and it places past top_n either
 * way). Without a bound (lists short) every token is a candidate. */
inline void psr_lp_row(uint vocab, uint nsb, uint split, __global const int *tokens,
                       __global const float2 *lse_in, __global const uint *beat_in,
                       __global const float *top_v, __global const uint *top_i, uint top_n,
                       __global float *token_logprobs, __global int *token_ranks, __global int *top_ids,
                       __global float *top_logprobs, __global const psr_logit_t *logits, ulong logits_offset,
                       ulong row_stride, __global const int *row_request, uint requests,
                       __global const float *temperatures, uint raw, __global const float *cuts, uint row,
                       bool published, uint lid, __local psr_lp_row_locals *l)
{
    uint lists = min(nsb * split, (uint)PSR_LP_LISTS); /* lib/logprobs.c keeps it within */
    uint cands = lists * top_n;
    uint p = top_n ? (top_n + lists - 1) / lists : 0, heads = lists * p; /* <= PSR_LP_LISTS */
    ulong first = (ulong)row * lists;
#if PSR_LPT == 1
    /* GPUs: a work-item's candidates held in registers (the loops over
     * them unroll), loaded with everything else in one round trip. */
    float hv[PSR_LP_HOLD];
    uint hi[PSR_LP_HOLD];
#pragma unroll
    for (uint k = 0; k < PSR_LP_HOLD; k++) {
        uint c = lid + k * PSR_VWG;
        hv[k] = c < cands ? psr_lp_read_f(top_v + first * top_n + c, published) : -INFINITY;
        hi[k] = c < cands ? psr_lp_read_u(top_i + first * top_n + c, published) : PSR_LP_NONE;
    }
#define PSR_LP_CAND_V(k, c) hv[k]
#define PSR_LP_CAND_I(k, c) hi[k]
#else
    /* CPUs: read where they are when needed (PoCL keeps a private array
     * per work-item of the whole group). */
#define PSR_LP_CAND_V(k, c) ((c) < cands ? psr_lp_read_f(top_v + first * top_n + (c), published) : -INFINITY)
#define PSR_LP_CAND_I(k, c) ((c) < cands ? psr_lp_read_u(top_i + first * top_n + (c), published) : PSR_LP_NONE)
#endif
    for (uint b = lid; b < lists; b += PSR_VWG) {
        l->parts[b] = psr_lse_partial(lse_in, first + b, published);
        l->beats[b] = psr_lp_read_u(beat_in + first + b, published);
    }
#if PSR_LPT == 1
#pragma unroll
#endif
    for (uint k = 0; k < PSR_LP_HOLD; k++) {
        uint c = lid + k * PSR_VWG;
        if (c < cands && c % top_n < p) {
            l->ev[c / top_n * p + c % top_n] = PSR_LP_CAND_V(k, c);
            l->ei[c / top_n * p + c % top_n] = PSR_LP_CAND_I(k, c);
        }
    }
    if (lid == 0) {
        l->tau_key = 0;
        l->tau_i = l->heads_i = PSR_LP_NONE;
        l->heads_v = -INFINITY;
        l->count = 0;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    /* The first entries' top_n-th best (none if fewer are tokens) */
    for (uint e = lid; e < heads; e += PSR_VWG) {
        float v = l->ev[e];
        uint i = l->ei[e], place = 0;
        for (uint f = 0; f < heads; f++)
            place += psr_lp_first(l->ev[f], l->ei[f], v, i);
        if (i != PSR_LP_NONE && place == top_n - 1) {
            l->heads_v = v;
            l->heads_i = i;
        }
    }
    /* tau's value: the largest of the lists' last entries */
#if PSR_LPT == 1
#pragma unroll
#endif
    for (uint k = 0; k < PSR_LP_HOLD; k++) {
        uint c = lid + k * PSR_VWG;
        if (c < cands && c % top_n == top_n - 1 && PSR_LP_CAND_I(k, c) != PSR_LP_NONE)
            atomic_max(&l->tau_key, psr_ordered(PSR_LP_CAND_V(k, c)));
    }
    /* Each super-block's partial from its split blocks': the lane tree's
     * last steps, lane g + s into g for s = split / 2, ..., 1, left in
     * parts[sb split]. */
    for (uint sb = lid; sb < nsb && split > 1; sb += PSR_VWG)
        for (uint s = split / 2; s > 0; s >>= 1)
            for (uint x = 0; x < s; x++)
                l->parts[sb * split + x] = psr_lse_merge(l->parts[sb * split + x], l->parts[sb * split + x + s]);
    barrier(CLK_LOCAL_MEM_FENCE);
    /* tau's index: the lowest among the entries of that value */
#if PSR_LPT == 1
#pragma unroll
#endif
    for (uint k = 0; k < PSR_LP_HOLD; k++) {
        uint c = lid + k * PSR_VWG;
        if (c < cands && c % top_n == top_n - 1 && PSR_LP_CAND_I(k, c) != PSR_LP_NONE &&
            psr_ordered(PSR_LP_CAND_V(k, c)) == l->tau_key)
            atomic_min(&l->tau_i, PSR_LP_CAND_I(k, c));
    }
    if (lid == 0) {
        float lse = psr_lp_lse_local(l->parts, nsb, split);
        l->lse = lse;
        int tok = tokens[row];
        bool valid = tok >= 0 && (uint)tok < vocab;
        int req = row_request ? row_request[row] : (int)row;
        float t = !raw && req >= 0 && req < (int)requests ? temperatures[req] : 1.0f;
        bool divide = isnormal(t) && t > 0.0f && t != 1.0f;
        float r = divide ? psr_temp_recip(t) : 1.0f;
        float tv = valid ? psr_lp_value(psr_load_logit(logits + logits_offset + (ulong)row * row_stride,
                                                       (ulong)tok),
                                        divide, t, r, psr_lp_cut(cuts, row, raw, t))
                         : NAN;
        uint beat = 0;
        for (uint b = 0; b < lists; b++)
            beat += l->beats[b];
        if (token_logprobs)
            token_logprobs[row] = valid ? tv - lse : NAN;
        if (token_ranks)
            token_ranks[row] = valid ? (int)beat + 1 : 0;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (top_n == 0)
        return; /* uniform */
    uint tau_key = l->tau_key, tau_i = l->tau_i, heads_key = psr_ordered(l->heads_v);
    if (l->heads_i != PSR_LP_NONE &&
        (tau_i == PSR_LP_NONE || heads_key > tau_key || (heads_key == tau_key && l->heads_i < tau_i))) {
        tau_key = heads_key;
        tau_i = l->heads_i;
    }
    bool bounded = tau_i != PSR_LP_NONE;
#if PSR_LPT == 1
#pragma unroll
#endif
    for (uint k = 0; k < PSR_LP_HOLD; k++) {
        uint c = lid + k * PSR_VWG;
        float v = PSR_LP_CAND_V(k, c);
        uint i = PSR_LP_CAND_I(k, c), key = psr_ordered(v);
        if (i != PSR_LP_NONE && (!bounded || key > tau_key || (key == tau_key && i <= tau_i))) {
            uint s = atomic_inc(&l->count);
            l->sv[s] = v;
            l->si[s] = i;
        }
    }
#undef PSR_LP_CAND_V
#undef PSR_LP_CAND_I
    barrier(CLK_LOCAL_MEM_FENCE);
    uint count = l->count;
    float lse = l->lse;
    for (uint s = lid; s < count; s += PSR_VWG) {
        float v = l->sv[s];
        uint i = l->si[s], place = 0;
        for (uint o = 0; o < count; o++)
            place += psr_better(l->sv[o], l->si[o], v, i);
        if (place < top_n) {
            top_ids[(ulong)row * top_n + place] = (int)i;
            top_logprobs[(ulong)row * top_n + place] = v - lse;
        }
    }
    for (uint n = min(count, top_n) + lid; n < top_n; n += PSR_VWG) { /* fewer tokens than top_n */
        top_ids[(ulong)row * top_n + n] = -1;
        top_logprobs[(ulong)row * top_n + n] = -INFINITY;
    }
}

/* One group per row: merges the row's nsb x split blocks (split: 1 after
 * psr_logprobs_partial, PSR_LP_SPLIT after psr_logprobs_split) and writes
 * the outputs. */
__kernel __attribute__((reqd_work_group_size(PSR_VWG, 1, 1)))
void psr_logprobs_finish(uint rows, uint vocab, uint nsb, uint split, __global const int *tokens,
                         __global const float2 *lse_in, __global const uint *beat_in,
                         __global const float *top_v, __global const uint *top_i, uint top_n,
                         __global float *token_logprobs, __global int *token_ranks,
                         __global int *top_ids, __global float *top_logprobs,
                         __global const psr_logit_t *logits, ulong logits_offset, ulong row_stride,
                         __global const int *row_request, uint requests,
                         __global const float *temperatures, uint raw, __global const float *cuts)
{
    __local psr_lp_row_locals l;
    psr_lp_row(vocab, nsb, split, tokens, lse_in, beat_in, top_v, top_i, top_n, token_logprobs, token_ranks,
               top_ids, top_logprobs, logits, logits_offset, row_stride, row_request, requests,
               temperatures, raw, cuts, get_group_id(0), false, get_local_id(0), &l);
}

/* Small batches in one launch: the blocks of psr_logprobs_partial, and
 * each row's last block to finish merges the row as psr_logprobs_finish
 * does. `done` holds a count per row, which that block resets. The merge
 * starts after every work-item's pass (the count's barriers), so the two
 * share their local memory. */
__kernel __attribute__((reqd_work_group_size(PSR_VWG, 1, 1)))
void psr_logprobs_one(__global const psr_logit_t *logits, ulong logits_offset, ulong row_stride,
                      uint vocab, uint nsb, __global const int *row_request, uint requests,
                      __global const float *temperatures, uint raw, __global const int *tokens,
                      uint top_n, __global float2 *lse, __global uint *beat, __global float *top_v,
                      __global uint *top_i, __global const float *cuts, __global float *token_logprobs,
                      __global int *token_ranks, __global int *top_ids, __global float *top_logprobs,
                      __global uint *done)
{
    __local union {
        psr_lp_block_locals block;
        psr_lp_row_locals row;
    } l;
    __local uint last;
    uint row = get_group_id(0) / nsb, lid = get_local_id(0);
    psr_lp_block(logits, logits_offset, row_stride, vocab, nsb, row_request, requests, temperatures, raw,
                 tokens, top_n, lse, beat, top_v, top_i, cuts, row, get_group_id(0) % nsb, 1, 0, lid,
                 &l.block);
    if (!psr_last_group(done + row, nsb, &last))
        return;
    psr_lp_row(vocab, nsb, 1, tokens, lse, beat, top_v, top_i, top_n, token_logprobs, token_ranks, top_ids,
               top_logprobs, logits, logits_offset, row_stride, row_request, requests, temperatures, raw,
               cuts, row, true, lid, &l.row);
}
