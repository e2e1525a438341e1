/* Super-blocks and their log-sum-exp, shared by verification (verify.cl)
 * and logprobs (logprobs.cl), so both get the same bits (verify.cl's
 * comment gives the order of the sums). No kernel. */

#include "tokens.cl"
#include "shuffle.cl"

#define PSR_VWG (PSR_WG_SIZE < PSR_LANES ? PSR_WG_SIZE : PSR_LANES)

/* Steps of a lane starting at `first` that reach into the row. */
inline uint psr_steps_left(uint first, uint vocab)
{
    return first < vocab ? min((uint)PSR_SB_STEPS, (vocab - first + 4 * PSR_LANES - 1) / (4 * PSR_LANES)) : 0u;
}

/* exp(x - m) of a scaled logit against its lane's max m, as
 * 2^((x - m) log2 e): NaN and -inf add 0, x == m exactly 1. With m = +inf
 * the row's log-sum-exp is +inf whatever the terms (psr_row_lse). */
inline float psr_lse_term(float x, float m)
{
    return psr_det_exp2_neg((x - m) * 0x1.715476p+0f);
}

inline float4 psr_exp_terms(float4 x, float m)
{
    return (float4)(psr_lse_term(x.s0, m), psr_lse_term(x.s1, m), psr_lse_term(x.s2, m),
                    psr_lse_term(x.s3, m));
}

#define PSR_LPT (PSR_LANES / PSR_VWG) /* lanes of 4 tokens per work-item */

/* Two (max, sum) pairs merged: each sum scaled to the larger max. */
inline float2 psr_lse_merge(float2 a, float2 b)
{
    float m = fmax(a.x, b.x);
    return (float2)(m, a.y * psr_lse_term(a.x, m) + b.y * psr_lse_term(b.x, m));
}

/* Warp shuffles (shuffle.cl) for the steps within one warp, where the
 * device has them and groups are whole warps. */
#if PSR_NV_SHUFFLE && PSR_VWG % 32 == 0
#define PSR_USE_SHUFFLE 1
#else
#define PSR_USE_SHUFFLE 0
#endif

/* Merges the 256 lanes' (max, sum) in lm, ls pairwise, lane L + s into L
 * for s = 128, 64, ..., 1 (psr_lse_merge); the super-block's (max, sum),
 * valid in every work-item. With `use_shuffles` (a constant), where the
 * device has them (PSR_USE_SHUFFLE), the steps below 32 run in the first
 * warp's registers, the same merges in the same order. The verification
 * statistics take them; logprobs do not (slower there on the H200,
 * docs/benchmarks.md). */
inline float2 psr_lse_tree(uint lid, __local float *lm, __local float *ls, bool use_shuffles)
{
    bool shuffle = use_shuffles && PSR_USE_SHUFFLE;
    uint s = PSR_LANES / 2;
    for (; s > (shuffle ? 16u : 0u); s >>= 1) { /* with shuffles, down to s = 32 */
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint l = lid; l < s; l += PSR_VWG) {
            float2 p = psr_lse_merge((float2)(lm[l], ls[l]), (float2)(lm[l + s], ls[l + s]));
            lm[l] = p.x;
            ls[l] = p.y;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#if PSR_USE_SHUFFLE
    if (shuffle && lid < PSR_WARP) { /* the whole first warp, which holds lanes 0 .. 31 */
        float2 p = (float2)(lm[lid], ls[lid]);
        for (; s > 0; s >>= 1) {
            float2 o = (float2)(psr_shfl_down_f(p.x, s), psr_shfl_down_f(p.y, s));
            if (lid < s)
                p = psr_lse_merge(p, o);
        }
        if (lid == 0) {
            lm[0] = p.x;
            ls[0] = p.y;
        }
    }
    if (shuffle)
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
    return (float2)(lm[0], ls[0]);
}

/* A lane's sum from its four exp chains. */
inline float psr_lane_sum(float4 s)
{
    return (s.s0 + s.s1) + (s.s2 + s.s3);
}

inline float psr_max4(float4 x)
{
    return fmax(fmax(x.s0, x.s1), fmax(x.s2, x.s3));
}

#if PSR_VEC_PATH
/* psr_lse_term per component. */
inline psr_vfloat psr_lse_vterms(psr_vfloat x, psr_vfloat m)
{
    psr_vfloat z = (x - m) * 0x1.715476p+0f;
    psr_vfloat kk = z + 0x1.8p23f;
    psr_vfloat f = z - (kk - 0x1.8p23f);
    psr_vfloat p = (psr_vfloat)(0x1.5bba14p-10f);
    p = fma(p, f, (psr_vfloat)(0x1.3cea88p-7f));
    p = fma(p, f, (psr_vfloat)(0x1.c6b752p-5f));
    p = fma(p, f, (psr_vfloat)(0x1.ebf9bcp-3f));
    p = fma(p, f, (psr_vfloat)(0x1.62e42ap-1f));
    p = fma(p, f, (psr_vfloat)(1.0f));
    psr_vfloat e = psr_as_vfloat(psr_as_vuint(p) + (psr_as_vuint(kk) << 23));
    return select((psr_vfloat)(0.0f), e, z > -125.0f); /* psr_det_exp2_neg's 0 below -125 and for NaN */
}

/* The maxima of four lanes held as one vector (lane l in components
 * 4l .. 4l + 3), each spread back over its lane's components in *spread. */
inline float4 psr_vlane_max(psr_vfloat wm, psr_vfloat *spread)
{
    float4 m = (float4)(psr_max4(wm.s0123), psr_max4(wm.s4567), psr_max4(wm.s89ab), psr_max4(wm.scdef));
    *spread = (psr_vfloat)((float4)(m.s0), (float4)(m.s1), (float4)(m.s2), (float4)(m.s3));
    return m;
}

/* Four lanes' maxima m and sums (psr_lane_sum of their exp chains), lane
 * l of work-item lid at lid + l * PSR_VWG of lm and ls. */
inline void psr_vlanes_store(float4 m, psr_vfloat lane, uint lid, __local float *lm, __local float *ls)
{
    float mv[4] = {m.s0, m.s1, m.s2, m.s3};
    float sv[4] = {psr_lane_sum(lane.s0123), psr_lane_sum(lane.s4567), psr_lane_sum(lane.s89ab),
                   psr_lane_sum(lane.scdef)};
    for (uint l = 0; l < 4; l++) {
        lm[lid + l * PSR_VWG] = mv[l];
        ls[lid + l * PSR_VWG] = sv[l];
    }
}

/* The tokens of four lanes' step 0 (lane l's four from component 4l) for
 * work-item lid of a super-block at `base`; step k adds k * 4 * PSR_LANES. */
inline psr_vuint psr_vlane_ids(uint base, uint lid)
{
    return (psr_vuint)(base + 4 * lid) + (PSR_LANE_IDS >> 2) * (4 * PSR_VWG) + (PSR_LANE_IDS & 3);
}

/* One step's values x (tokens ids) into each component's best (*bv, *bi):
 * a strict compare, as a component meets its tokens in increasing order,
 * keeps the lowest index of a tie; NaN never wins. */
inline void psr_vlanes_keep_best(psr_vfloat x, psr_vuint ids, psr_vfloat *bv, psr_vuint *bi)
{
    psr_vint better = x > *bv;
    *bv = select(*bv, x, better);
    *bi = select(*bi, ids, better);
}

/* The components' bests (index 0xffffffff: none) merged into (*v, *i),
 * which start as the caller's default, in psr_better's order. */
inline void psr_vlanes_merge_best(psr_vfloat bv, psr_vuint bi, float *v, uint *i)
{
    float vals[PSR_VEC];
    uint ids[PSR_VEC];
    psr_vstore(bv, 0, vals);
    psr_vstore(bi, 0, ids);
    for (uint c = 0; c < PSR_VEC; c++)
        if (psr_better(vals[c], ids[c], *v, *i)) {
            *v = vals[c];
            *i = ids[c];
        }
}
#endif

/* Partial `at` of the statistics; `published` reads one that another
 * group of the running launch published (groups.cl), else a plain load
 * (partials of an earlier launch). */
inline float2 psr_lse_partial(__global const float2 *lse, ulong at, bool published)
{
    return published ? *(volatile __global const float2 *)(lse + at) : lse[at];
}

/* A row's log-sum-exp from its n super-blocks' (max, sum), `stride`
 * apart from `first`: M the largest max, then sum_i s_i exp(m_i - M)
 * added in order of i. The exps are independent, so the walk waits for
 * one, not one per super-block. */
inline float psr_strided_lse(__global const float2 *first, ulong stride, uint n, bool published)
{
    float big = -INFINITY;
    for (uint sb = 0; sb < n; sb++)
        big = fmax(big, psr_lse_partial(first, sb * stride, published).x);
    if (isinf(big))
        return big; /* no finite logit, or an infinite one */
    float sum = 0.0f;
    for (uint sb = 0; sb < n; sb++) {
        float2 p = psr_lse_partial(first, sb * stride, published);
        sum += p.y * psr_lse_term(p.x, big);
    }
    return big + psr_det_log(sum);
}

/* A row's log-sum-exp from its super-blocks' partials, a row's together. */
inline float psr_row_lse_of(__global const float2 *lse, uint row, uint nsb, bool published)
{
    return psr_strided_lse(lse + (ulong)row * nsb, 1, nsb, published);
}

/* psr_row_lse_of over partials in local memory: the same arithmetic in
 * the same order. */
inline float psr_local_lse(__local const float2 *p, uint nsb)
{
    float big = -INFINITY;
    for (uint sb = 0; sb < nsb; sb++)
        big = fmax(big, p[sb].x);
    if (isinf(big))
        return big;
    float sum = 0.0f;
    for (uint sb = 0; sb < nsb; sb++)
        sum += p[sb].y * psr_lse_term(p[sb].x, big);
    return big + psr_det_log(sum);
}

#define PSR_HELD 12 /* partials a deciding work-item holds (vocabularies up to 196,608) */
#if PSR_HELD % 2
#error "psr_published_pair reads partials in pairs: PSR_HELD must be even"
#endif

/* psr_row_lse_of over partials held in p (PSR_HELD, those past nsb
 * (-inf, 0)): the same arithmetic in the same order. */
inline float psr_held_lse(const float2 *p, uint nsb)
{
    float big = -INFINITY;
#pragma unroll
    for (uint sb = 0; sb < PSR_HELD; sb++)
        big = fmax(big, p[sb].x);
    if (isinf(big))
        return big;
    float sum = 0.0f;
#pragma unroll
    for (uint sb = 0; sb < PSR_HELD; sb++)
        if (sb < nsb)
            sum += p[sb].y * psr_lse_term(p[sb].x, big);
    return big + psr_det_log(sum);
}
