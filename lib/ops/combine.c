/* The combine of a sharded sampling: the records of every shard to
 * tokens, on the device (psr_combine, cl/gumbel.cl's psr_shard_combine)
 * and on the host (psr_combine_host). Both take, per row, the record with
 * the largest value, then the lower token. */
#include "ops/ops.h"

#include <string.h>

PSR_ARGS_STRUCT(psr_combine_args, sizeof(psr_combine_args), .tokens_dtype = PSR_TOKENS_I32)
PSR_ARGS_STRUCT(psr_combine_host_args, sizeof(psr_combine_host_args), .tokens_dtype = PSR_TOKENS_I32)

/* The tag a record of shard s out of `shards` carries in flags' bits 16-31. */
static uint32_t shard_tag(size_t s, size_t shards)
{
    return (uint32_t)(s << 16 | shards << 24);
}

static psr_status check_counts(psr_context *ctx, size_t rows, size_t shards, psr_token_dtype tokens_dtype)
{
    REQUIRE(rows > 0, PSR_ERR_INVALID_ARGUMENT, "args->rows is 0");
    REQUIRE(rows <= UINT32_MAX / PSR_MAX_SHARDS, PSR_ERR_INVALID_ARGUMENT, "args->rows %zu is too large", rows);
    REQUIRE(shards > 0 && shards <= PSR_MAX_SHARDS, PSR_ERR_INVALID_ARGUMENT,
            "args->shards %zu is outside 1 .. PSR_MAX_SHARDS (%d)", shards, PSR_MAX_SHARDS);
    REQUIRE((unsigned)tokens_dtype <= PSR_TOKENS_I64, PSR_ERR_INVALID_ARGUMENT,
            "args->tokens_dtype %d is not a psr_token_dtype", (int)tokens_dtype);
    return PSR_OK;
}

psr_status psr_combine(psr_context *ctx, const psr_combine_args *args, cl_event *event)
{
    psr_combine_args a;
    psr_status st = psr_enqueue_begin(ctx, args, &psr_combine_args_layout, "psr_combine", &a, event, NULL);
    if (st == PSR_OK)
        st = check_counts(ctx, a.rows, a.shards, a.tokens_dtype);
    if (st != PSR_OK)
        return st;
    REQUIRE(a.num_events_in_wait_list == 0 || a.event_wait_list, PSR_ERR_NULL_ARGUMENT,
            "args->event_wait_list is NULL but args->num_events_in_wait_list is %u", a.num_events_in_wait_list);
    const psr_buffer_need required[] = {{a.records, 0, "args->records", false},
                                        {a.tokens, 0, "args->tokens", true}};
    st = psr_check_required(ctx, required, 2);
    if (st != PSR_OK)
        return st;
    const psr_buffer_need needs[] = {
        {a.records, a.shards * a.rows * sizeof(psr_shard_record), "args->records", false},
        {a.tokens, a.rows * psr_token_size(a.tokens_dtype), "args->tokens", true},
        {a.row_flags, a.rows * 4, "args->row_flags", true}};
    st = psr_check_buffers(ctx, needs, sizeof needs / sizeof needs[0]);
    psr_variant v = psr_variant_of(PSR_KERNELS_SAMPLE, 0, PSR_DTYPE_F32);
    cl_kernel k = NULL;
    if (st == PSR_OK)
        st = psr_kernel_get(ctx, &v, "psr_shard_combine", &k);
    if (st != PSR_OK)
        return st;
    cl_uint rows = (cl_uint)a.rows, shards = (cl_uint)a.shards, tokens64 = a.tokens_dtype == PSR_TOKENS_I64;
    psr_kernel_args b = psr_kernel_args_begin(ctx, k, "psr_shard_combine");
    psr_arg_value(&b, "rows", &rows, sizeof rows);
    psr_arg_value(&b, "shards", &shards, sizeof shards);
    psr_arg_value(&b, "tokens64", &tokens64, sizeof tokens64);
    psr_arg_mem(&b, "records", a.records);
    psr_arg_mem(&b, "tokens", a.tokens);
    psr_arg_mem(&b, "row_flags", a.row_flags);
    st = psr_kernel_args_end(&b);
    if (st != PSR_OK)
        return st;
    const size_t local = 64;
    return psr_enqueue_groups(ctx, k, "psr_shard_combine", (a.rows + local - 1) / local, local,
                              a.num_events_in_wait_list, a.event_wait_list, event);
}

/* Row r's token and flags from its records (every tag already checked). */
static int32_t combine_row(const psr_shard_record *records, size_t rows, size_t shards, size_t r,
                           uint32_t *flags)
{
    bool no_token = false, no_finite = true;
    uint32_t bad = 0;
    uint64_t best = 0;
    int32_t best_token = -1;
    for (size_t s = 0; s < shards; s++) {
        const psr_shard_record *rec = &records[s * rows + r];
        if (rec->token < 0) {
            no_token = true;
            bad |= rec->flags & 0xffffu & ~PSR_ROW_NO_FINITE;
            continue;
        }
        no_finite = no_finite && (rec->flags & PSR_ROW_NO_FINITE);
        if (best_token < 0 || rec->value > best || (rec->value == best && rec->token < best_token)) {
            best = rec->value;
            best_token = rec->token;
        }
    }
    *flags = no_token ? bad : no_finite ? PSR_ROW_NO_FINITE : 0;
    return no_token ? -1 : best_token;
}

psr_status psr_combine_host(psr_context *ctx, const psr_combine_host_args *args)
{
    psr_clear_thread_error();
    if (!args)
        return psr_fail(ctx, PSR_ERR_NULL_ARGUMENT, "psr_combine_host: args is NULL");
    psr_combine_host_args a;
    psr_status st = psr_struct_read(ctx, args, &psr_combine_host_args_layout, "args", &a);
    if (st == PSR_OK)
        st = check_counts(ctx, a.rows, a.shards, a.tokens_dtype);
    if (st != PSR_OK)
        return st;
    REQUIRE(a.records, PSR_ERR_NULL_ARGUMENT, "args->records is NULL");
    REQUIRE(a.tokens, PSR_ERR_NULL_ARGUMENT, "args->tokens is NULL");
    for (size_t s = 0; s < a.shards; s++) {
        for (size_t r = 0; r < a.rows; r++) {
            uint32_t tag = a.records[s * a.rows + r].flags & 0xffff0000u;
            REQUIRE(tag == shard_tag(s, a.shards), PSR_ERR_SHARD_MISMATCH,
                    "args->records[%zu] (shard %zu, row %zu) is from shard %u of %u, not shard %zu of %zu",
                    s * a.rows + r, s, r, (unsigned)(tag >> 16 & 0xff), (unsigned)(tag >> 24), s, a.shards);
        }
    }
    for (size_t r = 0; r < a.rows; r++) {
        uint32_t flags;
        int32_t token = combine_row(a.records, a.rows, a.shards, r, &flags);
        if (a.tokens_dtype == PSR_TOKENS_I64)
            ((int64_t *)a.tokens)[r] = token;
        else
            ((int32_t *)a.tokens)[r] = token;
        if (a.row_flags)
            a.row_flags[r] = flags;
    }
    return PSR_OK;
}
