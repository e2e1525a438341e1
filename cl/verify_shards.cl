/* Verification across vocabulary shards (docs/sharded.md), included at the
 * end of verify.cl so that it shares its statistics, acceptance test and
 * residual. Four rounds, the app moving bytes between them:
 *  psr_verify_shard_keys    per row: the draft token's target and draft
 *                           logits as keys where this shard holds the
 *                           token (else 0), and the inputs' check in the
 *                           last word (every shard finds the same);
 *                           reduced by maximum.
 *  psr_verify_shard_stats   per (row, super-block of the shard): the
 *                           statistics of verify.cl into this shard's
 *                           slots; gathered.
 *  psr_verify_shard_sample  per request: the walk over every shard's
 *                           slots, then the residual or bonus row over
 *                           this shard's columns, as a psr_shard_record;
 *                           gathered.
 *  psr_verify_shard_finish  per request: the walk again and the output row,
 *                           the token from the records.
 * A slot holds one super-block's statistics for every row: the target's
 * (max, sum) pairs, the draft's pairs, the target's best values and their
 * global ids (psr_verify_shard_params.slot_words apart). Merged in slot
 * order, they give verify.cl's bits where the shards start on super-block
 * bounds. Noise is drawn for global ids, so a shard scores each token as
 * the unsharded scan does.
 */

/* A slot's arrays: (max, sum) pairs of the target and of the draft, then
 * the target's best values and their global ids. */
inline __global float2 *psr_vs_t_lse(__global uint *part, const psr_verify_shard_params *p, uint slot)
{
    return (__global float2 *)(part + (ulong)slot * p->slot_words);
}

inline __global float2 *psr_vs_q_lse(__global uint *part, const psr_verify_shard_params *p, uint slot)
{
    return (__global float2 *)(part + (ulong)slot * p->slot_words + 2 * p->rows);
}

inline __global float *psr_vs_best(__global uint *part, const psr_verify_shard_params *p, uint slot)
{
    return (__global float *)(part + (ulong)slot * p->slot_words + 4 * p->rows);
}

inline __global uint *psr_vs_best_i(__global uint *part, const psr_verify_shard_params *p, uint slot)
{
    return part + (ulong)slot * p->slot_words + 5 * p->rows;
}

#if !defined(PSR_ONE_KERNEL) || defined(PSR_ONLY_psr_verify_shard_keys)
/* Group 0 checks the inputs (as psr_verify_stats' group 0, draft tokens
 * against the whole vocabulary) into keys[2 rows]; the others take a row
 * per work-item. keys[row] is the target logit of the row's draft token,
 * keys[rows + row] its draft-cache logit, both as psr_value_key. */
__kernel __attribute__((reqd_work_group_size(PSR_VWG, 1, 1)))
void psr_verify_shard_keys(const psr_verify_shard_params p, __global const psr_logit_t *logits,
                           __global const int *row_req, __global const int *cu, __global const float *temperatures,
                           __global const float *draft_cache, __global const int *draft_tokens,
                           __global const long *positions, __global uint *keys)
{
    __local uint lflags;
    uint lid = get_local_id(0);
    if (get_group_id(0) == 0) {
        psr_verify_check(lid, p.rows, p.requests, p.vocab_total, row_req, cu, draft_tokens, positions,
                         temperatures, keys + 2 * p.rows, &lflags);
        return;
    }
    uint row = (get_group_id(0) - 1) * PSR_VWG + lid;
    if (row >= p.rows)
        return;
    uint req = (uint)row_req[row], j = row - (uint)cu[req];
    bool draft_row = row + 1 < (uint)cu[req + 1];
    long d = draft_row ? (long)draft_tokens[row] - (long)p.token_base : -1;
    uint kt = 0, kq = 0;
    if (d >= 0 && d < (long)p.vocab) {
        kt = psr_value_key(psr_load_logit(logits + p.logits_offset + (ulong)row * p.row_stride, (ulong)d));
        if (draft_cache)
            kq = psr_value_key(psr_cache_row(draft_cache, req, p.cache_k, j, p.vocab)[d]);
    }
    keys[row] = kt;
    keys[p.rows + row] = kq;
}
#endif

#if !defined(PSR_ONE_KERNEL) || defined(PSR_ONLY_psr_verify_shard_stats)
/* One group per (row, super-block of this shard), and with a draft cache
 * one more per (draft row, super-block) for the draft: verify.cl's
 * partial (the argmax of a greedy request's row, else the log-sum-exp of
 * logits / T), stored in slot first_slot + super-block. Bonus rows of
 * sampled requests need none. */
__kernel __attribute__((reqd_work_group_size(PSR_VWG, 1, 1)))
void psr_verify_shard_stats(const psr_verify_shard_params p, __global const psr_logit_t *logits,
                            __global const int *row_req, __global const int *cu,
                            __global const float *temperatures, __global const float *draft_cache,
                            __global uint *part)
{
    __local float lm[PSR_LANES], ls[PSR_LANES];
    __local float lbv[PSR_VWG];
    __local uint lbi[PSR_VWG];
    uint lid = get_local_id(0), nsb = (p.vocab + PSR_SB - 1) / PSR_SB;
    uint g = get_group_id(0), per_row = draft_cache ? 2 * nsb : nsb;
    uint row = g / per_row, h = g % per_row;
    bool is_draft = h >= nsb;
    uint sb = is_draft ? h - nsb : h;
    uint req = (uint)row_req[row], j = row - (uint)cu[req];
    bool draft_row = row + 1 < (uint)cu[req + 1];
    float t = temperatures[req];
    bool scale = !p.greedy_all && isnormal(t) && t > 0.0f;
    bool divide = scale && t != 1.0f;
    float r = scale ? psr_temp_recip(t) : 1.0f;
    if ((is_draft && !(draft_row && scale)) || (!draft_row && scale))
        return; /* uniform across the group */
    uint slot = p.first_slot + sb, base = sb * PSR_SB;
    __global const psr_logit_t *src = logits + p.logits_offset + (ulong)row * p.row_stride;
    __global const float *q = is_draft ? psr_cache_row(draft_cache, req, p.cache_k, j, p.vocab) : 0;
    bool aligned = is_draft ? ((size_t)q & 15) == 0 : ((size_t)src & (4 * sizeof(psr_logit_t) - 1)) == 0;
    __global float *best = psr_vs_best(part, &p, slot) + row;
    __global uint *best_i = psr_vs_best_i(part, &p, slot) + row;
    psr_stats_partial(scale, is_draft, src, q, aligned, base + PSR_SB <= p.vocab, base, p.vocab, lid, divide, t, r,
                      lm, ls, lbv, lbi, best, best_i,
                      (is_draft ? psr_vs_q_lse(part, &p, slot) : psr_vs_t_lse(part, &p, slot)) + row, p.token_base);
}
#endif

/* A row's log-sum-exp merged over every shard's slots, in slot order
 * (psr_row_lse_of's arithmetic): slot s's pair is slot_words / 2 float2
 * after slot s - 1's. */
inline float psr_vs_row_lse(__global uint *part, const psr_verify_shard_params *p, uint row, bool draft)
{
    __global const float2 *first = (draft ? psr_vs_q_lse(part, p, 0) : psr_vs_t_lse(part, p, 0)) + row;
    return psr_strided_lse(first, p->slot_words / 2, p->slots, false);
}

/* A greedy row's argmax over the slots, as psr_row_argmax. */
inline uint psr_vs_row_argmax(__global uint *part, const psr_verify_shard_params *p, uint row)
{
    float bv = -INFINITY;
    uint bi = 0xffffffffu;
    for (uint s = 0; s < p->slots; s++) {
        float v = psr_vs_best(part, p, s)[row];
        uint i = psr_vs_best_i(part, p, s)[row];
        if (s == 0 || psr_better(v, i, bv, bi)) {
            bv = v;
            bi = i;
        }
    }
    return bi;
}

/* The walk of one request over the reduced keys and gathered slots, as
 * psr_accept and psr_walk_decide decide it: drafts accepted, the row
 * sampled, its mode (0: the token is known, 1: residual, 2: bonus) and,
 * for mode 1, the row's log-sum-exps. */
inline void psr_vs_walk(const psr_verify_shard_params *p, uint req, __global const int *cu,
                        __global const int *draft_tokens, __global const long *seeds,
                        __global const float *temperatures, __global const long *positions, bool cache,
                        __global const uint *keys, __global uint *part, psr_walk *walk, float *lse_p, float *lse_q)
{
    uint first_row = (uint)cu[req], n = (uint)cu[req + 1] - first_row;
    float t = temperatures[req];
    bool greedy = p->greedy_all || !(isnormal(t) && t > 0.0f);
    float r = greedy ? 1.0f : psr_temp_recip(t);
    long seed = seeds[req];
    uint j = 0;
    *lse_p = *lse_q = 0.0f;
    for (; j + 1 < n; j++) {
        uint row = first_row + j;
        int d = draft_tokens[row];
        if (d < 0 || d >= (int)p->vocab_total)
            break; /* a placeholder (or a bad id) is rejected */
        if (greedy) {
            if ((uint)d != psr_vs_row_argmax(part, p, row))
                break;
            continue;
        }
        *lse_p = psr_vs_row_lse(part, p, row, false);
        *lse_q = cache ? psr_vs_row_lse(part, p, row, true) : 0.0f;
        float x = psr_unordered(keys[row]), y = psr_unordered(keys[p->rows + row]);
        float u = psr_u32(psr_row_key((ulong)seed, (ulong)positions[row]));
        if (!psr_accept_test(x, y, cache, *lse_p, *lse_q, t, r, u))
            break;
    }
    walk->accepted = (int)j;
    walk->row = first_row + j;
    walk->mode = greedy ? 0 : j + 1 < n ? 1 : 2;
    walk->pos = positions[walk->row];
    walk->draft = walk->mode == 1 ? draft_tokens[walk->row] : -1;
    walk->token = greedy ? (int)psr_vs_row_argmax(part, p, walk->row) : -1;
    if (walk->mode == 1 && (walk->draft < 0 || walk->draft >= (int)p->vocab_total)) {
        /* rejected before its test: the row's log-sum-exps still serve the residual */
        *lse_p = psr_vs_row_lse(part, p, walk->row, false);
        *lse_q = cache ? psr_vs_row_lse(part, p, walk->row, true) : 0.0f;
    }
}

/* The locals of a request's group. */
typedef struct psr_vs_locals {
    psr_acc_t lv[PSR_WG_SIZE];
    uint li[PSR_WG_SIZE];
    psr_walk walk;
    float lse[2];
} psr_vs_locals;

/* Work-item 0: the walk into the group's locals. */
inline void psr_vs_walk_into(const psr_verify_shard_params *p, uint req, __global const int *cu,
                             __global const int *draft_tokens, __global const long *seeds,
                             __global const float *temperatures, __global const long *positions, bool cache,
                             __global const uint *keys, __global uint *part, __local psr_vs_locals *l)
{
    psr_walk walk;
    float lse_p, lse_q;
    psr_vs_walk(p, req, cu, draft_tokens, seeds, temperatures, positions, cache, keys, part, &walk, &lse_p, &lse_q);
    l->walk = walk;
    l->lse[0] = lse_p;
    l->lse[1] = lse_q;
}

#if !defined(PSR_ONE_KERNEL) || defined(PSR_ONLY_psr_verify_shard_sample)
/* One group per request: the walk, then the residual (mode 1) or bonus
 * (mode 2) row over this shard's columns, every token scored as
 * psr_consider_residual or psr_consider4 score it for its global id,
 * unpruned. The best goes to records[records_offset + request]; a known
 * token (mode 0) is written by every shard alike. */
__kernel __attribute__((reqd_work_group_size(PSR_WG_SIZE, 1, 1)))
void psr_verify_shard_sample(const psr_verify_shard_params p, __global const psr_logit_t *logits,
                             __global const int *cu, __global const int *draft_tokens, __global const long *seeds,
                             __global const float *temperatures, __global const long *positions,
                             __global const float *draft_cache, __global const uint *keys, __global uint *part,
                             __global psr_shard_rec *records)
{
    __local psr_vs_locals l;
    uint req = get_group_id(0), lid = get_local_id(0);
    if (lid == 0)
        psr_vs_walk_into(&p, req, cu, draft_tokens, seeds, temperatures, positions, draft_cache != 0, keys, part, &l);
    barrier(CLK_LOCAL_MEM_FENCE);
    psr_walk walk = l.walk;
    float t = temperatures[req];
    uint key = psr_row_key((ulong)seeds[req], (ulong)walk.pos);
    psr_row row = {t, walk.mode != 0 ? psr_temp_recip(t) : 1.0f, key, false, PSR_ACC_NEG_INF, -INFINITY, 0.0f, 0};
    int d = walk.draft;
    uint j = walk.row - (uint)cu[req];
    /* As psr_sample_setup: a -1 draft has no draft distribution (the
     * residual is p), and one-hot drafts mask their token. */
    bool cache = draft_cache && d >= 0;
    psr_residual res = {row.t, row.r, l.lse[0], l.lse[1], key, cache,
                        !cache && d >= 0 ? (uint)d : 0xffffffffu, PSR_ACC_NEG_INF};
    __global const psr_logit_t *src = logits + p.logits_offset + (ulong)walk.row * p.row_stride;
    __global const float *q = cache ? psr_cache_row(draft_cache, req, p.cache_k, j, p.vocab) : 0;
    psr_acc_t best = PSR_ACC_NEG_INF;
    uint best_i = 4 * lid < p.vocab ? p.token_base + 4 * lid : 0xffffffffu;
    for (uint i = 4 * lid; walk.mode != 0 && i < p.vocab; i += 4 * PSR_WG_SIZE) {
        float4 x = psr_load4(src, i, p.vocab, false);
        float4 y = q ? psr_load4_f32(q, i, p.vocab, false) : (float4)(NAN);
        psr_verify_step(walk.mode, &row, &res, x, y, p.token_base + i, &best, &best_i);
    }
    l.lv[lid] = best;
    l.li[lid] = best_i;
    psr_reduce_best(l.lv, l.li, lid);
    if (lid == 0) {
        bool known = walk.mode == 0;
        psr_shard_rec rec = {known ? 0 : psr_record_value(l.lv[0]), known ? walk.token : (int)l.li[0], p.shard_tag};
        records[p.records_offset + req] = rec;
    }
}
#endif

#if !defined(PSR_ONE_KERNEL) || defined(PSR_ONLY_psr_verify_shard_finish)
/* One group per request: the walk again (the same on every shard), the
 * token from the gathered records [shards, requests] (the largest value,
 * the lower token on ties; -1 where a record's shard tag does not match
 * its place), and the output row. Bad inputs (the check's word) write
 * nothing but status. */
__kernel __attribute__((reqd_work_group_size(PSR_WG_SIZE, 1, 1)))
void psr_verify_shard_finish(const psr_verify_shard_params p, __global const int *cu,
                             __global const int *draft_tokens, __global const long *seeds,
                             __global const float *temperatures, __global const long *positions,
                             __global const float *draft_cache, __global const uint *keys, __global uint *part,
                             __global const psr_shard_rec *records, __global uint *user_status,
                             __global int *tokens, __global int *num_sampled)
{
    __local psr_vs_locals l;
    uint req = get_group_id(0), lid = get_local_id(0);
    uint checked = keys[2 * p.rows];
    if (req == 0 && lid == 0 && user_status)
        *user_status = checked;
    if (checked)
        return; /* as unsharded: nothing written */
    if (lid == 0) {
        psr_vs_walk_into(&p, req, cu, draft_tokens, seeds, temperatures, positions, draft_cache != 0, keys, part, &l);
        if (l.walk.mode != 0) {
            ulong bv = 0;
            int bt = -1;
            bool bad = false;
            for (uint s = 0; s < p.shards; s++) {
                psr_shard_rec rec = records[(ulong)s * p.requests + req];
                bad |= rec.flags >> 16 != (s | p.shards << 8);
                if (s == 0 || rec.value > bv || (rec.value == bv && rec.token < bt)) {
                    bv = rec.value;
                    bt = rec.token;
                }
            }
            l.walk.token = bad ? -1 : bt;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    psr_walk walk = l.walk;
    psr_write_output(req, &walk, walk.token, lid, p.cols, (uint)cu[req], draft_tokens, NULL, 0, tokens, p.tokens64,
                     num_sampled);
}
#endif
