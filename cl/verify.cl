/* Verification of speculative drafts (docs/speculative.md), built with
 * PSR_METHOD 0 and IS_DRAFTING 0: everything here is on the target stream.
 *
 * Two or three launches:
 *  psr_verify_stats     per (row, super-block): the target row's argmax and
 *                       log-sum-exp partials, and those of the draft row,
 *                       rows in order of their draft slot; a row's last
 *                       group decides its draft, and a recorded rejection
 *                       lets the request's later rows skip their tokens;
 *                       group 0 also checks the device-side inputs.
 *  psr_verify_sample    per (request, chunk): takes the recorded first
 *                       rejection (or walks the request's drafts from the
 *                       partials where nothing was decided), then samples
 *                       the residual or bonus row (Gumbel-max with exact
 *                       pruning); the request's last group writes its
 *                       output row.
 *  psr_verify_finalize  only without 64-bit atomics (or with fp64 noise):
 *                       combines the chunks and writes the outputs.
 * Or, for small batches, one: psr_verify_fused runs the first two as one
 * launch (its comment says how).
 *
 * Log-sum-exp has a fixed reduction order that depends on neither the
 * work-group size nor the split, so every device (and lib/oracle/verify.c)
 * gets the same bits: a row is cut into super-blocks of PSR_SB = 16384
 * tokens, and a super-block into 256 lanes. Lane w holds the 64 tokens
 * base + 4w + c + 1024k (c = 0..3, k = 0..15); M_w is their largest
 * scaled logit; for each c, exp(x / T - M_w) adds to a sum in order of k;
 * the lane's sum is (s_0 + s_1) + (s_2 + s_3). The 256 lanes' (M, S)
 * merge pairwise (psr_lse_tree), and the row merges its super-blocks'
 * (M, S) in order (psr_row_lse). Every exp is psr_lse_term. No lane waits
 * for another before its exps, so a GPU's warps overlap their arithmetic
 * with the memory traffic of the others.
 */

#include "lse.cl"

/* A region of psr_verify's state buffer (psr_shared.h's PSR_VS_*), NULL
 * where the host left it out; needs the kernel's `p` and `state`. */
#define PSR_VS(type, region)                                                                      \
    ((__global type *)(p.at[region] == PSR_VS_NONE ? 0 : state + p.at[region]))

/* As PSR_VERIFY_* in psr.h. */
#define PSR_VERIFY_BAD_TOKEN 1u
#define PSR_VERIFY_BAD_POSITION 2u
#define PSR_VERIFY_BAD_TEMPERATURE 4u

/* A logit scaled by the temperature (x / 1 is x; psr_scale keeps
 * infinities and NaN). */
inline float psr_scaled(float x, float t, float r)
{
    return t == 1.0f ? x : psr_scale(x, t, r);
}

inline float4 psr_load4_f32(__global const float *src, uint i, uint end, bool aligned)
{
    if (aligned && i + 3 < end)
        return *(__global const float4 *)(src + i);
    float4 x = (float4)(NAN);
    if (i < end)
        x.s0 = src[i];
    if (i + 1 < end)
        x.s1 = src[i + 1];
    if (i + 2 < end)
        x.s2 = src[i + 2];
    if (i + 3 < end)
        x.s3 = src[i + 3];
    return x;
}

/* Where request r's rows are, and which draft row j of it is. */
inline __global const float *psr_cache_row(__global const float *cache, uint req, uint cache_k, uint j,
                                           uint vocab)
{
    return cache + ((ulong)req * cache_k + j) * vocab;
}


inline float4 psr_scaled4(float4 x, float t, float r)
{
    return (float4)(psr_scaled(x.s0, t, r), psr_scaled(x.s1, t, r), psr_scaled(x.s2, t, r),
                    psr_scaled(x.s3, t, r));
}


/* One lane's 4 tokens: logits i .. i + 3 of the target or the draft row. */
inline float4 psr_stats_load(bool is_draft, __global const psr_logit_t *src, __global const float *q,
                             uint i, uint vocab, bool aligned)
{
    return is_draft ? psr_load4_f32(q, i, vocab, aligned) : psr_load4(src, i, vocab, aligned);
}

/* Checks the inputs only the device holds; one group, the result in *status. */
inline void psr_verify_check(uint lid, uint rows, uint requests, uint vocab, __global const int *row_req,
                             __global const int *cu, __global const int *draft_tokens,
                             __global const long *positions, __global const float *temperatures,
                             __global uint *status, __local uint *flags)
{
    if (lid == 0)
        *flags = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    uint mine = 0;
    for (uint row = lid; row < rows; row += PSR_VWG) {
        int req = row_req[row];
        long pos = positions[row];
        if (pos < 0 || pos >= PSR_MAX_POSITION)
            mine |= PSR_VERIFY_BAD_POSITION;
        if (row + 1 < (uint)cu[req + 1]) { /* a draft row */
            int d = draft_tokens[row];
            if (d < -1 || d >= (int)vocab)
                mine |= PSR_VERIFY_BAD_TOKEN;
        }
    }
    for (uint r = lid; r < requests; r += PSR_VWG) {
        float t = temperatures[r];
        if (!(t == 0.0f || (isnormal(t) && t > 0.0f)))
            mine |= PSR_VERIFY_BAD_TEMPERATURE;
    }
    if (mine)
        atomic_or(flags, mine);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0)
        *status = *flags;
}


/* Published partials sb and sb + 1 of a row starting at `at` (at even:
 * one 16-byte volatile load, since volatile loads of one work-item go one
 * after another), those past nsb (-inf, 0). */
inline void psr_published_pair(__global const float2 *lse, ulong at, uint sb, uint nsb, float2 *p)
{
    const float2 none = (float2)(-INFINITY, 0.0f);
    if ((at & 1) == 0 && sb + 1 < nsb) {
        float4 v = *(volatile __global const float4 *)(lse + at + sb);
        p[sb] = v.xy;
        p[sb + 1] = v.zw;
    } else {
        p[sb] = sb < nsb ? psr_lse_partial(lse, at + sb, true) : none;
        p[sb + 1] = sb + 1 < nsb ? psr_lse_partial(lse, at + sb + 1, true) : none;
    }
}

/* The target row's and (with_q) the draft row's log-sum-exps from their
 * published partials, every partial read before any is used, so a
 * decision waits for one round trip of reads rather than four. */
inline float2 psr_published_lse2(__global const float2 *t_lse, __global const float2 *q_lse, bool with_q,
                                 uint row, uint nsb)
{
    if (nsb > PSR_HELD)
        return (float2)(psr_row_lse_of(t_lse, row, nsb, true),
                        with_q ? psr_row_lse_of(q_lse, row, nsb, true) : 0.0f);
    ulong at = (ulong)row * nsb;
    float2 tp[PSR_HELD], qp[PSR_HELD];
#pragma unroll
    for (uint sb = 0; sb < PSR_HELD; sb += 2) {
        psr_published_pair(t_lse, at, sb, nsb, tp);
        psr_published_pair(q_lse, at, sb, with_q ? nsb : 0, qp);
    }
    return (float2)(psr_held_lse(tp, nsb), with_q ? psr_held_lse(qp, nsb) : 0.0f);
}

inline float psr_row_lse(__global const float2 *lse, uint row, uint nsb)
{
    return psr_row_lse_of(lse, row, nsb, false);
}

inline uint psr_row_argmax(__global const float *best, __global const uint *best_i, uint row, uint nsb,
                           bool published)
{
    float bv = -INFINITY;
    uint bi = 0xffffffffu;
    for (uint sb = 0; sb < nsb; sb++) {
        ulong at = (ulong)row * nsb + sb;
        float v = published ? *(volatile __global const float *)(best + at) : best[at];
        uint i = published ? *(volatile __global const uint *)(best_i + at) : best_i[at];
        if (sb == 0 || psr_better(v, i, bv, bi)) {
            bv = v;
            bi = i;
        }
    }
    return bi;
}

/* The probabilistic test of a draft, from its target logit x and draft
 * logit y (unused without a cache), the rows' log-sum-exps and the row's
 * uniform u. */
inline bool psr_accept_test(float x, float y, bool cache, float lse_p, float lse_q, float t, float r,
                            float u)
{
    float tl = psr_scaled(x, t, r) - lse_p;
    float dl = cache ? psr_scaled(y, t, r) - lse_q : 0.0f;
    return tl > psr_det_log(u) + dl;
}

/* A row's draft token, or -1 for a placeholder (or a bad id: nothing is
 * written then). */
inline int psr_draft_at(__global const int *draft_tokens, uint row, uint vocab)
{
    int d = draft_tokens[row];
    return d >= 0 && d < (int)vocab ? d : -1;
}

/* Is draft j of request req accepted? For the walk, from the statistics of
 * the launch before; the log-sum-exps it computed in *lse_p, *lse_q. */
inline bool psr_accept(__global const psr_logit_t *logits, ulong logits_offset, ulong row_stride,
                       uint vocab, uint nsb, uint req, uint j, uint row, bool greedy, float t, float r,
                       long seed, __global const long *positions, __global const int *draft_tokens,
                       __global const float *draft_cache, uint cache_k, __global const float2 *t_lse,
                       __global const float *t_best, __global const uint *t_best_i,
                       __global const float2 *q_lse, float *lse_p, float *lse_q)
{
    int d = psr_draft_at(draft_tokens, row, vocab);
    if (d < 0)
        return false;
    if (greedy)
        return (uint)d == psr_row_argmax(t_best, t_best_i, row, nsb, false);
    __global const psr_logit_t *src = logits + logits_offset + (ulong)row * row_stride;
    *lse_p = psr_row_lse(t_lse, row, nsb);
    float x = psr_load_logit(src, (ulong)d), y = 0.0f;
    if (draft_cache) {
        y = psr_cache_row(draft_cache, req, cache_k, j, vocab)[d];
        *lse_q = psr_row_lse(q_lse, row, nsb);
    }
    float u = psr_u32(psr_row_key((ulong)seed, (ulong)positions[row]));
    return psr_accept_test(x, y, draft_cache != 0, *lse_p, *lse_q, t, r, u);
}

/* The first rejected draft of each request that the statistics found,
 * for later rows to skip: a word per request, (epoch << 12) | (4095 - j),
 * so the largest is the earliest rejection of this launch and words of
 * earlier launches (other epochs) read as none. */
#define PSR_NO_REJECTION 0xffffffffu

inline uint psr_known_rejection(__global const uint *rejected, uint req, uint epoch)
{
    uint w = *(volatile __global const uint *)(rejected + req);
    uint last = (1u << PSR_REJECT_BITS) - 1;
#ifdef PSR_TEST_ANY_EPOCH
    epoch = w >> PSR_REJECT_BITS; /* tests only: a control that reads other launches' words */
#endif
    return w >> PSR_REJECT_BITS == epoch ? last - (w & last) : PSR_NO_REJECTION;
}

inline void psr_record_rejection(__global uint *rejected, uint req, uint epoch, uint j)
{
    uint last = (1u << PSR_REJECT_BITS) - 1;
    if (j < last) /* later drafts are not recorded: their rows are computed */
        atomic_max(rejected + req, epoch << PSR_REJECT_BITS | (last - j));
}

/* The entry of `order` of statistics group g (numbered from 0 after the
 * check's group): the draft rows' groups come first, per_row each, then
 * the bonus rows', nsb each (target logits only). */
inline uint psr_order_entry(uint g, uint per_row, uint nsb, uint draft_rows)
{
    uint in_drafts = draft_rows * per_row;
    return g < in_drafts ? g / per_row : draft_rows + (g - in_drafts) / nsb;
}

/* Work-item 0 of each group of a draft row, once the group's partial is
 * published (or at once, for a draft group with nothing to read): counts
 * the group, and the row's last group decides the draft and records a
 * rejection. What the decision needs from the caller's inputs, which no
 * group writes, is read before the count (its round trips overlap the
 * fence's), and only then the partials and the draft's logits. They are
 * read here rather than held across the token loop, which would cost
 * registers (and resident groups). */
inline void psr_count_row(__global const psr_logit_t *logits, ulong logits_offset, ulong row_stride,
                          uint vocab, uint nsb, __global const int4 *order,
                          __global const float *temperatures, __global const long *seeds,
                          uint greedy_all, __global const float *draft_cache, uint cache_k,
                          __global const int *draft_tokens, __global const long *positions,
                          __global const float2 *t_lse, __global const float *t_best,
                          __global const uint *t_best_i, __global const float2 *q_lse,
                          __global uint *done, __global uint *rejected, uint epoch,
                          __global float2 *row_lse, uint draft_rows, uint g, bool fused)
{
    uint groups = draft_cache ? 2 * nsb : nsb; /* every group of a draft row counts */
    int4 o = order[psr_order_entry(g, groups, nsb, draft_rows)]; /* row, request, slot, rows */
    uint row = (uint)o.x, req = (uint)o.y, slot = (uint)o.z;
    if (slot + 1 >= (uint)o.w)
        return; /* a greedy request's bonus row: nothing to decide */
    float t = temperatures[req];
    bool scale = !greedy_all && isnormal(t) && t > 0.0f;
    int d = psr_draft_at(draft_tokens, row, vocab);
    long seed = scale ? seeds[req] : 0, pos = scale ? positions[row] : 0;
    if (!psr_last_arrival(done + row, groups, epoch, PSR_REJECT_BITS))
        return;
    bool accept = false;
    if (!scale) {
        accept = d >= 0 && (uint)d == psr_row_argmax(t_best, t_best_i, row, nsb, true);
    } else {
        float x = 0.0f, y = 0.0f;
        if (d >= 0) {
            x = psr_load_logit(logits + logits_offset + (ulong)row * row_stride, (ulong)d);
            if (draft_cache)
                y = psr_cache_row(draft_cache, req, cache_k, slot, vocab)[d];
        }
        float u = psr_u32(psr_row_key((ulong)seed, (ulong)pos));
        float2 lse = psr_published_lse2(t_lse, q_lse, draft_cache != 0, row, nsb);
        accept = d >= 0 && psr_accept_test(x, y, draft_cache != 0, lse.x, lse.y, t, psr_temp_recip(t), u);
        /* For the residual, when this is the first rejection; in one launch
         * its sampling groups read it (published), else the next kernel. */
        if (fused) {
            psr_publish((__global uint *)(row_lse + row), as_uint(lse.x));
            psr_publish((__global uint *)(row_lse + row) + 1, as_uint(lse.y));
        } else {
            row_lse[row] = lse;
        }
    }
    if (!accept)
        psr_record_rejection(rejected, req, epoch, slot);
}

/* The group's argmax from each work-item's (bv, bi), published at *best,
 * *best_i, the index plus id_base (a shard's first token). Every
 * work-item calls it (barriers). */
inline void psr_stats_publish_best(float bv, uint bi, uint lid, __local float *lbv, __local uint *lbi,
                                   __global float *best, __global uint *best_i, uint id_base)
{
    lbv[lid] = bv;
    lbi[lid] = bi;
    for (uint s = PSR_VWG / 2; s > 0; s >>= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < s && psr_better(lbv[lid + s], lbi[lid + s], lbv[lid], lbi[lid])) {
            lbv[lid] = lbv[lid + s];
            lbi[lid] = lbi[lid + s];
        }
    }
    if (lid == 0) {
        psr_publish((__global uint *)best, as_uint(lbv[0]));
        psr_publish(best_i, lbi[0] == 0xffffffffu ? lbi[0] : lbi[0] + id_base);
    }
}

/* The group's log-sum-exp partial from its lanes' (lm, ls), published at
 * *part. Every work-item calls it (barriers). */
inline void psr_stats_publish_lse(uint lid, __local float *lm, __local float *ls, __global float2 *part)
{
    float2 lse = psr_lse_tree(lid, lm, ls, true);
    if (lid == 0) {
        __global uint *w = (__global uint *)part;
        psr_publish(w, as_uint(lse.x));
        psr_publish(w + 1, as_uint(lse.y));
    }
}

/* Tokens i .. i + 3 (logits x) into the argmax (*bv, *bi): larger value,
 * then lower index; NaN never wins. */
inline void psr_argmax4(float4 x, uint i, float *bv, uint *bi)
{
    if (psr_better(x.s0, i, *bv, *bi))
        *bv = x.s0, *bi = i;
    if (psr_better(x.s1, i + 1, *bv, *bi))
        *bv = x.s1, *bi = i + 1;
    if (psr_better(x.s2, i + 2, *bv, *bi))
        *bv = x.s2, *bi = i + 2;
    if (psr_better(x.s3, i + 3, *bv, *bi))
        *bv = x.s3, *bi = i + 3;
}

#define PSR_STATS_VLANES (PSR_VEC_PATH && PSR_LPT == 4 && PSR_DETERMINISTIC)
#if PSR_LPT > 1
#if PSR_STATS_VLANES
/* CPU devices: the work-item's four lanes as one vector, lane l in
 * components 4l .. 4l + 3, each component through its lane's operations
 * in order (the same bits). Past the row the loads give NaN, which
 * neither raises a max nor adds to a sum (its term is 0). */
inline psr_vfloat psr_stats_vstep(bool is_draft, __global const psr_logit_t *src, __global const float *q,
                                  bool aligned, uint base, uint vocab, uint lid, bool divide, float t, float r,
                                  uint k)
{
    float4 x[4];
    for (uint l = 0; l < 4; l++)
        x[l] = psr_stats_load(is_draft, src, q, base + 4 * (lid + l * PSR_VWG) + k * 4 * PSR_LANES, vocab, aligned);
    psr_vfloat v = (psr_vfloat)(x[0], x[1], x[2], x[3]);
    return divide && t != 1.0f ? psr_vscale(v, t, r) : v; /* psr_scaled4's */
}

inline void psr_stats_lse_lanes(bool is_draft, __global const psr_logit_t *src, __global const float *q,
                                bool aligned, bool full, uint base, uint vocab, uint lid, bool divide, float t,
                                float r, __local float *lm, __local float *ls)
{
    uint last = full ? PSR_SB_STEPS : psr_steps_left(base + 4 * lid, vocab); /* lane 0's: the most */
    psr_vfloat vv[PSR_SB_STEPS]; /* loaded and scaled once for both passes */
    psr_vfloat wm = (psr_vfloat)(-INFINITY);
    for (uint k = 0; k < last; k++) {
        vv[k] = psr_stats_vstep(is_draft, src, q, aligned, base, vocab, lid, divide, t, r, k);
        wm = fmax(wm, vv[k]);
    }
    psr_vfloat m16;
    float4 m = psr_vlane_max(wm, &m16);
    psr_vfloat lane = (psr_vfloat)(0.0f);
    for (uint k = 0; k < last; k++)
        lane += psr_lse_vterms(vv[k], m16);
    psr_vlanes_store(m, lane, lid, lm, ls);
}

/* A greedy row's argmax over the work-item's four lanes, as one vector
 * (psr_vlanes_keep_best), merged into (*bv, *bi). NaN (also past the row)
 * never wins. */
inline void psr_stats_argmax_lanes(bool is_draft, __global const psr_logit_t *src, __global const float *q,
                                   bool aligned, bool full, uint base, uint vocab, uint lid, float *bv, uint *bi)
{
    uint last = full ? PSR_SB_STEPS : psr_steps_left(base + 4 * lid, vocab);
    psr_vuint ids = psr_vlane_ids(base, lid);
    psr_vfloat best = (psr_vfloat)(-INFINITY);
    psr_vuint best_i = (psr_vuint)0xffffffffu;
    for (uint k = 0; k < last; k++)
        psr_vlanes_keep_best(psr_stats_vstep(is_draft, src, q, aligned, base, vocab, lid, false, 1.0f, 1.0f, k),
                             ids + k * 4 * PSR_LANES, &best, &best_i);
    psr_vlanes_merge_best(best, best_i, bv, bi);
}
#else
/* CPUs: each of the work-item's lanes' max of logits / T, then its exp
 * sums against it, into lm and ls; each pass reads the lane again. */
inline void psr_stats_lse_lanes(bool is_draft, __global const psr_logit_t *src, __global const float *q,
                                bool aligned, bool full, uint base, uint vocab, uint lid, bool divide, float t,
                                float r, __local float *lm, __local float *ls)
{
    for (uint l = 0; l < PSR_LPT; l++) {
        uint steps = full ? PSR_SB_STEPS : psr_steps_left(base + 4 * (lid + l * PSR_VWG), vocab);
        float wm = -INFINITY;
        for (uint k = 0; k < steps; k++) {
            uint i = base + 4 * (lid + l * PSR_VWG) + k * 4 * PSR_LANES;
            float4 x = psr_stats_load(is_draft, src, q, i, vocab, aligned);
            wm = fmax(wm, psr_max4(divide ? psr_scaled4(x, t, r) : x));
        }
        float4 lane = (float4)(0.0f);
        for (uint k = 0; k < steps; k++) {
            uint i = base + 4 * (lid + l * PSR_VWG) + k * 4 * PSR_LANES;
            float4 x = psr_stats_load(is_draft, src, q, i, vocab, aligned);
            lane += psr_exp_terms(divide ? psr_scaled4(x, t, r) : x, wm);
        }
        lm[lid + l * PSR_VWG] = wm;
        ls[lid + l * PSR_VWG] = psr_lane_sum(lane);
    }
}

/* A greedy row's argmax over the work-item's lanes, lane by lane: its
 * tokens are not in increasing order, so ties compare indices. */
inline void psr_stats_argmax_lanes(bool is_draft, __global const psr_logit_t *src, __global const float *q,
                                   bool aligned, bool full, uint base, uint vocab, uint lid, float *bv, uint *bi)
{
    for (uint l = 0; l < PSR_LPT; l++) {
        uint steps = full ? PSR_SB_STEPS : psr_steps_left(base + 4 * (lid + l * PSR_VWG), vocab);
        for (uint k = 0; k < steps; k++) {
            uint i = base + 4 * (lid + l * PSR_VWG) + k * 4 * PSR_LANES;
            psr_argmax4(psr_stats_load(is_draft, src, q, i, vocab, aligned), i, bv, bi);
        }
    }
}
#endif
#endif

/* A statistics group's partial of the super-block at `base`, from the
 * lanes it loads and uses here: greedy (!scale), the argmax at *best,
 * *best_i (its index plus id_base); else the log-sum-exp of logits / T at
 * *part (divide: T is not 1; r its reciprocal). Every work-item calls it
 * (barriers). */
inline void psr_stats_partial(bool scale, bool is_draft, __global const psr_logit_t *src, __global const float *q,
                              bool aligned, bool full, uint base, uint vocab, uint lid, bool divide, float t,
                              float r, __local float *lm, __local float *ls, __local float *lbv,
                              __local uint *lbi, __global float *best, __global uint *best_i,
                              __global float2 *part, uint id_base)
{
    uint steps[PSR_LPT];
    for (uint l = 0; l < PSR_LPT; l++)
        steps[l] = full ? PSR_SB_STEPS : psr_steps_left(base + 4 * (lid + l * PSR_VWG), vocab);
#if PSR_LPT == 1
    /* GPUs: one lane per work-item, its 16 steps held in registers. Every
     * load is issued first, none waiting on another, so the memory system
     * sees all of a work-item's requests at once. */
    float4 v[PSR_SB_STEPS];
    uint first = base + 4 * lid;
    if (full && aligned) {
#pragma unroll
        for (uint k = 0; k < PSR_SB_STEPS; k++) {
            uint i = first + k * 4 * PSR_LANES;
            v[k] = is_draft ? *(__global const float4 *)(q + i) : psr_load4_aligned(src, i);
        }
    } else {
#pragma unroll /* constant indices keep v in registers */
        for (uint k = 0; k < PSR_SB_STEPS; k++)
            if (k < steps[0])
                v[k] = psr_stats_load(is_draft, src, q, first + k * 4 * PSR_LANES, vocab, aligned);
    }
#endif

    if (!scale) {
        /* Greedy: only the argmax, ties to the lowest index (NaN never
         * wins); a work-item's tokens are in increasing order only when
         * it has one lane, so ties compare indices. */
        float bv = -INFINITY;
        uint bi = base + 4 * lid < vocab ? base + 4 * lid : 0xffffffffu;
#if PSR_LPT == 1
#pragma unroll
        for (uint k = 0; k < PSR_SB_STEPS; k++) {
            if (k >= steps[0])
                break; /* the rest of the lane is past the row */
            psr_argmax4(v[k], first + k * 4 * PSR_LANES, &bv, &bi);
        }
#else
        psr_stats_argmax_lanes(is_draft, src, q, aligned, full, base, vocab, lid, &bv, &bi);
#endif
        psr_stats_publish_best(bv, bi, lid, lbv, lbi, best, best_i, id_base);
    } else {
        /* Each lane's max of logits / T, then its exp sums against it. */
#if PSR_LPT == 1
        float wm = -INFINITY;
#pragma unroll
        for (uint k = 0; k < PSR_SB_STEPS; k++) {
            if (k >= steps[0])
                break; /* the rest of the lane is past the row */
            if (divide)
                v[k] = psr_scaled4(v[k], t, r);
            wm = fmax(wm, psr_max4(v[k]));
        }
        float4 lane = (float4)(0.0f);
#pragma unroll
        for (uint k = 0; k < PSR_SB_STEPS; k++)
            if (k < steps[0])
                lane += psr_exp_terms(v[k], wm);
        lm[lid] = wm;
        ls[lid] = psr_lane_sum(lane);
#else
        psr_stats_lse_lanes(is_draft, src, q, aligned, full, base, vocab, lid, divide, t, r, lm, ls);
#endif
        psr_stats_publish_lse(lid, lm, ls, part);
    }
}

/* One statistics group's work (g counts from 0 after the check's group);
 * `fused` when the sampling groups of the same launch read its results
 * (psr_verify_fused). The locals are the kernel's. */
inline void psr_stats_group(__global const psr_logit_t *logits, ulong logits_offset, ulong row_stride,
                            uint vocab, uint nsb, __global const int4 *order,
                            __global const float *temperatures, __global const long *seeds,
                            uint greedy_all, __global const float *draft_cache, uint cache_k,
                            __global const int *draft_tokens, __global const long *positions,
                            __global float2 *t_lse, __global float *t_best, __global uint *t_best_i,
                            __global float2 *q_lse, __global uint *done, __global uint *rejected,
                            uint epoch, uint decide, __global float2 *row_lse, uint draft_rows, uint g,
                            bool fused, __global uint *req_done, uint lid, __local float *lm,
                            __local float *ls, __local float *lbv, __local uint *lbi,
                            __local uint *lskip)
{
    /* The draft rows' groups (target and draft logits), then the bonus
     * rows' (target logits only). */
    uint per_row = draft_cache ? 2 * nsb : nsb;
    uint in_drafts = draft_rows * per_row;
    uint h = g < in_drafts ? g % per_row : (g - in_drafts) % nsb;
    bool is_draft = h >= nsb;
    uint sb = is_draft ? h - nsb : h;
    int4 o = order[psr_order_entry(g, per_row, nsb, draft_rows)];
    /* row, request, slot, the request's rows */
    uint row = (uint)o.x, req = (uint)o.y, slot = (uint)o.z;

    float t = temperatures[req];
    bool scale = !greedy_all && isnormal(t) && t > 0.0f;
    bool divide = scale && t != 1.0f; /* x / 1 is x: skip the division */
    float r = scale ? psr_temp_recip(t) : 1.0f;
    bool draft_row = slot + 1 < (uint)o.w;
    /* In one launch every exit counts the group into its request's
     * req_done (after its own stores), for the sampling groups to wait on. */
    if (!draft_row && scale) {
        if (lid == 0 && fused)
            psr_count_arrival(req_done + req, epoch, PSR_REJECT_BITS);
        return; /* a bonus row is sampled without its log-sum-exp */
    }
    if (is_draft && !(draft_cache && draft_row && scale)) {
        /* Nothing to read (a greedy request's draft row): counted at once. */
        if (lid == 0 && decide && draft_row)
            psr_count_row(logits, logits_offset, row_stride, vocab, nsb, order, temperatures, seeds,
                          greedy_all, draft_cache, cache_k, draft_tokens, positions, t_lse, t_best,
                          t_best_i, q_lse, done, rejected, epoch, row_lse, draft_rows, g, fused);
        if (lid == 0 && fused)
            psr_count_arrival(req_done + req, epoch, PSR_REJECT_BITS);
        return; /* uniform across the group */
    }
    if (decide && slot > 0) { /* nothing is recorded before a request's first draft */
        if (lid == 0)
            *lskip = psr_known_rejection(rejected, req, epoch) < slot;
        barrier(CLK_LOCAL_MEM_FENCE);
        if (*lskip) {
            if (lid == 0 && fused)
                psr_count_arrival(req_done + req, epoch, PSR_REJECT_BITS);
            return; /* past a recorded rejection: never read (uncounted, so never decided) */
        }
    }
    uint base = sb * PSR_SB;
    bool full = base + PSR_SB <= vocab;
    ulong at = (ulong)row * nsb + sb;

    __global const psr_logit_t *src = logits + logits_offset + (ulong)row * row_stride;
    __global const float *q = is_draft ? psr_cache_row(draft_cache, req, cache_k, slot, vocab) : 0;
    bool aligned = is_draft ? ((size_t)q & 15) == 0
                            : ((size_t)src & (4 * sizeof(psr_logit_t) - 1)) == 0;
    psr_stats_partial(scale, is_draft, src, q, aligned, full, base, vocab, lid, divide, t, r, lm, ls, lbv, lbi,
                      t_best + at, t_best_i + at, (is_draft ? q_lse : t_lse) + at, 0);

    if (lid == 0 && decide)
        psr_count_row(logits, logits_offset, row_stride, vocab, nsb, order, temperatures, seeds,
                      greedy_all, draft_cache, cache_k, draft_tokens, positions, t_lse, t_best,
                      t_best_i, q_lse, done, rejected, epoch, row_lse, draft_rows, g, fused);
    if (lid == 0 && fused)
        psr_count_arrival(req_done + req, epoch, PSR_REJECT_BITS);
}

/* The parameters of psr_verify_stats, which psr_verify_fused starts with. */
#define PSR_VERIFY_STATS_ARGS                                                                            \
    const psr_verify_params p, __global const psr_logit_t *logits, __global const int *row_req,          \
        __global const int *cu, __global const int4 *order, __global const float *temperatures,          \
        __global const long *seeds, __global const float *draft_cache, __global const int *draft_tokens, \
        __global const long *positions, __global uchar *state

/* Group 0 checks the inputs only the device holds (status). Then one
 * group per (row, super-block) of the target logits: for a greedy
 * request the argmax partial, else the log-sum-exp partial of logits / T
 * (neither needs the other); with a draft cache, one per (draft row,
 * super-block) of the draft logits beside them. Each work-item loads all
 * its tokens first (independent loads), then finds its lanes' max and sums
 * their exps from registers; the group merges the lanes.
 *
 * Rows come in the order of `order`: every request's first draft row, then
 * every second one, and so on, then the bonus rows. The last group of a
 * draft row decides the draft from the row's published partials, exactly
 * as the walk will, and records a rejection; groups of the request's later
 * rows that start after it skip their tokens, since the walk stops at the
 * first rejection and never reads them. Which groups skip depends on
 * timing, the tokens do not. With `decide` 0 (launches of about a wave,
 * where every row starts before any decision) no group counts, decides or
 * skips. */
#if !defined(PSR_ONE_KERNEL) || defined(PSR_ONLY_psr_verify_stats)
__kernel __attribute__((reqd_work_group_size(PSR_VWG, 1, 1)))
void psr_verify_stats(PSR_VERIFY_STATS_ARGS)
{
    __local float lm[PSR_LANES], ls[PSR_LANES];
    __local float lbv[PSR_VWG];
    __local uint lbi[PSR_VWG];
    __local uint lflags, lskip;
    uint lid = get_local_id(0);
    if (get_group_id(0) == 0) {
        /* A group of its own for the check, which returns: under a
         * condition in a group that goes on, its barriers would make PoCL
         * copy the rest of the kernel (2.6x its build time). */
        psr_verify_check(lid, p.rows, p.requests, p.vocab, row_req, cu, draft_tokens, positions,
                         temperatures, PSR_VS(uint, PSR_VS_STATUS), &lflags);
        return;
    }
    psr_stats_group(logits, p.logits_offset, p.row_stride, p.vocab, p.blocks_per_row, order, temperatures,
                    seeds, p.greedy_all, draft_cache, p.cache_k, draft_tokens, positions,
                    PSR_VS(float2, PSR_VS_T_LSE), PSR_VS(float, PSR_VS_T_BEST), PSR_VS(uint, PSR_VS_T_BEST_I),
                    PSR_VS(float2, PSR_VS_Q_LSE), PSR_VS(uint, PSR_VS_DONE), PSR_VS(uint, PSR_VS_REJECTED),
                    p.epoch, p.decide, PSR_VS(float2, PSR_VS_ROW_LSE), p.draft_rows,
                    (uint)get_group_id(0) - 1, false, NULL, lid, lm, ls, lbv, lbi, &lskip);
}
#endif

/* The residual of one rejected row: log max(p - q, 0) + g. */
typedef struct psr_residual {
    float t, r;        /* temperature and its reciprocal */
    float lse_p, lse_q; /* log-sum-exp of target / T and draft / T */
    uint key;          /* the row's (target) Philox key */
    bool cache;        /* q from the draft cache; else one-hot at `masked` */
    uint masked;
    psr_acc_t floor;   /* pruning, as psr_row.floor; every exact value raises it */
} psr_residual;

/* Tests only: a pruning floor this much too high must change tokens
 * (test_verify's control for the exact pruning). */
#ifndef PSR_TEST_FLOOR_SLACK
#define PSR_TEST_FLOOR_SLACK 0
#endif

/* log p of target logit x into *lp, false where p = 0 (also NaN from an
 * infinite logit, and NaN x): nothing to sample. */
inline bool psr_residual_lp(const psr_residual *res, float x, float *lp)
{
    if (isnan(x))
        return false;
    *lp = psr_scaled(x, res->t, res->r) - res->lse_p; /* log p, up to rounding */
    return *lp > -87.0f;
}

/* Token i of the residual once its log p (psr_residual_lp) and its words
 * w are known. */
inline void psr_residual_words(psr_residual *res, float lp, float y, uint i, uint2 w, psr_acc_t *best,
                               uint *best_i)
{
    /* Exact pruning: log(p - q) <= log p <= lp + rounding, far below 1e-3. */
    if ((psr_acc_t)(lp + 1e-3f) + psr_noise_bound(w) < res->floor + PSR_TEST_FLOOR_SLACK)
        return;
    float p = psr_det_exp_neg(lp);
    float q;
    if (res->cache)
        q = psr_det_exp_neg(psr_scaled(y, res->t, res->r) - res->lse_q); /* NaN, -inf: 0 */
    else
        q = i == res->masked ? 1.0f : 0.0f;
    float d = p - q;
    if (!(d >= FLT_MIN))
        return; /* q takes all of p here */
    psr_acc_t v = (psr_acc_t)psr_det_log(d) + psr_noise(w);
    if (v > *best) {
        *best = v;
        *best_i = i;
    }
    if (v > res->floor)
        res->floor = v; /* this token reaches v: a bound below it cannot win */
}

inline void psr_consider_residual(psr_residual *res, float x, float y, uint i, psr_acc_t *best,
                                  uint *best_i)
{
    float lp;
    if (psr_residual_lp(res, x, &lp))
        psr_residual_words(res, lp, y, i, psr_token_words(res->key, i), best, best_i);
}

/* What the walk decided for one request, shared by its groups. */
typedef struct psr_walk {
    int accepted; /* drafts accepted */
    int token;    /* the final token when already known (greedy), else -1 */
    int mode;     /* 0 known, 1 residual, 2 bonus */
    uint row;     /* the row sampled */
    long pos;     /* its position */
    int draft;    /* its draft token (unused for the bonus row) */
} psr_walk;

/* Rows a sampling group's walk reads ahead: work-items 0 and the last
 * read the rejection and the status, so two fewer than the group. */
#define PSR_WALK_AHEAD (PSR_WG_SIZE > 2 ? PSR_WG_SIZE - 2u : 0u)

/* The walk's reads, each row's by a work-item of its own; lse also keeps
 * an unrecorded walk's log-sum-exps. */
typedef struct psr_walk_rows {
    long pos[PSR_WG_SIZE];
    int draft[PSR_WG_SIZE];
    float lse[2 * PSR_WG_SIZE];
    uint status;
} psr_walk_rows;

/* Writes request req's output row: accepted drafts (the first `held` of
 * them from held_drafts, read by the walk), the token, then -1. */
inline void psr_write_output(uint req, const psr_walk *walk, int token, uint lid, uint cols,
                             uint first_row, __global const int *draft_tokens,
                             __local const int *held_drafts, uint held, __global int *tokens,
                             uint tokens64, __global int *num_sampled)
{
    for (uint c = lid; c < cols; c += PSR_WG_SIZE) {
        int d = c < held ? held_drafts[c] : (int)c < walk->accepted ? draft_tokens[first_row + c] : -1;
        int v = (int)c < walk->accepted ? d : (int)c == walk->accepted ? token : -1;
        ulong at = (ulong)req * cols + c;
        if (tokens64)
            ((__global long *)tokens)[at] = v;
        else
            tokens[at] = v;
    }
    if (lid == 0)
        num_sampled[req] = walk->accepted + 1;
}

#if PSR_ROW_WORDS
/* The best of a request's sampling groups: each group stores its key
 * (psr_best_key) in its own slot of keys and counts itself in the
 * request's word (launch-numbered, as psr_count_arrival); the last to
 * count reads every slot. Three round trips however the groups arrive,
 * where folding into one word by compare-and-swap takes one more for each
 * group that got there just before. The counts are apart from the keys,
 * which are never cleared. True in the last group, with the best index in
 * *best_i. */
inline bool psr_gather_best(bool join, __global ulong *keys, __global uint *count, uint part, uint groups,
                            uint epoch, float v, uint idx, uint lid, __local ulong *lk, __local int *flag,
                            uint *best_i)
{
    if (lid == 0 && join) {
        atom_xchg(keys + part, psr_best_key(v, idx));
        *flag = psr_last_arrival(count, groups, epoch, PSR_REJECT_BITS);
    } else if (lid == 0) {
        *flag = 0; /* PSR_FLAT_BARRIERS: a group that does not gather */
    }
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    bool last = *flag != 0;
    if (!PSR_FLAT_BARRIERS && !last)
        return false;
    if (last)
        mem_fence(CLK_GLOBAL_MEM_FENCE); /* every reader, as psr_last_group */
    ulong key = psr_largest_key(keys, last ? groups : 0, lid, lk);
    if (!last)
        return false;
    *best_i = psr_key_index(key);
    return true;
}
#endif

/* One step of 4 tokens of the row being sampled, x its target logits and
 * y its draft logits (NaN without a cache): bonus (mode 2) or residual. */
inline void psr_verify_step(int mode, const psr_row *row, psr_residual *res, float4 x, float4 y,
                            uint i, psr_acc_t *best, uint *best_i)
{
    if (mode == 2) {
        psr_consider4(row, x, i, best, best_i);
        return;
    }
    psr_consider_residual(res, x.s0, y.s0, i, best, best_i);
    psr_consider_residual(res, x.s1, y.s1, i + 1, best, best_i);
    psr_consider_residual(res, x.s2, y.s2, i + 2, best, best_i);
    psr_consider_residual(res, x.s3, y.s3, i + 3, best, best_i);
}

/* A sampling group's request: where its rows are, how it samples, and
 * how its walk goes. */
typedef struct psr_sample_req {
    uint req, part;    /* the request, and the group's chunk of its row */
    uint first_row, n; /* the request's rows */
    float t, r;        /* temperature and its reciprocal */
    bool greedy;
    long seed;
    bool recorded;     /* the walk takes the statistics' recorded rejection */
    uint ahead;        /* rows the walk reads ahead */
} psr_sample_req;

/* The request of sampling group gid, and how its walk goes. */
inline void psr_sample_request(psr_sample_req *rq, __global const int *cu, __global const float *temperatures,
                               __global const long *seeds, uint greedy_all, uint groups_per_row, uint decide,
                               uint gid, bool fused)
{
    uint req = gid / groups_per_row;
    uint part = gid % groups_per_row;
    uint first_row = (uint)cu[req];
    uint n = (uint)cu[req + 1] - first_row;
    float t = temperatures[req];
    bool greedy = greedy_all || !(isnormal(t) && t > 0.0f);
    float r = greedy ? 1.0f : psr_temp_recip(t);
    long seed = seeds[req];
    rq->req = req;
    rq->part = part;
    rq->first_row = first_row;
    rq->n = n;
    rq->t = t;
    rq->r = r;
    rq->greedy = greedy;
    rq->seed = seed;

    /* The walk. Where the statistics decided every draft up to the first
     * rejection (decide, and every slot recordable), that rejection is
     * recorded, or none is when all were accepted; else every draft in
     * parallel, then the first rejection. */
    bool recorded = fused || (decide && n <= (1u << PSR_REJECT_BITS)); /* fused: the host ensures both */
    rq->recorded = recorded;
    rq->ahead = recorded ? min(n, PSR_WALK_AHEAD) : 0; /* rows read ahead */
}

/* Where recorded, all the walk reads comes in one round trip, each
 * load from a work-item of its own (one work-item's volatile loads go
 * one after another): work-item 0 the rejection, the last the status,
 * and work-item 1 + j row j's position, draft token and log-sum-exps,
 * for whichever row the rejection picks. */
inline void psr_walk_read_ahead(const psr_sample_req *rq, uint lid, bool fused, __global const uint *status,
                                __global const uint *rejected, uint epoch, __global const long *positions,
                                __global const int *draft_tokens, __global const float2 *row_lse,
                                __local int *first_reject, __local psr_walk_rows *lrows)
{
    uint first_row = rq->first_row, n = rq->n;
    if (lid == PSR_WG_SIZE - 1)
        lrows->status = fused ? *(volatile __global const uint *)status : *status;
    if (lid == 0)
        *first_reject = rq->recorded ? (int)min(psr_known_rejection(rejected, rq->req, epoch), n - 1) : (int)n - 1;
    if (lid >= 1 && lid - 1 < rq->ahead) {
        uint j = lid - 1;
        lrows->pos[j] = positions[first_row + j];
        lrows->draft[j] = draft_tokens[first_row + j];
        /* Computed by the statistics' decision of a rejected draft (a
         * bonus row has none). */
        float2 kept = j + 1 < n ? psr_lse_partial(row_lse, first_row + j, fused) : (float2)(NAN);
        lrows->lse[2 * j] = kept.x;
        lrows->lse[2 * j + 1] = kept.y;
    }
}

/* The walk where nothing was recorded: every draft tested in parallel,
 * the first rejection into first_reject. */
inline void psr_walk_unrecorded(const psr_sample_req *rq, bool bad, uint lid,
                                __global const psr_logit_t *logits, ulong logits_offset, ulong row_stride,
                                uint vocab, uint nsb, __global const long *positions,
                                __global const int *draft_tokens, __global const float *draft_cache,
                                uint cache_k, __global const float2 *t_lse, __global const float *t_best,
                                __global const uint *t_best_i, __global const float2 *q_lse,
                                __local int *first_reject, __local psr_walk_rows *lrows)
{
    for (uint j = lid; !rq->recorded && j + 1 < rq->n && !bad; j += PSR_WG_SIZE) {
        float lse_p = NAN, lse_q = NAN;
        if (!psr_accept(logits, logits_offset, row_stride, vocab, nsb, rq->req, j, rq->first_row + j, rq->greedy,
                        rq->t, rq->r, rq->seed, positions, draft_tokens, draft_cache, cache_k, t_lse, t_best,
                        t_best_i, q_lse, &lse_p, &lse_q))
            atomic_min(first_reject, (int)j);
        if (j < PSR_WG_SIZE) { /* kept for the residual (recomputed past the group) */
            lrows->lse[2 * j] = lse_p;
            lrows->lse[2 * j + 1] = lse_q;
        }
    }
}

/* Work-item 0, once the walk's reads are in: what the walk decided, for
 * the group (lwalk), and the sampled row's log-sum-exps (lres). */
inline void psr_walk_decide(const psr_sample_req *rq, bool bad, uint nsb, __global const long *positions,
                            __global const int *draft_tokens, __global const float *draft_cache,
                            __global const float2 *t_lse, __global const float *t_best,
                            __global const uint *t_best_i, __global const float2 *q_lse,
                            __global const float2 *row_lse, __global int4 *walks, bool fused,
                            __local const int *first_reject, __local const psr_walk_rows *lrows,
                            __local psr_walk *lwalk, __local float *lres)
{
    uint first_row = rq->first_row, n = rq->n;
    bool greedy = rq->greedy, recorded = rq->recorded;
    uint j = (uint)*first_reject;
    bool held = j < rq->ahead;
    lwalk->accepted = (int)j;
    lwalk->row = first_row + j;
    lwalk->mode = greedy || bad ? 0 : j + 1 < n ? 1 : 2;
    /* A bonus row's draft entry is not used. */
    lwalk->pos = held ? lrows->pos[j] : positions[lwalk->row];
    lwalk->draft = lwalk->mode != 1 ? -1 : held ? lrows->draft[j] : draft_tokens[lwalk->row];
    /* Only greedy requests have argmax partials (and bad input writes nothing). */
    lwalk->token = greedy && !bad ? (int)psr_row_argmax(t_best, t_best_i, lwalk->row, nsb, fused) : -1;
    /* A rejected draft's log-sum-exps, computed by the statistics'
     * decision, or by the walk when its accept test got that far (a
     * -1 draft or a bad id did not): NaN where not. */
    float2 kept = (float2)(NAN);
    if (lwalk->mode == 1 && (held || (!recorded && j < PSR_WG_SIZE)))
        kept = (float2)(lrows->lse[2 * j], lrows->lse[2 * j + 1]);
    else if (recorded && lwalk->mode == 1)
        kept = psr_lse_partial(row_lse, lwalk->row, fused);
    lres[0] = lwalk->mode != 1 ? 0.0f : !isnan(kept.x) ? kept.x : psr_row_lse_of(t_lse, lwalk->row, nsb, fused);
    lres[1] = lwalk->mode != 1 || !draft_cache ? 0.0f
              : !isnan(kept.y)                 ? kept.y
                                               : psr_row_lse_of(q_lse, lwalk->row, nsb, fused);
    if (rq->part == 0 && walks)
        walks[rq->req] = (int4)(lwalk->accepted, lwalk->token, 0, 0);
}

/* The sampled row's state for the scan: the bonus row's (row: exactly
 * psr_gumbel_sample's scan) and the residual's (res); returns the draft
 * row the residual reads (q_aligned: aligned for vector loads). */
inline __global const float *psr_sample_setup(psr_row *row, psr_residual *res, bool *q_aligned,
                                              const psr_sample_req *rq, const psr_walk *walk,
                                              __global const float *draft_cache, uint cache_k, uint vocab,
                                              __local const float *lres)
{
    uint key = psr_row_key((ulong)rq->seed, (ulong)walk->pos);
    row->t = rq->t;
    row->r = rq->r;
    row->key = key;
    row->greedy = false;
    row->floor = PSR_ACC_NEG_INF;
    row->skip_below = -INFINITY;
    row->shift = 0.0f;
    row->base = 0;
    res->t = rq->t;
    res->r = rq->r;
    res->lse_p = lres[0];
    res->lse_q = lres[1];
    res->key = key;
    res->cache = draft_cache != 0;
    res->masked = 0xffffffffu;
    res->floor = PSR_ACC_NEG_INF;
    __global const float *q = draft_cache;
    *q_aligned = false;
    if (walk->mode == 1) {
        uint j = walk->row - rq->first_row;
        int d = walk->draft;
        /* A -1 draft has no draft distribution: the residual is p itself. */
        res->cache = draft_cache && d >= 0;
        if (res->cache) {
            q = psr_cache_row(draft_cache, rq->req, cache_k, j, vocab);
            *q_aligned = ((size_t)q & 15) == 0;
        } else {
            res->masked = d >= 0 ? (uint)d : 0xffffffffu;
        }
    }
    return q;
}

#if PSR_VEC_PATH
/* CPU devices: tokens i .. min(i + PSR_VEC, end) - 1 of the row sampled
 * (PoCL does not vectorise the scalar loop across work-items). The bonus
 * row's whole vectors take the sampler's vector path; the residual's
 * words are drawn as one vector, each token then scored as
 * psr_verify_step scores it. */
/* Whether some lane of a residual block (logits x, words w0, w1) may
 * pass psr_residual_words's pruning test: the same test per lane, with a
 * slack far above any rounding it could differ by. Where none may, the
 * block needs neither its logs nor the lanes one by one. */
inline bool psr_residual_vreach(const psr_residual *res, psr_vfloat x, psr_vuint w0, psr_vuint w1)
{
    psr_vfloat lp = (res->t == 1.0f ? x : psr_vscale(x, res->t, res->r)) - res->lse_p; /* psr_residual_lp's */
    psr_vacc reach = psr_to_vacc(lp + 1e-3f) + psr_vnoise_bound(w0, w1);
    reach = select(reach, (psr_vacc)PSR_ACC_NEG_INF, psr_to_vacc_mask(isnan(lp))); /* NaN: nothing to sample */
    psr_acc_t slack = (psr_acc_t)1e-3f + fabs(res->floor) * (psr_acc_t)0x1p-16;
    return !(psr_vmax_acc(reach) < res->floor - slack); /* a floor of -inf: always */
}

inline void psr_verify_vstep(int mode, psr_row *row, psr_residual *res, __global const psr_logit_t *src,
                             __global const float *q, bool with_q, uint i, uint end, psr_acc_t *best,
                             uint *best_i)
{
    uint n = min(end - i, (uint)PSR_VEC);
    if (mode == 2 && n == PSR_VEC) {
        psr_vacc lane_best = (psr_vacc)(PSR_ACC_NEG_INF);
        psr_vuint lane_best_i = (psr_vuint)0xffffffffu;
        psr_vfloat x = psr_vload_logits(src, i);
        if (psr_vmay_win(row, x))
            psr_consider_vec(row, x, i, &lane_best, &lane_best_i, -INFINITY);
        psr_merge_lanes(lane_best, lane_best_i, best, best_i);
        return;
    }
    float xs[PSR_VEC], ys[PSR_VEC];
    psr_vuint w1 = 0, w0 = 0; /* the residual's words, for every lane at once */
    if (mode == 1)
        w0 = psr_vtoken_words(res->key, (psr_vuint)(i) + PSR_LANE_IDS, &w1);
    if (n == PSR_VEC) {
        psr_vfloat x = psr_vload_logits(src, i);
        if (mode == 1 && !psr_residual_vreach(res, x, w0, w1))
            return;
        psr_vstore(x, 0, xs);
        psr_vstore(with_q ? psr_vload(0, q + i) : (psr_vfloat)(NAN), 0, ys);
    } else {
        for (uint l = 0; l < n; l++) {
            xs[l] = psr_load_logit(src, i + l);
            ys[l] = with_q ? q[i + l] : NAN;
        }
    }
    if (mode == 2) {
        for (uint l = 0; l < n; l++)
            psr_consider(row, xs[l], i + l, best, best_i);
        return;
    }
    uint w0s[PSR_VEC], w1s[PSR_VEC];
    psr_vstore(w0, 0, w0s);
    psr_vstore(w1, 0, w1s);
    for (uint l = 0; l < n; l++) {
        float lp;
        if (psr_residual_lp(res, xs[l], &lp))
            psr_residual_words(res, lp, ys[l], i + l, (uint2)(w0s[l], w1s[l]), best, best_i);
    }
}
#endif

/* After each work-item's first step, the group's best so far becomes the
 * floor that prunes the rest (`floors`, uniform: every work-item reaches
 * the barriers). */
inline void psr_scan_floor(bool floors, psr_row *row, psr_residual *res, uint lid, __local psr_acc_t *lv,
                           psr_acc_t best)
{
    if (PSR_FLAT_BARRIERS || floors) {
        lv[lid] = best;
        for (uint s = PSR_WG_SIZE / 2; s > 0; s >>= 1) {
            barrier(CLK_LOCAL_MEM_FENCE);
            if (lid < s)
                lv[lid] = fmax(lv[lid], lv[lid + s]); /* max() is undefined for -inf */
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (floors) {
            row->floor = res->floor = lv[0];
#if PSR_VEC_PATH
            psr_raise_floor(row, lv[0]); /* and skip_below */
#endif
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

/* The work-item's tokens of [start, end) of the row sampled (mode 2: the
 * bonus row, 1: the residual; 0: none), into (*best, *best_i). Every
 * work-item calls it (its barriers' condition is uniform). */
#if PSR_VEC_PATH
inline void psr_sample_scan(int mode, psr_row *row, psr_residual *res, __global const psr_logit_t *src,
                            bool aligned, __global const float *q, bool q_aligned, uint start, uint end,
                            uint lid, __local psr_acc_t *lv, psr_acc_t *best, uint *best_i)
{
    (void)aligned, (void)q_aligned;
    bool active = mode != 0;
    bool with_q = active && mode == 1 && res->cache;
    uint i = start + PSR_VEC * lid;
    if (active && i < end)
        psr_verify_vstep(mode, row, res, src, q, with_q, i, end, best, best_i);
    psr_scan_floor(active && start + PSR_VEC * PSR_WG_SIZE < end, row, res, lid, lv, *best);
    for (i += PSR_VEC * PSR_WG_SIZE; active && i < end; i += PSR_VEC * PSR_WG_SIZE)
        psr_verify_vstep(mode, row, res, src, q, with_q, i, end, best, best_i);
}
#else
inline void psr_sample_scan(int mode, psr_row *row, psr_residual *res, __global const psr_logit_t *src,
                            bool aligned, __global const float *q, bool q_aligned, uint start, uint end,
                            uint lid, __local psr_acc_t *lv, psr_acc_t *best, uint *best_i)
{
    bool active = mode != 0;
    /* Each step's logits are loaded a step ahead, so the loads are in
     * flight while the previous step's noise is drawn. */
    bool with_q = active && mode == 1 && res->cache;
    uint i = start + 4 * lid;
    float4 x = active ? psr_load4(src, i, end, aligned) : (float4)(NAN);
    float4 y = with_q ? psr_load4_f32(q, i, end, q_aligned) : (float4)(NAN);
    uint next = i + 4 * PSR_WG_SIZE;
    float4 x_next = active ? psr_load4(src, next, end, aligned) : (float4)(NAN);
    float4 y_next = with_q ? psr_load4_f32(q, next, end, q_aligned) : (float4)(NAN);
    if (active)
        psr_verify_step(mode, row, res, x, y, i, best, best_i);
    psr_scan_floor(active && start + 4 * PSR_WG_SIZE < end, row, res, lid, lv, *best);
    for (i = next; active && i < end; i += 4 * PSR_WG_SIZE) {
        x = x_next;
        y = y_next;
        next = i + 4 * PSR_WG_SIZE;
        x_next = psr_load4(src, next, end, aligned);
        y_next = with_q ? psr_load4_f32(q, next, end, q_aligned) : (float4)(NAN);
        psr_verify_step(mode, row, res, x, y, i, best, best_i);
    }
}
#endif

/* The locals of a sampling group (psr_sample_group), the kernel's. */
typedef struct psr_sample_locals {
    psr_acc_t lv[PSR_WG_SIZE]; /* the work-items' bests (the scan's floors first) */
    uint li[PSR_WG_SIZE];
    int first_reject;
    psr_walk lwalk;
    float lres[2];             /* the sampled row's log-sum-exps */
    int lfinish;
    psr_walk_rows lrows;
    ulong lk[PSR_WG_SIZE];     /* the gather's keys */
} psr_sample_locals;

/* One sampling group's work: group `gid` of the sampling groups; `fused`
 * when the statistics ran in the same launch (psr_verify_fused), so their
 * results are read as published. */
inline void psr_sample_group(__global const psr_logit_t *logits, ulong logits_offset, ulong row_stride,
                             uint vocab, uint nsb, __global const int *cu, __global const int *draft_tokens,
                             __global const long *seeds, __global const float *temperatures,
                             __global const long *positions, uint greedy_all,
                             __global const float *draft_cache, uint cache_k, __global const float2 *t_lse,
                             __global const float *t_best, __global const uint *t_best_i,
                             __global const float2 *q_lse, uint groups_per_row, uint chunk,
                             __global ulong *best_keys, __global uint *best_count, __global psr_acc_t *part_value,
                             __global uint *part_index, __global int4 *walks, __global const uint *status,
                             __global uint *user_status, uint cols, __global int *tokens, uint tokens64,
                             __global int *num_sampled, uint decide, __global const uint *rejected,
                             uint epoch, __global const float2 *row_lse, uint gid, bool fused, uint lid,
                             __local psr_sample_locals *l)
{
    psr_sample_req rq;
    psr_sample_request(&rq, cu, temperatures, seeds, greedy_all, groups_per_row, decide, gid, fused);
    psr_walk_read_ahead(&rq, lid, fused, status, rejected, epoch, positions, draft_tokens, row_lse,
                        &l->first_reject, &l->lrows);
    barrier(CLK_LOCAL_MEM_FENCE);
    uint checked = l->lrows.status;
    bool bad = checked != 0;
    if (gid == 0 && lid == 0 && user_status)
        *user_status = checked;
    psr_walk_unrecorded(&rq, bad, lid, logits, logits_offset, row_stride, vocab, nsb, positions, draft_tokens,
                        draft_cache, cache_k, t_lse, t_best, t_best_i, q_lse, &l->first_reject, &l->lrows);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0)
        psr_walk_decide(&rq, bad, nsb, positions, draft_tokens, draft_cache, t_lse, t_best, t_best_i, q_lse,
                        row_lse, walks, fused, &l->first_reject, &l->lrows, &l->lwalk, l->lres);
    barrier(CLK_LOCAL_MEM_FENCE);
    psr_walk walk = l->lwalk;
    bool active = walk.mode != 0;

    /* The residual or bonus row's scan over the group's chunk. */
    uint part = rq.part, req = rq.req;
    uint start = part * chunk;
    uint end = min(start + chunk, vocab);
    psr_acc_t best = PSR_ACC_NEG_INF;
    uint best_i = start + 4 * lid < end ? start + 4 * lid : 0xffffffffu;
    __global const psr_logit_t *src = logits + logits_offset + (ulong)walk.row * row_stride;
    bool aligned = ((size_t)src & (4 * sizeof(psr_logit_t) - 1)) == 0;
    psr_row row;
    psr_residual res;
    bool q_aligned;
    __global const float *q = psr_sample_setup(&row, &res, &q_aligned, &rq, &walk, draft_cache, cache_k, vocab,
                                               l->lres);
    psr_sample_scan(walk.mode, &row, &res, src, aligned, q, q_aligned, start, end, lid, l->lv, &best, &best_i);

    /* The gather and the output. */
    l->lv[lid] = best;
    l->li[lid] = best_i;
    psr_reduce_best(l->lv, l->li, lid);
    psr_acc_t final_v = l->lv[0];
    uint final_i = l->li[0];
    bool finish = groups_per_row == 1 || !active;
    bool quits = !active && part != 0;
    if (!PSR_FLAT_BARRIERS && quits)
        return;
#if PSR_ROW_WORDS
    bool gather = !quits && !finish && best_keys;
    if (PSR_FLAT_BARRIERS || gather)
        finish = psr_gather_best(gather, best_keys + (ulong)req * groups_per_row, best_count + req, part,
                                 groups_per_row, epoch, final_v, final_i, lid, l->lk, &l->lfinish, &final_i) || finish;
#endif
    if (quits)
        return; /* flat: after every barrier */
    if (finish) {
        if (!bad)
            psr_write_output(req, &walk, walk.mode == 0 ? walk.token : (int)final_i, lid, cols,
                             rq.first_row, draft_tokens, l->lrows.draft, rq.ahead, tokens, tokens64, num_sampled);
    } else if (!best_keys && lid == 0) {
        part_value[gid] = final_v;
        part_index[gid] = final_i;
    }
}

#if !defined(PSR_ONE_KERNEL) || defined(PSR_ONLY_psr_verify_sample)
__kernel __attribute__((reqd_work_group_size(PSR_WG_SIZE, 1, 1)))
void psr_verify_sample(const psr_verify_params p, __global const psr_logit_t *logits,
                       __global const int *cu, __global const int *draft_tokens, __global const long *seeds,
                       __global const float *temperatures, __global const long *positions,
                       __global const float *draft_cache, __global psr_acc_t *part_value,
                       __global uint *part_index, __global uchar *state, __global uint *user_status,
                       __global int *tokens, __global int *num_sampled)
{
    __local psr_sample_locals l;
    psr_sample_group(logits, p.logits_offset, p.row_stride, p.vocab, p.blocks_per_row, cu, draft_tokens, seeds,
                     temperatures, positions, p.greedy_all, draft_cache, p.cache_k,
                     PSR_VS(float2, PSR_VS_T_LSE), PSR_VS(float, PSR_VS_T_BEST), PSR_VS(uint, PSR_VS_T_BEST_I),
                     PSR_VS(float2, PSR_VS_Q_LSE), p.groups_per_row, p.chunk, PSR_VS(ulong, PSR_VS_BEST_KEYS),
                     PSR_VS(uint, PSR_VS_BEST_COUNT), part_value, part_index, PSR_VS(int4, PSR_VS_WALKS),
                     PSR_VS(uint, PSR_VS_STATUS), user_status, p.cols, tokens, p.tokens64, num_sampled,
                     p.decide, PSR_VS(uint, PSR_VS_REJECTED), p.epoch, PSR_VS(float2, PSR_VS_ROW_LSE),
                     (uint)get_group_id(0), false, get_local_id(0), &l);
}
#endif

#if PSR_WG_SIZE <= PSR_LANES
/* Spins until other groups of the launch have stored `a_value` at `a` and
 * `b_value` at `b`; both are read in every round, so a word that is
 * already set costs no round trip of its own. */
inline void psr_wait_for(__global const uint *a, uint a_value, __global const uint *b, uint b_value)
{
    for (;;) {
        uint x = *(volatile __global const uint *)a, y = *(volatile __global const uint *)b;
        if (x == a_value && y == b_value)
            break;
    }
    mem_fence(CLK_GLOBAL_MEM_FENCE);
}

/* Small batches in one launch: the statistics groups and the sampling
 * groups of the two kernels above, taken by tickets in the order groups
 * start: ticket 0 checks the inputs, tickets 1 .. first_sampling - 1 are the
 * statistics groups (the last group of each draft row decides it, as
 * always), the rest the sampling groups. A sampling group waits until its
 * request's statistics groups have all counted themselves in req_done,
 * then samples as psr_verify_sample does after a launch boundary. A group
 * waits only for groups that took their tickets before it, which are
 * running or done, so the launch cannot deadlock, however many groups the
 * device holds at once. The host chooses this kernel when all tickets fit
 * the count's 12 bits, every draft slot is recordable and the sampling
 * groups need no finishing kernel. Same tokens as the two kernels. */
#if !defined(PSR_ONE_KERNEL) || defined(PSR_ONLY_psr_verify_fused)
__kernel __attribute__((reqd_work_group_size(PSR_WG_SIZE, 1, 1)))
void psr_verify_fused(PSR_VERIFY_STATS_ARGS, __global uint *user_status, __global int *tokens,
                      __global int *num_sampled)
{
    const ulong logits_offset = p.logits_offset, row_stride = p.row_stride;
    const uint vocab = p.vocab, nsb = p.blocks_per_row, greedy_all = p.greedy_all, cache_k = p.cache_k;
    const uint epoch = p.epoch, groups_per_row = p.groups_per_row;
    __global float2 *t_lse = PSR_VS(float2, PSR_VS_T_LSE), *q_lse = PSR_VS(float2, PSR_VS_Q_LSE);
    __global float2 *row_lse = PSR_VS(float2, PSR_VS_ROW_LSE);
    __global float *t_best = PSR_VS(float, PSR_VS_T_BEST);
    __global uint *t_best_i = PSR_VS(uint, PSR_VS_T_BEST_I), *status = PSR_VS(uint, PSR_VS_STATUS);
    __global uint *done = PSR_VS(uint, PSR_VS_DONE), *rejected = PSR_VS(uint, PSR_VS_REJECTED);
    __global uint *tickets = PSR_VS(uint, PSR_VS_TICKETS), *req_done = PSR_VS(uint, PSR_VS_REQ_DONE);
    __global uint *best_count = PSR_VS(uint, PSR_VS_BEST_COUNT);
    __global ulong *best_keys = PSR_VS(ulong, PSR_VS_BEST_KEYS);
    __local float lm[PSR_LANES], ls[PSR_LANES];
    __local float lbv[PSR_VWG];
    __local uint lbi[PSR_VWG];
    __local uint lflags, lskip, lticket;
    __local psr_sample_locals l;
    if (get_local_id(0) == 0) {
        atomic_max(tickets, epoch << PSR_REJECT_BITS);
        lticket = atomic_inc(tickets) & ((1u << PSR_REJECT_BITS) - 1);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    uint ticket = lticket;
    uint lid = get_local_id(0);
    if (ticket == 0) {
        psr_verify_check(lid, p.rows, p.requests, vocab, row_req, cu, draft_tokens, positions,
                         temperatures, status, &lflags);
        if (lid == 0) {
            psr_publish(status, lflags);
            mem_fence(CLK_GLOBAL_MEM_FENCE);
            psr_publish(tickets + 1, epoch); /* the check is done */
        }
        return;
    }
    uint per_row = draft_cache ? 2 * nsb : nsb;
    if (ticket >= p.first_sampling) {
        uint gid = ticket - p.first_sampling, req = gid / groups_per_row;
        if (lid == 0) {
            uint n = (uint)(cu[req + 1] - cu[req]);
            /* The check, then every statistics group of the request. */
            psr_wait_for(tickets + 1, epoch, req_done + req,
                         epoch << PSR_REJECT_BITS | ((n - 1) * per_row + nsb));
        }
        barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
        psr_sample_group(logits, logits_offset, row_stride, vocab, nsb, cu, draft_tokens, seeds,
                         temperatures, positions, greedy_all, draft_cache, cache_k, t_lse, t_best, t_best_i,
                         q_lse, groups_per_row, p.chunk, best_keys, best_count, NULL, NULL, NULL, status,
                         user_status, p.cols, tokens, p.tokens64, num_sampled, 1u, rejected, epoch, row_lse, gid,
                         true, lid, &l);
        return;
    }
    /* The statistics last, as in psr_verify_stats. */
    psr_stats_group(logits, logits_offset, row_stride, vocab, nsb, order, temperatures, seeds, greedy_all,
                    draft_cache, cache_k, draft_tokens, positions, t_lse, t_best, t_best_i, q_lse, done,
                    rejected, epoch, 1u, row_lse, p.draft_rows, ticket - 1, true, req_done, lid, lm, ls, lbv,
                    lbi, &lskip);
}
#endif
#endif

/* Without the one-kernel gather: combines each request's chunks and writes
 * its output row. One group per request. */
#if !defined(PSR_ONE_KERNEL) || defined(PSR_ONLY_psr_verify_finalize)
__kernel __attribute__((reqd_work_group_size(PSR_WG_SIZE, 1, 1)))
void psr_verify_finalize(const psr_verify_params p, __global const psr_acc_t *part_value,
                         __global const uint *part_index, __global const int *cu, __global const int *draft_tokens,
                         __global uchar *state, __global int *tokens, __global int *num_sampled)
{
    const uint groups_per_row = p.groups_per_row, cols = p.cols, tokens64 = p.tokens64;
    __global const int4 *walks = PSR_VS(int4, PSR_VS_WALKS);
    __global const uint *status = PSR_VS(uint, PSR_VS_STATUS);
    __local psr_acc_t lv[PSR_WG_SIZE];
    __local uint li[PSR_WG_SIZE];
    uint lid = get_local_id(0);
    uint req = get_group_id(0);
    psr_reduce_parts(req, groups_per_row, part_value, part_index, lv, li, lid);
    if (*status != 0)
        return;
    int4 w = walks[req];
    psr_walk walk;
    walk.accepted = w.x;
    walk.token = w.y;
    psr_write_output(req, &walk, w.y >= 0 ? w.y : (int)li[0], lid, cols, (uint)cu[req], draft_tokens,
                     NULL, 0, tokens, tokens64, num_sampled);
}
#endif

#include "verify_shards.cl"
