/* Gumbel-max sampling: token = argmax_i (logit_i / T + g_i), g_i the
 * Gumbel noise of token i from the row's stream (stream.cl). Needs
 * stream.cl and detmath.cl before it.
 *
 * Build-time defines:
 *   PSR_WG_SIZE        work-items per group
 *   PSR_LOGIT_DTYPE    0 fp32, 1 fp16, 2 bf16
 *   PSR_DETERMINISTIC  1: detmath.cl (same bits on every device); 0: native logs
 *   IS_DRAFTING, USE_FP64 as in stream.cl
 *
 * A row is split into groups_per_row chunks of `chunk` tokens, one
 * work-group each. Each group writes its best (value, index); with one
 * group per row it writes the token itself, otherwise psr_gumbel_finalize
 * combines the partials. Ties go to the lowest index throughout.
 */

#ifndef PSR_LOGIT_DTYPE
#define PSR_LOGIT_DTYPE 0
#endif
#ifndef PSR_DETERMINISTIC
#define PSR_DETERMINISTIC 1
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

#if USE_FP64
typedef double psr_acc_t;
#define PSR_ACC_NEG_INF (-INFINITY)
#else
typedef float psr_acc_t;
#define PSR_ACC_NEG_INF (-INFINITY)
#endif

/* Row flags, as PSR_ROW_* in psr.h. */
#define PSR_ROW_NO_FINITE 1u
#define PSR_ROW_BAD_POSITION 2u
#define PSR_ROW_BAD_TEMPERATURE 4u

/* Positions at or past the draft salt would make the streams meet. */
#define PSR_MAX_POSITION 0x40000000L

/* Gumbel noise of one token. */
#if USE_FP64
inline double psr_gumbel_noise(uint row_key, uint token)
{
    uint2 w = psr_token_words(row_key, token);
    double u = psr_u64(w.x, w.y);
#if PSR_DETERMINISTIC
    return -psr_det_log_d(-psr_det_log_d(u));
#else
    return -log(-log(u));
#endif
}
#else
inline float psr_gumbel_noise(uint row_key, uint token)
{
    uint2 w = psr_token_words(row_key, token);
    float u = psr_u32(w.x);
#if PSR_DETERMINISTIC
    return -psr_det_log(-psr_det_log1p_neg(u));
#else
    return -native_log(-log1p(-u));
#endif
}
#endif

/* x / T for finite x; r = 1/T from psr_det_recip. */
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

/* Checks a row's inputs; returns its flags (0: fine). */
inline uint psr_row_check(long pos, float t)
{
    uint flags = 0;
    if (pos < 0 || pos >= PSR_MAX_POSITION)
        flags |= PSR_ROW_BAD_POSITION;
    if (!(t == 0.0f || (isnormal(t) && t > 0.0f)))
        flags |= PSR_ROW_BAD_TEMPERATURE;
    return flags;
}

__kernel __attribute__((reqd_work_group_size(PSR_WG_SIZE, 1, 1)))
void psr_gumbel_sample(__global const psr_logit_t *logits, ulong logits_offset, ulong row_stride,
                       uint vocab, __global const int *row_request, __global const long *seeds,
                       __global const float *temperatures, __global const long *positions,
                       uint groups_per_row, uint chunk, __global psr_acc_t *part_value,
                       __global uint *part_index, __global int *tokens, __global uint *row_flags,
                       __global float *draft_cache, __global const int *draft_cache_rows,
                       ulong draft_cache_stride)
{
    __local psr_acc_t lv[PSR_WG_SIZE];
    __local uint li[PSR_WG_SIZE];
    uint lid = get_local_id(0);
    uint row = get_group_id(0) / groups_per_row;
    uint part = get_group_id(0) % groups_per_row;
    int req = row_request ? row_request[row] : (int)row;

    uint start = part * chunk;
    uint end = min(start + chunk, vocab);
    psr_acc_t best = PSR_ACC_NEG_INF;
    uint best_i = start + lid < end ? start + lid : 0xffffffffu;
    uint flags = 0;

    if (req >= 0) {
        float t = temperatures[req];
        long pos = positions[row];
        flags = psr_row_check(pos, t);
        __global const psr_logit_t *src = logits + logits_offset + (ulong)row * row_stride;
        __global float *cache = 0;
        if (draft_cache) {
            int crow = draft_cache_rows ? draft_cache_rows[row] : (int)row;
            if (crow >= 0)
                cache = draft_cache + (ulong)crow * draft_cache_stride;
        }
        bool greedy = t == 0.0f;
        uint key = psr_row_key((ulong)seeds[req], (ulong)pos);
#if PSR_DETERMINISTIC
        float r = greedy || flags ? 1.0f : psr_det_recip(t);
#else
        float r = 1.0f;
#endif
        for (uint i = start + lid; i < end && !flags; i += PSR_WG_SIZE) {
            float x = psr_load_logit(src, i);
            if (cache)
                cache[i] = x;
            psr_acc_t v;
            if (isnan(x)) {
                v = PSR_ACC_NEG_INF;
            } else if (greedy || isinf(x)) {
                v = x;
            } else {
                v = (psr_acc_t)psr_scale(x, t, r) + psr_gumbel_noise(key, i);
            }
            if (v > best) {
                best = v;
                best_i = i;
            }
        }
    }
    lv[lid] = best;
    li[lid] = best_i;
    psr_reduce_best(lv, li, lid);
    if (lid != 0)
        return;
    if (groups_per_row == 1) {
        if (req < 0) {
            tokens[row] = -1;
            flags = 0;
        } else if (flags) {
            tokens[row] = -1;
        } else {
            tokens[row] = (int)li[0];
            if (!(lv[0] > PSR_ACC_NEG_INF))
                flags |= PSR_ROW_NO_FINITE;
        }
        if (row_flags)
            row_flags[row] = flags;
    } else {
        part_value[get_group_id(0)] = lv[0];
        part_index[get_group_id(0)] = li[0];
    }
}

/* Combines the partial results of each row: one work-group per row. */
__kernel __attribute__((reqd_work_group_size(PSR_WG_SIZE, 1, 1)))
void psr_gumbel_finalize(uint groups_per_row, __global const psr_acc_t *part_value,
                         __global const uint *part_index, __global const int *row_request,
                         __global const float *temperatures, __global const long *positions,
                         __global int *tokens, __global uint *row_flags)
{
    __local psr_acc_t lv[PSR_WG_SIZE];
    __local uint li[PSR_WG_SIZE];
    uint lid = get_local_id(0);
    uint row = get_group_id(0);
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
    if (lid != 0)
        return;
    int req = row_request ? row_request[row] : (int)row;
    uint flags = 0;
    int token = -1;
    if (req >= 0) {
        flags = psr_row_check(positions[row], temperatures[req]);
        if (!flags) {
            token = (int)li[0];
            if (!(lv[0] > PSR_ACC_NEG_INF))
                flags |= PSR_ROW_NO_FINITE;
        }
    }
    tokens[row] = token;
    if (row_flags)
        row_flags[row] = flags;
}

/* Noise of (seed, pos, token) triples, for the bit-exactness tests. */
__kernel void psr_gumbel_noise_kat(__global const long *seeds, __global const long *positions,
                                   __global const uint *tokens, uint n, __global psr_acc_t *noise)
{
    uint i = get_global_id(0);
    if (i >= n)
        return;
    uint key = psr_row_key((ulong)seeds[i], (ulong)positions[i]);
    noise[i] = psr_gumbel_noise(key, tokens[i]);
}
