/* Gumbel-max's and the race's arithmetic per token, shared by every
 * program that reads logits or draws noise (gumbel.cl, filter.cl, lse.cl,
 * verify.cl, logprobs.cl, probe_noise.cl): token = argmax_i (logit_i / T
 * + g_i), g_i the Gumbel noise of token i from the row's stream
 * (stream.cl). Logit loads, scaling, the three noises and their bounds,
 * the per-token considers, and the group reductions the kernels share.
 * No kernel: each program holds only the kernels of its own root file.
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
 */

#include "stream.cl"
#include "detmath.cl"
#include "vecmath.cl"
#include "groups.cl"
#include "shuffle.cl"

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
/* 1: the sampler variant that applies filter.cl's per-row thresholds; the
 * default variant has no trace of them (their compare cost 5-20% on the
 * H200). */
#ifndef PSR_FILTERS
#define PSR_FILTERS 0
#endif

/* 1 (the host sets it on CPU devices): every barrier outside run-time
 * conditions. A compiler that runs a work-group as loops over its
 * work-items (PoCL) copies the code after a barrier under a condition
 * once per path, and compiles the copies at the kernel's first launch.
 * A step with barriers goes under `if (PSR_FLAT_BARRIERS || cond)` and
 * acts on its result only where `cond` holds; an early return before a
 * barrier is `if (!PSR_FLAT_BARRIERS && cond) return`, and the group then
 * runs on doing nothing; but a return before the kernel's first barrier,
 * for a group that has nothing at all to do, costs no copy and stays. A
 * constant, so the other devices build the code they had. Same results
 * either way. */
#ifndef PSR_FLAT_BARRIERS
#define PSR_FLAT_BARRIERS 0
#endif

/* Group reductions by warp shuffles (shuffle.cl) where the device has
 * them and groups are whole warps: each warp reduces in registers, then
 * its first work-item hands the warp's result over in local memory; two
 * barriers instead of one per halving. Results are the same: (value,
 * index) pairs are totally ordered, and the maximum of values does not
 * depend on the order. */
#if PSR_NV_SHUFFLE && PSR_WG_SIZE % 32 == 0 && PSR_WG_SIZE >= 64
#define PSR_WARP_REDUCE 1
#define PSR_WARPS (PSR_WG_SIZE / 32)
/* `T name(T mine, uint lid, __local T *l)`: the group's largest `mine`
 * (by `maxf`) in every work-item; l is free again when it returns. */
#define PSR_DEFINE_WARP_MAX(name, T, shfl, maxf)                                                  \
    inline T name(T mine, uint lid, __local T *l)                                                 \
    {                                                                                             \
        for (uint d = 16; d > 0; d >>= 1)                                                         \
            mine = maxf(mine, shfl(mine, d));                                                     \
        if (lid % 32 == 0)                                                                        \
            l[lid / 32] = mine;                                                                   \
        barrier(CLK_LOCAL_MEM_FENCE);                                                             \
        T top = l[0];                                                                             \
        for (uint w = 1; w < PSR_WARPS; w++)                                                      \
            top = maxf(top, l[w]);                                                                \
        barrier(CLK_LOCAL_MEM_FENCE);                                                             \
        return top;                                                                               \
    }
#else
#define PSR_WARP_REDUCE 0
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
#define PSR_ROW_BAD_SHARD 32u

/* An fp32 value as an unsigned integer of the same order. */
inline uint psr_ordered(float v)
{
    if (v == 0.0f)
        v = 0.0f; /* -0 equals +0 everywhere else: the lowest index must win */
    uint b = as_uint(v);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

/* The fp32 value of psr_ordered's integer. */
inline float psr_unordered(uint o)
{
    return as_float((o & 0x80000000u) ? (o & 0x7fffffffu) : ~o);
}

/* A value as a shard's key for a reduction by maximum: an unsigned integer
 * of the same order, 0 only for one NaN pattern (0: the shard does not
 * hold the token, read back as that NaN). -0 keeps its sign, so
 * psr_unordered gives back the very bits. */
inline uint psr_value_key(float v)
{
    uint b = as_uint(v);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

#if PSR_WITH_FP64
/* A double as an unsigned integer of the same order (-0 as +0). */
inline ulong psr_ordered_d(double v)
{
    ulong b = as_ulong(v == 0.0 ? 0.0 : v);
    return (b >> 63) ? ~b : (b | 0x8000000000000000UL);
}

/* The double of psr_ordered_d's integer. */
inline double psr_unordered_d(ulong o)
{
    return as_double((o >> 63) ? (o & 0x7fffffffffffffffUL) : ~o);
}
#endif

/* A score as psr_shard_record.value: the order of the scores, as an
 * unsigned integer (fp32 scores in the high half). */
inline ulong psr_record_value(psr_acc_t v)
{
#if USE_FP64
    return psr_ordered_d(v);
#else
    return (ulong)psr_ordered(v) << 32;
#endif
}

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
#if PSR_INT64_ATOMICS
#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable
#endif
/* PSR_ROW_WORDS: fp32 scores, which fit a key with their index. (The
 * sampler also gathers fp64 scores, two words a slot: gumbel.cl.) */
#if PSR_INT64_ATOMICS && !USE_FP64
#define PSR_ROW_WORDS 1

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

#if PSR_WARP_REDUCE
PSR_DEFINE_WARP_MAX(psr_warp_group_max_ul, ulong, psr_shfl_down_ul, max)
#endif

/* The largest of `groups` keys (psr_best_key) that groups of this
 * launch stored in keys, in every work-item (each reads some of them: one
 * work-item's volatile loads go one after another); every work-item must
 * call it. */
inline ulong psr_largest_key(__global const ulong *keys, uint groups, uint lid, __local ulong *lk)
{
    ulong best = 0; /* below every key */
    for (uint g = lid; g < groups; g += PSR_WG_SIZE)
        best = max(best, *(volatile __global const ulong *)(keys + g));
#if PSR_WARP_REDUCE
    return psr_warp_group_max_ul(best, lid, lk);
#else
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
#endif
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
/* The three noises by name: a sampler variant takes one at build time
 * (psr_noise below), the filters' draw from a list at run time
 * (filter.cl). */
#if PSR_WITH_FP64
inline double psr_noise_fp64(uint2 w)
{
    double u = psr_u64(w.x, w.y);
#if PSR_DETERMINISTIC
    return -psr_det_log_d(-psr_det_log_d(u));
#else
    return -log(-log(u));
#endif
}
#endif

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
inline float psr_noise_wide(uint2 w)
{
    return -psr_det_log(psr_wide_e(w));
}

inline float psr_noise_fp32(uint2 w)
{
    float u = psr_u32(w.x);
#if PSR_DETERMINISTIC
    return -psr_det_log(-psr_det_log1p_neg(u));
#else
    return -native_log(-log1p(-u));
#endif
}

/* Upper bounds on the three noises from their words (above), by name as
 * the noises are. */
#if PSR_WITH_FP64
inline double psr_noise_bound_fp64(uint2 w)
{
    ulong bits = ((ulong)w.y << 32) | (ulong)w.x;
    ulong rest = ~bits; /* 2^64 - 1 - bits */
    if (rest < 4096)
        return INFINITY; /* u rounds to (nearly) 1: no cheap bound */
    int e = 63 - (int)clz(rest - 2048) - 64; /* 1 - u >= 2^e */
    return -(double)e * 0x1.62e42fefa39efp-1 + 1e-6;
}
#endif
inline float psr_noise_bound_wide(uint2 w)
{
    ulong rest = ~(((ulong)w.y << 32) | (ulong)w.x) + 1UL; /* 2^64 - bits (0 for bits = 0) */
    return (float)(1 + (int)clz(rest)) * 0x1.62e430p-1f + 1e-3f;
}
inline float psr_noise_bound_fp32(uint2 w)
{
    /* Straight from the word, s = the folded int of u32(): u >= s * 2^-32
     * >= 2^(-1 - clz(s)), a few operations cheaper than reading the
     * exponent of u (measured: 3-4% at large batch on the H200). */
    int s = as_int(w.x);
    uint folded = (uint)(s < 0 ? ~s : s);
    return (float)(1 + (int)clz(folded)) * 0x1.62e430p-1f + 1e-3f;
}

/* The variant's noise and its bound. */
#if USE_FP64
inline double psr_noise_bound(uint2 w)
{
    return psr_noise_bound_fp64(w);
}
inline double psr_noise(uint2 w)
{
    return psr_noise_fp64(w);
}
#elif USE_WIDE
inline float psr_noise_bound(uint2 w)
{
    return psr_noise_bound_wide(w);
}
inline float psr_noise(uint2 w)
{
    return psr_noise_wide(w);
}
#else
inline float psr_noise_bound(uint2 w)
{
    return psr_noise_bound_fp32(w);
}
inline float psr_noise(uint2 w)
{
    return psr_noise_fp32(w);
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

#if PSR_WARP_REDUCE
inline psr_acc_t psr_shfl_down_acc(psr_acc_t v, uint delta)
{
#if USE_FP64
    return as_double(psr_shfl_down_ul(as_ulong(v), delta));
#else
    return psr_shfl_down_f(v, delta);
#endif
}

PSR_DEFINE_WARP_MAX(psr_warp_group_max_acc, psr_acc_t, psr_shfl_down_acc, fmax)

/* The warp's best (value, index) in its lane 0. */
inline void psr_warp_best(psr_acc_t *v, uint *i)
{
    for (uint d = 16; d > 0; d >>= 1) {
        psr_acc_t ov = psr_shfl_down_acc(*v, d);
        uint oi = psr_shfl_down(*i, d);
        if (psr_better(ov, oi, *v, *i)) {
            *v = ov;
            *i = oi;
        }
    }
}
#endif

/* Reduces (value, index) pairs over the work-group; the result is in slot 0. */
inline void psr_reduce_best(__local psr_acc_t *lv, __local uint *li, uint lid)
{
#if PSR_WARP_REDUCE
    psr_acc_t v = lv[lid];
    uint i = li[lid];
    psr_warp_best(&v, &i);
    barrier(CLK_LOCAL_MEM_FENCE); /* every slot read before the warps' results go in */
    if (lid % 32 == 0) {
        lv[lid / 32] = v;
        li[lid / 32] = i;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) {
        for (uint w = 1; w < PSR_WARPS; w++) {
            if (psr_better(lv[w], li[w], v, i)) {
                v = lv[w];
                i = li[w];
            }
        }
        lv[0] = v;
        li[0] = i;
    }
#else
    for (uint s = PSR_WG_SIZE / 2; s > 0; s >>= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < s && psr_better(lv[lid + s], li[lid + s], lv[lid], li[lid])) {
            lv[lid] = lv[lid + s];
            li[lid] = li[lid + s];
        }
    }
#endif
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* The largest `mine` over the work-group; every work-item must call it
 * (a uniform condition), and lv is free again when it returns. */
inline psr_acc_t psr_group_max(__local psr_acc_t *lv, psr_acc_t mine, uint lid)
{
#if PSR_WARP_REDUCE
    return psr_warp_group_max_acc(mine, lid, lv);
#else
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
#endif
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
    psr_acc_t floor; /* a value some token of this row reaches: anything
                        whose bound is below it cannot win */
    float skip_below; /* vector path: logits below it cannot reach the floor
                         or are filtered out */
    float shift;     /* race over logits: the group's largest scaled logit */
    uint base;       /* global id of token 0 (a shard's first token; noise uses global ids) */
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

#endif

/* Folds token i with logit x into the running (best, best_i): the race's
 * score p / E as p * (1/E) (fp64: in double), or Gumbel-max's logit plus
 * noise. Tokens go in increasing order, so a strict > keeps the lowest
 * index on ties; NaN never wins. A scaled logit below `cut` (filter.cl's
 * threshold) is filtered out; greedy rows of Gumbel-max ignore it, as the
 * argmax is always kept. */
inline void psr_consider_cut(const psr_row *row, float x, uint i, psr_acc_t *best, uint *best_i,
                             float cut)
{
    if (isnan(x))
        return;
    psr_acc_t v;
#if PSR_METHOD != 0
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
        uint2 w = psr_token_words(row->key, row->base + i);
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
#else
    if (row->greedy || isinf(x)) {
        v = x;
    } else {
        float xf = psr_scale(x, row->t, row->r);
#if PSR_FILTERS
        if (xf < cut)
            return;
#endif
        psr_acc_t xs = (psr_acc_t)xf;
        uint2 w = psr_token_words(row->key, row->base + i);
        /* Exact pruning: skip the logs of a token that cannot win. */
        if (xs + psr_noise_bound(w) < row->floor)
            return;
        v = xs + psr_noise(w);
    }
#endif
    if (v > *best) {
        *best = v;
        *best_i = i;
    }
}

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
/* Logits i .. i + PSR_VEC - 1 as floats. */
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

/* A logit below the returned value scales (psr_vscale, t > 0) to below
 * s, by a margin far above the rounding of the scale, of this product and
 * of a sum with s's terms (`size`: their magnitudes). */
inline float psr_raw_below(psr_acc_t s, psr_acc_t size, float t)
{
    return (float)((s - ((psr_acc_t)1 + size) * (psr_acc_t)0x1p-12) * t);
}

/* The race's 32-bit noises: a weight p scores at most p * 2^k * 1.001,
 * k at most 33 (classic) or 65 (wide); fp64's k has no such bound. */
#define PSR_RACE_K_MAX (USE_WIDE ? 65 : 33)
#define PSR_RACE_SKIPS (PSR_METHOD != 0 && !USE_FP64)

#if PSR_RACE_SKIPS
/* The raw input below which the race's weight p (the scaled logit less
 * the group's shift, through exp; or the probability itself) has
 * p * 2^PSR_RACE_K_MAX * 1.001 < 2^e <= f, e = ilogb(f): in logs for
 * logits, less 2e-3 (ln 1.001 < 1e-3, and the exp's rounding) and the
 * scale's margin; for probabilities, 0.99 of the power of two. */
inline float psr_race_raw_below(const psr_row *row, float f)
{
    int e = ilogb(f) - PSR_RACE_K_MAX;
#if PSR_METHOD == 2
    (void)row;
    return ldexp(0.99f, e);
#else
    float room = (float)e * 0x1.62e430p-1f - 2e-3f;
    return psr_raw_below(row->shift + room, fabs(row->shift) + fabs(room), row->t);
#endif
}
#endif

/* Raises the row's floor to v, and with it skip_below: a logit below it
 * has psr_vscale(x) + PSR_NOISE_MAX < floor, or, for the race with
 * 32-bit noise, a weight that cannot reach the floor however small its
 * variate. */
inline void psr_raise_floor(psr_row *row, psr_acc_t v)
{
    row->floor = fmax(row->floor, v);
    psr_acc_t f = row->floor;
#if PSR_METHOD == 0
    if (isfinite(f) && !row->greedy)
        row->skip_below = fmax(row->skip_below, psr_raw_below(f - PSR_NOISE_MAX, fabs(f) + PSR_NOISE_MAX, row->t));
#elif PSR_RACE_SKIPS
    if (isfinite(f) && f > 0.0f && !row->greedy)
        row->skip_below = fmax(row->skip_below, psr_race_raw_below(row, f));
#else
    (void)f;
#endif
}

/* Whether some lane of the logits x may win: false only where the
 * floor or the filters' cut rules every lane out, before any scaling,
 * exp (and the call psr_consider_vec costs). Greedy rows, and the race
 * with fp64 noise, always look. */
inline bool psr_vmay_win(const psr_row *row, psr_vfloat x)
{
#if PSR_METHOD == 0 || PSR_RACE_SKIPS
    return row->greedy || psr_vany_at_least(x, row->skip_below);
#else
    (void)row, (void)x;
    return true;
#endif
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
        float top = psr_vmax_finite(p); /* weights: never NaN */
        if (!(top > 0.0f))
            return;
#if !USE_FP64
        if ((psr_acc_t)ldexp(top, PSR_RACE_K_MAX) * (psr_acc_t)1.001f < row->floor)
            return;
#endif
        psr_vuint w1, w0 = psr_vtoken_words(row->key, (psr_vuint)(row->base + i) + PSR_LANE_IDS, &w1);
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
        psr_raise_floor(row, psr_vmax_acc(v));
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
        float top = psr_vmax_finite(xs); /* NaN lanes are dead: -inf */
        /* a block of filtered (or -inf) lanes never wins, even before the
         * floor rises above -inf */
        if (!(top > -INFINITY) || top + PSR_NOISE_MAX < row->floor)
            return;
        psr_vuint w1, w0 = psr_vtoken_words(row->key, (psr_vuint)(row->base + i) + PSR_LANE_IDS, &w1);
        psr_vacc xa = psr_to_vacc(xs);
        if (psr_vmax_acc(xa + psr_vnoise_bound(w0, w1)) < row->floor) /* PoCL's any() goes lane by lane */
            return;
        v = xa + psr_vnoise(w0, w1); /* an infinite xs stays itself */
        psr_raise_floor(row, psr_vmax_acc(v));
    }
    psr_keep_better(v, i, best, best_i); /* never for a NaN or filtered lane */
}
#endif

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
