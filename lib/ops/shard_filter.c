/* Filters across vocabulary shards: the rounds that find each row's
 * threshold over the whole vocabulary (cl/filter.cl's
 * psr_shard_filter_round), between which the app reduces the shards'
 * partials. The kernel makes every decision; the host checks and counts. */
#include "ops/ops.h"

PSR_ARGS_STRUCT(psr_shard_filter_args, sizeof(psr_shard_filter_args), .round = 0)

/* 4 search rounds (8 bits of the key each) for top-k, 4 for top-p. */
static void count_rounds(const psr_sample_args *a, cl_uint *k_rounds, cl_uint *p_rounds)
{
    *k_rounds = a->top_k || (a->all_top_k > 0 && (size_t)a->all_top_k < a->vocab_total) ? 4 : 0;
    *p_rounds = a->top_p || a->all_top_p < 1.0f ? 4 : 0;
}

psr_status psr_shard_filter_rounds(psr_context *ctx, const psr_sample_args *args, size_t *rounds)
{
    psr_sample_args a;
    unsigned flags;
    psr_status st = psr_sample_read_args(ctx, args, "psr_shard_filter_rounds", &a, &flags);
    if (st != PSR_OK)
        return st;
    REQUIRE(rounds, PSR_ERR_NULL_ARGUMENT, "psr_shard_filter_rounds: rounds is NULL");
    cl_uint k, p;
    count_rounds(&a, &k, &p);
    *rounds = psr_filter_requested(&a) ? 1 + k + p : 0;
    return PSR_OK;
}

/* The round's own checks, past those of its sample args. */
static psr_status check_round(psr_context *ctx, const psr_shard_filter_args *r, const psr_sample_args *a,
                              size_t rounds)
{
    REQUIRE(a->shard_count, PSR_ERR_INVALID_ARGUMENT,
            "args->sample->shard_count is 0: psr_shard_filter_round is for sharded calls");
    REQUIRE(rounds, PSR_ERR_INVALID_ARGUMENT, "args->sample has no filter: there are no rounds");
    REQUIRE(r->round <= rounds, PSR_ERR_INVALID_ARGUMENT, "args->round %zu is past the last round, %zu",
            r->round, rounds);
    REQUIRE(r->round == 0 || r->reduced, PSR_ERR_NULL_ARGUMENT,
            "args->reduced is NULL: round %zu applies the reduced partials of round %zu", r->round,
            r->round - 1);
    REQUIRE(r->round == rounds || r->partial, PSR_ERR_NULL_ARGUMENT,
            "args->partial is NULL: round %zu writes a partial", r->round);
    REQUIRE(r->num_events_in_wait_list == 0 || r->event_wait_list, PSR_ERR_NULL_ARGUMENT,
            "args->event_wait_list is NULL but args->num_events_in_wait_list is %u", r->num_events_in_wait_list);
    size_t words = a->rows * PSR_SHARD_FILTER_WORDS * sizeof(cl_ulong);
    const psr_buffer_need needs[] = {{a->logits, 0, "args->sample->logits", false},
                                     {r->round ? r->reduced : NULL, words, "args->reduced", false},
                                     {r->round < rounds ? r->partial : NULL, words, "args->partial", true},
                                     {a->shard_filter_state, a->rows * PSR_SHARD_FILTER_STATE_BYTES,
                                      "args->sample->shard_filter_state", true}};
    return psr_check_buffers(ctx, needs, sizeof needs / sizeof needs[0]);
}

static psr_status bind_round(psr_context *ctx, cl_kernel k, const psr_shard_filter_args *r,
                             const psr_sample_args *a, cl_uint k_rounds, cl_uint p_rounds, size_t rounds)
{
    psr_filter_params params = {
        .rows = psr_rows_params_of(a->logits_offset, a->row_stride, a->vocab, a->requests, 1, 0),
        .all_top_k = a->all_top_k,
        .all_top_p = a->all_top_p,
        .all_min_p = a->all_min_p};
    cl_uint vocab_total = (cl_uint)a->vocab_total, round = (cl_uint)r->round;
    psr_kernel_args b = psr_kernel_args_begin(ctx, k, "psr_shard_filter_round");
    psr_arg_rows(&b, &params, sizeof params, a);
    psr_arg_mem(&b, "temperatures", a->temperatures);
    psr_arg_mem(&b, "top_k", a->top_k);
    psr_arg_mem(&b, "top_p", a->top_p);
    psr_arg_mem(&b, "min_p", a->min_p);
    psr_arg_value(&b, "vocab_total", &vocab_total, sizeof vocab_total);
    psr_arg_value(&b, "round", &round, sizeof round);
    psr_arg_value(&b, "k_rounds", &k_rounds, sizeof k_rounds);
    psr_arg_value(&b, "p_rounds", &p_rounds, sizeof p_rounds);
    psr_arg_mem(&b, "reduced", r->round ? r->reduced : NULL);
    psr_arg_mem(&b, "partial", r->round < rounds ? r->partial : NULL);
    psr_arg_mem(&b, "state", a->shard_filter_state);
    return psr_kernel_args_end(&b);
}

psr_status psr_shard_filter_round(psr_context *ctx, const psr_shard_filter_args *args, cl_event *event)
{
    psr_shard_filter_args r;
    psr_sample_args a;
    unsigned flags;
    psr_status st = psr_enqueue_begin(ctx, args, &psr_shard_filter_args_layout, "psr_shard_filter_round", &r,
                                      event, NULL);
    if (st == PSR_OK)
        REQUIRE(r.sample, PSR_ERR_NULL_ARGUMENT, "args->sample is NULL");
    if (st == PSR_OK)
        st = psr_sample_read_args(ctx, r.sample, "psr_shard_filter_round", &a, &flags);
    if (st != PSR_OK)
        return st;
    cl_uint k_rounds, p_rounds;
    count_rounds(&a, &k_rounds, &p_rounds);
    size_t rounds = psr_filter_requested(&a) ? 1 + k_rounds + p_rounds : 0;
    st = check_round(ctx, &r, &a, rounds);
    psr_variant v = psr_variant_of(PSR_KERNELS_FILTER, flags, a.logits_dtype);
    v.filtered = true;
    cl_kernel k = NULL;
    if (st == PSR_OK)
        st = psr_kernel_get(ctx, &v, "psr_shard_filter_round", &k);
    if (st == PSR_OK)
        st = bind_round(ctx, k, &r, &a, k_rounds, p_rounds, rounds);
    if (st != PSR_OK)
        return st;
    return psr_enqueue_groups(ctx, k, "psr_shard_filter_round", a.rows, ctx->tuning.sample.work_group_size,
                              r.num_events_in_wait_list, r.event_wait_list, event);
}
