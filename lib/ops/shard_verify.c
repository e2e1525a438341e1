/* Host side of verification across vocabulary shards
 * (cl/verify_shards.cl): the shard checks (a shard's place, shared with
 * logprobs) and the four rounds' launches. */
#include "ops/ops.h"

_Static_assert(sizeof(psr_verify_shard_params) == 80, "psr_verify_shard_params is laid out as in OpenCL C");

size_t psr_verify_shard_slot_bytes(size_t rows)
{
    if (rows > SIZE_MAX / 32)
        return 0;
    return (rows * 24 + 15) / 16 * 16;
}

psr_status psr_check_shard_place(psr_context *ctx, const psr_shard_place *p, size_t total_max, const char *what_max,
                                 size_t slots_max)
{
    REQUIRE(p->count <= PSR_MAX_SHARDS, PSR_ERR_INVALID_ARGUMENT, "args->shard_count %zu is above PSR_MAX_SHARDS (%d)",
            p->count, PSR_MAX_SHARDS);
    REQUIRE(p->index < p->count, PSR_ERR_INVALID_ARGUMENT, "args->shard_index %zu is not below args->shard_count %zu",
            p->index, p->count);
    REQUIRE(p->total <= total_max, PSR_ERR_INVALID_ARGUMENT, "args->vocab_total %zu is above %s", p->total, what_max);
    REQUIRE(p->offset < p->total && p->vocab <= p->total - p->offset, PSR_ERR_SHARD_MISMATCH,
            "args->vocab_offset %zu + vocab %zu is past args->vocab_total %zu", p->offset, p->vocab, p->total);
    if (!slots_max)
        return PSR_OK;
    REQUIRE(p->slots > 0 && p->slots <= slots_max, PSR_ERR_INVALID_ARGUMENT,
            "args->shard_slots %zu is outside 1 .. %zu", p->slots, slots_max);
    size_t mine = psr_logprobs_shard_slots(p->vocab);
    REQUIRE(p->slot <= p->slots && mine <= p->slots - p->slot, PSR_ERR_SHARD_MISMATCH,
            "args->shard_slot %zu + this shard's %zu slots is past args->shard_slots %zu", p->slot, mine, p->slots);
    return PSR_OK;
}

psr_status psr_verify_check_shard(psr_context *ctx, const psr_verify_args *a)
{
    if (!a->shard_count) {
        REQUIRE(!a->shard_index && !a->vocab_offset && !a->vocab_total && !a->shard_slot && !a->shard_slots &&
                    !a->shard_keys && !a->shard_partials && !a->shard_records,
                PSR_ERR_INVALID_ARGUMENT, "args->shard_* or vocab_offset/vocab_total set with args->shard_count 0");
        return PSR_OK;
    }
    size_t slot_bytes = psr_verify_shard_slot_bytes(a->rows);
    const psr_shard_place place = {a->shard_count, a->shard_index, a->vocab_offset, a->vocab,
                                   a->vocab_total, a->shard_slot,  a->shard_slots};
    psr_status st = psr_check_shard_place(ctx, &place, INT32_MAX, "what an int32 token id holds",
                                          slot_bytes ? UINT32_MAX / slot_bytes : 0);
    if (st != PSR_OK)
        return st;
    REQUIRE(ctx->host_byte_order, PSR_ERR_NOT_SUPPORTED,
            "args->shard_count: the device's byte order differs from the host's, so keys would not reduce");
    const psr_buffer_need needs[] = {
        {a->shard_keys, (2 * a->rows + 1) * 4, "args->shard_keys", true},
        {a->shard_partials, a->shard_slots * slot_bytes, "args->shard_partials", true},
        {a->shard_records, a->shard_count * a->requests * sizeof(psr_shard_record), "args->shard_records", true}};
    psr_status st_need = psr_check_required(ctx, needs, sizeof needs / sizeof needs[0]);
    return st_need == PSR_OK ? psr_check_buffers(ctx, needs, sizeof needs / sizeof needs[0]) : st_need;
}

static psr_verify_shard_params shard_params(const psr_verify_args *a)
{
    psr_verify_shard_params p = {
        .logits_offset = a->target_offset,
        .row_stride = a->target_row_stride ? a->target_row_stride : a->vocab,
        .vocab = (cl_uint)a->vocab,
        .vocab_total = (cl_uint)a->vocab_total,
        .token_base = (cl_uint)a->vocab_offset,
        .rows = (cl_uint)a->rows,
        .requests = (cl_uint)a->requests,
        .greedy_all = a->method == PSR_VERIFY_GREEDY,
        .cache_k = (cl_uint)a->draft_cache_k,
        .first_slot = (cl_uint)a->shard_slot,
        .slots = (cl_uint)a->shard_slots,
        .slot_words = (cl_uint)(psr_verify_shard_slot_bytes(a->rows) / 4),
        .cols = (cl_uint)(a->max_drafts + 1),
        .tokens64 = a->tokens_dtype == PSR_TOKENS_I64,
        .shard_tag = (cl_uint)(a->shard_index << 16 | a->shard_count << 24),
        .records_offset = (cl_uint)(a->shard_index * a->requests),
        .shards = (cl_uint)a->shard_count};
    return p;
}

/* Each round's kernel, its arguments and its groups. */
static const char *const round_kernel[PSR_VERIFY_SHARD_ROUNDS] = {
    "psr_verify_shard_keys", "psr_verify_shard_stats", "psr_verify_shard_sample", "psr_verify_shard_finish"};

static psr_status bind_round(psr_context *ctx, cl_kernel k, unsigned round, const psr_verify_args *a,
                             const psr_verify_shard_params *p)
{
    psr_kernel_args b = psr_kernel_args_begin(ctx, k, round_kernel[round]);
    psr_arg_value(&b, "p", p, sizeof *p);
    if (round < 3)
        psr_arg_mem(&b, "logits", a->target_logits);
    if (round < 2)
        psr_arg_mem(&b, "row_req", ctx->verify_layout[1]);
    psr_arg_mem(&b, "cu", ctx->verify_layout[0]);
    if (round >= 2) {
        psr_arg_mem(&b, "draft_tokens", a->draft_tokens);
        psr_arg_mem(&b, "seeds", a->seeds);
    }
    psr_arg_mem(&b, "temperatures", a->temperatures);
    if (round >= 2)
        psr_arg_mem(&b, "positions", a->positions);
    psr_arg_mem(&b, "draft_cache", a->draft_cache);
    if (round == 0) {
        psr_arg_mem(&b, "draft_tokens", a->draft_tokens);
        psr_arg_mem(&b, "positions", a->positions);
    }
    if (round != 1)
        psr_arg_mem(&b, "keys", a->shard_keys);
    if (round >= 1)
        psr_arg_mem(&b, "part", a->shard_partials);
    if (round >= 2)
        psr_arg_mem(&b, "records", a->shard_records);
    if (round == 3) {
        psr_arg_mem(&b, "user_status", a->status);
        psr_arg_mem(&b, "tokens", a->tokens);
        psr_arg_mem(&b, "num_sampled", a->num_sampled);
    }
    return psr_kernel_args_end(&b);
}

psr_status psr_verify_shard_round(psr_context *ctx, const psr_verify_args *args, unsigned round,
                                  cl_event *event)
{
    if (event)
        *event = NULL;
    psr_verify_args call;
    unsigned flags;
    psr_status st = psr_verify_read_args(ctx, args, "psr_verify_shard_round", &call, &flags);
    if (st != PSR_OK)
        return st;
    const psr_verify_args *a = &call;
    REQUIRE(a->shard_count, PSR_ERR_INVALID_ARGUMENT,
            "args->shard_count is 0: psr_verify_shard_round is for shards (else psr_verify)");
    REQUIRE(round < PSR_VERIFY_SHARD_ROUNDS, PSR_ERR_INVALID_ARGUMENT, "round %u is not below %d", round,
            PSR_VERIFY_SHARD_ROUNDS);
    psr_variant v = psr_variant_of(PSR_KERNELS_VERIFY, flags, a->target_dtype); /* noise flags only */
    cl_kernel k = NULL;
    st = psr_kernel_get(ctx, &v, round_kernel[round], &k);
    if (st == PSR_OK)
        st = psr_verify_upload_layout(ctx, a); /* cu and the rows' requests */
    psr_verify_shard_params p = shard_params(a);
    if (st == PSR_OK)
        st = bind_round(ctx, k, round, a, &p);
    if (st != PSR_OK)
        return st;
    size_t wg = ctx->tuning.sample.work_group_size, stats_local = wg < PSR_LANES ? wg : PSR_LANES;
    size_t nsb = (a->vocab + PSR_SB - 1) / PSR_SB;
    const size_t groups[PSR_VERIFY_SHARD_ROUNDS] = {1 + (a->rows + stats_local - 1) / stats_local,
                                                     a->rows * nsb * (a->draft_cache ? 2 : 1), a->requests,
                                                     a->requests};
    st = psr_enqueue_groups(ctx, k, round_kernel[round], groups[round], round < 2 ? stats_local : wg,
                            a->num_events_in_wait_list, a->event_wait_list, event);
    if (st == PSR_OK)
        psr_record_flags(ctx, a->effective_noise, psr_verify_legacy_layout(a), flags);
    return st;
}
