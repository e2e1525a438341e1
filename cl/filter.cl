/* Per-request logit filters (min-p, top-k, top-p) as one threshold per
 * row: psr_gumbel_sample then treats a scaled logit below it as -inf.
 * Needs gumbel.cl (and what it needs) before it.
 *
 * The filters work on s = logit / T exactly as psr_gumbel_sample scales
 * it (psr_scale), in the order min-p, top-k, top-p; every token kept has
 * s >= threshold. No sort: top-k and top-p are radix searches over the
 * 32-bit order-preserving key of s, 8 bits a pass, with a histogram in
 * local memory. Top-p weighs each token by q = floor(e^(s - max) * 2^32),
 * summed in 64-bit integers, so its result does not depend on the order
 * of the sums and lib/oracle_filter.c gets the same bits.
 *
 * One work-group per row. Output: -inf (nothing removed), NaN (a bad
 * top_p or min_p: the sampler flags the row), else the threshold. */

#define PSR_FILTER_BINS 256
#define PSR_FILTER_SEG ((PSR_FILTER_BINS + PSR_WG_SIZE - 1) / PSR_WG_SIZE)

/* fp32 as an unsigned key of the same order; -0 and +0 share one. */
inline uint psr_filter_key(float v)
{
    if (v == 0.0f)
        v = 0.0f;
    uint b = as_uint(v);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

inline float psr_filter_unkey(uint k)
{
    return as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
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
    return (ulong)(e * 0x1p32f);
}

/* Does cumulative weight `cum` reach the target? counts: cum >= want;
 * mass: (float)cum >= goal (both exact functions of integers). */
inline bool psr_filter_reached(ulong cum, bool mass, ulong want, float goal)
{
    return mass ? (float)cum >= goal : cum >= want;
}

/* The largest key K >= floor_key such that the weight of the tokens with
 * key >= K reaches the target; floor_key when the whole set falls short
 * (top-k with fewer than k tokens). Mass mode sets the goal from the
 * set's total: p * total. Uniform control flow: every work-item calls it. */
inline uint psr_filter_search(__global const psr_logit_t *src, uint vocab, float t, float r,
                              float m, uint floor_key, bool mass, ulong want, float p,
                              __local uint *hlo, __local uint *hhi, __local ulong *seg,
                              __local uint *pick)
{
    uint lid = get_local_id(0);
    uint prefix = 0;
    ulong base = 0; /* weight of the tokens above the current prefix */
    float goal = 0.0f;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (uint b = lid; b < PSR_FILTER_BINS; b += PSR_WG_SIZE)
            hlo[b] = hhi[b] = 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint i = lid; i < vocab; i += PSR_WG_SIZE) {
            float s = psr_filter_scaled(src, i, t, r);
            if (isnan(s))
                continue;
            uint key = psr_filter_key(s);
            if (key < floor_key || (shift < 24 && (key >> (shift + 8)) != prefix))
                continue;
            ulong w = psr_filter_weight(s, m, mass);
            uint d = (key >> shift) & 0xffu;
            uint wlo = (uint)w, whi = (uint)(w >> 32);
            /* 64-bit sums from 32-bit atomics: each carry is counted once. */
            if (wlo && atomic_add(&hlo[d], wlo) > ~wlo)
                whi++;
            if (whi)
                atomic_add(&hhi[d], whi);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        /* Segment totals, then suffix sums over segments. */
        ulong mine = 0;
        for (uint j = 0; j < PSR_FILTER_SEG; j++) {
            uint b = lid * PSR_FILTER_SEG + j;
            if (b < PSR_FILTER_BINS)
                mine += ((ulong)hhi[b] << 32) | hlo[b];
        }
        seg[lid] = mine;
        for (uint s = 1; s < PSR_WG_SIZE; s <<= 1) {
            barrier(CLK_LOCAL_MEM_FENCE);
            ulong add = lid + s < PSR_WG_SIZE ? seg[lid + s] : 0;
            barrier(CLK_LOCAL_MEM_FENCE);
            seg[lid] += add;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (shift == 24) {
            ulong total = seg[0];
            goal = p * (float)total;
            if (!psr_filter_reached(total, mass, want, goal))
                return floor_key; /* uniform: every work-item sees the same total */
        }
        /* The one segment where the target is reached: its suffix does,
         * the next one's does not. */
        ulong after = lid + 1 < PSR_WG_SIZE ? seg[lid + 1] : 0;
        if (psr_filter_reached(base + seg[lid], mass, want, goal) &&
            !psr_filter_reached(base + after, mass, want, goal)) {
            ulong cum = base + after;
            for (int j = PSR_FILTER_SEG - 1; j >= 0; j--) {
                uint b = lid * PSR_FILTER_SEG + (uint)j;
                if (b >= PSR_FILTER_BINS)
                    continue;
                ulong here = ((ulong)hhi[b] << 32) | hlo[b];
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
        prefix = (prefix << 8) | pick[0];
        base = ((ulong)pick[2] << 32) | pick[1];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    return max(prefix, floor_key);
}

__kernel __attribute__((reqd_work_group_size(PSR_WG_SIZE, 1, 1)))
void psr_filter_threshold(__global const psr_logit_t *logits, ulong logits_offset, ulong row_stride,
                          uint vocab, __global const int *row_request, uint requests,
                          __global const float *temperatures, __global const int *top_k,
                          __global const float *top_p, __global const float *min_p,
                          __global float *thresholds)
{
    __local uint hlo[PSR_FILTER_BINS], hhi[PSR_FILTER_BINS];
    __local ulong seg[PSR_WG_SIZE];
    __local float lm[PSR_WG_SIZE];
    __local uint pick[3];
    uint lid = get_local_id(0);
    uint row_id = get_group_id(0);
    int req = row_request ? row_request[row_id] : (int)row_id;
    if (req < 0 || req >= (int)requests) {
        if (lid == 0)
            thresholds[row_id] = -INFINITY; /* padding or a bad index: the sampler decides */
        return;
    }
    int k = top_k ? top_k[req] : 0;
    float p = top_p ? top_p[req] : 1.0f;
    float mp = min_p ? min_p[req] : 0.0f;
    float t = temperatures[req];
    if (!(p > 0.0f && p <= 1.0f) || !(mp >= 0.0f && mp <= 1.0f)) {
        if (lid == 0)
            thresholds[row_id] = NAN;
        return;
    }
    bool k_on = k > 0 && (uint)k < vocab;
    bool p_on = p < 1.0f;
    bool m_on = mp >= FLT_MIN; /* below FLT_MIN min-p removes nothing that could be drawn */
    bool t_ok = isnormal(t) && t > 0.0f; /* greedy or a bad temperature: no filter */
    if (!t_ok || !(k_on || p_on || m_on)) {
        if (lid == 0)
            thresholds[row_id] = -INFINITY;
        return;
    }
    float r = 1.0f;
#if PSR_DETERMINISTIC
    r = psr_det_recip(t);
#endif
    __global const psr_logit_t *src = logits + logits_offset + (ulong)row_id * row_stride;

    float m = -INFINITY;
    for (uint i = lid; i < vocab; i += PSR_WG_SIZE) {
        float s = psr_filter_scaled(src, i, t, r);
        if (!isnan(s))
            m = fmax(m, s);
    }
    lm[lid] = m;
    for (uint s = PSR_WG_SIZE / 2; s > 0; s >>= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < s)
            lm[lid] = fmax(lm[lid], lm[lid + s]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    m = lm[0];
    float cut = -INFINITY;
    if (m > -INFINITY) {
        if (m_on)
            cut = m + psr_det_log(mp);
        uint floor_key = psr_filter_key(cut);
        if (k_on)
            floor_key = psr_filter_search(src, vocab, t, r, m, floor_key, false, (ulong)k, 1.0f,
                                          hlo, hhi, seg, pick);
        if (p_on)
            floor_key = psr_filter_search(src, vocab, t, r, m, floor_key, true, 0,
                                          fmax(p, FLT_MIN), hlo, hhi, seg, pick);
        if (k_on || p_on)
            cut = psr_filter_unkey(floor_key);
    }
    if (lid == 0)
        thresholds[row_id] = cut;
}
