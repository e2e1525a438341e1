/* Logprobs of sampled tokens (docs/api/logprobs.md), with
 * verification's super-blocks and log-sum-exp order (lse.cl), so a
 * logprob is the same bits on every device and in lib/oracle/logprobs.c.
 *
 * psr_logprobs_partial: per (row, super-block): the (max, sum) of the
 *   log-sum-exp, how many tokens beat the sampled one, and the block's
 *   top-N tokens (value descending, index ascending); per row (from its
 *   first block) the sampled token's value, so the finish need not load
 *   it through the token, request and temperature one after another.
 * psr_logprobs_partial_few: the same, with the segment bound first whatever
 *   the tuning chose, for calls of few blocks (lib/ops/logprobs.c).
 * psr_logprobs_finish: per row: the log-sum-exp, the sampled token's
 *   logprob and rank, and the row's top-N merged from its blocks.
 * psr_logprobs_token_key: per row, a shard's first round (docs/sharded.md):
 *   the sampled token's value as an ordered integer where this shard
 *   holds the token, else 0, for the app to reduce by maximum.
 * Where a (row, block)'s partials lie is the params' layout: one array
 * per kind, rows apart (one call), or a shards' exchange buffer of
 * slots, a block's partials for every row in each (docs/sharded.md).
 * Values are logits / T ("processed"; T = 0 counts as 1) or the logits
 * themselves (raw); NaN counts as -inf.
 */

#include "lse.cl"

#define PSR_MAX_TOP_N 20
/* Top-N candidates of a block: at most N work-items' tokens reach the
 * exact bound (below), so this many always fit. */
#define PSR_LP_CANDIDATES (PSR_MAX_TOP_N * 16 * PSR_LPT * 4)
/* The cheap bound first: the N-th best of the maxima of 32 segments of
 * work-items (1: on; 0: only the exact bound, for comparison), in
 * psr_logprobs_partial (psr_logprobs_partial_few always takes it first). */
#ifndef PSR_LP_SEGMENT_TAU
#define PSR_LP_SEGMENT_TAU 1
#endif
#define PSR_LP_SEGMENTS 32
#define PSR_LP_SEGMENTS_FIT (PSR_VWG >= 2 * PSR_LP_SEGMENTS) /* groups wide enough for them */
#define PSR_LP_NONE 0xffffffffu

/* Bounds tau on a block's top_n-th token, from each work-item's best
 * (bv, bi): top_n distinct tokens come at or before tau (value
 * descending, index ascending), so the block's top_n do too. With fewer
 * owners than top_n, tau is -inf (every token qualifies). Both use lbv and
 * lbi, and start with no barrier, so the caller's writes before the call
 * (lcount[0]) are ordered before the candidates are counted.
 *
 * The segment bound: the top_n-th best of 32 segment maxima, a few
 * barriers and a looser tau. Uses lm[0] and lcount[1] too. */
inline void psr_lp_tau_segments(float bv, uint bi, uint top_n, uint lid, __local float *lbv,
                                __local uint *lbi, __local float *lm, __local uint *lcount,
                                float *tau_v, uint *tau_i)
{
    lbv[lid] = bv;
    lbi[lid] = bi;
    const uint stride = PSR_VWG / PSR_LP_SEGMENTS, count = PSR_LP_SEGMENTS;
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

/* The exact bound: the top_n-th best of all the work-items' bests, so at
 * most top_n work-items' tokens reach it. A bitonic sort of the bests,
 * best first and no token last: log2(WG) (log2(WG) + 1) / 2 rounds of one
 * compare-exchange (on the H200 a quarter faster overall than each
 * work-item ranking its best against all the others). Tokens are distinct,
 * so the order is total. (With NVIDIA's warp shuffles for the rounds
 * within a warp it was slower on the H200, docs/benchmarks.md.) */
inline void psr_lp_tau_sorted(float bv, uint bi, uint top_n, uint lid, __local float *lbv,
                              __local uint *lbi, float *tau_v, uint *tau_i)
{
    lbv[lid] = bv;
    lbi[lid] = bi;
    for (uint size = 2, span = 1; size <= PSR_VWG;) {
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
    bool enough = top_n <= PSR_VWG && lbi[top_n - 1] != PSR_LP_NONE;
    *tau_v = enough ? lbv[top_n - 1] : -INFINITY;
    *tau_i = enough ? lbi[top_n - 1] : PSR_LP_NONE;
}

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

/* The locals of a row's merge (psr_lp_row), for up to 64 blocks (vocab
 * <= 2^20, lib/ops/logprobs.c). */
typedef struct psr_lp_row_locals {
    float cv[64 * PSR_MAX_TOP_N]; /* the blocks' top-N lists */
    uint ci[64 * PSR_MAX_TOP_N];
    float2 parts[64]; /* the blocks' log-sum-exp partials */
    uint beats[64];
    float lse;
    uint valid;
} psr_lp_row_locals;

/* A block's pass over its row (psr_lp_block): how values are made from
 * the row's logits, and where the work-item's lanes are. The lanes' steps
 * in the row are kept apart (steps[PSR_LPT]): indexed at run time on
 * CPUs, inside the struct they would keep all of it in memory. */
typedef struct psr_lp_lanes {
    float t, r, cut;
    bool divide, full, aligned;
    uint base, vocab, lid;
} psr_lp_lanes;

/* The values of tokens i .. i + 3, step k of the work-item's lane j. */
#if PSR_LPT == 1
#define PSR_LP_VALUES(j, k, i) v[k]
/* Every loop over a lane's steps has the constant bound PSR_SB_STEPS and
 * stops at the lane's steps[j]; on GPUs it unrolls, so v[k] keeps a
 * constant index (indexed at run time, v would live in memory, not
 * registers). CPUs do not unroll: PoCL's build would take 5x as long. */
#else
/* CPUs: several lanes per work-item, read again for each pass. */
#define PSR_LP_VALUES(j, k, i)                                                                    \
    psr_lp_values(psr_load4(src, i, ln->vocab, ln->aligned), ln->divide, ln->t, ln->r, ln->cut)
#endif

/* The start of step k of a loop over lane j's steps (the loop's bound is
 * PSR_SB_STEPS, above): leaves the loop past the lane's steps, else
 * declares i, the step's first token, and x, its values. Needs `base`,
 * `lid` and `steps`. */
#define PSR_LP_STEP(j, k, i, x)                                                                   \
    if ((k) >= steps[j])                                                                           \
        break;                                                                                     \
    uint i = base + 4 * (lid + (j) * PSR_VWG) + (k) * 4 * PSR_LANES;                               \
    float4 x = PSR_LP_VALUES(j, k, i)

/* A row's temperature t (its reciprocal r, whether to divide) and filter
 * threshold. */
inline void psr_lp_row_scale(__global const int *row_request, uint requests, __global const float *temperatures,
                             uint raw, __global const float *cuts, uint row, float *t, float *r, bool *divide,
                             float *cut)
{
    int req = row_request ? row_request[row] : (int)row;
    *t = !raw && req >= 0 && req < (int)requests ? temperatures[req] : 1.0f;
    *divide = isnormal(*t) && *t > 0.0f && *t != 1.0f;
    *r = *divide ? psr_temp_recip(*t) : 1.0f;
    *cut = psr_lp_cut(cuts, row, raw, *t);
}

/* The row's temperature and filter, and the block's lanes (sb of the row
 * at src); returns the sampled token's value. With shards the value comes
 * from the reduced keys (token_keys), as only its shard can read it. */
inline float psr_lp_block_setup(psr_lp_lanes *ln, uint *steps, __global const psr_logit_t *src, uint vocab,
                                __global const int *row_request, uint requests,
                                __global const float *temperatures, uint raw, __global const int *tokens,
                                uint tokens64, __global const uint *token_keys, __global const float *cuts,
                                uint row, uint sb, uint lid)
{
    float t, r, cut;
    bool divide;
    psr_lp_row_scale(row_request, requests, temperatures, raw, cuts, row, &t, &r, &divide, &cut);
    uint base = sb * PSR_SB;
    bool full = base + PSR_SB <= vocab;
    bool aligned = ((size_t)src & (4 * sizeof(psr_logit_t) - 1)) == 0;
    float tv = INFINITY; /* no token: nothing beats it, rank 0 later */
    if (token_keys) {
        uint key = token_keys[row];
        tv = key ? psr_unordered(key) : INFINITY;
    } else {
        int tok = psr_load_token(tokens, row, tokens64);
        if (tok >= 0 && (uint)tok < vocab)
            tv = psr_lp_value(psr_load_logit(src, (ulong)tok), divide, t, r, cut);
    }
    psr_lp_lanes lanes = {t, r, cut, divide, full, aligned, base, vocab, lid};
    *ln = lanes;
    for (uint j = 0; j < PSR_LPT; j++)
        steps[j] = full ? PSR_SB_STEPS : psr_steps_left(base + 4 * (lid + j * PSR_VWG), vocab);
    return tv;
}

#if PSR_LPT == 1
/* GPUs: the lane's values, into the registers v that every pass reads. */
inline void psr_lp_load_lane(const psr_lp_lanes *ln, const uint *steps, __global const psr_logit_t *src,
                             float4 *v)
{
    uint base = ln->base, lid = ln->lid;
    if (ln->full && ln->aligned) {
#pragma unroll
        for (uint k = 0; k < PSR_SB_STEPS; k++)
            v[k] = psr_load4_aligned(src, base + 4 * lid + k * 4 * PSR_LANES);
    } else {
#pragma unroll
        for (uint k = 0; k < PSR_SB_STEPS; k++)
            if (k < steps[0])
                v[k] = psr_load4(src, base + 4 * lid + k * 4 * PSR_LANES, ln->vocab, ln->aligned);
    }
#pragma unroll
    for (uint k = 0; k < PSR_SB_STEPS; k++)
        if (k < steps[0])
            v[k] = psr_lp_values(v[k], ln->divide, ln->t, ln->r, ln->cut);
}
#endif

#if PSR_VEC_PATH && PSR_LPT == 4 && PSR_DETERMINISTIC
/* CPU devices: the work-item's four lanes as one vector, lane j in
 * components 4j .. 4j + 3, so that each component goes through the scalar
 * lane's operations in its order (the same bits, as test_logprobs checks
 * against the oracle); a step past a lane's end reads as -inf, whose term
 * adds +0 (lane sums start at +0). */
#define PSR_LP_VLANES 1

inline psr_vfloat psr_lp_vvalues(psr_vfloat x, bool divide, float t, float r, float cut)
{
    psr_vfloat v = divide ? psr_vscale(x, t, r) : x; /* NaN stays NaN */
    return select((psr_vfloat)(-INFINITY), v, v >= cut);
}

/* Step k of the four lanes (past the row's end psr_load4 gives NaN, so
 * -inf here: a lane's steps past its last read as such). */
inline psr_vfloat psr_lp_vstep(const psr_lp_lanes *ln, __global const psr_logit_t *src, uint k)
{
    float4 x[4];
    for (uint j = 0; j < 4; j++)
        x[j] = psr_load4(src, ln->base + 4 * (ln->lid + j * PSR_VWG) + k * 4 * PSR_LANES, ln->vocab, ln->aligned);
    return psr_lp_vvalues((psr_vfloat)(x[0], x[1], x[2], x[3]), ln->divide, ln->t, ln->r, ln->cut);
}

/* The four lanes' values, loaded and scaled once for every pass (1 KB a
 * work-item): vv[k] is step k, as psr_lp_vstep gives it. */
inline void psr_lp_vload(const psr_lp_lanes *ln, const uint *steps, __global const psr_logit_t *src,
                         psr_vfloat *vv)
{
    uint last = max(max(steps[0], steps[1]), max(steps[2], steps[3]));
    for (uint k = 0; k < last; k++)
        vv[k] = psr_lp_vstep(ln, src, k);
}

/* Step k of psr_lp_vload's values, which the passes get as `v`. */
inline psr_vfloat psr_lp_vat(const float4 *v, uint k)
{
    return ((const psr_vfloat *)v)[k];
}
#endif

/* Pass 1: each lane's max and how many tokens beat the sampled one (value
 * tv); pass 2: the lane's exp sums against its max (verify.cl's order),
 * into ls. Returns the work-item's count of beats. */
#ifdef PSR_LP_VLANES
inline uint psr_lp_lane_sums(const psr_lp_lanes *ln, const uint *steps, __global const psr_logit_t *src,
                             const float4 *v, float tv, __local float *ls)
{
    uint lid = ln->lid, last = max(max(steps[0], steps[1]), max(steps[2], steps[3]));
    psr_vfloat wm = (psr_vfloat)(-INFINITY);
    psr_vint beats = 0;
    for (uint k = 0; k < last; k++) {
        psr_vfloat x = psr_lp_vat(v, k);
        wm = fmax(wm, x);
        beats -= x > tv; /* past the row's end the values are -inf: they beat nothing */
    }
    psr_vfloat m16;
    float4 m = psr_vlane_max(wm, &m16);
    psr_vfloat lane = (psr_vfloat)(0.0f);
    for (uint k = 0; k < last; k++)
        lane += psr_lse_vterms(psr_lp_vat(v, k), m16);
    psr_vlanes_store(m, lane, lid, ls + PSR_LANES, ls);
    int8 b8 = beats.lo + beats.hi;
    int4 b4 = b8.lo + b8.hi;
    int2 b2 = b4.lo + b4.hi;
    return (uint)(b2.x + b2.y);
}
#else
inline uint psr_lp_lane_sums(const psr_lp_lanes *ln, const uint *steps, __global const psr_logit_t *src,
                             const float4 *v, float tv, __local float *ls)
{
    uint base = ln->base, lid = ln->lid;
    uint beat = 0;
    for (uint j = 0; j < PSR_LPT; j++) {
        float wm = -INFINITY;
#if PSR_LPT == 1
#pragma unroll
#endif
        for (uint k = 0; k < PSR_SB_STEPS; k++) {
            PSR_LP_STEP(j, k, i, x);
            wm = fmax(wm, psr_max4(x));
            beat += (x.s0 > tv) + (x.s1 > tv) + (x.s2 > tv) + (x.s3 > tv);
            /* past the row's end the values are -inf: they beat nothing */
        }
        float4 lane = (float4)(0.0f);
#if PSR_LPT == 1
#pragma unroll
#endif
        for (uint k = 0; k < PSR_SB_STEPS; k++) {
            PSR_LP_STEP(j, k, i, x);
            lane += psr_exp_terms(x, wm);
        }
        ls[PSR_LANES + lid + j * PSR_VWG] = wm;
        ls[lid + j * PSR_VWG] = psr_lane_sum(lane);
    }
    return beat;
}
#endif

/* The work-item's best token (value descending, index ascending) in *bi,
 * PSR_LP_NONE where it has none; returns its value. */
#ifdef PSR_LP_VLANES
/* CPU devices: each component keeps its best in increasing token order
 * (a strict >), then the 16 merge by value and index: the scalar walk's
 * answer, which for a work-item whose tokens are all -inf is its first
 * token. */
inline float psr_lp_lane_best(const psr_lp_lanes *ln, const uint *steps, __global const psr_logit_t *src,
                              const float4 *v, uint *best_i)
{
    uint last = max(max(steps[0], steps[1]), max(steps[2], steps[3]));
    psr_vuint at = psr_vlane_ids(ln->base, ln->lid);
    psr_vfloat bv = (psr_vfloat)(-INFINITY);
    psr_vuint bi = (psr_vuint)(PSR_LP_NONE);
    for (uint k = 0; k < last; k++)
        psr_vlanes_keep_best(psr_lp_vat(v, k), at + k * 4 * PSR_LANES, &bv, &bi);
    /* a component without a token above -inf keeps PSR_LP_NONE and never
     * beats the default, the first token (where the work-item has one) */
    float best = -INFINITY;
    *best_i = steps[0] > 0 ? ln->base + 4 * ln->lid : PSR_LP_NONE;
    psr_vlanes_merge_best(bv, bi, &best, best_i);
    return best;
}
#else
inline float psr_lp_lane_best(const psr_lp_lanes *ln, const uint *steps, __global const psr_logit_t *src,
                              const float4 *v, uint *best_i)
{
    uint base = ln->base, lid = ln->lid, vocab = ln->vocab;
    float bv = -INFINITY;
#if PSR_LPT == 1
    /* One lane, visited in increasing token order: only a larger value
     * is better. Past the row the values are -inf and never are. */
    uint bi = base + 4 * lid < vocab ? base + 4 * lid : PSR_LP_NONE;
#pragma unroll
    for (uint k = 0; k < PSR_SB_STEPS; k++) {
        if (k >= steps[0])
            break;
        uint i = base + 4 * lid + k * 4 * PSR_LANES;
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
            uint i = base + 4 * (lid + j * PSR_VWG) + k * 4 * PSR_LANES;
            float4 x = PSR_LP_VALUES(j, k, i);
            float xs[4] = {x.s0, x.s1, x.s2, x.s3};
            for (uint c = 0; c < 4; c++)
                if (i + c < vocab && (bi == PSR_LP_NONE || psr_better(xs[c], i + c, bv, bi)))
                    bv = xs[c], bi = i + c;
        }
#endif
    *best_i = bi;
    return bv;
}
#endif

/* The work-item's tokens at or before the bound (tau_v, tau_i), counted
 * in lcount[0] and stored as candidates while they fit (in any order: they
 * are placed by count, and an overflow discards them). */
#ifdef PSR_LP_VLANES
/* CPU devices: the four lanes a vector at a time; most steps hold no
 * candidate and cost one compare-and-or. Tokens past the row (-inf, ids
 * at or past vocab) never qualify: the bound's index is a row token's. */
inline void psr_lp_gather_candidates(const psr_lp_lanes *ln, const uint *steps, __global const psr_logit_t *src,
                                     const float4 *v, float tau_v, uint tau_i, __local psr_lp_block_locals *l)
{
    uint last = max(max(steps[0], steps[1]), max(steps[2], steps[3]));
    psr_vuint at = psr_vlane_ids(ln->base, ln->lid);
    for (uint k = 0; k < last; k++) {
        psr_vfloat x = psr_lp_vat(v, k);
        psr_vuint ids = at + k * 4 * PSR_LANES;
        psr_vint after = (x < tau_v) | ((x == tau_v) & psr_as_vint(ids > tau_i)); /* psr_after's */
        if (!psr_vany_nonzero(~after))
            continue;
        float xs[PSR_VEC];
        uint is[PSR_VEC];
        int af[PSR_VEC];
        psr_vstore(x, 0, xs);
        psr_vstore(ids, 0, is);
        psr_vstore(after, 0, af);
        for (uint c = 0; c < PSR_VEC; c++)
            if (!af[c]) {
                uint slot = atomic_inc(&l->lcount[0]);
                if (slot < PSR_LP_CANDIDATES) {
                    l->lcv[slot] = xs[c];
                    l->lci[slot] = is[c];
                }
            }
    }
}
#else
inline void psr_lp_gather_candidates(const psr_lp_lanes *ln, const uint *steps, __global const psr_logit_t *src,
                                     const float4 *v, float tau_v, uint tau_i, __local psr_lp_block_locals *l)
{
    uint base = ln->base, lid = ln->lid;
    for (uint j = 0; j < PSR_LPT; j++)
#if PSR_LPT == 1
#pragma unroll
#endif
        for (uint k = 0; k < PSR_SB_STEPS; k++) {
            PSR_LP_STEP(j, k, i, x);
            float xs[4] = {x.s0, x.s1, x.s2, x.s3};
            for (uint c = 0; c < 4; c++)
                if (!psr_after(xs[c], i + c, tau_v, tau_i)) {
                    uint slot = atomic_inc(&l->lcount[0]);
                    if (slot < PSR_LP_CANDIDATES) {
                        l->lcv[slot] = xs[c];
                        l->lci[slot] = i + c;
                    }
                }
        }
}
#endif

/* The work-item's tokens under the bound (tau_v, tau_i) gathered; every
 * work-item calls it (barriers). Returns whether they fit. No bound
 * (every token qualifies): the row's last token bounds it, so tokens past
 * the row (-inf) never qualify. */
inline bool psr_lp_gather_under(const psr_lp_lanes *ln, const uint *steps, __global const psr_logit_t *src,
                                const float4 *v, float tau_v, uint tau_i, __local psr_lp_block_locals *l)
{
    psr_lp_gather_candidates(ln, steps, src, v, tau_v, tau_i == PSR_LP_NONE ? ln->vocab - 1 : tau_i, l);
    barrier(CLK_LOCAL_MEM_FENCE);
    bool fits = l->lcount[0] <= PSR_LP_CANDIDATES; /* the same for every work-item */
    barrier(CLK_LOCAL_MEM_FENCE); /* all have read it before it is reset */
    return fits;
}

/* The block's candidates, from each work-item's best (bv, bi): under the
 * cheap bound first where the kernel takes it, then, if they overflow,
 * under the exact one (with PSR_FLAT_BARRIERS every group sorts for it,
 * and those whose candidates fit gather nothing more). Every work-item of
 * the group calls it (barriers); their count is in lcount[0]. */
inline void psr_lp_bound_candidates(const psr_lp_lanes *ln, const uint *steps, __global const psr_logit_t *src,
                                    const float4 *v, float bv, uint bi, uint top_n, bool segments_first,
                                    __local psr_lp_block_locals *l)
{
    uint lid = ln->lid;
    if (lid == 0)
        l->lcount[0] = 0; /* the candidates */
    bool fits = false;
    float tau_v;
    uint tau_i;
    if (segments_first && PSR_LP_SEGMENTS_FIT) { /* a constant of each kernel */
        psr_lp_tau_segments(bv, bi, top_n, lid, l->lbv, l->lbi, l->lm, l->lcount, &tau_v, &tau_i);
        fits = psr_lp_gather_under(ln, steps, src, v, tau_v, tau_i, l);
        if (!fits && lid == 0)
            l->lcount[0] = 0; /* the exact bound counts afresh (it always fits) */
    }
    if (PSR_FLAT_BARRIERS || !fits) {
        const uint none[PSR_LPT] = {0};
        psr_lp_tau_sorted(bv, bi, top_n, lid, l->lbv, l->lbi, &tau_v, &tau_i);
        psr_lp_gather_under(ln, fits ? none : steps, src, v, tau_v, tau_i, l);
    }
}

/* Each candidate placed by how many candidates beat it: the block's top_n
 * list from element `at`, absent tokens last; ids are global (token_base
 * added). */
inline void psr_lp_place_candidates(__local const psr_lp_block_locals *l, uint top_n, ulong at, uint token_base,
                                    __global float *top_v, __global uint *top_i, uint lid)
{
    __local const float *lcv = l->lcv;
    __local const uint *lci = l->lci;
    uint cands = min(l->lcount[0], (uint)PSR_LP_CANDIDATES); /* the bound keeps it far below */
    for (uint c = lid; c < cands; c += PSR_VWG) {
        uint at_place = 0;
        for (uint d = 0; d < cands; d++)
            at_place += psr_better(lcv[d], lci[d], lcv[c], lci[c]);
        if (at_place < top_n) {
            top_v[at + at_place] = lcv[c];
            top_i[at + at_place] = lci[c] + token_base;
        }
    }
    for (uint n = cands + lid; n < top_n; n += PSR_VWG) /* fewer tokens than top_n */
        top_i[at + n] = 0xffffffffu;
}

/* One block's pass: super-block sb of a row (psr_logprobs_partial), its
 * partials stored in slot p.first_slot + sb of the params' layout. */
inline void psr_lp_block(const psr_logprobs_params p, __global const psr_logit_t *logits,
                         __global const int *row_request, __global const float *temperatures,
                         __global const int *tokens, __global const uint *token_keys, __global float2 *lse_out,
                         __global uint *beat_out, __global float *top_v, __global uint *top_i,
                         __global const float *cuts, __global float *token_value, uint row, uint sb, uint lid,
                         bool segments_first, __local psr_lp_block_locals *l)
{
    __global const psr_logit_t *src = logits + p.logits_offset + (ulong)row * p.row_stride;
    const uint top_n = p.top_n;
    psr_lp_lanes ln;
    uint steps[PSR_LPT];
    float tv = psr_lp_block_setup(&ln, steps, src, p.vocab, row_request, p.requests, temperatures, p.raw, tokens,
                                  p.tokens64, token_keys, cuts, row, sb, lid);
#if PSR_LPT == 1
    /* GPUs: the lane's values stay in registers for every pass below. */
    float4 v[PSR_SB_STEPS];
    psr_lp_load_lane(&ln, steps, src, v);
#elif defined(PSR_LP_VLANES)
    /* CPU devices: the lanes' values in memory, read by every pass. */
    psr_vfloat vv[PSR_SB_STEPS];
    psr_lp_vload(&ln, steps, src, vv);
    const float4 *v = (const float4 *)vv;
#else
    const float4 *v = 0; /* CPUs: each pass reads its lanes again */
#endif

    /* Passes 1 and 2: the lanes' counts of beats and their log-sum-exps. */
    if (lid == 0)
        l->lcount[0] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    uint beat = psr_lp_lane_sums(&ln, steps, src, v, tv, l->ls);
    if (beat)
        atomic_add(&l->lcount[0], beat);
    float2 part = psr_lse_tree(lid, l->ls + PSR_LANES, l->ls, false); /* its barriers publish lcount */
    ulong slot = p.first_slot + sb, at = (ulong)row * p.part_row_step;
    if (lid == 0) {
        beat_out[at + slot * p.beat_slot_step] = l->lcount[0];
        lse_out[at + slot * p.lse_slot_step] = part;
        if (sb == 0 && token_value)
            token_value[row] = tv;
    }

    /* Pass 3: the block's top-N. A bound tau (psr_lp_tau_*) leaves as
     * candidates only the tokens at or before it. They are gathered in
     * local memory, first under the cheap bound; if they overflow it, again
     * under the exact one, under which they always fit. Each candidate is
     * then placed by how many candidates beat it. */
    if (PSR_FLAT_BARRIERS || top_n > 0) { /* uniform; flat: without top-N a group reads nothing */
        const uint none[PSR_LPT] = {0};
        const uint *lanes = top_n > 0 ? steps : none;
        uint bi;
        float bv = psr_lp_lane_best(&ln, lanes, src, v, &bi);
        psr_lp_bound_candidates(&ln, lanes, src, v, bv, bi, max(top_n, 1u), segments_first, l);
        psr_lp_place_candidates(l, top_n, (ulong)row * p.top_row_step + slot * p.top_slot_step, p.token_base,
                                top_v, top_i, lid);
    }
}
#undef PSR_LP_STEP
#undef PSR_LP_VALUES

/* The arrays of the kernels' one scratch buffer (psr_logprobs_params):
 * every buffer argument costs the host time at each launch. */
#define PSR_LP_LSE(parts, p) ((__global float2 *)(parts) + (p).lse_base)
#define PSR_LP_TOP_V(parts, p) ((__global float *)(parts) + (p).top_v_base)
#define PSR_LP_TOKEN_VALUE(parts, p) \
    ((p).token_value_base == PSR_LP_NONE ? 0 : (__global float *)(parts) + (p).token_value_base)

/* The partial kernel, with the tuning's bound (psr_logprobs_partial) and
 * with the segment bound first wherever the tuning chose the exact one
 * alone (psr_logprobs_partial_few): on the H200 1.0-1.6 us faster at 1 to
 * 16 rows of 128,256 (one block per SM or fewer), and a third slower at
 * 64 (docs/benchmarks.md), so lib/ops/logprobs.c takes it for few blocks. One
 * body for both: the choice is a constant of each kernel. */
#define PSR_LP_PARTIAL_KERNEL(name, segments_first)                                                       \
    __kernel __attribute__((reqd_work_group_size(PSR_VWG, 1, 1))) void name(                              \
        const psr_logprobs_params p, __global const psr_logit_t *logits, __global const int *row_request,  \
        __global const float *temperatures, __global const int *tokens, __global const uint *token_keys,   \
        __global uint *parts, __global const float *cuts)                                                 \
    {                                                                                                     \
        __local psr_lp_block_locals l;                                                                    \
        uint nsb = p.blocks_per_row;                                                                      \
        psr_lp_block(p, logits, row_request, temperatures, tokens, token_keys, PSR_LP_LSE(parts, p),      \
                     parts + p.beat_base, PSR_LP_TOP_V(parts, p), parts + p.top_i_base, cuts,              \
                     PSR_LP_TOKEN_VALUE(parts, p), get_group_id(0) / nsb, get_group_id(0) % nsb,           \
                     get_local_id(0), segments_first, &l);                                                \
    }

#if !defined(PSR_ONE_KERNEL) || defined(PSR_ONLY_psr_logprobs_partial)
PSR_LP_PARTIAL_KERNEL(psr_logprobs_partial, PSR_LP_SEGMENT_TAU)
#endif
#if !defined(PSR_ONE_KERNEL) || defined(PSR_ONLY_psr_logprobs_partial_few)
PSR_LP_PARTIAL_KERNEL(psr_logprobs_partial_few, true)
#endif

/* How many of a block's top-n list (sorted best first, absent tokens
 * last) beat (v, i): a prefix of the list, found by bisection. */
inline uint psr_lp_beaten_by(__local const float *lv, __local const uint *li, uint top_n, float v, uint i)
{
    uint lo = 0, hi = top_n;
    while (lo < hi) {
        uint mid = (lo + hi) / 2;
        if (li[mid] != PSR_LP_NONE && psr_better(lv[mid], li[mid], v, i))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

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

/* One row's merge of its blocks (psr_logprobs_finish), `published` when
 * the blocks ran in the same launch. Each block's partials and top-N list
 * are loaded by work-items of their own, in parallel (one work-item's
 * volatile loads go one after another). Each candidate of a block's list
 * is placed in parallel: its place in its own list plus, in each other
 * list, how many beat it. */
inline void psr_lp_row(const psr_logprobs_params p, __global const int *tokens, __global const uint *token_keys,
                       __global const float2 *lse_in, __global const uint *beat_in, __global const float *top_v,
                       __global const uint *top_i, __global const float *token_value,
                       __global float *token_logprobs, __global int *token_ranks, __global int *top_ids,
                       __global float *top_logprobs, uint row, bool published, uint lid,
                       __local psr_lp_row_locals *l)
{
    __local float *cv = l->cv;
    __local uint *ci = l->ci;
    const uint nsb = p.blocks_per_row, top_n = p.top_n;
    uint blocks = min(nsb, 64u); /* at most 64 (lib/ops/logprobs.c) */
    uint cands = blocks * top_n;
    ulong part_at = (ulong)row * p.part_row_step, top_at = (ulong)row * p.top_row_step;
    /* The sampled token and its value, with everything else. */
    bool valid = false;
    float tv = 0.0f;
    if (lid == 0 && token_keys) { /* shards: the reduced keys */
        uint key = token_keys[row];
        valid = key != 0;
        tv = psr_unordered(key);
    } else if (lid == 0) {
        int tok = psr_load_token(tokens, row, p.tokens64);
        valid = tok >= 0 && (uint)tok < p.vocab;
        tv = psr_lp_read_f(token_value + row, published);
    }
    bool packed = p.top_slot_step == top_n; /* one call's lists, back to back: no division */
    for (uint c = lid; c < cands; c += PSR_VWG) {
        ulong at = top_at + c;
        if (!packed) {
            uint b = c / top_n;
            at = top_at + (ulong)b * p.top_slot_step + (c - b * top_n);
        }
        cv[c] = psr_lp_read_f(top_v + at, published);
        ci[c] = psr_lp_read_u(top_i + at, published);
    }
    for (uint b = lid; b < blocks; b += PSR_VWG) {
        l->parts[b] = psr_lse_partial(lse_in, part_at + (ulong)b * p.lse_slot_step, published);
        l->beats[b] = psr_lp_read_u(beat_in + part_at + (ulong)b * p.beat_slot_step, published);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) {
        l->valid = 0;
        /* psr_row_lse's arithmetic, over the partials loaded above */
        float2 held[PSR_HELD];
#pragma unroll
        for (uint b = 0; b < PSR_HELD; b++)
            held[b] = b < blocks ? l->parts[b] : (float2)(-INFINITY, 0.0f);
        float lse = nsb <= PSR_HELD ? psr_held_lse(held, nsb) : psr_local_lse(l->parts, blocks);
        l->lse = lse;
        uint beat = 0;
        for (uint b = 0; b < blocks; b++)
            beat += l->beats[b];
        if (token_logprobs)
            token_logprobs[row] = valid ? tv - lse : NAN;
        if (token_ranks)
            token_ranks[row] = valid ? (int)beat + 1 : 0;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float lse = l->lse;
    uint mine = 0;
    for (uint c = lid; c < cands; c += PSR_VWG) {
        if (ci[c] == PSR_LP_NONE)
            continue; /* a block with fewer tokens than top_n */
        mine++;
        uint own = c / top_n, place = c % top_n;
        for (uint b = 0; b < blocks && place < top_n; b++)
            if (b != own)
                place += psr_lp_beaten_by(cv + b * top_n, ci + b * top_n, top_n, cv[c], ci[c]);
        if (place < top_n) {
            top_ids[(ulong)row * top_n + place] = (int)ci[c];
            top_logprobs[(ulong)row * top_n + place] = cv[c] - lse;
        }
    }
    if (mine)
        atomic_add(&l->valid, mine);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint n = l->valid + lid; n < top_n; n += PSR_VWG) { /* fewer tokens than top_n */
        top_ids[(ulong)row * top_n + n] = -1;
        top_logprobs[(ulong)row * top_n + n] = -INFINITY;
    }
}

/* One group per row: merges the row's blocks and writes the outputs. */
#if !defined(PSR_ONE_KERNEL) || defined(PSR_ONLY_psr_logprobs_finish)
__kernel __attribute__((reqd_work_group_size(PSR_VWG, 1, 1)))
void psr_logprobs_finish(const psr_logprobs_params p, __global const int *tokens,
                         __global const uint *token_keys, __global uint *parts, __global float *token_logprobs,
                         __global int *token_ranks, __global int *top_ids, __global float *top_logprobs)
{
    __local psr_lp_row_locals l;
    psr_lp_row(p, tokens, token_keys, PSR_LP_LSE(parts, p), parts + p.beat_base, PSR_LP_TOP_V(parts, p),
               parts + p.top_i_base, PSR_LP_TOKEN_VALUE(parts, p), token_logprobs, token_ranks, top_ids,
               top_logprobs, get_group_id(0), false, get_local_id(0), &l);
}
#endif

/* Small batches in one launch: the blocks of psr_logprobs_partial, and
 * each row's last block to finish merges the row as psr_logprobs_finish
 * does. `done` holds a count per row, which that block resets. The merge
 * starts after every work-item's pass (the count's barriers), so the two
 * share their local memory. */
#if !defined(PSR_ONE_KERNEL) || defined(PSR_ONLY_psr_logprobs_one)
__kernel __attribute__((reqd_work_group_size(PSR_VWG, 1, 1)))
void psr_logprobs_one(const psr_logprobs_params p, __global const psr_logit_t *logits,
                      __global const int *row_request, __global const float *temperatures,
                      __global const int *tokens, __global uint *parts, __global const float *cuts,
                      __global float *token_logprobs, __global int *token_ranks, __global int *top_ids,
                      __global float *top_logprobs)
{
    __global float2 *lse = PSR_LP_LSE(parts, p);
    __global uint *beat = parts + p.beat_base, *top_i = parts + p.top_i_base, *done = parts + p.done_base;
    __global float *top_v = PSR_LP_TOP_V(parts, p), *token_value = PSR_LP_TOKEN_VALUE(parts, p);
    const uint nsb = p.blocks_per_row;
    __local union {
        psr_lp_block_locals block;
        psr_lp_row_locals row;
    } l;
    __local uint last;
    uint row = get_group_id(0) / nsb, lid = get_local_id(0);
    psr_lp_block(p, logits, row_request, temperatures, tokens, 0, lse, beat, top_v, top_i, cuts, token_value, row,
                 get_group_id(0) % nsb, lid, PSR_LP_SEGMENT_TAU, &l.block);
    if (!psr_last_group(done + row, nsb, &last))
        return;
    psr_lp_row(p, tokens, 0, lse, beat, top_v, top_i, token_value, token_logprobs, token_ranks, top_ids, top_logprobs,
               row, true, lid, &l.row);
}
#endif

/* A shard's keys of the sampled tokens: one work-item per row. */
#if !defined(PSR_ONE_KERNEL) || defined(PSR_ONLY_psr_logprobs_token_key)
__kernel void psr_logprobs_token_key(const psr_logprobs_params p, __global const psr_logit_t *logits,
                                     __global const int *row_request, __global const float *temperatures,
                                     __global const int *tokens, __global const float *cuts,
                                     __global uint *token_keys)
{
    uint row = get_global_id(0);
    if (row >= p.rows)
        return;
    float t, r, cut;
    bool divide;
    psr_lp_row_scale(row_request, p.requests, temperatures, p.raw, cuts, row, &t, &r, &divide, &cut);
    long local_id = (long)psr_load_token(tokens, row, p.tokens64) - (long)p.token_base;
    uint key = 0;
    if (local_id >= 0 && local_id < (long)p.vocab) {
        __global const psr_logit_t *src = logits + p.logits_offset + (ulong)row * p.row_stride;
        key = psr_value_key(psr_lp_value(psr_load_logit(src, (ulong)local_id), divide, t, r, cut));
    }
    token_keys[row] = key;
}
#endif
