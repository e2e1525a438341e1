/* Gumbel-max sampling: token = argmax_i (logit_i / T + g_i), g_i the
 * Gumbel noise of token i from the row's stream (stream.cl).
 *
 * Build-time defines:
 *   PSR_WG_SIZE        work-items per group
 *   PSR_LOGIT_DTYPE    0 fp32, 1 fp16, 2 bf16
 *   PSR_DETERMINISTIC  1: detmath.cl (same bits on every device); 0: native logs
 *   IS_DRAFTING, USE_FP64 as in stream.cl
 *   USE_WIDE           1: wide-tail fp32 noise from 64 random bits (docs/statistics.md)
 *   PSR_METHOD         0 Gumbel-max, 1 exponential race over logits, 2 over probabilities
 *
 * The exponential race picks argmax p_i / E_i with E_i = exp(-g_i), the
 * same variate as the Gumbel noise, so it picks the Gumbel token up to
 * rounding. Over logits, p_i = exp(x_i / T - m) with m the work-group's
 * largest scaled logit; groups then compare m + log(best score).
 *
 * A row is split into groups_per_row chunks of `chunk` tokens, one
 * work-group each. Each group writes its best (value, index); with one
 * group per row it writes the token itself, otherwise psr_gumbel_finalize
 * combines the partials. Ties go to the lowest index throughout.
 */

#include "stream.cl"
#include "detmath.cl"
#include "vecmath.cl"
#include "groups.cl"

#ifndef PSR_LOGIT_DTYPE
#define PSR_LOGIT_DTYPE 0
#endif
#ifndef PSR_DETERMINISTIC
#define PSR_DETERMINISTIC 1
#endif
#ifndef USE_WIDE
#define USE_WIDE 0 /* wide-tail fp32 noise (no double anywhere) */
#endif
/* 0: Gumbel-max over logits; 1: exponential race over softmax(logits / T),
 * fused; 2: exponential race over probabilities (fp32). */
#ifndef PSR_METHOD
#define PSR_METHOD 0
#endif
/* 1: the variant that applies filter.cl's per-row thresholds; the default
 * variant has no trace of them (their compare cost 5-20% on the H200). */
#ifndef PSR_FILTERS
#define PSR_FILTERS 0
#endif

#if PSR_LOGIT_DTYPE == 0
typedef float psr_logit_t;
inline float psr_load_logit(__global const float *p, ulong i) { return p[i]; }
#elif PSR_LOGIT_DTYPE == 1
typedef half psr_logit_t;
inline float psr_load_logit(__global const half *p, ulong i) { return vload_half(i, p); }
#else
typedef ushort psr_logit_t;
inline float psr_load_logit(__global const ushort *p, ulong i) { return as_float((uint)p[i] << 16); }
#endif

/* Token ids travel as int32 or int64 (the host's choice, per launch). */
inline void psr_store_token(__global int *tokens, uint i, int token, uint tokens64)
{
    if (tokens64)
        ((__global long *)tokens)[i] = token;
    else
        tokens[i] = token;
}

/* An id outside int32 becomes INT_MIN or INT_MAX: out of every range. */
inline int psr_load_token(__global const int *tokens, uint i, uint tokens64)
{
    return tokens64 ? (int)clamp(((__global const long *)tokens)[i], (long)INT_MIN, (long)INT_MAX) : tokens[i];
}

#if USE_FP64
typedef double psr_acc_t;
#else
typedef float psr_acc_t;
#endif
/* The value of "nothing can win here": race scores over probabilities are
 * linear and start at 0; everything else compares on a log scale. */
#if PSR_METHOD == 2
#define PSR_ACC_NEG_INF 0.0f
#else
#define PSR_ACC_NEG_INF (-INFINITY)
#endif

/* Row flags, as PSR_ROW_* in psr.h. */
#define PSR_ROW_NO_FINITE 1u
#define PSR_ROW_BAD_POSITION 2u
#define PSR_ROW_BAD_TEMPERATURE 4u
#define PSR_ROW_BAD_INDEX 8u
#define PSR_ROW_BAD_FILTER 16u

/* One kernel per launch: with 64-bit atomics, each work-group of a split
 * row stores its best as one 64-bit key, [value:32][~index:20] (a larger
 * key is a better candidate), in a slot of its own, then counts itself in
 * the row's word; the last to count reads every slot and writes the row.
 * That is three round trips however the groups arrive: the groups of a
 * row arrive together, and a fold into shared words by compare-and-swap
 * lost one more round trip for each group just before (docs/devices.md). */
/* The host defines PSR_INT64_ATOMICS only for devices that list
 * cl_khr_int64_base_atomics; a compiler that then lacks it fails the build
 * loudly instead of leaving rows unfinished. */
#ifndef PSR_INT64_ATOMICS
#define PSR_INT64_ATOMICS 0
#endif
#if PSR_INT64_ATOMICS && !USE_FP64
#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable
#define PSR_ROW_WORDS 1

/* An fp32 value as an unsigned integer of the same order. */
inline uint psr_ordered(float v)
{
    if (v == 0.0f)
        v = 0.0f; /* -0 equals +0 everywhere else: the lowest index must win */
    uint b = as_uint(v);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

/* A group's (value, index) as a key: the larger key is the better pair
 * (larger value, then lower index). */
inline ulong psr_best_key(float v, uint idx)
{
    return ((ulong)psr_ordered(v) << 20) | (ulong)(0xfffffu - idx);
}

/* The index that psr_best_key put into key. */
inline uint psr_key_index(ulong key)
{
    return 0xfffffu - (uint)(key & 0xfffffu);
}

/* The largest of `groups` keys (psr_best_key) that groups of this
 * launch stored in keys, in every work-item (each reads some of them: one
 * work-item's volatile loads go one after another); every work-item must
 * call it. */
inline ulong psr_largest_key(__global const ulong *keys, uint groups, uint lid, __local ulong *lk)
{
    ulong best = 0; /* below every key */
    for (uint g = lid; g < groups; g += PSR_WG_SIZE)
        best = max(best, *(volatile __global const ulong *)(keys + g));
    lk[lid] = best;
    uint span = 1; /* the reduction spans the slots read, not the group */
    while (span < min(groups, (uint)PSR_WG_SIZE))
        span <<= 1;
    for (uint s = span / 2; s > 0; s >>= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < s)
            lk[lid] = max(lk[lid], lk[lid + s]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    return lk[0];
}
#else
#define PSR_ROW_WORDS 0
#endif

/* Positions at or past the draft salt would make the streams meet. */
#define PSR_MAX_POSITION 0x40000000L

/* Gumbel noise of one token from its words, and an upper bound on it that
 * needs no log, plus a margin far above the rounding of the computed g.
 *   fp32: g = -log(-log1p(-u)) <= -log(u)     <= (1 + clz(s)) * ln 2
 *   fp64: g = -log(-log(u))    <= -log(1 - u) <= -floor(log2 (1 - u)) * ln 2
 * For fp64, 1 - u >= (2^64 - 1 - bits - 2^11) * 2^-64: converting the 64
 * bits to double moves them by at most 2^11.
 *   wide: g = -log(E) <= -log(V) <= (1 + clz(2^64 - bits)) * ln 2, as E >= V
 * below (and g <= -log(log 2) when u < 1/2). */
#if USE_FP64
inline double psr_noise_bound(uint2 w)
{
    ulong bits = ((ulong)w.y << 32) | (ulong)w.x;
    ulong rest = ~bits; /* 2^64 - 1 - bits */
    if (rest < 4096)
        return INFINITY; /* u rounds to (nearly) 1: no cheap bound */
    int e = 63 - (int)clz(rest - 2048) - 64; /* 1 - u >= 2^e */
    return -(double)e * 0x1.62e42fefa39efp-1 + 1e-6;
}
inline double psr_noise(uint2 w)
{
    double u = psr_u64(w.x, w.y);
#if PSR_DETERMINISTIC
    return -psr_det_log_d(-psr_det_log_d(u));
#else
    return -log(-log(u));
#endif
}
#elif USE_WIDE
/* Wide-tail noise: E = -log(u) for the 64-bit uniform u = bits * 2^-64 of
 * the fp64 path, in fp32 and integer arithmetic only. Where u >= 1/2 it
 * works from V = 1 - u = (2^64 - bits) * 2^-64, exact as an integer and
 * within half an ulp as a float, so E = -log1p(-V) resolves down to 2^-64:
 * tokens far below 2^-24 keep their chance, as with fp64 noise. */
inline float psr_wide_e(uint2 w)
{
    ulong bits = ((ulong)w.y << 32) | (ulong)w.x;
    if (bits >> 63) {
        float v = (float)(~bits + 1UL) * 0x1p-64f; /* in [2^-64, 1/2] */
        return -psr_det_log1p_neg(v);
    }
    float u = max((float)bits * 0x1p-64f, 0x1p-64f); /* in [2^-64, 1/2] */
    return -psr_det_log(u);
}
inline float psr_noise_bound(uint2 w)
{
    ulong rest = ~(((ulong)w.y << 32) | (ulong)w.x) + 1UL; /* 2^64 - bits (0 for bits = 0) */
    return (float)(1 + (int)clz(rest)) * 0x1.62e430p-1f + 1e-3f;
}
inline float psr_noise(uint2 w)
{
    return -psr_det_log(psr_wide_e(w));
}
#else
inline float psr_noise_bound(uint2 w)
{
    /* Straight from the word, s = the folded int of u32(): u >= s * 2^-32
     * >= 2^(-1 - clz(s)), a few operations cheaper than reading the
     * exponent of u (measured: 3-4% at large batch on the H200). */
    int s = as_int(w.x);
    uint folded = (uint)(s < 0 ? ~s : s);
    return (float)(1 + (int)clz(folded)) * 0x1.62e430p-1f + 1e-3f;
}
inline float psr_noise(uint2 w)
{
    float u = psr_u32(w.x);
#if PSR_DETERMINISTIC
    return -psr_det_log(-psr_det_log1p_neg(u));
#else
    return -native_log(-log1p(-u));
#endif
}
#endif

/* x / T, r = 1/T from psr_det_recip: psr_det_div for finite x;
 * infinities (and overflow) give infinity, NaN stays NaN. */
inline float psr_scale(float x, float t, float r)
{
#if PSR_DETERMINISTIC
    float q = psr_det_div(x, t, r);
    return isinf(x * r) ? x * r : q; /* overflow: keep the infinity, not NaN */
#else
    return x / t;
#endif
}

/* Is (va, ia) a better candidate than (vb, ib)? Larger value, then lower index. */
inline bool psr_better(psr_acc_t va, uint ia, psr_acc_t vb, uint ib)
{
    return va > vb || (va == vb && ia < ib);
}

/* Reduces (value, index) pairs over the work-group; the result is in slot 0. */
inline void psr_reduce_best(__local psr_acc_t *lv, __local uint *li, uint lid)
{
    for (uint s = PSR_WG_SIZE / 2; s > 0; s >>= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < s && psr_better(lv[lid + s], li[lid + s], lv[lid], li[lid])) {
            lv[lid] = lv[lid + s];
            li[lid] = li[lid + s];
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* The largest `mine` over the work-group; every work-item must call it
 * (a uniform condition), and lv is free again when it returns. */
inline psr_acc_t psr_group_max(__local psr_acc_t *lv, psr_acc_t mine, uint lid)
{
    lv[lid] = mine;
    for (uint s = PSR_WG_SIZE / 2; s > 0; s >>= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < s)
            lv[lid] = fmax(lv[lid], lv[lid + s]); /* max() is undefined for infinities */
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    psr_acc_t m = lv[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return m;
}

/* A row's request (*req, -1 for padding) and the flags of its inputs;
 * 0 means the row is sampled. Indices are checked before any use. */
inline uint psr_row_status(uint row_id, __global const int *row_request, uint requests,
                           __global const float *temperatures, __global const long *positions,
                           __global const float *draft_cache, __global const int *draft_cache_rows,
                           uint draft_cache_rows_total, int *req)
{
    *req = row_request ? row_request[row_id] : (int)row_id;
    if (*req < 0)
        return 0;
    if (*req >= (int)requests)
        return PSR_ROW_BAD_INDEX;
    uint flags = 0;
    long pos = positions[row_id];
    float t = temperatures[*req];
    if (pos < 0 || pos >= PSR_MAX_POSITION)
        flags |= PSR_ROW_BAD_POSITION;
    if (!(t == 0.0f || (isnormal(t) && t > 0.0f)))
        flags |= PSR_ROW_BAD_TEMPERATURE;
    if (draft_cache && draft_cache_rows && draft_cache_rows[row_id] >= (int)draft_cache_rows_total)
        flags |= PSR_ROW_BAD_INDEX;
    return flags;
}

/* What one row needs while its tokens are scanned. */
typedef struct psr_row {
    float t, r;      /* temperature and its reciprocal */
    uint key;        /* the row's Philox key */
    bool greedy;
    psr_acc_t floor; /* a value some token of this group reaches: anything
                        whose bound is below it cannot win */
    float shift;     /* race over logits: the group's largest scaled logit */
} psr_row;

#if PSR_METHOD != 0
/* The race's E for a token's words, and the exponent of a power of two
 * below it (E >= 2^-k), which bounds the score p / E without any log. */
#if USE_FP64
inline double psr_race_e(uint2 w)
{
    /* 0 - log, not -log: u rounded to 1 gives E = +0 and an infinite score
     * (the Gumbel path's largest noise), not -0 and -inf */
    return 0.0 - psr_det_log_d(psr_u64(w.x, w.y));
}
inline int psr_race_e_shift(uint2 w) /* E >= 1 - u >= 2^-k; 1100: no bound */
{
    ulong rest = ~(((ulong)w.y << 32) | (ulong)w.x);
    return rest < 4096 ? 1100 : 64 - (63 - (int)clz(rest - 2048));
}
#elif USE_WIDE
inline float psr_race_e(uint2 w)
{
    return psr_wide_e(w);
}
inline int psr_race_e_shift(uint2 w) /* E >= V >= 2^-(1 + clz(2^64 - bits)) */
{
    return 1 + (int)clz(~(((ulong)w.y << 32) | (ulong)w.x) + 1UL);
}
#else
inline float psr_race_e(uint2 w)
{
    return -psr_det_log1p_neg(psr_u32(w.x));
}
inline int psr_race_e_shift(uint2 w) /* E >= u >= 2^-(1 + clz(s)) */
{
    int s = as_int(w.x);
    return 1 + (int)clz((uint)(s < 0 ? ~s : s));
}
#endif

/* The race over one token: score p / E as p * (1/E) (fp64: in double).
 * A scaled logit below `cut` (filter.cl's threshold) is filtered out. */
inline void psr_consider_cut(const psr_row *row, float x, uint i, psr_acc_t *best, uint *best_i,
                             float cut)
{
    if (isnan(x))
        return;
    psr_acc_t v;
#if PSR_METHOD == 2
    if (!(x > 0.0f))
        return; /* a probability that is 0, negative or NaN never wins */
    float p = x;
#else
    float p;
    if (row->greedy) {
        p = x;
    } else {
        /* An infinite scaled logit (also one that overflowed x / T) is an
         * infinite weight, as it is an infinite value for Gumbel-max. */
        float xs = isinf(x) ? x : psr_scale(x, row->t, row->r);
#if PSR_FILTERS
        if (xs < cut)
            return;
#endif
        p = isinf(xs) ? (xs > 0.0f ? INFINITY : 0.0f) : psr_det_exp_neg(xs - row->shift);
    }
#endif
    if (row->greedy) {
        v = p;
    } else {
        if (!(p > 0.0f))
            return;
        uint2 w = psr_token_words(row->key, i);
        int k = psr_race_e_shift(w);
        /* Exact pruning: p * 2^k (exact) bounds the score; 1.001 covers rounding. */
        if (k < 1000 && (psr_acc_t)ldexp(p, min(k, 200)) * (psr_acc_t)1.001f < row->floor)
            return;
#if USE_FP64
        v = (double)p * (1.0 / psr_race_e(w));
#else
        v = p * psr_det_recip(psr_race_e(w));
#endif
    }
    if (v > *best) {
        *best = v;
        *best_i = i;
    }
}
#else
/* Folds token i with logit x into the running (best, best_i). Tokens go in
 * increasing order, so a strict > keeps the lowest index on ties. A scaled
 * logit below `cut` (filter.cl's threshold) is filtered out; greedy rows
 * ignore it, as the argmax is always kept. */
inline void psr_consider_cut(const psr_row *row, float x, uint i, psr_acc_t *best, uint *best_i,
                             float cut)
{
    if (isnan(x))
        return;
    psr_acc_t v;
    if (row->greedy || isinf(x)) {
        v = x;
    } else {
        float xf = psr_scale(x, row->t, row->r);
#if PSR_FILTERS
        if (xf < cut)
            return;
#endif
        psr_acc_t xs = (psr_acc_t)xf;
        uint2 w = psr_token_words(row->key, i);
        /* Exact pruning: skip the logs of a token that cannot win. */
        if (xs + psr_noise_bound(w) < row->floor)
            return;
        v = xs + psr_noise(w);
    }
    if (v > *best) {
        *best = v;
        *best_i = i;
    }
}
#endif

inline void psr_consider(const psr_row *row, float x, uint i, psr_acc_t *best, uint *best_i)
{
    psr_consider_cut(row, x, i, best, best_i, -INFINITY);
}

/* Logits i .. i + 3 where all four exist and the address is aligned. */
inline float4 psr_load4_aligned(__global const psr_logit_t *src, uint i)
{
#if PSR_LOGIT_DTYPE == 0
    return *(__global const float4 *)(src + i);
#elif PSR_LOGIT_DTYPE == 1
    return vload_half4(0, src + i);
#else
    ushort4 b = *(__global const ushort4 *)(src + i);
    return as_float4(convert_uint4(b) << 16);
#endif
}

/* Logits i .. i+3 of a row, or NaN (ignored) past its end. */
inline float4 psr_load4(__global const psr_logit_t *src, uint i, uint end, bool aligned)
{
    if (aligned && i + 3 < end)
        return psr_load4_aligned(src, i);
    float4 x = (float4)(NAN);
    if (i < end)
        x.s0 = psr_load_logit(src, i);
    if (i + 1 < end)
        x.s1 = psr_load_logit(src, i + 1);
    if (i + 2 < end)
        x.s2 = psr_load_logit(src, i + 2);
    if (i + 3 < end)
        x.s3 = psr_load_logit(src, i + 3);
    return x;
}

inline void psr_store_cache(__global float *cache, uint i, uint end, float4 x)
{
    if (i < end)
        cache[i] = x.s0;
    if (i + 1 < end)
        cache[i + 1] = x.s1;
    if (i + 2 < end)
        cache[i + 2] = x.s2;
    if (i + 3 < end)
        cache[i + 3] = x.s3;
}

inline void psr_consider4_cut(const psr_row *row, float4 x, uint i, psr_acc_t *best,
                              uint *best_i, float cut)
{
    psr_consider_cut(row, x.s0, i, best, best_i, cut);
    psr_consider_cut(row, x.s1, i + 1, best, best_i, cut);
    psr_consider_cut(row, x.s2, i + 2, best, best_i, cut);
    psr_consider_cut(row, x.s3, i + 3, best, best_i, cut);
}

inline void psr_consider4(const psr_row *row, float4 x, uint i, psr_acc_t *best, uint *best_i)
{
    psr_consider4_cut(row, x, i, best, best_i, -INFINITY);
}

/* The vector path (cl/vecmath.cl): Gumbel-max and the race, every noise. */
#if PSR_VEC
#define PSR_VEC_PATH 1
#define PSR_STEP PSR_VEC
#else
#define PSR_VEC_PATH 0
#define PSR_STEP 4
#endif

#if PSR_VEC_PATH
inline psr_vfloat psr_vload_logits(__global const psr_logit_t *src, uint i)
{
#if PSR_LOGIT_DTYPE == 0
    return psr_vload(0, src + i);
#elif PSR_LOGIT_DTYPE == 1
    return psr_vload_half(0, src + i);
#else
    return psr_as_vfloat(psr_convert_vuint(psr_vload(0, src + i)) << 16);
#endif
}

/* A block's scaled logits, and its dead lanes: NaN, or below the filter
 * threshold `cut`. */
inline psr_vfloat psr_vscaled(const psr_row *row, psr_vfloat x, float cut, psr_vint *dead)
{
    *dead = isnan(x);
    psr_vfloat xs = psr_vscale(x, row->t, row->r);
#if PSR_FILTERS
    *dead |= xs < cut;
#else
    (void)cut;
#endif
    return xs;
}

/* Lanes whose value v (tokens i, i + 1, ...) beats their best take it:
 * strictly, so the lowest index keeps a tie. */
inline void psr_keep_better(psr_vacc v, uint i, psr_vacc *best, psr_vuint *best_i)
{
    psr_vacc_mask better = v > *best;
    *best = select(*best, v, better);
    *best_i = select(*best_i, (psr_vuint)i + PSR_LANE_IDS, convert_int16(better));
}

#if PSR_METHOD != 0
/* The race's psr_consider_cut on 16 lanes. A lane of weight p loses on
 * its bound p * 2^k (k from the words); a block whose largest p cannot
 * reach the floor even with the largest k needs no Philox. */
inline void psr_consider_vec(psr_row *row, psr_vfloat x, uint i, psr_vacc *best,
                             psr_vuint *best_i, float cut)
{
    psr_vfloat p;
#if PSR_METHOD == 2
    p = select((psr_vfloat)(0.0f), x, x > 0.0f); /* 0, negative or NaN: weight 0 */
#else
    if (row->greedy) {
        p = x;
    } else {
        psr_vint dead;
        psr_vfloat xs = psr_vscaled(row, x, cut, &dead);
        p = select(psr_vdet_exp_neg(xs - row->shift), select((psr_vfloat)(0.0f), (psr_vfloat)INFINITY, xs > 0.0f),
                   isinf(xs));
        p = select(p, (psr_vfloat)(0.0f), dead);
    }
#endif
    psr_vacc v;
    if (row->greedy) {
        v = psr_to_vacc(p);
    } else {
        float top = psr_vmax(p);
        if (!(top > 0.0f))
            return;
#if !USE_FP64
        /* k is at most 33 (classic) or 65 (wide) */
        if ((psr_acc_t)ldexp(top, USE_WIDE ? 65 : 33) * (psr_acc_t)1.001f < row->floor)
            return;
#endif
        psr_vuint w1, w0 = psr_vtoken_words(row->key, (psr_vuint)i + PSR_LANE_IDS, &w1);
        psr_vint k = psr_vrace_e_shift(w0, w1);
        psr_vacc bound = psr_to_vacc(ldexp(p, min(k, 200))) * (psr_acc_t)1.001f;
#if USE_FP64
        bound = select(bound, (psr_vacc)INFINITY, psr_to_vacc_mask(k >= 1000));
#endif
        if (psr_vmax_acc(bound) < row->floor)
            return;
#if USE_FP64
        v = psr_to_vacc(p) * (1.0 / psr_vrace_e(w0, w1));
#else
        v = p * psr_vdet_recip(psr_vrace_e(w0, w1));
#endif
        v = select(v, (psr_vacc)PSR_ACC_NEG_INF, psr_to_vacc_mask(~(p > 0.0f))); /* weight 0: never */
        row->floor = fmax(row->floor, psr_vmax_acc(v));
    }
    psr_keep_better(v, i, best, best_i);
}
#else
/* Tokens i .. i + PSR_VEC - 1 into the lanes' running bests, as
 * psr_consider_cut takes them one by one. A lane that loses on its bound
 * may still be computed exactly (the argmax of exact values is the same),
 * so a block draws noise only if some lane may win, and no Philox at all
 * when even the largest noise cannot lift its best logit to the floor.
 * Each exact value raises the floor. */
inline void psr_consider_vec(psr_row *row, psr_vfloat x, uint i, psr_vacc *best,
                             psr_vuint *best_i, float cut)
{
    psr_vacc v;
    if (row->greedy) {
        v = psr_to_vacc(x);
    } else {
        psr_vint dead;
        psr_vfloat xs = psr_vscaled(row, x, cut, &dead);
        xs = select(xs, (psr_vfloat)(-INFINITY), dead);
        if (psr_vmax(xs) + PSR_NOISE_MAX < row->floor)
            return;
        psr_vuint w1, w0 = psr_vtoken_words(row->key, (psr_vuint)i + PSR_LANE_IDS, &w1);
        psr_vacc xa = psr_to_vacc(xs);
        if (psr_vmax_acc(xa + psr_vnoise_bound(w0, w1)) < row->floor) /* PoCL's any() goes lane by lane */
            return;
        v = xa + psr_vnoise(w0, w1); /* an infinite xs stays itself */
        row->floor = fmax(row->floor, psr_vmax_acc(v));
    }
    psr_keep_better(v, i, best, best_i); /* never for a NaN or filtered lane */
}
#endif

/* One work-item's step: a whole vector, or the chunk's last few tokens
 * one by one. */
inline void psr_consider_step(psr_row *row, __global const psr_logit_t *src, uint i, uint end,
                              __global float *cache, float cut, psr_vacc *lane_best,
                              psr_vuint *lane_best_i, psr_acc_t *best, uint *best_i)
{
    if (i + PSR_VEC <= end) {
        psr_vfloat x = psr_vload_logits(src, i);
        if (cache)
            psr_vstore(x, 0, cache + i);
        psr_consider_vec(row, x, i, lane_best, lane_best_i, cut);
        return;
    }
    for (uint j = i; j < end; j++) {
        float x = psr_load_logit(src, j);
        if (cache)
            cache[j] = x;
        psr_consider_cut(row, x, j, best, best_i, cut);
    }
}

/* Folds the lanes into the work-item's (best, best_i). */
inline void psr_merge_lanes(psr_vacc lane_best, psr_vuint lane_best_i, psr_acc_t *best,
                            uint *best_i)
{
    psr_acc_t values[PSR_VEC];
    uint indices[PSR_VEC];
    psr_vstore(lane_best, 0, values);
    psr_vstore(lane_best_i, 0, indices);
    for (int l = 0; l < PSR_VEC; l++) {
        psr_acc_t v = values[l];
        uint i = indices[l];
        if (psr_better(v, i, *best, *best_i)) {
            *best = v;
            *best_i = i;
        }
    }
}
#endif

/* The row's sampling state once its status is known: temperature, key,
 * and where its draft cache row is (NULL: none). Inactive rows keep the
 * greedy defaults. */
inline __global float *psr_row_setup(psr_row *row, bool active, int req, uint row_id, uint cache_k,
                                     uint draft_step, ulong cache_stride, __global const long *seeds,
                                     __global const float *temperatures, __global const long *positions,
                                     __global float *draft_cache, __global const int *draft_cache_rows)
{
    row->t = 1.0f;
    row->r = 1.0f;
    row->key = 0;
    row->greedy = true;
    row->floor = PSR_ACC_NEG_INF;
    row->shift = 0.0f;
    __global float *cache = 0;
    if (!active)
        return cache;
    row->t = temperatures[req];
    row->greedy = row->t == 0.0f;
    row->key = psr_row_key((ulong)seeds[req], (ulong)positions[row_id]);
#if PSR_DETERMINISTIC
    if (!row->greedy)
        row->r = psr_temp_recip(row->t);
#endif
    if (draft_cache) {
        /* [requests, K, vocab] with K = draft_cache_k, else one row per row */
        int crow = draft_cache_rows ? draft_cache_rows[row_id]
                   : cache_k ? req * (int)cache_k + (int)draft_step
                             : (int)row_id;
        if (crow >= 0)
            cache = draft_cache + (ulong)crow * cache_stride;
    }
    return cache;
}

#if PSR_METHOD == 1
/* The race's scale: the group's largest scaled logit over [start, end).
 * Every work-item of the group calls it (it ends in a group reduction). */
inline float psr_race_shift(const psr_row *row, __global const psr_logit_t *src, uint start, uint end,
                            bool aligned, __local psr_acc_t *lv, uint lid)
{
    float m = -INFINITY;
#if PSR_VEC_PATH
    /* fmax passes over NaN, and psr_vscale keeps infinities */
    for (uint j = start + PSR_VEC * lid; j + PSR_VEC <= end; j += PSR_VEC * PSR_WG_SIZE)
        m = fmax(m, psr_vmax(psr_vscale(psr_vload_logits(src, j), row->t, row->r)));
    for (uint j = start + (end - start) / PSR_VEC * PSR_VEC + lid; j < end; j += PSR_WG_SIZE) {
        float x = psr_load_logit(src, j);
        if (!isnan(x))
            m = fmax(m, isinf(x) ? x : psr_scale(x, row->t, row->r));
    }
    (void)aligned;
#else
    for (uint j = start + 4 * lid; j < end; j += 4 * PSR_WG_SIZE) {
        float4 x = psr_load4(src, j, end, aligned);
        float xs[4] = {x.s0, x.s1, x.s2, x.s3};
        for (int k = 0; k < 4; k++)
            if (!isnan(xs[k]))
                m = fmax(m, isinf(xs[k]) ? xs[k] : psr_scale(xs[k], row->t, row->r));
    }
#endif
    return (float)psr_group_max(lv, m, lid);
}

/* A group's best race score back on a scale all groups share:
 * shift + log(score). */
inline psr_acc_t psr_race_unscale(psr_acc_t v, float shift)
{
#if USE_FP64
    return v > 0.0 ? (isinf(v) ? v : (double)shift + psr_det_log_d(v)) : -INFINITY;
#else
    return v > 0.0f ? (isinf(v) ? v : shift + psr_det_log(fmax(v, FLT_MIN))) : -INFINITY;
#endif
}
#endif

#if PSR_VEC_PATH
/* The work-item's tokens of [start, end), PSR_VEC at a time, into its
 * (best, best_i). After the first step the group's best so far becomes
 * every work-item's floor (a uniform condition, as in the scalar path). */
inline void psr_scan_chunk(psr_row *row, bool active, __global const psr_logit_t *src, uint start, uint end,
                           __global float *cache, float cut, psr_acc_t *best, uint *best_i,
                           __local psr_acc_t *lv, uint lid)
{
    psr_vacc lane_best = (psr_vacc)(PSR_ACC_NEG_INF);
    psr_vuint lane_best_i = (psr_vuint)0xffffffffu;
    uint i = start + PSR_VEC * lid;
    if (active)
        psr_consider_step(row, src, i, end, cache, cut, &lane_best, &lane_best_i, best, best_i);
    i += PSR_VEC * PSR_WG_SIZE;
    if (!(active && row->greedy) && start + PSR_VEC * PSR_WG_SIZE < end)
        row->floor = fmax(row->floor, psr_group_max(lv, fmax(*best, psr_vmax_acc(lane_best)), lid));
    for (; active && i < end; i += PSR_VEC * PSR_WG_SIZE)
        psr_consider_step(row, src, i, end, cache, cut, &lane_best, &lane_best_i, best, best_i);
    psr_merge_lanes(lane_best, lane_best_i, best, best_i);
}
#else
/* The work-item's tokens of [start, end), 4 per step from x_first (the
 * first step's logits, loaded early), into its (best, best_i). After the
 * first step the group's best so far becomes the pruning floor. */
inline void psr_scan_chunk(psr_row *row, bool active, __global const psr_logit_t *src, uint start, uint end,
                           bool aligned, float4 x_first, __global float *cache, float cut, psr_acc_t *best,
                           uint *best_i, __local psr_acc_t *lv, uint lid)
{
    uint i = start + 4 * lid;
    if (active) {
        if (cache)
            psr_store_cache(cache, i, end, x_first);
        psr_consider4_cut(row, x_first, i, best, best_i, cut);
    }
    i += 4 * PSR_WG_SIZE;
    /* Every work-item reaches this barrier: the condition is uniform
     * (greedy is a property of the row, and rows span whole groups). */
    if (!(active && row->greedy) && start + 4 * PSR_WG_SIZE < end)
        row->floor = psr_group_max(lv, *best, lid);
    /* x holds the logits at i (NaN past the end); the loops load the next
     * step's after their work, so no extra logits stay live across it. */
    float4 x = psr_load4(src, i, end, aligned);
    /* Greedy rows only stream memory, and so mostly do filtered rows (no
     * noise for the tokens they remove): keep two loads in flight. (The
     * sampling path gains nothing from this and loses registers.) */
    bool streaming = active && (row->greedy || (PSR_FILTERS && cut > -INFINITY));
    for (; streaming && i + 4 * PSR_WG_SIZE < end; i += 8 * PSR_WG_SIZE) {
        uint j = i + 4 * PSR_WG_SIZE;
        float4 y = psr_load4(src, j, end, aligned);
        if (cache) {
            psr_store_cache(cache, i, end, x);
            psr_store_cache(cache, j, end, y);
        }
        psr_consider4_cut(row, x, i, best, best_i, cut);
        psr_consider4_cut(row, y, j, best, best_i, cut);
        x = psr_load4(src, j + 4 * PSR_WG_SIZE, end, aligned);
    }
    for (; active && i < end; i += 4 * PSR_WG_SIZE) {
        if (cache)
            psr_store_cache(cache, i, end, x);
        psr_consider4_cut(row, x, i, best, best_i, cut);
        x = psr_load4(src, i + 4 * PSR_WG_SIZE, end, aligned);
    }
}
#endif

#if PSR_ROW_WORDS
/* One kernel per launch: the group stores its best key, counts itself in
 * the row's word, and the last group to count takes the row's best key
 * (into *v and *idx). Rows that are padding or invalid never gather:
 * group 0 reports them. Both conditions are uniform over the group.
 * Returns whether this group writes the row. */
inline bool psr_gather_row(bool active, uint part, uint row_id, uint groups_per_row,
                           __global ulong *best_keys, __global uint *best_count, psr_acc_t *v, uint *idx,
                           uint lid, __local ulong *lk, __local uint *llast)
{
    if (!active)
        return part == 0;
    if (lid == 0)
        atom_xchg(best_keys + get_group_id(0), psr_best_key(*v, *idx));
    if (!psr_last_group(best_count + row_id, groups_per_row, llast))
        return false;
    ulong key = psr_largest_key(best_keys + (ulong)row_id * groups_per_row, groups_per_row, lid, lk);
    *idx = psr_key_index(key);
    uint ord = (uint)(key >> 20);
    *v = ord > psr_ordered((float)PSR_ACC_NEG_INF) ? (psr_acc_t)INFINITY : PSR_ACC_NEG_INF;
    return true;
}
#endif

/* Work-item 0's output: the row's token and flags when this group
 * finishes the row, else the group's partial for psr_gumbel_finalize. */
inline void psr_write_result(bool finish, int req, uint flags, psr_acc_t v, uint idx, uint row_id,
                             __global int *tokens, uint tokens64, __global uint *row_flags,
                             __global psr_acc_t *part_value, __global uint *part_index, bool gathered)
{
    if (finish) {
        int token = -1;
        if (req < 0) {
            flags = 0;
        } else if (!flags) {
            token = (int)idx;
            if (!(v > PSR_ACC_NEG_INF))
                flags |= PSR_ROW_NO_FINITE;
        }
        psr_store_token(tokens, row_id, token, tokens64);
        if (row_flags)
            row_flags[row_id] = flags;
    } else if (!gathered) {
        part_value[get_group_id(0)] = v;
        part_index[get_group_id(0)] = idx;
    }
}

/* Filters (filter.cl): the row's threshold (*cut), NaN for bad filter
 * values (flagged), and whether the filter pass already drew the row's
 * token (then the whole row's groups return, before any barrier). */
inline bool psr_row_cut(__global const float *thresholds, uint row_id, int req, uint *flags, float *cut)
{
    *cut = -INFINITY;
#if PSR_FILTERS
    if (thresholds && req >= 0 && !(*flags & PSR_ROW_BAD_INDEX)) {
        float2 th = vload2(row_id, thresholds);
        if (th.y != 0.0f)
            return true;
        *cut = th.x;
        if (isnan(*cut))
            *flags |= PSR_ROW_BAD_FILTER;
    }
#endif
    return false;
}

/* Each work-item takes 4 consecutive tokens per step (PSR_VEC on the
 * vector path), the group a chunk of the row. After the first step the
 * group's best so far becomes the pruning floor for the rest of it. */
__kernel __attribute__((reqd_work_group_size(PSR_WG_SIZE, 1, 1)))
void psr_gumbel_sample(const psr_sample_params p, __global const psr_logit_t *logits,
                       __global const int *row_request, __global const long *seeds,
                       __global const float *temperatures, __global const long *positions,
                       __global psr_acc_t *part_value, __global uint *part_index, __global int *tokens,
                       __global uint *row_flags, __global float *draft_cache,
                       __global const int *draft_cache_rows, __global ulong *best_keys,
                       __global uint *best_count, __global const float *thresholds)
{
    __local psr_acc_t lv[PSR_WG_SIZE];
    __local uint li[PSR_WG_SIZE];
#if PSR_ROW_WORDS
    __local ulong lk[PSR_WG_SIZE];
    __local uint llast;
#endif
    const uint groups_per_row = p.rows.groups_per_row;
    uint lid = get_local_id(0);
    uint row_id = get_group_id(0) / groups_per_row;
    uint part = get_group_id(0) % groups_per_row;
    uint start = part * p.rows.chunk; /* chunk is a multiple of 4 (of PSR_VEC) */
    uint end = min(start + p.rows.chunk, p.rows.vocab);
    /* Every row lies inside the logits buffer, valid or not, so the first
     * step's logits are asked for before the row's status: at small batch
     * the kernel is a chain of latencies, and these two overlap. (The
     * second step's too would cost registers, and greedy speed.) Inactive
     * rows load from the row too: `aligned` is its. */
    __global const psr_logit_t *src = logits + p.rows.logits_offset + (ulong)row_id * p.rows.row_stride;
    /* Vector loads need the row's real address aligned (a buffer made from
     * a host pointer need not be): test the pointer, not the offset. */
    bool aligned = ((size_t)src & (4 * sizeof(psr_logit_t) - 1)) == 0;
#if !PSR_VEC_PATH
    float4 x_first = psr_load4(src, start + 4 * lid, end, aligned);
#endif
    int req;
    uint flags = psr_row_status(row_id, row_request, p.rows.requests, temperatures, positions, draft_cache,
                                draft_cache_rows, p.draft_cache_rows_total, &req);
    float cut;
    if (psr_row_cut(thresholds, row_id, req, &flags, &cut))
        return;
    bool active = req >= 0 && !flags;
    psr_acc_t best = PSR_ACC_NEG_INF;
    uint best_i = start + PSR_STEP * lid < end ? start + PSR_STEP * lid : 0xffffffffu;
    psr_row row;
    __global float *cache = psr_row_setup(&row, active, req, row_id, p.draft_cache_k, p.draft_step,
                                          p.draft_cache_stride, seeds, temperatures, positions, draft_cache,
                                          draft_cache_rows);
#if PSR_METHOD == 1
    if (active && !row.greedy) /* uniform: every work-item reaches the barriers */
        row.shift = psr_race_shift(&row, src, start, end, aligned, lv, lid);
#endif
#if PSR_VEC_PATH
    psr_scan_chunk(&row, active, src, start, end, cache, cut, &best, &best_i, lv, lid);
#else
    psr_scan_chunk(&row, active, src, start, end, aligned, x_first, cache, cut, &best, &best_i, lv, lid);
#endif
    lv[lid] = best;
    li[lid] = best_i;
    psr_reduce_best(lv, li, lid);
    psr_acc_t final_v = lv[0];
    uint final_i = li[0];
#if PSR_METHOD == 1
    if (active && !row.greedy)
        final_v = psr_race_unscale(final_v, row.shift);
#endif
    bool finish = groups_per_row == 1;
#if PSR_ROW_WORDS
    if (!finish && best_keys)
        finish = psr_gather_row(active, part, row_id, groups_per_row, best_keys, best_count, &final_v, &final_i,
                                lid, lk, &llast);
#endif
    if (lid == 0)
        psr_write_result(finish, req, flags, final_v, final_i, row_id, tokens, p.tokens64, row_flags, part_value,
                         part_index, best_keys != 0);
}

/* The best (value, index) of one row's per-group partials, in slot 0 of
 * lv and li (the second kernel of a two-kernel launch). */
inline void psr_reduce_parts(uint row, uint groups_per_row, __global const psr_acc_t *part_value,
                             __global const uint *part_index, __local psr_acc_t *lv, __local uint *li,
                             uint lid)
{
    psr_acc_t best = PSR_ACC_NEG_INF;
    uint best_i = 0xffffffffu;
    for (uint g = lid; g < groups_per_row; g += PSR_WG_SIZE) {
        ulong at = (ulong)row * groups_per_row + g;
        if (psr_better(part_value[at], part_index[at], best, best_i)) {
            best = part_value[at];
            best_i = part_index[at];
        }
    }
    lv[lid] = best;
    li[lid] = best_i;
    psr_reduce_best(lv, li, lid);
}

/* Combines the partial results of each row: one work-group per row. */
__kernel __attribute__((reqd_work_group_size(PSR_WG_SIZE, 1, 1)))
void psr_gumbel_finalize(const psr_sample_params p, __global const psr_acc_t *part_value,
                         __global const uint *part_index, __global const int *row_request,
                         __global const float *temperatures, __global const long *positions,
                         __global int *tokens, __global uint *row_flags,
                         __global const float *draft_cache, __global const int *draft_cache_rows,
                         __global const float *thresholds)
{
    const uint groups_per_row = p.rows.groups_per_row, requests = p.rows.requests;
    const uint draft_cache_rows_total = p.draft_cache_rows_total;
    __local psr_acc_t lv[PSR_WG_SIZE];
    __local uint li[PSR_WG_SIZE];
    uint lid = get_local_id(0);
    uint row = get_group_id(0);
    psr_reduce_parts(row, groups_per_row, part_value, part_index, lv, li, lid);
    if (lid != 0)
        return;
    int req;
    uint flags = psr_row_status(row, row_request, requests, temperatures, positions, draft_cache,
                                draft_cache_rows, draft_cache_rows_total, &req);
    if (PSR_FILTERS && thresholds && req >= 0 && !(flags & PSR_ROW_BAD_INDEX)) {
        float2 th = vload2(row, thresholds);
        if (th.y != 0.0f)
            return; /* filter.cl drew the token */
        if (isnan(th.x))
            flags |= PSR_ROW_BAD_FILTER;
    }
    int token = -1;
    if (req >= 0 && !flags) {
        token = (int)li[0];
        if (!(lv[0] > PSR_ACC_NEG_INF))
            flags |= PSR_ROW_NO_FINITE;
    }
    psr_store_token(tokens, row, token, p.tokens64);
    if (row_flags)
        row_flags[row] = flags;
}
