/* Per-request logit filters (min-p, top-k, top-p) as one threshold per
 * row: psr_gumbel_sample then treats a scaled logit below it as -inf.
 *
 * The filters work on s = logit / T exactly as psr_gumbel_sample scales
 * it (psr_scale), in the order min-p, top-k, top-p; every token kept has
 * s >= threshold. No sort: top-k and top-p are searches over the 32-bit
 * order-preserving key of s (psr_ordered). Top-p weighs each token by
 * q = floor(e^(s - max) * 2^32), summed in 64-bit integers, so its result
 * does not depend on the order of the sums and lib/oracle/filter.c gets
 * the same bits.
 *
 * Up to three kernels with many work-groups per row, so that a few rows
 * still fill the device; the last group of a row to finish a pass does
 * the row's remaining work, which saves a launch per pass (lib/ops/filter.c
 * enqueues them). On the vector path (CPU devices) top-k rows with a
 * small k finish in the scan instead (psr_filter_stream, below):
 *   psr_filter_scan     the row's largest key and, with top-k, a histogram
 *                       of the keys' top 12 bits (counts). The row's last
 *                       group finds the bin that holds the k-th largest
 *                       key, or for a min-p-only row writes the threshold.
 *   psr_filter_collect  top-k rows: every key at or above that bin (and
 *                       the min-p cut) into a candidate list; the row's
 *                       last group then finds the exact threshold among
 *                       them: by counting for up to 512, else by radix
 *                       search (8 bits a pass), over the whole row when
 *                       the list overflowed. Rows with top-p but no
 *                       top-k: a histogram of masses by distance below
 *                       the row's max (psr_filter_mbin).
 *   psr_filter_collect_mass  rows with top-p alone: the bin where the
 *                       mass from the top reaches p, the keys at or above
 *                       it, and the same exact search in the last group,
 *                       by counting among that bin's keys alone.
 * Data that crosses work-groups is written with atomics and read with
 * volatile loads; a group fences its writes before it counts itself done.
 * Output, two floats per row: the threshold, -inf (nothing removed), NaN
 * (a bad top_p or min_p: the sampler flags the row) or the value; then
 * 1 when the search's last group also sampled the row (below), -n when
 * the row's n candidates hold every kept token and the sampler is to
 * draw from them (GPUs, below), else 0.
 *
 * Sampling from the list: when the kept tokens all lie in a short
 * candidate list (at most `direct_max`, given the sampler's outputs), the
 * row's token is drawn from them, the same Gumbel-max values and tie rule
 * as psr_gumbel_sample over the whole row: reading every logit for a few
 * hundred survivors would be wasted. The last group draws it and the
 * sampler skips the row; but off the vector path, for top-p alone (pass
 * 3, long lists), the sampler's groups split the list among them instead
 * (psr_consider_list), as they split a row, and pass 3 carries no noise.
 *
 * State between the kernels, zero between launches (each row's last
 * group clears it): state[4 * row] the largest key + 1 seen (0: none),
 * [4 * row + 1] the candidate count, [4 * row + 2] the groups done, [4 *
 * row + 3] the lowest key a top-k candidate can have; hist[row] 4096
 * counts, or 2048 low then 2048 high words of masses. A row's candidates
 * are `cap` keys, then the `cap` token ids of the same entries. */

#include "tokens.cl"

#define PSR_FILTER_BINS 256                  /* one radix pass: 8 bits */
#define PSR_FILTER_HSHIFT 20
#define PSR_FILTER_MBINS 2048                /* top-p's histogram of masses */
#define PSR_FILTER_MSPAN 22.25f              /* past it below the max, a mass is 0 (2^-32 at 22.18) */
#define PSR_FILTER_GCAP 1024                 /* candidates a group gathers in local memory */
#define PSR_FILTER_STATE 4                   /* state words per row */

/* The noise and stream of the rows a filter draws from their lists (the
 * only code that reads them): with PSR_FILTER_NOISE_ARGS=1 (CPUs) the
 * call's parameters (PSR_FILTER_NOISE_* in psr_shared.h), else the
 * variant's own, built in. */
#ifndef PSR_FILTER_NOISE_ARGS
#define PSR_FILTER_NOISE_ARGS 0
#endif
#if PSR_FILTER_NOISE_ARGS
#define PSR_FILTER_NOISE_OF(p) (p).noise
#define PSR_FILTER_DRAFTING_OF(p) (p).drafting
#else
#define PSR_FILTER_NOISE_OF(p) \
    (USE_FP64 ? PSR_FILTER_NOISE_FP64 : USE_WIDE ? PSR_FILTER_NOISE_WIDE : PSR_FILTER_NOISE_FP32)
#define PSR_FILTER_DRAFTING_OF(p) IS_DRAFTING
#endif

/* The Gumbel-max score of a listed token (the scaled logit its key gives
 * back, plus its noise), as the sampler adds them (psr_consider_cut), in
 * *k as an unsigned key of the same order (ties equal: -0 and +0 give
 * one key); false for a score of -inf, which never wins. */
inline bool psr_filter_score(uint key, uint2 w, uint noise, ulong *k)
{
    float s = psr_unordered(key);
#if PSR_WITH_FP64
    if (noise == PSR_FILTER_NOISE_FP64) {
        double v = (double)s + psr_noise_fp64(w);
        *k = psr_ordered_d(v);
        return v > -INFINITY;
    }
#endif
    float v = s + (noise == PSR_FILTER_NOISE_WIDE ? psr_noise_wide(w) : psr_noise_fp32(w));
    *k = (ulong)psr_ordered(v) << 32;
    return v > -INFINITY;
}

/* Whether a candidate (key, words w) may beat the best so far (best,
 * best_i): the score's upper bound (the noise's bound) is not below the
 * best's score. A tie is kept: the lower id may win it. Its noise's logs
 * are then needed; most candidates of a row need only their words. */
inline bool psr_filter_may_beat(uint key, uint2 w, uint noise, ulong best, uint best_i)
{
    if (best_i == 0xffffffffu)
        return true;
    float s = psr_unordered(key);
#if PSR_WITH_FP64
    if (noise == PSR_FILTER_NOISE_FP64)
        return !((double)s + psr_noise_bound_fp64(w) < psr_unordered_d(best));
#endif
    float b = noise == PSR_FILTER_NOISE_WIDE ? psr_noise_bound_wide(w) : psr_noise_bound_fp32(w);
    return !(s + b < psr_unordered((uint)(best >> 32)));
}

/* Does (k, id) beat the best so far? A larger score, then the lower id. */
inline bool psr_filter_beats(ulong k, uint id, ulong best, uint best_i)
{
    return best_i == 0xffffffffu || k > best || (k == best && id < best_i);
}

/* Candidate (key, id) of a list into the draw's best (*best, *best_i):
 * its logs only where its bound may beat the best. */
inline void psr_filter_take(uint key, uint id, uint row_key, uint noise, ulong *best, uint *best_i)
{
    uint2 w = psr_token_words(row_key, id);
    ulong k;
    if (psr_filter_may_beat(key, w, noise, *best, *best_i) && psr_filter_score(key, w, noise, &k) &&
        psr_filter_beats(k, id, *best, *best_i)) {
        *best = k;
        *best_i = id;
    }
}

/* A row's output: its threshold and whether its token is already drawn
 * (sampled), or how many candidates the sampler is to draw it from. */
inline void psr_filter_set_listed(__global float *thresholds, uint row, float cut, bool sampled, uint listed)
{
    vstore2((float2)(cut, sampled ? 1.0f : -(float)listed), row, thresholds);
}

inline void psr_filter_set(__global float *thresholds, uint row, float cut, bool sampled)
{
    psr_filter_set_listed(thresholds, row, cut, sampled, 0);
}

/* The scaled logit of token i, as psr_consider computes it (NaN stays NaN). */
inline float psr_filter_scaled(__global const psr_logit_t *src, uint i, float t, float r)
{
    float x = psr_load_logit(src, i);
    return (isnan(x) || isinf(x)) ? x : psr_scale(x, t, r);
}

/* The weight of a token in the search: 1 (counts) or its fixed-point mass. */
inline ulong psr_filter_weight(float s, float m, bool mass)
{
    if (!mass)
        return 1;
    float e = isinf(m) ? (s == m ? 1.0f : 0.0f) : psr_det_exp_neg(s - m);
    /* the same value as (ulong)(e * 2^32): below 2^32 the 32-bit
     * conversion is exact and cheaper */
    return e < 1.0f ? (ulong)(uint)(e * 0x1p32f) : (ulong)(e * 0x1p32f);
}

/* Top-p's bin of a scaled logit s: PSR_FILTER_MBINS - 1 for the max m,
 * then bins of equal width by d = m - s, 0 past PSR_FILTER_MSPAN. Any
 * order-preserving bins give the same threshold (the search is exact);
 * these spread a row's tokens over many bins, where the 11 top bits of
 * the keys put most of them in a few, and so the last group's search
 * looks at one narrow bin and the local atomics seldom collide. */
inline uint psr_filter_mbin(float s, float m)
{
    float d = s == m ? 0.0f : m - s; /* m = s = +inf: 0, not NaN; s <= m */
    /* d * scale rounded to an integer by adding 2^23 (an fma rounds once,
     * so j grows with d): cheaper than a float-to-integer conversion */
    uint j = as_uint(fma(d, (float)(PSR_FILTER_MBINS - 1) / PSR_FILTER_MSPAN, 0x1p23f)) - as_uint(0x1p23f);
    uint b = PSR_FILTER_MBINS - 1 - min(j, (uint)PSR_FILTER_MBINS - 2);
    return d < PSR_FILTER_MSPAN ? b : 0; /* past the span, NaN and -inf: 0 */
}

/* The smallest key whose value lies in bin b or above (b <= the max's
 * bin; psr_filter_mbin grows with the key): from the key of the bin's
 * lower edge, a step or two up or down to the exact one; by bisection
 * where that takes longer (never on finite rows seen so far). */
inline uint psr_filter_mbin_low(uint b, float m)
{
    uint lo = psr_ordered(-INFINITY), hi = psr_ordered(m);
    if (b == 0)
        return lo;
    float w = PSR_FILTER_MSPAN / (float)(PSR_FILTER_MBINS - 1);
    uint k = clamp(psr_ordered(m - ((float)(PSR_FILTER_MBINS - 1 - b) + 0.5f) * w), lo, hi);
    for (int i = 0; i < 8 && k > lo && psr_filter_mbin(psr_unordered(k - 1), m) >= b; i++)
        k--;
    for (int i = 0; i < 8 && psr_filter_mbin(psr_unordered(k), m) < b; i++)
        k++;
    if (psr_filter_mbin(psr_unordered(k), m) >= b &&
        (k == lo || psr_filter_mbin(psr_unordered(k - 1), m) < b))
        return k;
    while (lo < hi) {
        uint mid = lo + (hi - lo) / 2;
        if (psr_filter_mbin(psr_unordered(mid), m) >= b)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* Does cumulative weight `cum` reach the target? counts: cum >= want;
 * mass: (float)cum >= goal (both exact functions of integers). */
inline bool psr_filter_reached(ulong cum, bool mass, ulong want, float goal)
{
    return mass ? (float)cum >= goal : cum >= want;
}

/* Adds a 64-bit weight to a bin kept as two 32-bit words; each carry is
 * counted once however the adds interleave. A macro because OpenCL 1.2
 * has no pointer that takes both local and global memory. */
#define PSR_FILTER_ADD64(lo, hi, w)                                                               \
    do {                                                                                           \
        uint wlo_ = (uint)(w), whi_ = (uint)((w) >> 32);                                           \
        if (wlo_ && atomic_add((lo), wlo_) > ~wlo_)                                                \
            whi_++;                                                                                \
        if (whi_)                                                                                  \
            atomic_add((hi), whi_);                                                                \
    } while (0)

inline void psr_filter_add_local(__local uint *lo, __local uint *hi, ulong w)
{
    PSR_FILTER_ADD64(lo, hi, w);
}

inline void psr_filter_add_global(__global uint *lo, __global uint *hi, ulong w)
{
    PSR_FILTER_ADD64(lo, hi, w);
}

inline ulong psr_filter_bin(__local const uint *hlo, __local const uint *hhi, bool wide, uint b)
{
    return wide ? ((ulong)hhi[b] << 32) | hlo[b] : hlo[b];
}

/* Suffix sums over the work-items' segments of `nbins` local bins: on
 * return seg[j] is the weight of segments j and above, and every
 * work-item gets the total. */
inline ulong psr_filter_suffix(__local const uint *hlo, __local const uint *hhi, bool wide,
                               uint nbins, __local ulong *seg)
{
    uint lid = get_local_id(0);
    uint per = (nbins + PSR_WG_SIZE - 1) / PSR_WG_SIZE;
    ulong mine = 0;
    for (uint j = 0; j < per; j++) {
        uint b = lid * per + j;
        if (b < nbins)
            mine += psr_filter_bin(hlo, hhi, wide, b);
    }
    seg[lid] = mine;
    for (uint s = 1; s < PSR_WG_SIZE; s <<= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        ulong add = lid + s < PSR_WG_SIZE ? seg[lid + s] : 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        seg[lid] += add;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    return seg[0];
}

/* After psr_filter_suffix, with base + total reaching the target: the
 * bin b where base + weight(bins >= b) reaches it and base + weight(bins
 * > b) does not. pick[0] = b, pick[1..2] = the latter weight. */
inline void psr_filter_cross(__local const uint *hlo, __local const uint *hhi, bool wide,
                             uint nbins, ulong base, bool mass, ulong want, float goal,
                             __local const ulong *seg, __local uint *pick)
{
    uint lid = get_local_id(0);
    uint per = (nbins + PSR_WG_SIZE - 1) / PSR_WG_SIZE;
    ulong after = lid + 1 < PSR_WG_SIZE ? seg[lid + 1] : 0;
    if (psr_filter_reached(base + seg[lid], mass, want, goal) &&
        !psr_filter_reached(base + after, mass, want, goal)) {
        ulong cum = base + after;
        for (int j = (int)per - 1; j >= 0; j--) {
            uint b = lid * per + (uint)j;
            if (b >= nbins)
                continue;
            ulong here = psr_filter_bin(hlo, hhi, wide, b);
            if (psr_filter_reached(cum + here, mass, want, goal)) {
                pick[0] = b;
                pick[1] = (uint)cum;
                pick[2] = (uint)(cum >> 32);
                break;
            }
            cum += here;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* The largest key K >= floor_key such that the weight of the tokens with
 * key >= K reaches the target; floor_key when the whole set falls short
 * (top-k with fewer than k tokens). The set is the row's tokens (keys ==
 * 0) or the candidate keys keys[0 .. n), which other groups wrote. Mass mode sets the goal
 * from the set's total, p * total, unless `total_in` gives the total.
 * Uniform control flow: every work-item calls it. With PSR_FLAT_BARRIERS
 * a set that falls short still runs the passes, over nothing. */
inline uint psr_filter_search(__global const psr_logit_t *src, float t, float r,
                              volatile __global const uint *keys, uint n, float m, uint floor_key,
                              bool mass, ulong want, float p, ulong total_in,
                              __local uint *hlo, __local uint *hhi, __local ulong *seg,
                              __local uint *pick)
{
    uint lid = get_local_id(0);
    uint prefix = 0;
    ulong base = 0; /* weight of the tokens above the current prefix */
    float goal = 0.0f;
    bool short_set = false;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (uint b = lid; b < PSR_FILTER_BINS; b += PSR_WG_SIZE)
            hlo[b] = hhi[b] = 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint i = lid; i < (short_set ? 0 : n); i += PSR_WG_SIZE) {
            uint key;
            float s;
            if (keys) {
                key = keys[i];
                s = psr_unordered(key);
            } else {
                s = psr_filter_scaled(src, i, t, r);
                if (isnan(s))
                    continue;
                key = psr_ordered(s);
            }
            if (key < floor_key || (shift < 24 && (key >> (shift + 8)) != prefix))
                continue;
            psr_filter_add_local(&hlo[(key >> shift) & 0xffu], &hhi[(key >> shift) & 0xffu],
                                 psr_filter_weight(s, m, mass));
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        ulong total = psr_filter_suffix(hlo, hhi, true, PSR_FILTER_BINS, seg);
        if (shift == 24) {
            goal = p * (float)(total_in ? total_in : total);
            short_set = !psr_filter_reached(total, mass, want, goal);
            if (!PSR_FLAT_BARRIERS && short_set)
                return floor_key; /* uniform: every work-item sees the same total */
        }
        psr_filter_cross(hlo, hhi, true, PSR_FILTER_BINS, base, mass, want, goal, seg, pick);
        prefix = (prefix << 8) | pick[0];
        base = ((ulong)pick[2] << 32) | pick[1];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    return short_set ? floor_key : max(prefix, floor_key);
}

/* The same result as psr_filter_search over keys[0 .. n) in local
 * memory, by counting instead of radix passes: each key's weight from
 * the top is summed directly, n per key. Few barriers, so it is the
 * faster one for short lists (n <= PSR_FILTER_RANK_MAX). w holds n
 * weights. `base`: the weight of the set's tokens above every listed key
 * (0: the list is the whole set). */
#define PSR_FILTER_RANK_MAX 512

inline uint psr_filter_rank_search(__local const uint *keys, uint n, float m, uint floor_key,
                                   bool mass, ulong want, float p, ulong total_in, ulong base,
                                   __local ulong *w, __local ulong *seg, __local uint *pick)
{
    uint lid = get_local_id(0);
    ulong mine = 0;
    for (uint c = lid; c < n; c += PSR_WG_SIZE) {
        uint key = keys[c];
        ulong wc = key < floor_key ? 0 : psr_filter_weight(psr_unordered(key), m, mass);
        w[c] = wc;
        mine += wc;
    }
    seg[lid] = mine;
    if (lid == 0)
        pick[0] = 0; /* the answer's key + 1 */
    for (uint s = PSR_WG_SIZE / 2; s > 0; s >>= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < s)
            seg[lid] += seg[lid + s];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    ulong total = base + seg[0];
    barrier(CLK_LOCAL_MEM_FENCE); /* read by all before the next call writes seg */
    float goal = p * (float)(total_in ? total_in : total);
    bool reached = psr_filter_reached(total, mass, want, goal);
    if (!PSR_FLAT_BARRIERS && !reached)
        return floor_key; /* uniform: every work-item sees the same total */
    for (uint c = lid; c < (reached ? n : 0); c += PSR_WG_SIZE) {
        uint key = keys[c];
        if (key < floor_key)
            continue;
        ulong cum = base; /* the weight of the keys >= this one (w is 0 below the floor) */
        for (uint j = 0; j < n; j++)
            cum += keys[j] >= key ? w[j] : 0;
        if (psr_filter_reached(cum, mass, want, goal))
            atomic_max(&pick[0], key + 1);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    uint found = pick[0] - 1; /* set: the smallest key's weight is the total */
    barrier(CLK_LOCAL_MEM_FENCE);
    return reached ? max(found, floor_key) : floor_key;
}

/* One row's filter settings, read alike by every kernel. `state`:
 * 0 nothing to do (threshold -inf), 1 bad values (NaN), 2 filter. */
typedef struct {
    int k;
    float p, mp, t, r;
    bool k_on, p_on, m_on;
    int state;
} psr_filter_row;

inline psr_filter_row psr_filter_row_get(uint row_id, uint vocab, __global const int *row_request,
                                         uint requests, __global const float *temperatures,
                                         __global const int *top_k, __global const float *top_p,
                                         __global const float *min_p, const psr_filter_params *all)
{
    psr_filter_row f;
    f.state = 0;
    f.k = 0;
    f.p = 1.0f;
    f.mp = 0.0f;
    f.t = 1.0f;
    f.r = 1.0f;
    f.k_on = f.p_on = f.m_on = false;
    int req = row_request ? row_request[row_id] : (int)row_id;
    if (req < 0 || req >= (int)requests)
        return f; /* padding or a bad index: the sampler decides */
    f.k = top_k ? top_k[req] : all->all_top_k;
    f.p = top_p ? top_p[req] : all->all_top_p;
    f.mp = min_p ? min_p[req] : all->all_min_p;
    f.t = temperatures[req];
    if (!(f.p > 0.0f && f.p <= 1.0f) || !(f.mp >= 0.0f && f.mp <= 1.0f)) {
        f.state = 1;
        return f;
    }
    f.k_on = f.k > 0 && (uint)f.k < vocab;
    f.p_on = f.p < 1.0f;
    f.m_on = f.mp >= FLT_MIN; /* below FLT_MIN min-p removes nothing that could be drawn */
    bool t_ok = isnormal(f.t) && f.t > 0.0f; /* greedy or a bad temperature: no filter */
    if (t_ok && (f.k_on || f.p_on || f.m_on))
        f.state = 2;
#if PSR_DETERMINISTIC
    if (f.state == 2)
        f.r = psr_temp_recip(f.t);
#endif
    return f;
}

/* The row's largest scaled logit from its state word (-inf: none). */
inline float psr_filter_max_of(uint mk)
{
    return mk ? psr_unordered(mk - 1) : -INFINITY;
}

inline float psr_filter_min_p_cut(const psr_filter_row *f, float m)
{
    return f->m_on ? m + psr_det_log(f->mp) : -INFINITY;
}

/* The parameters every filter kernel starts with (psr_filter_params in
 * psr_shared.h), and the names its functions take the rows' scalars by. */
#define PSR_FILTER_ROW_ARGS                                                                       \
    const psr_filter_params p, __global const psr_logit_t *logits, __global const int *row_request, \
        __global const float *temperatures, __global const int *top_k, __global const float *top_p, \
        __global const float *min_p
/* The filter kernels' scratch (psr_filter_params): one buffer argument,
 * as each costs the host time at every launch. */
#define PSR_FILTER_SCRATCH_UNPACK                                                                 \
    __global float *thresholds = (__global float *)scratch;                                        \
    __global uint *state = scratch + PSR_FILTER_AT_WORDS(p.state_at);                              \
    __global uint *hist = scratch + PSR_FILTER_AT_WORDS(p.hist_at);                                \
    __global uint *cand = p.cand_at == PSR_FILTER_NONE ? 0 : scratch + PSR_FILTER_AT_WORDS(p.cand_at)
#define PSR_FILTER_ROWS_UNPACK                                                                    \
    const ulong logits_offset = p.rows.logits_offset, row_stride = p.rows.row_stride;              \
    const uint vocab = p.rows.vocab, requests = p.rows.requests;                                   \
    const uint groups_per_row = p.rows.groups_per_row, chunk = p.rows.chunk

#define PSR_FILTER_ROW_GET(row_id)                                                                \
    psr_filter_row_get((row_id), vocab, row_request, requests, temperatures, top_k, top_p, min_p, &p)

/* The scaled logits of tokens i .. i + 3 and i + 4 * WG .. + 3: two
 * vector loads in flight per work-item (one load at a time leaves the
 * loop waiting on memory). NaN past `end` and for NaN logits. */
inline void psr_filter_load8(__global const psr_logit_t *src, uint i, uint end, bool aligned,
                             float t, float r, float *v)
{
    float4 x = psr_load4(src, i, end, aligned);
    float4 y = psr_load4(src, i + 4 * PSR_WG_SIZE, end, aligned);
    v[0] = x.s0, v[1] = x.s1, v[2] = x.s2, v[3] = x.s3;
    v[4] = y.s0, v[5] = y.s1, v[6] = y.s2, v[7] = y.s3;
    for (int q = 0; q < 8; q++)
        v[q] = (isnan(v[q]) || isinf(v[q])) ? v[q] : psr_scale(v[q], t, r);
}

#define PSR_FILTER_STEP (8 * PSR_WG_SIZE)

#if PSR_VEC_PATH
/* CPU devices (PSR_VEC): a work-item takes PSR_VEC tokens a step, scaled
 * and keyed as one vector, and goes lane by lane only where some lane
 * passes the pass's bound. */
#define PSR_FILTER_VSTEP (PSR_VEC * PSR_WG_SIZE)

/* psr_ordered + 1 of each lane's scaled logit; 0 for NaN. */
inline psr_vuint psr_filter_vkey1(psr_vfloat s)
{
    psr_vuint b = psr_as_vuint(select(s, (psr_vfloat)(0.0f), s == 0.0f));
    psr_vuint key = select(b | 0x80000000u, ~b, psr_as_vint(b) < 0);
    return select(key + 1u, (psr_vuint)(0u), isnan(s));
}

/* The keys + 1 of tokens i .. i + PSR_VEC - 1 (all inside the row). */
inline psr_vuint psr_filter_vload_keys1(__global const psr_logit_t *src, uint i, float t, float r)
{
    return psr_filter_vkey1(psr_vscale(psr_vload_logits(src, i), t, r));
}

inline uint psr_vmax_uint(psr_vuint v)
{
    uint8 m8 = max(v.lo, v.hi);
    uint4 m4 = max(m8.lo, m8.hi);
    uint2 m2 = max(m4.lo, m4.hi);
    return max(m2.x, m2.y);
}

/* The keys + 1 of tokens i .. min(i + PSR_VEC, end) - 1 (0 past the
 * end), and in *n how many there are. */
inline psr_vuint psr_filter_vkeys(__global const psr_logit_t *src, uint i, uint end, const psr_filter_row *f,
                                  uint *n)
{
    *n = min(end - i, (uint)PSR_VEC);
    if (*n == PSR_VEC)
        return psr_filter_vkey1(psr_vscale(psr_vload_logits(src, i), f->t, f->r));
    uint keys1[PSR_VEC];
    for (uint q = 0; q < PSR_VEC; q++) {
        float s = q < *n ? psr_filter_scaled(src, i + q, f->t, f->r) : NAN;
        keys1[q] = isnan(s) ? 0 : psr_ordered(s) + 1;
    }
    return psr_vload(0, keys1);
}

/* Pass 1's step on the vector path: the largest key + 1 into *mk and,
 * with top-k, a count for each key at or above `bound`. */
inline void psr_filter_vscan_step(__global const psr_logit_t *src, uint i, uint end, const psr_filter_row *f,
                                  bool k_on, uint bound, uint *mk, __local uint *lh)
{
    uint n;
    psr_vuint k1 = psr_filter_vkeys(src, i, end, f, &n);
    uint top = psr_vmax_uint(k1);
    *mk = max(*mk, top);
    if (!k_on || top <= bound)
        return; /* no lane at or above the bound (a NaN lane is 0) */
    uint keys1[PSR_VEC];
    psr_vstore(k1, 0, keys1);
    for (uint q = 0; q < n; q++)
        if (keys1[q] > bound)
            atomic_inc(&lh[(keys1[q] - 1) >> PSR_FILTER_HSHIFT]);
}

/* Top-k rows with k up to PSR_FILTER_STREAM_K stream in pass 1 (CPU
 * devices, where a work-group runs on one thread anyway): work-item 0 of
 * each group reads its chunk and keeps the candidates in a private list;
 * when the list fills, the bar rises to the k-th largest key it holds (at
 * least k of the row's keys reach it, so the row's k-th largest does too)
 * and what falls below is dropped. The row's last group then finishes the
 * row from the groups' lists (psr_filter_stream_finish), with no
 * histogram, no second pass and no barrier. */
#define PSR_FILTER_SLIST 1024

/* The k-th largest of keys[0 .. n) (1 <= k <= n): quickselect on a
 * copy (median-of-three pivots), about a quarter of what four radix
 * passes of 256 bins cost on lists of a few hundred keys. */
inline uint psr_filter_kth(const uint *keys, uint n, uint k)
{
    uint a[PSR_FILTER_SLIST];
    for (uint c = 0; c < n; c++)
        a[c] = keys[c];
    int lo = 0, hi = (int)n - 1, want = (int)(n - k); /* its index in ascending order */
    while (lo < hi) {
        uint x = a[lo], y = a[lo + (hi - lo) / 2], z = a[hi];
        uint pivot = max(min(x, y), min(max(x, y), z));
        int i = lo, j = hi;
        while (i <= j) {
            while (a[i] < pivot)
                i++;
            while (a[j] > pivot)
                j--;
            if (i <= j) {
                uint swap = a[i];
                a[i++] = a[j];
                a[j--] = swap;
            }
        }
        /* a[lo .. j] <= pivot <= a[i .. hi], and pivot between them */
        if (want <= j)
            hi = j;
        else if (want >= i)
            lo = i;
        else
            return a[want];
    }
    return a[want];
}

/* Keeps the entries with key >= bar; returns how many. */
inline uint psr_filter_keep(uint *keys, uint *ids, uint n, uint bar)
{
    uint kept = 0;
    for (uint c = 0; c < n; c++)
        if (keys[c] >= bar) {
            keys[kept] = keys[c];
            ids[kept++] = ids[c];
        }
    return kept;
}

/* A raw logit x below the value returned scales below s (the bar's
 * value): psr_scale's result lies within a few ulps of x / t, far inside
 * the 2^-16 margin, and |s|, t and s * t stay normal in the range
 * checked. -inf (skip nothing) outside that range. */
inline float psr_filter_raw_below(float s, float t)
{
    float a = fabs(s);
    if (!(a >= 0x1p-60f && a <= 0x1p60f && t >= 0x1p-60f && t <= 0x1p60f))
        return -INFINITY;
    float x = s * t;
    return x - fabs(x) * 0x1p-16f;
}

/* Pass 1 of a streaming row, by work-item 0 (`on`): the largest key + 1
 * into *mk, and the candidates into the row's list (st[1] counts them; a
 * list that ties kept more than half full adds cap + 1, so the finish
 * searches the whole row), the bar into st[3] (the smallest key the
 * row's list can miss). */
inline void psr_filter_stream(bool on, __global const psr_logit_t *src, uint start, uint end,
                              const psr_filter_row *f, uint *mk, __global uint *st, __global uint *rc, uint cap)
{
    if (!on)
        return;
    uint keys[PSR_FILTER_SLIST], ids[PSR_FILTER_SLIST], n = 0, bar = 0, k = (uint)f->k;
    /* The bar rises when the list passes `limit`: early for a small k, so
     * that it tracks the k-th largest so far and fewer steps pass it; the
     * limit doubles past a list that ties kept long. */
    uint limit = min((uint)(PSR_FILTER_SLIST - PSR_VEC), max(128u, 3 * k));
    bool over = false;
    uint row_mk = *mk;
    float raw_skip = -INFINITY; /* a step whose raw logits are all below it has no key at the bar */
    for (uint i = start; i < end; i += PSR_VEC) {
        /* Such a step cannot raise row_mk either: the bar is one of the keys
         * seen. Most steps skip once the bar has risen, so four are checked
         * at once first. */
        if (i + 4 * PSR_VEC <= end && !psr_vany_at_least(psr_vload_logits(src, i), raw_skip) &&
            !psr_vany_at_least(psr_vload_logits(src, i + PSR_VEC), raw_skip) &&
            !psr_vany_at_least(psr_vload_logits(src, i + 2 * PSR_VEC), raw_skip) &&
            !psr_vany_at_least(psr_vload_logits(src, i + 3 * PSR_VEC), raw_skip)) {
            i += 3 * PSR_VEC;
            continue;
        }
        if (i + PSR_VEC <= end && !psr_vany_at_least(psr_vload_logits(src, i), raw_skip))
            continue;
        uint lanes;
        psr_vuint k1 = psr_filter_vkeys(src, i, end, f, &lanes);
        uint top = psr_vmax_uint(k1);
        row_mk = max(row_mk, top);
        if (over || top <= bar)
            continue; /* no lane at or above the bar (keys + 1 > bar; a NaN lane is 0) */
        uint keys1[PSR_VEC];
        psr_vstore(k1, 0, keys1);
        for (uint q = 0; q < lanes; q++)
            if (keys1[q] > bar) {
                keys[n] = keys1[q] - 1;
                ids[n++] = i + q;
            }
        if (n > limit) {
            bar = psr_filter_kth(keys, n, k);
            n = psr_filter_keep(keys, ids, n, bar);
            over = n > PSR_FILTER_SLIST / 2;
            limit = min((uint)(PSR_FILTER_SLIST - PSR_VEC), max(limit, 2 * n));
            raw_skip = psr_filter_raw_below(psr_unordered(bar), f->t);
        }
    }
    *mk = row_mk;
    if (!over && n > k) { /* the finish's search is over these */
        bar = psr_filter_kth(keys, n, k);
        n = psr_filter_keep(keys, ids, n, bar);
    }
    uint at = atomic_add(&st[1], over ? cap + 1 : n);
    atomic_max(&st[3], bar);
    for (uint c = 0; !over && c < n && at + c < cap; c++) {
        psr_publish(&rc[at + c], keys[c]);
        psr_publish(&rc[cap + at + c], ids[c]);
    }
}

/* psr_filter_search by one work-item: the largest key K >= floor_key
 * whose tokens' weight (counts or masses) reaches the target, over the
 * list (n entries, keys) or the whole row (keys == 0, n = vocab). */
inline uint psr_filter_search_serial(__global const psr_logit_t *src, float t, float r,
                                     volatile __global const uint *keys, uint n, float m, uint floor_key,
                                     bool mass, ulong want, float p)
{
    uint prefix = 0;
    ulong base = 0;
    float goal = 0.0f;
    for (int shift = 24; shift >= 0; shift -= 8) {
        ulong bins[PSR_FILTER_BINS];
        for (uint b = 0; b < PSR_FILTER_BINS; b++)
            bins[b] = 0;
        ulong total = 0;
        for (uint c = 0; c < n; c++) {
            float s = keys ? psr_unordered(keys[c]) : psr_filter_scaled(src, c, t, r);
            if (isnan(s))
                continue;
            uint key = keys ? keys[c] : psr_ordered(s);
            if (key < floor_key || (shift < 24 && (key >> (shift + 8)) != prefix))
                continue;
            ulong w = psr_filter_weight(s, m, mass);
            bins[(key >> shift) & 0xffu] += w;
            total += w;
        }
        if (shift == 24) {
            goal = p * (float)total;
            if (!psr_filter_reached(total, mass, want, goal))
                return floor_key; /* the set falls short: nothing removed */
        }
        uint b = PSR_FILTER_BINS - 1;
        for (; b > 0 && !psr_filter_reached(base + bins[b], mass, want, goal); b--)
            base += bins[b];
        prefix = (prefix << 8) | b;
    }
    return max(prefix, floor_key);
}

/* A streaming row's thresholds over a list of at most PSR_FILTER_SHORT
 * keys: the keys at or above floor_key sorted once, largest first, then
 * top-k's cut (the k-th largest) and top-p's (the largest key whose mass
 * from the top reaches p of the total) by walking them; the values
 * psr_filter_search_serial's two searches find, without their radix
 * passes. */
#define PSR_FILTER_SHORT 256
inline uint psr_filter_short_search(volatile __global const uint *keys, uint n, const psr_filter_row *f, float m,
                                    uint floor_key)
{
    uint a[PSR_FILTER_SHORT], len = 0;
    for (uint c = 0; c < n; c++) {
        uint key = keys[c];
        if (key < floor_key || isnan(psr_unordered(key)))
            continue;
        uint j = len++;
        for (; j > 0 && a[j - 1] < key; j--)
            a[j] = a[j - 1];
        a[j] = key;
    }
    /* fewer than k keys: top-k removes nothing */
    uint cut = len < (uint)f->k ? floor_key : a[f->k - 1];
    if (!f->p_on)
        return cut;
    uint kept = min(len, (uint)f->k); /* and the keys tied with the k-th */
    while (kept < len && a[kept] == cut)
        kept++;
    len = kept;
    ulong w[PSR_FILTER_SHORT], total = 0;
    for (uint i = 0; i < len; i++)
        total += w[i] = psr_filter_weight(psr_unordered(a[i]), m, true);
    float goal = fmax(f->p, FLT_MIN) * (float)total;
    if (!psr_filter_reached(total, true, 0, goal))
        return cut;
    ulong cum = 0; /* reached within a run of equal keys: their key all the same */
    for (uint i = 0; i < len; i++) {
        cum += w[i];
        if (psr_filter_reached(cum, true, 0, goal))
            return a[i];
    }
    return cut;
}

/* Gumbel-max over the list's entries with key >= cut_key, as the sampler
 * would draw over the row (psr_filter_sample_list); 0xffffffff when no
 * score is above -inf. */
inline uint psr_filter_draw_serial(volatile __global const uint *keys, volatile __global const uint *ids, uint n,
                                   uint cut_key, uint row_key, uint noise)
{
    ulong best = 0;
    uint best_i = 0xffffffffu;
    for (uint c = 0; c < n; c++) {
        if (keys[c] >= cut_key)
            psr_filter_take(keys[c], ids[c], row_key, noise, &best, &best_i);
    }
    return best_i;
}
#endif

/* Does the row stream its top-k candidates in pass 1 (and so skip pass
 * 2)? Both kernels decide it from the row's filters alone. A macro, so
 * that on other devices pass 2 compiles to the code it had. */
#define PSR_FILTER_STREAMS(f) (PSR_VEC_PATH && (f).state == 2 && (f).k_on && (f).k <= PSR_FILTER_STREAM_K)

/* Pass 1's end in the row's last group (`last`): the bin that holds the
 * k-th largest key (state word 3), or for min-p-only rows the threshold.
 * Other groups wrote st and h: volatile reads go past any cache. With
 * PSR_FLAT_BARRIERS every group calls it, and only the last acts. */
inline void psr_filter_scan_last(bool last, const psr_filter_row *f, uint row_id, __global uint *st,
                                 __global uint *h, __global float *thresholds, __local uint *lh,
                                 __local ulong *seg, __local uint *pick)
{
    uint lid = get_local_id(0);
    volatile __global const uint *vst = st, *vh = h;
    bool k_last = last && f->k_on;
    if (PSR_FLAT_BARRIERS || k_last) {
        /* Other groups pass the barriers over no bins (uniform: `last`
         * and the filters hold for the whole group). */
        uint bins = k_last ? PSR_FILTER_HBINS : 0;
        for (uint b = lid; b < bins; b += PSR_WG_SIZE)
            lh[b] = vh[b];
        barrier(CLK_LOCAL_MEM_FENCE);
        ulong total = psr_filter_suffix(lh, lh, false, bins, seg);
        uint low = 0; /* fewer than k tokens: every key is a candidate */
        bool cross = k_last && total >= (ulong)f->k;
        if (PSR_FLAT_BARRIERS || cross) {
            psr_filter_cross(lh, lh, false, bins, 0, false, (ulong)f->k, 0.0f, seg, pick);
            if (cross)
                low = pick[0] << PSR_FILTER_HSHIFT;
        }
        barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
        for (uint b = lid; b < (k_last ? PSR_FILTER_HBINS : 0); b += PSR_WG_SIZE)
            h[b] = 0;
        if (k_last && lid == 0)
            st[3] = low;
    }
    bool m_last = last && !f->k_on && !f->p_on;
    if (PSR_FLAT_BARRIERS || m_last) {
        float cut = m_last ? psr_filter_min_p_cut(f, psr_filter_max_of(vst[0])) : 0.0f;
        barrier(CLK_GLOBAL_MEM_FENCE);
        if (m_last && lid == 0) {
            psr_filter_set(thresholds, row_id, cut, false);
            st[0] = 0;
        }
    }
}

/* One candidate into the group's local list, or past its end straight
 * into the row's list. */
inline void psr_filter_append(uint key, uint token, __local uint *lbuf, __local uint *n_local,
                              __global uint *count, __global uint *rc, uint cap)
{
    uint j = atomic_inc(n_local);
    if (j < PSR_FILTER_GCAP) {
        lbuf[j] = key;
        lbuf[PSR_FILTER_GCAP + j] = token;
    } else {
        uint g = atomic_inc(count);
        if (g < cap) {
            psr_publish(&rc[g], key);
            psr_publish(&rc[cap + g], token);
        }
    }
}

/* Appends the keys of [start, end) at or above `low`, and their token
 * ids, to the row's candidate list: gathered in local memory, then one
 * atomic reserves the group's place (keys past the local buffer go one by
 * one). The count runs on past `cap` so that the row's last group sees
 * the overflow. lbuf: 2 * PSR_FILTER_GCAP words. */
inline void psr_filter_gather(__global const psr_logit_t *src, bool aligned, const psr_filter_row *f,
                              uint start, uint end, uint low, __global uint *count,
                              __global uint *rc, uint cap, __local uint *lbuf, __local uint *n_local)
{
    __local uint *lidx = lbuf + PSR_FILTER_GCAP;
    uint lid = get_local_id(0);
    if (lid == 0)
        n_local[0] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
#if PSR_VEC_PATH
    /* A whole vector of logits below `skip` scales below low's value: no
     * key of it reaches low, and its keys need not be made. */
    float s_low = psr_unordered(low);
    float skip = isfinite(s_low) ? psr_raw_below(s_low, fabs(s_low), f->t) : -INFINITY;
    for (uint i = start + PSR_VEC * lid; i < end; i += PSR_FILTER_VSTEP) {
        if (i + PSR_VEC <= end && !psr_vany_at_least(psr_vload_logits(src, i), skip))
            continue;
        uint n;
        psr_vuint k1 = psr_filter_vkeys(src, i, end, f, &n);
        if (psr_vmax_uint(k1) <= low)
            continue; /* no lane at or above low (a NaN lane is 0) */
        uint keys1[PSR_VEC];
        psr_vstore(k1, 0, keys1);
        for (uint q = 0; q < n; q++)
            if (keys1[q] > low)
                psr_filter_append(keys1[q] - 1, i + q, lbuf, n_local, count, rc, cap);
    }
    (void)aligned;
#else
    for (uint i = start + 4 * lid; i < end; i += PSR_FILTER_STEP) {
        float v[8];
        psr_filter_load8(src, i, end, aligned, f->t, f->r, v);
        for (int q = 0; q < 8; q++) {
            uint key = psr_ordered(v[q]);
            if (!isnan(v[q]) && key >= low)
                psr_filter_append(key, i + (q < 4 ? (uint)q : 4 * PSR_WG_SIZE + (uint)q - 4), lbuf, n_local,
                                  count, rc, cap);
        }
    }
#endif
    barrier(CLK_LOCAL_MEM_FENCE);
    uint n = min(n_local[0], (uint)PSR_FILTER_GCAP);
    if (lid == 0)
        n_local[1] = n ? atomic_add(count, n) : 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    uint at = n_local[1];
    for (uint j = lid; j < n && at + j < cap; j += PSR_WG_SIZE) {
        psr_publish(&rc[at + j], lbuf[j]);
        psr_publish(&rc[cap + at + j], lidx[j]);
    }
}

/* The sampler's arguments for drawing a row's token from its candidates
 * (psr_filter_finish); tokens == 0 or direct_max == 0: never. */
#define PSR_FILTER_DIRECT_ARGS                                                                    \
    __global const long *seeds, __global const long *positions, __global int *tokens,            \
        __global uint *row_flags
#define PSR_FILTER_DIRECT_PASS                                                            \
    seeds, positions, tokens, row_flags, direct_max, p.tokens64, PSR_FILTER_NOISE_OF(p), PSR_FILTER_DRAFTING_OF(p)

/* Gumbel-max over the candidates with key >= cut_key: the values that
 * psr_consider_cut gives the same tokens in the sampler (the key gives
 * back the scaled logit; -0 comes back as +0, which compares equal) and
 * its tie rule (the lowest index), so the winner is the token the sampler
 * would draw from the whole row; 0xffffffff when no score is above -inf.
 * Every work-item calls it. The list is read 4 entries a load (volatile
 * loads are not overlapped; keys and ids are 16-byte aligned, as `cap`
 * is a multiple of 4, and n <= cap). The group's best goes through local
 * atomics on `pick` (3 words) rather than a reduction tree: PoCL's
 * compile time grows with every barrier. */
inline uint psr_filter_sample_list(volatile __global const uint *keys,
                                   volatile __global const uint *ids, uint n, uint cut_key,
                                   uint row_key, uint noise, __local uint *pick)
{
    uint lid = get_local_id(0);
    ulong k = 0;
    uint best_i = 0xffffffffu;
    for (uint c = 4 * lid; c < n; c += 4 * PSR_WG_SIZE) {
        uint4 k4 = *(volatile __global const uint4 *)(keys + c);
        uint4 i4 = *(volatile __global const uint4 *)(ids + c);
        uint ks[4] = {k4.s0, k4.s1, k4.s2, k4.s3}, is[4] = {i4.s0, i4.s1, i4.s2, i4.s3};
        for (uint q = 0; q < 4; q++) {
            if (c + q >= n || ks[q] < cut_key)
                continue;
            /* as in the sampler: +inf stays +inf, a NaN score never wins */
            psr_filter_take(ks[q], is[q], row_key, noise, &k, &best_i);
        }
    }
    if (lid == 0) {
        pick[0] = pick[1] = 0;
        pick[2] = 0xffffffffu;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    bool has = best_i != 0xffffffffu;
    if (has)
        atomic_max(&pick[0], (uint)(k >> 32));
    barrier(CLK_LOCAL_MEM_FENCE);
    has = has && (uint)(k >> 32) == pick[0];
    if (has)
        atomic_max(&pick[1], (uint)k);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (has && (uint)k == pick[1])
        atomic_min(&pick[2], best_i);
    barrier(CLK_LOCAL_MEM_FENCE);
    return pick[2];
}

/* The exact threshold of a row's last group: top-k, then top-p, each by
 * counting over a short list (lbuf), else by radix search over the list
 * (keys) or the whole row (keys == 0); n entries. `on` is the group's:
 * with PSR_FLAT_BARRIERS a group that is not its row's last runs both
 * searches over nothing, so that every group reaches their barriers. One
 * call site per search keeps the program small: PoCL's compile time
 * grows fast with inlined barriers. */
inline uint psr_filter_threshold(bool on, const psr_filter_row *f, __global const psr_logit_t *src,
                                 volatile __global const uint *keys, uint n, bool short_list, uint n_short,
                                 ulong base, float m, uint floor_key, ulong total, __local uint *lbuf,
                                 __local ulong *w,
                                 __local uint *hlo, __local uint *hhi, __local ulong *seg, __local uint *pick)
{
#pragma unroll 1
    for (int pass = 0; pass < 2; pass++) {
        bool mass = pass == 1;
        bool does = on && (mass ? f->p_on : f->k_on);
        if (!PSR_FLAT_BARRIERS && !does)
            continue; /* uniform */
        ulong want = mass ? 0 : (ulong)f->k;
        float p = mass ? fmax(f->p, FLT_MIN) : 1.0f;
        ulong total_in = mass ? total : 0;
        bool ranks = does && short_list, radix = does && !short_list;
        if (PSR_FLAT_BARRIERS || short_list) {
            uint k = psr_filter_rank_search(lbuf, ranks ? n_short : 0, m, floor_key, mass, want, p, total_in,
                                            mass ? base : 0, w, seg, pick);
            floor_key = ranks ? k : floor_key;
        }
        if (PSR_FLAT_BARRIERS || !short_list) {
            uint k = psr_filter_search(src, f->t, f->r, keys, radix ? n : 0, m, floor_key, mass, want, p,
                                       total_in, hlo, hhi, seg, pick);
            floor_key = radix ? k : floor_key;
        }
    }
    return floor_key;
}

/* A row's last group (`on`): the exact threshold from the candidate list
 * (or from the whole row when the list overflowed), the row's token when
 * the list holds every kept token (or with `to_sampler`, a constant at
 * each call and off the vector path only, the row marked for the sampler
 * to draw from the list), then the row's state cleared for the next
 * launch. Top-p alone (from pass 3) takes its total from the mass
 * histogram, which pass 3 summed (mass_total), as its list holds only
 * the top of the set, and searches only the keys of the histogram's bin
 * mass_bin (psr_filter_mbin), above which the masses sum to mass_base
 * (PSR_FILTER_NO_BIN: the whole list). `low`: the smallest key the list
 * can hold. lbuf: 4096 words. With PSR_FLAT_BARRIERS every group calls
 * it, and only the last reads or writes anything. */
#define PSR_FILTER_NO_BIN 0xffffffffu

inline void psr_filter_finish(bool on, const psr_filter_row *fp, uint row_id, __global const psr_logit_t *src,
                              float m, uint floor_key, uint low, uint vocab, uint cap,
                              __global uint *st, __global uint *h, __global uint *rc,
                              __global float *thresholds, __global const int *row_request,
                              uint requests, __global const float *temperatures,
                              PSR_FILTER_DIRECT_ARGS, uint direct_max, uint tokens64, uint noise, uint drafting,
                              ulong mass_total, uint mass_bin, ulong mass_base, bool to_sampler,
                              __local uint *lbuf, __local uint *hlo, __local uint *hhi,
                              __local ulong *seg, __local uint *pick)
{
    psr_filter_row f = *fp;
    uint lid = get_local_id(0);
    /* Other groups wrote these: volatile reads go past any cache. */
    volatile __global const uint *vst = st, *vrc = rc;
    bool sampled = false;
    uint count = on ? vst[1] : 0;
    bool fits = count <= cap;
    /* The whole row's search (the list overflowed) sums the row itself.
     * Below, barriers stay out of conditions that vary at run time: PoCL
     * copies the code after such a barrier once per path. */
    ulong total = fits ? mass_total : 0;
    /* lbuf: the whole list when it is short, or the keys of bin mass_bin */
    bool by_bin = fits && mass_bin != PSR_FILTER_NO_BIN;
    if (lid == 0)
        pick[0] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint j = lid; j < (by_bin || count <= PSR_FILTER_RANK_MAX ? count : 0); j += PSR_WG_SIZE) {
        uint key = vrc[j];
        if (by_bin && psr_filter_mbin(psr_unordered(key), m) != mass_bin)
            continue;
        uint at = by_bin ? atomic_inc(&pick[0]) : j;
        if (at < PSR_FILTER_RANK_MAX)
            lbuf[at] = key;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    uint n_short = by_bin ? pick[0] : count;
    bool short_list = n_short <= PSR_FILTER_RANK_MAX;
    barrier(CLK_LOCAL_MEM_FENCE); /* pick is rewritten below */
    __local ulong *w = (__local ulong *)(lbuf + 2 * PSR_FILTER_RANK_MAX);
    floor_key = psr_filter_threshold(on, &f, src, fits ? vrc : 0, fits ? count : vocab, short_list, n_short,
                                     by_bin ? mass_base : 0, m, floor_key, total, lbuf, w, hlo, hhi, seg, pick);
    float cut = psr_unordered(floor_key);
    /* Every kept key is in the list when the list is whole and the
     * threshold is no lower than the list's lowest possible key. The
     * row must be one the sampler would sample (no flags). */
    int req;
    bool draws = on && tokens && fits && count <= direct_max && floor_key >= low &&
                 !psr_row_status(row_id, row_request, requests, temperatures, positions, 0, 0, 0, &req);
#if PSR_VEC_PATH
    to_sampler = false;
#endif
    uint listed = to_sampler && draws ? count : 0; /* the sampler draws it (psr_consider_list) */
    draws = draws && !to_sampler;
    if (PSR_FLAT_BARRIERS || draws) {
        uint row_key = draws ? psr_row_key_on((ulong)seeds[req], (ulong)positions[row_id], drafting) : 0;
        uint token = psr_filter_sample_list(vrc, vrc + cap, draws ? count : 0, floor_key, row_key, noise, pick);
        /* no score above -inf: the sampler flags the row as it always has */
        sampled = draws && token != 0xffffffffu;
        if (sampled && lid == 0) {
            psr_store_token(tokens, row_id, (int)token, tokens64);
            if (row_flags)
                row_flags[row_id] = 0;
        }
    }
    /* Clear the row's state for the next launch, after every read. */
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    if (on && !f.k_on)
        for (uint b = lid; b < 2 * PSR_FILTER_MBINS; b += PSR_WG_SIZE)
            h[b] = 0;
    if (on && lid == 0) {
        psr_filter_set_listed(thresholds, row_id, cut, sampled, listed);
        st[0] = 0;
        st[1] = 0;
        st[3] = 0;
    }
}

/* A row with no value above -inf (so no candidates): its threshold and
 * the state cleared, by one work-item of the row's group 0; the other
 * groups read nothing that this changes (they see no maximum either). */
inline void psr_filter_end_empty(const psr_filter_row *f, uint row_id, __global uint *st,
                                 __global float *thresholds)
{
    if (get_local_id(0) != 0)
        return;
    psr_filter_set(thresholds, row_id, psr_filter_min_p_cut(f, -INFINITY), false);
    st[0] = 0;
    st[1] = 0;
    st[3] = 0;
}

/* Pass 1 of the histogram path over [start, end), 4 tokens a step:
 * the largest key + 1 into *mk and, with top-k, each key counted in lh. */
inline void psr_filter_scan_chunk4(__global const psr_logit_t *src, uint start, uint end, bool aligned,
                                   const psr_filter_row *f, bool k_on, uint *mk, __local uint *lh)
{
    for (uint i = start + 4 * get_local_id(0); i < end; i += PSR_FILTER_STEP) {
        float v[8];
        psr_filter_load8(src, i, end, aligned, f->t, f->r, v);
        for (int q = 0; q < 8; q++) {
            if (isnan(v[q]))
                continue;
            uint key = psr_ordered(v[q]);
            *mk = max(*mk, key + 1);
            if (k_on)
                atomic_inc(&lh[key >> PSR_FILTER_HSHIFT]);
        }
    }
}

#if PSR_VEC_PATH
/* The same on the vector path. Top-k: the first step's keys are a sample
 * of the row; when k of them lie in bins >= b0, so does the row's k-th
 * largest key, and later keys below bin b0 need no count (the bins from
 * the answer's up stay exact in every group). Every work-item calls it. */
inline void psr_filter_vscan_chunk(__global const psr_logit_t *src, uint start, uint end,
                                   const psr_filter_row *f, bool k_on, uint *mk, __local uint *lh,
                                   __local ulong *seg, __local uint *pick)
{
    uint i = start + PSR_VEC * get_local_id(0);
    if (i < end)
        psr_filter_vscan_step(src, i, end, f, k_on, 0, mk, lh);
    uint bound = 0;
    if (PSR_FLAT_BARRIERS || k_on) {
        uint bins = k_on ? PSR_FILTER_HBINS : 0; /* the barriers only, without top-k */
        barrier(CLK_LOCAL_MEM_FENCE);
        ulong total = psr_filter_suffix(lh, lh, false, bins, seg);
        bool cross = k_on && total >= (ulong)f->k;
        if (PSR_FLAT_BARRIERS || cross) {
            psr_filter_cross(lh, lh, false, bins, 0, false, (ulong)f->k, 0.0f, seg, pick);
            if (cross)
                bound = pick[0] << PSR_FILTER_HSHIFT;
        }
    }
    for (i += PSR_FILTER_VSTEP; i < end; i += PSR_FILTER_VSTEP)
        psr_filter_vscan_step(src, i, end, f, k_on, bound, mk, lh);
}

/* A streaming row's end, by work-item 0 of its last group (`on`): the
 * exact threshold over the groups' lists (or the whole row when they
 * overflowed), then the token drawn from the list when it holds every
 * kept token, as pass 2's finish does; the row's state cleared. */
inline void psr_filter_stream_finish(bool on, const psr_filter_row *f, uint row_id, __global const psr_logit_t *src,
                                     uint vocab, uint cap, __global uint *st, __global uint *rc,
                                     __global float *thresholds, __global const int *row_request, uint requests,
                                     __global const float *temperatures, PSR_FILTER_DIRECT_ARGS, uint direct_max,
                                     uint tokens64, uint noise, uint drafting)
{
    if (!on)
        return;
    volatile __global const uint *vst = st, *vrc = rc;
    float m = psr_filter_max_of(vst[0]);
    if (!(m > -INFINITY)) {
        psr_filter_end_empty(f, row_id, st, thresholds);
        return;
    }
    uint count = vst[1], low = vst[3];
    bool fits = count <= cap;
    uint floor_key = psr_ordered(psr_filter_min_p_cut(f, m));
    volatile __global const uint *keys = fits ? vrc : 0;
    uint n = fits ? count : vocab;
    if (fits && count <= PSR_FILTER_SHORT) {
        floor_key = psr_filter_short_search(vrc, count, f, m, floor_key);
    } else {
        floor_key = psr_filter_search_serial(src, f->t, f->r, keys, n, m, floor_key, false, (ulong)f->k, 1.0f);
        if (f->p_on)
            floor_key =
                psr_filter_search_serial(src, f->t, f->r, keys, n, m, floor_key, true, 0, fmax(f->p, FLT_MIN));
    }
    int req;
    bool sampled = false;
    if (tokens && fits && count <= direct_max && floor_key >= low &&
        !psr_row_status(row_id, row_request, requests, temperatures, positions, 0, 0, 0, &req)) {
        uint token = psr_filter_draw_serial(
            vrc, vrc + cap, count, floor_key,
            psr_row_key_on((ulong)seeds[req], (ulong)positions[row_id], drafting), noise);
        sampled = token != 0xffffffffu;
        if (sampled) {
            psr_store_token(tokens, row_id, (int)token, tokens64);
            if (row_flags)
                row_flags[row_id] = 0;
        }
    }
    psr_filter_set(thresholds, row_id, psr_unordered(floor_key), sampled);
    st[0] = 0;
    st[1] = 0;
    st[3] = 0;
}
#endif

/* Pass 1, groups_per_row groups per row: the row's largest key and, for
 * top-k, the count of keys in each 12-bit bin. The row's last group then
 * finds the bin that holds the k-th largest key (state word 3), or for
 * min-p-only rows writes the threshold. Rows without a filter get their
 * threshold from their first group. */
#if !defined(PSR_ONE_KERNEL) || defined(PSR_ONLY_psr_filter_scan)
__kernel __attribute__((reqd_work_group_size(PSR_WG_SIZE, 1, 1)))
void psr_filter_scan(PSR_FILTER_ROW_ARGS, __global uint *scratch, PSR_FILTER_DIRECT_ARGS)
{
    PSR_FILTER_SCRATCH_UNPACK;
    PSR_FILTER_ROWS_UNPACK;
    __local uint lh[PSR_FILTER_HBINS];
    __local uint lmax[PSR_WG_SIZE];
    __local ulong seg[PSR_WG_SIZE];
    __local uint pick[3];
    const uint cap = p.cap, direct_max = p.direct_max;
    uint lid = get_local_id(0);
    uint row_id = get_group_id(0) / groups_per_row;
    uint part = get_group_id(0) % groups_per_row;
    psr_filter_row f = PSR_FILTER_ROW_GET(row_id);
    bool on = f.state == 2;
    if (!on && part == 0 && lid == 0)
        psr_filter_set(thresholds, row_id, f.state == 1 ? NAN : -INFINITY, false);
    if (!on)
        return; /* before any barrier, for the whole group */
    __global const psr_logit_t *src = logits + logits_offset + (ulong)row_id * row_stride;
    bool aligned = ((size_t)src & (4 * sizeof(psr_logit_t) - 1)) == 0;
    __global uint *st = state + PSR_FILTER_STATE * row_id;
    __global uint *h = hist + (ulong)row_id * PSR_FILTER_HBINS;
    uint start = part * chunk, end = min(start + chunk, vocab);
    bool streams = PSR_FILTER_STREAMS(f); /* uniform over the group */
    bool k_on = f.k_on && !streams;
    __global uint *rc = cand + (ulong)row_id * 2 * cap;
    if (PSR_FLAT_BARRIERS || k_on) {
        for (uint b = lid; b < (k_on ? PSR_FILTER_HBINS : 0); b += PSR_WG_SIZE)
            lh[b] = 0;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    uint mk = 0; /* key + 1 of the largest non-NaN value; 0: none */
#if PSR_VEC_PATH
    psr_filter_stream(streams && lid == 0, src, start, end, &f, &mk, st, rc, cap);
    psr_filter_vscan_chunk(src, start, streams ? start : end, &f, k_on, &mk, lh, seg, pick);
    (void)aligned;
#else
    psr_filter_scan_chunk4(src, start, end, aligned, &f, k_on, &mk, lh);
    (void)rc, (void)direct_max, (void)seeds, (void)positions, (void)tokens, (void)row_flags; /* streaming only */
#endif
    lmax[lid] = mk;
    for (uint s = PSR_WG_SIZE / 2; s > 0; s >>= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < s)
            lmax[lid] = max(lmax[lid], lmax[lid + s]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0 && lmax[0])
        atomic_max(&st[0], lmax[0]);
    if (k_on)
        for (uint b = lid; b < PSR_FILTER_HBINS; b += PSR_WG_SIZE)
            if (lh[b])
                atomic_add(&h[b], lh[b]);
    bool last = psr_last_group_if(true, &st[2], groups_per_row, &pick[2]);
    psr_filter_scan_last(last && !streams, &f, row_id, st, h, thresholds, lh, seg, pick);
#if PSR_VEC_PATH
    psr_filter_stream_finish(last && streams && lid == 0, &f, row_id, src, vocab, cap, st, rc, thresholds,
                             row_request, requests, temperatures, PSR_FILTER_DIRECT_PASS);
#endif
}
#endif

#define PSR_FILTER_COLLECT_START                                                                  \
    __local ulong lbuf64[PSR_FILTER_MBINS]; /* 4096 words: a histogram or keys */                 \
    __local uint *lbuf = (__local uint *)lbuf64;                                                   \
    __local uint hlo[PSR_FILTER_BINS], hhi[PSR_FILTER_BINS];                                       \
    __local ulong seg[PSR_WG_SIZE];                                                                \
    __local uint pick[3];                                                                          \
    PSR_FILTER_SCRATCH_UNPACK;                                                                     \
    PSR_FILTER_ROWS_UNPACK;                                                                        \
    const uint cap = p.cap, direct_max = p.direct_max;                                             \
    uint lid = get_local_id(0);                                                                    \
    uint row_id = get_group_id(0) / groups_per_row;                                                \
    uint part = get_group_id(0) % groups_per_row;                                                  \
    psr_filter_row f = PSR_FILTER_ROW_GET(row_id);                                                 \
    __global uint *st = state + PSR_FILTER_STATE * row_id;                                         \
    __global const psr_logit_t *src = logits + logits_offset + (ulong)row_id * row_stride;         \
    bool aligned = ((size_t)src & (4 * sizeof(psr_logit_t) - 1)) == 0;                             \
    __global uint *h = hist + (ulong)row_id * PSR_FILTER_HBINS;                                    \
    __global uint *rc = cand + (ulong)row_id * 2 * cap

/* A group's part of a row in passes 2 and 3, once pass 1 has ended. */
typedef struct psr_filter_part {
    float m;         /* the row's largest scaled logit (complete: pass 1 has ended) */
    uint floor_key;  /* the min-p cut's key */
    uint start, end; /* the group's tokens */
    bool empty;      /* the row has no value above -inf */
} psr_filter_part;

/* The part of group `part` of a row that takes pass 2 or 3; a row with no
 * candidates ends in its group 0 where `ends_empty`. */
inline psr_filter_part psr_filter_part_start(bool ends_empty, const psr_filter_row *f, uint row_id, uint part,
                                             uint chunk, uint vocab, __global uint *st, __global float *thresholds)
{
    psr_filter_part g;
    g.m = psr_filter_max_of(st[0]);
    g.floor_key = psr_ordered(psr_filter_min_p_cut(f, g.m));
    g.start = part * chunk;
    g.end = min(g.start + chunk, vocab);
    g.empty = !(g.m > -INFINITY);
    if (g.empty && ends_empty && part == 0)
        psr_filter_end_empty(f, row_id, st, thresholds);
    return g;
}

/* Top-p alone: a token's mass (s, its scaled logit) into its bin of the
 * group's masses, none below the min-p cut (floor: its value, compared
 * as the keys would be) or for NaN. */
inline void psr_filter_add_mass(float s, float m, float floor, __local uint *mlo, __local uint *mhi)
{
    if (isnan(s))
        return;
    ulong w = s < floor ? 0 : psr_filter_weight(s, m, true);
    if (w) {
        uint b = psr_filter_mbin(s, m);
        psr_filter_add_local(&mlo[b], &mhi[b], w);
    }
}

#if PSR_VEC_PATH
/* psr_filter_mbin per lane. */
inline psr_vuint psr_filter_vmbin(psr_vfloat s, float m)
{
    psr_vfloat d = select(m - s, (psr_vfloat)(0.0f), s == m);
    psr_vuint j = psr_as_vuint(fma(d, (psr_vfloat)((float)(PSR_FILTER_MBINS - 1) / PSR_FILTER_MSPAN),
                                   (psr_vfloat)(0x1p23f))) - as_uint(0x1p23f);
    psr_vuint b = PSR_FILTER_MBINS - 1 - min(j, (psr_vuint)(PSR_FILTER_MBINS - 2));
    return select((psr_vuint)(0u), b, psr_as_vuint(d < PSR_FILTER_MSPAN));
}

/* Pass 2's masses on CPU devices, by one work-item (so plain adds, and
 * 64-bit ones: m64 holds each bin as one word): the weights and bins of
 * PSR_VEC tokens at a time, each lane's weight and bin what
 * psr_filter_add_mass computes; a finite row maximum m only. */
inline void psr_filter_vmasses(const psr_filter_row *f, __global const psr_logit_t *src, const psr_filter_part *g,
                               float floor, __local ulong *m64)
{
    /* A block whose logits all lie below `skip` weighs nothing: each lane
     * is below the floor, or its e is below e^-22.25 < 2^-32. Most blocks
     * of a peaked row are, and they skip the exp. */
    float skip = psr_raw_below(fmax(floor, g->m - 22.25f), fabs(g->m) + 22.25f, f->t);
    uint i = g->start;
    for (; i + PSR_VEC <= g->end; i += PSR_VEC) {
        psr_vfloat x = psr_vload_logits(src, i);
        if (!psr_vany_at_least(x, skip))
            continue;
        psr_vfloat s = psr_vscale(x, f->t, f->r);
        /* NaN lanes and lanes below the floor weigh nothing, as do those
         * whose mass rounds to 0 (e < 2^-32) */
        psr_vfloat e = select(psr_vdet_exp_neg(s - g->m), (psr_vfloat)(0.0f), s < floor);
        if (!psr_vany_at_least(e, 0x1p-32f))
            continue;
        uint lo[PSR_VEC], bin[PSR_VEC];
        float ev[PSR_VEC];
        psr_vstore(convert_uint16(select(e * 0x1p32f, (psr_vfloat)(0.0f), e >= 1.0f)), 0, lo);
        psr_vstore(psr_filter_vmbin(s, g->m), 0, bin);
        psr_vstore(e, 0, ev);
        for (uint q = 0; q < PSR_VEC; q++) /* a weightless lane adds 0 */
            m64[bin[q]] += ev[q] >= 1.0f ? (ulong)(ev[q] * 0x1p32f) : lo[q];
    }
    for (; i < g->end; i++) { /* psr_filter_add_mass's */
        float s = psr_filter_scaled(src, i, f->t, f->r);
        if (!isnan(s) && !(s < floor))
            m64[psr_filter_mbin(s, g->m)] += psr_filter_weight(s, g->m, true);
    }
}
#endif

/* Pass 2 for a top-p row without top-k (`masses`): the 64-bit masses of
 * the group's part per bin (psr_filter_mbin), local then global. Every work-item
 * calls it; with PSR_FLAT_BARRIERS groups that have no such row too.
 * lbuf: 4096 words, free. */
inline void psr_filter_masses_of(bool masses, const psr_filter_row *f, __global const psr_logit_t *src,
                                 bool aligned, const psr_filter_part *g, __global uint *h, __local uint *lbuf)
{
    uint lid = get_local_id(0);
    __local uint *mlo = lbuf, *mhi = lbuf + PSR_FILTER_MBINS;
    float floor = psr_unordered(g->floor_key);
    for (uint b = lid; b < 2 * PSR_FILTER_MBINS; b += PSR_WG_SIZE)
        lbuf[b] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    uint end = masses ? g->end : g->start;
#if PSR_VEC_PATH
    bool words64 = false; /* the bins as 64-bit words */
    __local ulong *m64 = (__local ulong *)lbuf; /* the caller's lbuf64 */
    if (masses && !isinf(g->m)) { /* uniform over the group */
        if (lid == 0)
            psr_filter_vmasses(f, src, g, floor, m64);
        end = g->start;
        words64 = true;
    }
#endif
    for (uint i = g->start + 4 * lid; i < end; i += PSR_FILTER_STEP) {
        float v[8];
        psr_filter_load8(src, i, end, aligned, f->t, f->r, v);
        for (int q = 0; q < 8; q++)
            psr_filter_add_mass(v[q], g->m, floor, mlo, mhi);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint b = lid; b < (masses ? PSR_FILTER_MBINS : 0); b += PSR_WG_SIZE) {
        ulong w = ((ulong)mhi[b] << 32) | mlo[b];
#if PSR_VEC_PATH
        w = words64 ? m64[b] : w;
#endif
        if (w)
            psr_filter_add_global(&h[b], &h[PSR_FILTER_MBINS + b], w);
    }
}

/* Pass 2, groups_per_row groups per row, for rows with top-k or top-p.
 * Top-k rows: the candidates, keys at or above both the bin pass 1 found
 * and the min-p cut; the row's last group finishes it. Rows with top-p
 * and no top-k: the masses of the keys at or above the min-p cut, per
 * 11-bit bin. */
#if !defined(PSR_ONE_KERNEL) || defined(PSR_ONLY_psr_filter_collect)
__kernel __attribute__((reqd_work_group_size(PSR_WG_SIZE, 1, 1)))
void psr_filter_collect(PSR_FILTER_ROW_ARGS, __global uint *scratch, PSR_FILTER_DIRECT_ARGS)
{
    PSR_FILTER_COLLECT_START;
    bool streamed = PSR_FILTER_STREAMS(f); /* a variable: a constant operand of && draws a compiler warning */
    bool on = f.state == 2 && (f.k_on || f.p_on) && !streamed; /* pass 1 finished those */
    if (!on)
        return; /* before any barrier, for the whole group */
    /* no candidates: group 0 ends a top-k row (top-p alone: in pass 3) */
    psr_filter_part g = psr_filter_part_start(f.k_on, &f, row_id, part, chunk, vocab, st, thresholds);
    if (!PSR_FLAT_BARRIERS && g.empty)
        return;
    bool by_k = !g.empty && f.k_on, masses = !g.empty && !f.k_on;
    if (PSR_FLAT_BARRIERS || by_k) {
        uint low = by_k ? max(st[3], g.floor_key) : 0;
        psr_filter_gather(src, aligned, &f, g.start, by_k ? g.end : g.start, low, &st[1], rc, cap, lbuf, pick);
        bool last = psr_last_group_if(by_k, &st[2], groups_per_row, &pick[2]);
        if (!PSR_FLAT_BARRIERS && !last)
            return;
        psr_filter_finish(last, &f, row_id, src, g.m, g.floor_key, low, vocab, cap, st, h, rc, thresholds,
                          row_request, requests, temperatures, PSR_FILTER_DIRECT_PASS, 0, PSR_FILTER_NO_BIN, 0,
                          false, lbuf, hlo, hhi, seg, pick);
    }
    if (PSR_FLAT_BARRIERS || masses)
        psr_filter_masses_of(masses, &f, src, aligned, &g, h, lbuf);
}
#endif

/* Pass 2 of a call in which no row has top-k (the host knows: no top_k
 * buffer, no all_top_k): the masses of its top-p rows alone, without
 * psr_filter_collect's gather and finish, which a first call would
 * otherwise compile for nothing. */
#if !defined(PSR_ONE_KERNEL) || defined(PSR_ONLY_psr_filter_masses)
__kernel __attribute__((reqd_work_group_size(PSR_WG_SIZE, 1, 1)))
void psr_filter_masses(PSR_FILTER_ROW_ARGS, __global uint *scratch, PSR_FILTER_DIRECT_ARGS)
{
    PSR_FILTER_COLLECT_START;
    (void)cap, (void)direct_max, (void)rc, (void)seeds, (void)positions, (void)tokens, (void)row_flags;
    (void)hlo, (void)hhi, (void)seg, (void)pick;
    bool on = f.state == 2 && !f.k_on && f.p_on;
    if (!on)
        return; /* before any barrier, for the whole group */
    psr_filter_part g = psr_filter_part_start(false, &f, row_id, part, chunk, vocab, st, thresholds);
    if (!PSR_FLAT_BARRIERS && g.empty)
        return;
    psr_filter_masses_of(!g.empty, &f, src, aligned, &g, h, lbuf);
}
#endif

/* Pass 3 (enqueued with top-p), for rows with top-p and no top-k: the
 * bin where the mass from the top reaches p * total, then the keys at or
 * above it; the row's last group finishes it. */
#if !defined(PSR_ONE_KERNEL) || defined(PSR_ONLY_psr_filter_collect_mass)
__kernel __attribute__((reqd_work_group_size(PSR_WG_SIZE, 1, 1)))
void psr_filter_collect_mass(PSR_FILTER_ROW_ARGS, __global uint *scratch, PSR_FILTER_DIRECT_ARGS)
{
    PSR_FILTER_COLLECT_START;
    bool on = f.state == 2 && !f.k_on && f.p_on;
    if (!on)
        return; /* before any barrier, for the whole group */
    psr_filter_part g = psr_filter_part_start(true, &f, row_id, part, chunk, vocab, st, thresholds);
    if (!PSR_FLAT_BARRIERS && g.empty)
        return;
    bool live = !g.empty;
    __local uint *mlo = lbuf, *mhi = lbuf + PSR_FILTER_MBINS;
    for (uint b = lid; b < 2 * PSR_FILTER_MBINS; b += PSR_WG_SIZE)
        lbuf[b] = live ? h[b] : 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    ulong total = psr_filter_suffix(mlo, mhi, true, PSR_FILTER_MBINS, seg);
    float goal = fmax(f.p, FLT_MIN) * (float)total;
    psr_filter_cross(mlo, mhi, true, PSR_FILTER_MBINS, 0, true, 0, goal, seg, pick);
    /* the bin that holds the threshold, and the mass above it */
    uint bin = pick[0];
    ulong above = ((ulong)pick[2] << 32) | pick[1];
    uint low = max(g.floor_key, psr_filter_mbin_low(bin, g.m));
    barrier(CLK_LOCAL_MEM_FENCE);
    psr_filter_gather(src, aligned, &f, g.start, live ? g.end : g.start, low, &st[1], rc, cap, lbuf, pick);
    bool last = psr_last_group_if(live, &st[2], groups_per_row, &pick[2]);
    if (!PSR_FLAT_BARRIERS && !last)
        return;
    psr_filter_finish(last, &f, row_id, src, g.m, g.floor_key, low, vocab, cap, st, h, rc, thresholds,
                      row_request, requests, temperatures, PSR_FILTER_DIRECT_PASS, total, bin, above,
                      true, lbuf, hlo, hhi, seg, pick);
}
#endif

/* ---- Filters across vocabulary shards (lib/ops/shard_filter.c) ----
 *
 * The same threshold as the passes above, for a row whose tokens lie on
 * several shards, in rounds: each round every shard writes a partial per
 * row (PSR_SF_WORDS uint64), the app reduces them across shards (round 0
 * by maximum, the others by sum) and hands the result to the next round,
 * which first applies it. Round 0: the row's largest key + 1. Then up to
 * four rounds of top-k (counts of the keys at or above the min-p cut, 8
 * bits of the key a round, as psr_filter_search) and four of top-p
 * (fixed-point masses at or above the top-k cut). Every decision is made
 * here, by the same functions, on the reduced sums, which are exact
 * integers: each shard finds the unsharded threshold, bit for bit. The
 * last apply writes it where psr_gumbel_sample reads thresholds.
 * State per row after the thresholds (2 floats per row): PSR_SF_STATE
 * words, the global largest key + 1, the floor key (the cut so far), the
 * search's prefix, the weight above it (two words), and top-p's goal. */
#define PSR_SF_WORDS 256
#define PSR_SF_STATE 8

/* Round 0's partial: this shard's largest key + 1 (0: none) in word 0,
 * written where `act`. */
inline void psr_sf_max(__global const psr_logit_t *src, uint n, const psr_filter_row *f, bool act,
                       __global ulong *out, __local uint *pick)
{
    uint lid = get_local_id(0);
    if (lid == 0)
        pick[0] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    uint mk = 0;
    for (uint i = lid; i < (act ? n : 0); i += PSR_WG_SIZE) {
        float s = psr_filter_scaled(src, i, f->t, f->r);
        if (!isnan(s))
            mk = max(mk, psr_ordered(s) + 1);
    }
    atomic_max(&pick[0], mk);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint b = lid; b < (act ? PSR_SF_WORDS : 0); b += PSR_WG_SIZE)
        out[b] = b == 0 ? pick[0] : 0;
}

/* A search round's partial, written where `act`: the weights (counts,
 * or masses for top-p) of this shard's keys at or above the floor whose
 * bits above `shift + 8` are the prefix, in 256 bins of the next 8 bits;
 * zeros for a row that does not search (`does`). */
inline void psr_sf_histogram(__global const psr_logit_t *src, uint n, const psr_filter_row *f, bool act,
                             bool does, __global const uint *st, int shift, bool mass, __global ulong *out,
                             __local uint *hlo, __local uint *hhi)
{
    uint lid = get_local_id(0);
    for (uint b = lid; b < PSR_SF_WORDS; b += PSR_WG_SIZE)
        hlo[b] = hhi[b] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    uint floor_key = st[1], prefix = st[2];
    float m = psr_filter_max_of(st[0]);
    for (uint i = lid; i < (act && does ? n : 0); i += PSR_WG_SIZE) {
        float s = psr_filter_scaled(src, i, f->t, f->r);
        if (isnan(s))
            continue;
        uint key = psr_ordered(s);
        if (key < floor_key || (shift < 24 && (key >> (shift + 8)) != prefix))
            continue;
        psr_filter_add_local(&hlo[(key >> shift) & 0xffu], &hhi[(key >> shift) & 0xffu],
                             psr_filter_weight(s, m, mass));
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint b = lid; b < (act ? PSR_SF_WORDS : 0); b += PSR_WG_SIZE)
        out[b] = ((ulong)hhi[b] << 32) | hlo[b];
}

/* Round 0's reduction: the row's largest key, and the min-p cut as the
 * floor of the searches. */
inline void psr_sf_start(const psr_filter_row *f, bool on, __global const ulong *red, __global uint *st)
{
    if (get_local_id(0) != 0 || !on)
        return;
    uint mk = (uint)red[0];
    st[0] = mk;
    st[1] = psr_ordered(psr_filter_min_p_cut(f, psr_filter_max_of(mk)));
    st[2] = st[3] = st[4] = st[5] = 0;
}

/* A search round's reduction, level `level` (0 .. 3) of its search: the
 * bin that holds the answer, as psr_filter_search picks it; after level
 * 3 the answer becomes the floor. A set that falls short of the target
 * at level 0 leaves the floor as it is (word 5 = 1 marks it). */
inline void psr_sf_step(const psr_filter_row *f, bool does, __global const ulong *red, __global uint *st,
                        int level, bool mass, __local uint *hlo, __local uint *hhi, __local ulong *seg,
                        __local uint *pick)
{
    uint lid = get_local_id(0);
    for (uint b = lid; b < PSR_SF_WORDS; b += PSR_WG_SIZE) {
        ulong w = does ? red[b] : 0;
        hlo[b] = (uint)w;
        hhi[b] = (uint)(w >> 32);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    ulong total = psr_filter_suffix(hlo, hhi, true, PSR_SF_WORDS, seg);
    ulong want = (ulong)f->k, base = ((ulong)st[4] << 32) | st[3];
    float goal = level == 0 ? fmax(f->p, FLT_MIN) * (float)total : as_float(st[6]);
    bool live = does && (level == 0 ? psr_filter_reached(total, mass, want, goal) : st[5] == 0);
    psr_filter_cross(hlo, hhi, true, PSR_SF_WORDS, live ? base : 0, mass, want, goal, seg, pick);
    if (lid == 0 && does) {
        uint prefix = live ? (st[2] << 8) | pick[0] : 0;
        st[2] = level == 3 ? 0 : prefix;
        st[3] = level == 3 ? 0 : pick[1];
        st[4] = level == 3 ? 0 : pick[2];
        st[5] = level == 3 ? 0 : !live;
        st[6] = as_uint(goal);
        if (level == 3 && live)
            st[1] = max(prefix, st[1]);
    }
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
}

/* One round for one row (a work-group): apply the reduction of the round
 * before (round > 0), then write this round's partial (partial not NULL).
 * Rounds: 0 max; 1 .. k_rounds top-k; then p_rounds of top-p; the round
 * after the last only applies. vocab_total decides whether top-k is on,
 * as unsharded. The thresholds are the first 2 * rows words of state. */
#if !defined(PSR_ONE_KERNEL) || defined(PSR_ONLY_psr_shard_filter_round)
__kernel __attribute__((reqd_work_group_size(PSR_WG_SIZE, 1, 1)))
void psr_shard_filter_round(PSR_FILTER_ROW_ARGS, uint vocab_total, uint round, uint k_rounds, uint p_rounds,
                            __global const ulong *reduced, __global ulong *partial, __global uint *state)
{
    PSR_FILTER_ROWS_UNPACK;
    (void)groups_per_row, (void)chunk;
    __local uint hlo[PSR_SF_WORDS], hhi[PSR_SF_WORDS];
    __local ulong seg[PSR_WG_SIZE];
    __local uint pick[3];
    uint row_id = get_group_id(0);
    psr_filter_row f = psr_filter_row_get(row_id, vocab_total, row_request, requests, temperatures, top_k, top_p,
                                          min_p, &p);
    bool on = f.state == 2;
    __global const psr_logit_t *src = logits + logits_offset + (ulong)row_id * row_stride;
    __global uint *st = state + 2 * get_num_groups(0) + PSR_SF_STATE * row_id;
    __global const ulong *red = reduced ? reduced + (ulong)row_id * PSR_SF_WORDS : 0;
    if (round == 1)
        psr_sf_start(&f, on, red, st);
    barrier(CLK_GLOBAL_MEM_FENCE);
    bool k_applied = round <= 1 + k_rounds; /* the reduction applied is top-k's */
    if (PSR_FLAT_BARRIERS || round > 1) {
        int level = (int)round - 2 - (k_applied ? 0 : (int)k_rounds);
        bool does = on && round > 1 && (k_applied ? f.k_on : f.p_on) && st[0] != 0;
        psr_sf_step(&f, does, red, st, level, !k_applied, hlo, hhi, seg, pick);
    }
    if (round == 1 + k_rounds + p_rounds && get_local_id(0) == 0) {
        float cut = f.state == 1 ? NAN : !on ? -INFINITY
                    : st[0]              ? psr_unordered(st[1])
                                         : psr_filter_min_p_cut(&f, -INFINITY);
        psr_filter_set((__global float *)state, row_id, cut, false);
    }
    __global ulong *out = partial ? partial + (ulong)row_id * PSR_SF_WORDS : 0;
    if (PSR_FLAT_BARRIERS || (out && round == 0))
        psr_sf_max(src, on ? vocab : 0, &f, out && round == 0, out, pick);
    if (PSR_FLAT_BARRIERS || (out && round > 0)) {
        bool k_next = round <= k_rounds;
        int shift = 24 - 8 * ((int)round - 1 - (k_next ? 0 : (int)k_rounds));
        bool does = on && (k_next ? f.k_on : f.p_on) && st[0] != 0;
        psr_sf_histogram(src, vocab, &f, out && round > 0, does, st, shift, !k_next, out, hlo, hhi);
    }
}
#endif
