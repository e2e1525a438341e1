/* Gumbel-max sampling and the exponential race: the sampler's kernels
 * (the "sample" program), over the per-token arithmetic of tokens.cl.
 *
 * A row is split into groups_per_row chunks of `chunk` tokens, one
 * work-group each. Each group writes its best (value, index); with one
 * group per row it writes the token itself, otherwise psr_gumbel_finalize
 * combines the partials. Ties go to the lowest index throughout.
 *
 * PSR_FILTERS=1 (tokens.cl) builds the variant that applies the per-row
 * thresholds the filter program (filter.cl) computes.
 */

#include "tokens.cl"

/* A group's slot in best_scratch (psr_store_slot): fp64 scores take two
 * words. The rows' shared floors (psr_floor_publish) lie after the rows'
 * counts, where nothing else is ever stored: slots keep the scores of
 * older launches, which could read as floors above a row's best. */
#define PSR_SLOT_WORDS (USE_FP64 ? 2 : 1)
inline __global ulong *psr_floor_slot(__global ulong *best_scratch, uint groups_per_row, uint row_id)
{
    uint rows = get_num_groups(0) / groups_per_row;
    return best_scratch + (rows + 1) / 2 + row_id; /* after the rows' 32-bit counts */
}

#if PSR_VEC_PATH
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
        if (psr_vmay_win(row, x))
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
    row->skip_below = -INFINITY;
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
/* The race's scale: the group's largest scaled logit over [start, end),
 * -inf unless `on`. Every work-item of the group calls it (it ends in a
 * group reduction). */
inline float psr_race_shift(const psr_row *row, bool on, __global const psr_logit_t *src, uint start,
                            uint end, bool aligned, __local psr_acc_t *lv, uint lid)
{
    float m = -INFINITY;
    end = on ? end : start; /* a group that does not shift reads nothing */
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
/* Raises the row's floor to the exact value of the largest logit among
 * the work-item's whole vectors of [start, end). Without it the floor
 * rises only as the scan meets high values; with it, a row whose top
 * logit stands more than the noise's largest value above the others'
 * skips the Philox words of nearly every block from the first step on.
 * The pass reads those logits once more (about 3% of a plain row's
 * time); the token's value is computed again when the scan reaches it. */
inline void psr_seed_floor(psr_row *row, __global const psr_logit_t *src, uint start, uint end, float cut,
                           uint lid)
{
    psr_vfloat top = (psr_vfloat)(-INFINITY);
    psr_vuint top_at = (psr_vuint)start;
    for (uint i = start + PSR_VEC * lid; i + PSR_VEC <= end; i += PSR_VEC * PSR_WG_SIZE) {
        psr_vfloat x = psr_vload_logits(src, i);
        psr_vint higher = x > top; /* never for NaN */
        top = select(top, x, higher);
        top_at = select(top_at, (psr_vuint)i, higher);
    }
    float values[PSR_VEC];
    uint at[PSR_VEC];
    psr_vstore(top, 0, values);
    psr_vstore(top_at, 0, at);
    int lane = 0;
    for (int l = 1; l < PSR_VEC; l++)
        lane = values[l] > values[lane] ? l : lane;
    if (!(values[lane] > -INFINITY))
        return;
    uint j = at[lane] + (uint)lane;
    psr_acc_t v = PSR_ACC_NEG_INF;
    uint v_i = j;
    psr_consider_cut(row, psr_load_logit(src, j), j, &v, &v_i, cut);
    psr_raise_floor(row, v);
}

#if PSR_INT64_ATOMICS
/* A split row's groups share their floors through one word per row (0:
 * none yet; else psr_record_value's order). Any exact value of one of the
 * row's tokens bounds the row's best from below, so a floor another group
 * found is as good as one's own, whenever it arrives. The race over
 * logits has none: its groups' scores are on scales of their own. */
inline void psr_floor_publish(__global ulong *slot, psr_acc_t v)
{
    ulong key = psr_record_value(v), seen = *(volatile __global ulong *)slot;
    while (key > seen) {
        ulong was = atom_cmpxchg(slot, seen, key);
        if (was == seen)
            break;
        seen = was;
    }
}

inline psr_acc_t psr_floor_read(__global const ulong *slot)
{
    ulong k = *(volatile __global const ulong *)slot;
    if (!k)
        return PSR_ACC_NEG_INF;
#if USE_FP64
    return psr_unordered_d(k);
#else
    return psr_unordered((uint)(k >> 32));
#endif
}
#endif

/* Where a group's floors come from beyond its chunk: a row of a few
 * groups seeds from the whole row (*seed_span; each group reads it, as
 * the groups may well run one after the other), a row of more groups
 * shares them as they come (the returned word, or NULL). The race over
 * logits scales each group's scores by its own chunk: it seeds from the
 * chunk alone. */
#define PSR_SEED_ROW_GROUPS 2
inline __global ulong *psr_floor_sources(const psr_sample_params *p, const psr_row *row, bool active, uint row_id,
                                         uint start, uint end, __global ulong *best_scratch, uint2 *seed_span)
{
    *seed_span = (uint2)(start, end);
#if PSR_METHOD != 1 && PSR_SEED_FLOORS
    if (p->rows.groups_per_row <= PSR_SEED_ROW_GROUPS)
        *seed_span = (uint2)(0, p->rows.vocab);
#if PSR_INT64_ATOMICS
    else if (active && !row->greedy && best_scratch)
        return psr_floor_slot(best_scratch, p->rows.groups_per_row, row_id);
#endif
#endif
    (void)p, (void)row, (void)active, (void)row_id, (void)best_scratch;
    return 0;
}

/* The work-item's tokens of [start, end), PSR_VEC at a time, into its
 * (best, best_i). The floor starts at the value of the work-item's
 * largest logit where psr_floor_sources says; after the first step the
 * group's largest floor becomes every work-item's (a uniform condition,
 * as in the scalar path). With a shared word the group offers its floor
 * to the row's other groups and takes theirs every few steps. */
#define PSR_FLOOR_READ_STEPS 8
inline void psr_scan_chunk(psr_row *row, bool active, __global const psr_logit_t *src, uint start, uint end,
                           const psr_sample_params *p, uint row_id, __global ulong *best_scratch,
                           __global float *cache, float cut, psr_acc_t *best, uint *best_i,
                           __local psr_acc_t *lv, uint lid)
{
    uint2 seed_span;
    __global ulong *floor_slot = psr_floor_sources(p, row, active, row_id, start, end, best_scratch, &seed_span);
    psr_vacc lane_best = (psr_vacc)(PSR_ACC_NEG_INF);
    psr_vuint lane_best_i = (psr_vuint)0xffffffffu;
    uint i = start + PSR_VEC * lid;
#if PSR_FILTERS && PSR_METHOD == 0
    if (active && !row->greedy && isfinite(cut)) /* lanes below the cut never win */
        row->skip_below = psr_raw_below(cut, fabs(cut), row->t);
#endif
    if (PSR_SEED_FLOORS && active && !row->greedy)
        psr_seed_floor(row, src, seed_span.x, seed_span.y, cut, lid);
    if (active)
        psr_consider_step(row, src, i, end, cache, cut, &lane_best, &lane_best_i, best, best_i);
    i += PSR_VEC * PSR_WG_SIZE;
    bool floors = !(active && row->greedy) && start + PSR_VEC * PSR_WG_SIZE < end;
    if (PSR_FLAT_BARRIERS || floors) {
        /* the floor and every value the first step computed are exact values */
        psr_acc_t m = psr_group_max(lv, fmax(row->floor, fmax(*best, psr_vmax_acc(lane_best))), lid);
        if (floors)
            psr_raise_floor(row, m);
    }
    /* Greedy rows (no noise) take the lanes' argmax without a call a step. */
    for (; active && row->greedy && i + PSR_VEC <= end; i += PSR_VEC * PSR_WG_SIZE) {
        psr_vfloat x = psr_vload_logits(src, i);
        if (cache)
            psr_vstore(x, 0, cache + i);
        psr_keep_better(psr_to_vacc(x), i, &lane_best, &lane_best_i);
    }
#if PSR_INT64_ATOMICS
    if (floor_slot && lid == 0)
        psr_floor_publish(floor_slot, row->floor);
    for (; floor_slot && i < end;) { /* floor_slot: an active row */
        psr_raise_floor(row, psr_floor_read(floor_slot));
        for (uint n = 0; n < PSR_FLOOR_READ_STEPS && i < end; n++, i += PSR_VEC * PSR_WG_SIZE)
            psr_consider_step(row, src, i, end, cache, cut, &lane_best, &lane_best_i, best, best_i);
    }
#else
    (void)floor_slot;
#endif
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
    bool floors = !(active && row->greedy) && start + 4 * PSR_WG_SIZE < end;
    if (PSR_FLAT_BARRIERS || floors) {
        psr_acc_t m = psr_group_max(lv, *best, lid);
        if (floors)
            row->floor = m;
    }
    /* x holds the logits at i (NaN past the end); the loops load the next
     * step's after their work, so no extra logits stay live across it. */
    float4 x = psr_load4(src, i, end, aligned);
    /* Greedy rows only stream memory, and so mostly do filtered rows (no
     * noise for the tokens they remove): keep two loads in flight. (The
     * sampling path gains nothing from this and loses registers.) */
    bool streaming = active && (row->greedy || (PSR_FILTERS && cut > -INFINITY));
    /* Without filters only greedy rows stream: a copy known to be greedy
     * leaves the noise out of this loop's code (a third of the kernel's
     * copies of psr_consider_cut, and of its build time). */
    psr_row greedy_row = *row;
    greedy_row.greedy = PSR_FILTERS ? row->greedy : true;
    const psr_row *sr = &greedy_row;
    for (; streaming && i + 4 * PSR_WG_SIZE < end; i += 8 * PSR_WG_SIZE) {
        uint j = i + 4 * PSR_WG_SIZE;
        float4 y = psr_load4(src, j, end, aligned);
        if (cache) {
            psr_store_cache(cache, i, end, x);
            psr_store_cache(cache, j, end, y);
        }
        psr_consider4_cut(sr, x, i, best, best_i, cut);
        psr_consider4_cut(sr, y, j, best, best_i, cut);
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

#if PSR_INT64_ATOMICS
#define PSR_GATHER 1
#if USE_FP64
/* fp64 scores do not fit a key beside their index: a group's slot is two
 * words, the score's order (psr_record_value) and the index. */
inline void psr_store_slot(__global ulong *slot, double v, uint idx)
{
    atom_xchg(slot, psr_record_value(v));
    atom_xchg(slot + 1, (ulong)idx);
}

/* The best (larger score, then lower index) of `groups` slots, in every
 * work-item; every work-item must call it. */
inline void psr_best_slot(__global const ulong *slots, uint groups, uint lid, __local ulong *lk, __local uint *li,
                          double *v, uint *idx)
{
    ulong best = 0; /* below every score's order */
    uint best_i = 0xffffffffu;
    for (uint g = lid; g < groups; g += PSR_WG_SIZE) {
        ulong k = *(volatile __global const ulong *)(slots + 2 * g);
        uint i = (uint)*(volatile __global const ulong *)(slots + 2 * g + 1);
        if (k > best || (k == best && i < best_i)) {
            best = k;
            best_i = i;
        }
    }
#if PSR_WARP_REDUCE
    for (uint d = 16; d > 0; d >>= 1) {
        ulong ok = psr_shfl_down_ul(best, d);
        uint oi = psr_shfl_down(best_i, d);
        if (ok > best || (ok == best && oi < best_i)) {
            best = ok;
            best_i = oi;
        }
    }
    if (lid % 32 == 0) {
        lk[lid / 32] = best;
        li[lid / 32] = best_i;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    ulong k = lk[0];
    uint i0 = li[0];
    for (uint w = 1; w < PSR_WARPS; w++) {
        if (lk[w] > k || (lk[w] == k && li[w] < i0)) {
            k = lk[w];
            i0 = li[w];
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
#else
    lk[lid] = best;
    li[lid] = best_i;
    uint span = 1; /* the reduction spans the slots read, not the group */
    while (span < min(groups, (uint)PSR_WG_SIZE))
        span <<= 1;
    for (uint s = span / 2; s > 0; s >>= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < s && (lk[lid + s] > lk[lid] || (lk[lid + s] == lk[lid] && li[lid + s] < li[lid]))) {
            lk[lid] = lk[lid + s];
            li[lid] = li[lid + s];
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    ulong k = lk[0];
    uint i0 = li[0];
#endif
    *idx = i0;
    *v = psr_unordered_d(k);
}
#else
inline void psr_store_slot(__global ulong *slot, float v, uint idx)
{
    atom_xchg(slot, psr_best_key(v, idx));
}

inline void psr_best_slot(__global const ulong *slots, uint groups, uint lid, __local ulong *lk, __local uint *li,
                          float *v, uint *idx)
{
    (void)li;
    ulong key = psr_largest_key(slots, groups, lid, lk);
    *idx = psr_key_index(key);
    *v = psr_unordered((uint)(key >> 20));
}
#endif

/* One kernel per launch (`gather`): the group stores its best in a slot
 * of its own, counts itself in the row's word, and the last group to
 * count takes the row's best (into *v and *idx). Rows that are padding or
 * invalid never gather: group 0 reports them. Both conditions are uniform
 * over the group. Returns whether this group writes the row. With
 * PSR_FLAT_BARRIERS every group goes through the barriers, gathering or
 * not, and only `gather` groups count. */
inline bool psr_gather_row(bool gather, bool active, uint part, uint row_id, uint groups_per_row,
                           __global ulong *best_scratch, uint keys_at, psr_acc_t *v, uint *idx, uint lid,
                           __local ulong *lk, __local uint *li, __local uint *llast)
{
    /* One buffer (every buffer argument costs the host time at each
     * launch): the rows' counts, then the groups' slots from keys_at, then
     * the rows' shared floors. */
    __global uint *best_count = (__global uint *)best_scratch;
    __global ulong *best_keys = best_scratch + keys_at;
    bool join = gather && active;
    if (!PSR_FLAT_BARRIERS && !join)
        return part == 0;
    if (join && lid == 0)
        psr_store_slot(best_keys + (ulong)get_group_id(0) * PSR_SLOT_WORDS, *v, *idx);
    bool last = psr_last_group_if(join, best_count + row_id, groups_per_row, llast);
    if (!PSR_FLAT_BARRIERS && !last)
        return false;
    psr_acc_t row_v;
    uint row_i;
    psr_best_slot(best_keys + (ulong)row_id * groups_per_row * PSR_SLOT_WORDS, last ? groups_per_row : 0, lid, lk,
                  li, &row_v, &row_i);
    if (!join)
        return gather && part == 0;
    if (!last)
        return false;
#if PSR_VEC_PATH
    if (lid == 0) /* every group of the row is done with it: ready for the next launch */
        atom_xchg(psr_floor_slot(best_scratch, groups_per_row, row_id), 0UL);
#endif
    *idx = row_i;
    *v = row_v;
    return true;
}
#else
#define PSR_GATHER 0
#endif

/* A finished row's token (-1 with `flags` for rows that get none), or
 * with shards its record: the score, the global token, and the flags
 * tagged with the shard. */
inline void psr_store_row(const psr_sample_params *p, uint row_id, int req, uint flags, psr_acc_t v, uint idx,
                          __global int *tokens, __global uint *row_flags)
{
    int token = -1;
    if (req < 0) {
        flags = 0;
    } else if (!flags) {
        token = (int)(idx + p->token_base);
        if (!(v > PSR_ACC_NEG_INF))
            flags |= PSR_ROW_NO_FINITE;
    }
    if (p->shard_tag) {
        psr_shard_rec rec = {token < 0 ? 0 : psr_record_value(v), token, flags | p->shard_tag};
        ((__global psr_shard_rec *)tokens)[p->records_offset + row_id] = rec;
    } else {
        psr_store_token(tokens, row_id, token, p->tokens64);
    }
    if (row_flags)
        row_flags[row_id] = flags;
}

/* Work-item 0's output: the row's result when this group finishes the
 * row, else the group's partial for psr_gumbel_finalize. */
inline void psr_write_result(const psr_sample_params *p, bool finish, int req, uint flags, psr_acc_t v, uint idx,
                             uint row_id, __global int *tokens, __global uint *row_flags,
                             __global psr_acc_t *part_value, __global uint *part_index, bool gathered)
{
    if (finish) {
        psr_store_row(p, row_id, req, flags, v, idx, tokens, row_flags);
    } else if (!gathered) {
        part_value[get_group_id(0)] = v;
        part_index[get_group_id(0)] = idx;
    }
}

/* Filters (filter.cl): the row's threshold (*cut), NaN for bad filter
 * values (flagged), whether the filter pass already drew the row's token
 * (then the whole row's groups return, before any barrier), and in
 * *listed how many candidates hold every kept token, where the sampler
 * is to draw from them (0: from the row). */
inline bool psr_row_cut(__global const float *thresholds, uint row_id, int req, uint *flags, float *cut,
                        uint *listed)
{
    *cut = -INFINITY;
    *listed = 0;
#if PSR_FILTERS
    if (thresholds && req >= 0 && !(*flags & PSR_ROW_BAD_INDEX)) {
        float2 th = vload2(row_id, thresholds);
        if (th.y > 0.0f)
            return true;
        *listed = th.y < 0.0f ? (uint)(-th.y) : 0u;
        *cut = th.x;
        if (isnan(*cut))
            *flags |= PSR_ROW_BAD_FILTER;
    }
#endif
    return false;
}

#if PSR_FILTERS && PSR_METHOD == 0 && !PSR_VEC_PATH
/* A row whose kept tokens all lie in filter.cl's candidate list (n keys,
 * then their token ids, `cap` apart): the group's share of the list, each
 * listed token at or above the cut scored as psr_consider_cut scores it
 * in the row (the key gives back the scaled logit; -0 comes back as +0,
 * which adds the same), the lower id winning ties as the list is in no
 * order. */
inline void psr_consider_list(const psr_row *row, __global const uint *list, uint cap, uint n, uint part,
                              uint groups, float cut, psr_acc_t *best, uint *best_i)
{
    uint per = (n + groups - 1) / groups;
    uint end = min(n, (part + 1) * per);
    for (uint j = part * per + get_local_id(0); j < end; j += PSR_WG_SIZE) {
        float s = psr_unordered(list[j]);
        uint id = list[cap + j];
        if (!(s >= cut) || !(s > -INFINITY))
            continue;
        psr_acc_t v = isinf(s) ? (psr_acc_t)s : (psr_acc_t)s + psr_noise(psr_token_words(row->key, row->base + id));
        if (psr_better(v, id, *best, *best_i)) {
            *best = v;
            *best_i = id;
        }
    }
}
#endif

/* Row row_id's candidate list: the filters' scratch, whose thresholds
 * the sampler reads, holds the lists from p->list_at (16-byte units). */
inline __global const uint *psr_row_list(__global const float *thresholds, const psr_sample_params *p, uint row_id)
{
    return (__global const uint *)thresholds + PSR_FILTER_AT_WORDS(p->list_at) + (ulong)row_id * 2 * p->list_cap;
}

/* Each work-item takes 4 consecutive tokens per step (PSR_VEC on the
 * vector path), the group a chunk of the row. After the first step the
 * group's best so far becomes the pruning floor for the rest of it. */
#if !defined(PSR_ONE_KERNEL) || defined(PSR_ONLY_psr_gumbel_sample)
__kernel __attribute__((reqd_work_group_size(PSR_WG_SIZE, 1, 1)))
void psr_gumbel_sample(const psr_sample_params p, __global const psr_logit_t *logits,
                       __global const int *row_request, __global const long *seeds,
                       __global const float *temperatures, __global const long *positions,
                       __global psr_acc_t *part_value, __global uint *part_index, __global int *tokens,
                       __global uint *row_flags, __global float *draft_cache,
                       __global const int *draft_cache_rows, __global ulong *best_scratch,
                       __global const float *thresholds)
{
    __local psr_acc_t lv[PSR_WG_SIZE];
    __local uint li[PSR_WG_SIZE];
#if PSR_GATHER
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
    uint listed;
    bool drawn = psr_row_cut(thresholds, row_id, req, &flags, &cut, &listed);
    if (drawn)
        return; /* before any barrier, for the whole group (a row's property) */
    bool active = !drawn && req >= 0 && !flags;
    psr_acc_t best = PSR_ACC_NEG_INF;
    uint best_i = start + PSR_STEP * lid < end ? start + PSR_STEP * lid : 0xffffffffu;
    psr_row row;
    __global float *cache = psr_row_setup(&row, active, req, row_id, p.draft_cache_k, p.draft_step,
                                          p.draft_cache_stride, seeds, temperatures, positions, draft_cache,
                                          draft_cache_rows);
    row.base = p.token_base;
#if PSR_METHOD == 1
    bool shifts = active && !row.greedy; /* uniform: every work-item reaches the barriers */
    if (PSR_FLAT_BARRIERS || shifts) {
        float shift = psr_race_shift(&row, shifts, src, start, end, aligned, lv, lid);
        if (shifts)
            row.shift = shift;
    }
#endif
#if PSR_VEC_PATH
    psr_scan_chunk(&row, active, src, start, end, &p, row_id, best_scratch, cache, cut, &best, &best_i, lv, lid);
#else
    psr_scan_chunk(&row, active && !listed, src, start, end, aligned, x_first, cache, cut, &best, &best_i, lv,
                   lid);
#if PSR_FILTERS && PSR_METHOD == 0
    if (active && listed)
        psr_consider_list(&row, psr_row_list(thresholds, &p, row_id), p.list_cap, listed, part, groups_per_row,
                          cut, &best, &best_i);
#endif
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
#if PSR_GATHER
    bool gather = !finish && best_scratch;
    if (PSR_FLAT_BARRIERS || gather)
        finish = psr_gather_row(gather, active, part, row_id, groups_per_row, best_scratch, p.keys_at, &final_v,
                                &final_i, lid, lk, li, &llast) || finish;
#endif
    if (lid == 0 && !drawn)
        psr_write_result(&p, finish, req, flags, final_v, final_i, row_id, tokens, row_flags, part_value,
                         part_index, best_scratch != 0);
}
#endif


/* Combines the partial results of each row: one work-group per row. */
#if !defined(PSR_ONE_KERNEL) || defined(PSR_ONLY_psr_gumbel_finalize)
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
        if (th.y > 0.0f)
            return; /* filter.cl drew the token */
        if (isnan(th.x))
            flags |= PSR_ROW_BAD_FILTER;
    }
    psr_store_row(&p, row, req, flags, lv[0], li[0], tokens, row_flags);
}
#endif

/* psr_combine: one work-item per row takes the best of the row's shard
 * records (larger value, then lower token), as psr_combine_host does. */
#if !defined(PSR_ONE_KERNEL) || defined(PSR_ONLY_psr_shard_combine)
__kernel void psr_shard_combine(uint rows, uint shards, uint tokens64, __global const psr_shard_rec *records,
                                __global int *tokens, __global uint *row_flags)
{
    uint row = get_global_id(0);
    if (row >= rows)
        return;
    bool tags_fit = true, no_token = false, no_finite = true;
    uint bad = 0;
    ulong best = 0;
    int best_token = -1;
    for (uint s = 0; s < shards; s++) {
        psr_shard_rec r = records[(ulong)s * rows + row];
        tags_fit = tags_fit && (r.flags >> 16) == (s | (shards << 8));
        if (r.token < 0) {
            no_token = true;
            bad |= r.flags & 0xffffu & ~PSR_ROW_NO_FINITE;
            continue;
        }
        no_finite = no_finite && (r.flags & PSR_ROW_NO_FINITE) != 0;
        if (best_token < 0 || r.value > best || (r.value == best && r.token < best_token)) {
            best = r.value;
            best_token = r.token;
        }
    }
    uint flags = !tags_fit ? PSR_ROW_BAD_SHARD : no_token ? bad : no_finite ? PSR_ROW_NO_FINITE : 0u;
    psr_store_token(tokens, row, (tags_fit && !no_token) ? best_token : -1, tokens64);
    if (row_flags)
        row_flags[row] = flags;
}
#endif
