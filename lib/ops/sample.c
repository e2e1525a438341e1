/* Host side of Gumbel-max sampling (cl/gumbel.cl): argument checks,
 * launch geometry, and the host-pointer convenience call. */
#include "ops/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The 0.1 layout ended at event_wait_list; it chose the noise with flags. */
PSR_ARGS_STRUCT(psr_sample_args, PSR_LAYOUT_END(psr_sample_args, event_wait_list),
                .logits_dtype = PSR_DTYPE_F32, .noise = PSR_NOISE_FP32, .tokens_dtype = PSR_TOKENS_I32,
                .all_top_p = 1.0f)

static bool legacy_layout(const psr_sample_args *a)
{
    return a->struct_size < PSR_LAYOUT_END(psr_sample_args, noise);
}

psr_status psr_check_vocab_types(psr_context *ctx, size_t vocab, psr_dtype dtype, const char *dtype_field,
                                 psr_token_dtype tokens_dtype)
{
    REQUIRE(vocab > 0, PSR_ERR_INVALID_ARGUMENT, "args->vocab is 0");
    REQUIRE(vocab <= INT32_MAX, PSR_ERR_INVALID_ARGUMENT, "args->vocab %zu does not fit an int32 token id",
            vocab);
    REQUIRE((unsigned)dtype <= PSR_DTYPE_BF16, PSR_ERR_INVALID_ARGUMENT, "args->%s %d is not a psr_dtype",
            dtype_field, (int)dtype);
    REQUIRE((unsigned)tokens_dtype <= PSR_TOKENS_I64, PSR_ERR_INVALID_ARGUMENT,
            "args->tokens_dtype %d is not a psr_token_dtype", (int)tokens_dtype);
    return PSR_OK;
}

/* A shard's place in the whole vocabulary (psr_sample_args.shard_*). */
static psr_status check_shard(psr_context *ctx, const psr_sample_args *a)
{
    if (!a->shard_count) {
        REQUIRE(!a->shard_index && !a->vocab_offset && !a->vocab_total && !a->shard_records &&
                    !a->shard_records_offset,
                PSR_ERR_INVALID_ARGUMENT,
                "args->shard_index, vocab_offset, vocab_total or shard_records(_offset) set with args->shard_count 0");
        return PSR_OK;
    }
    REQUIRE(a->shard_count <= PSR_MAX_SHARDS, PSR_ERR_INVALID_ARGUMENT,
            "args->shard_count %zu is above PSR_MAX_SHARDS (%d)", a->shard_count, PSR_MAX_SHARDS);
    REQUIRE(a->shard_index < a->shard_count, PSR_ERR_INVALID_ARGUMENT,
            "args->shard_index %zu is not below args->shard_count %zu", a->shard_index, a->shard_count);
    REQUIRE(a->vocab_total <= INT32_MAX, PSR_ERR_INVALID_ARGUMENT,
            "args->vocab_total %zu does not fit an int32 token id", a->vocab_total);
    REQUIRE(a->vocab_offset < a->vocab_total && a->vocab <= a->vocab_total - a->vocab_offset,
            PSR_ERR_SHARD_MISMATCH,
            "args->vocab_offset %zu + vocab %zu is past args->vocab_total %zu", a->vocab_offset, a->vocab,
            a->vocab_total);
    REQUIRE(a->shard_records_offset <= UINT32_MAX - a->rows, PSR_ERR_INVALID_ARGUMENT,
            "args->shard_records_offset %zu is too large", a->shard_records_offset);
    REQUIRE(!a->tokens, PSR_ERR_INVALID_ARGUMENT,
            "args->tokens is set with shards: a shard writes args->shard_records, psr_combine the tokens");
    REQUIRE(!psr_filter_requested(a) || a->shard_filter_state, PSR_ERR_NULL_ARGUMENT,
            "args->shard_filter_state is NULL: filters with shards need the rounds of psr_shard_filter_round");
    REQUIRE(ctx->host_byte_order, PSR_ERR_NOT_SUPPORTED,
            "args->shard_count: the device's byte order differs from the host's, so records would not read back");
    return PSR_OK;
}

static psr_status check_shape(psr_context *ctx, const psr_sample_args *a, unsigned flags)
{
    REQUIRE(a->rows > 0, PSR_ERR_INVALID_ARGUMENT, "args->rows is 0");
    REQUIRE(a->rows <= UINT32_MAX / 64, PSR_ERR_INVALID_ARGUMENT, "args->rows %zu is too large",
            a->rows);
    psr_status st = psr_check_vocab_types(ctx, a->vocab, a->logits_dtype, "logits_dtype", a->tokens_dtype);
    if (st != PSR_OK)
        return st;
    REQUIRE(!(flags & PSR_SAMPLE_PROBS) || a->logits_dtype == PSR_DTYPE_F32, PSR_ERR_INVALID_ARGUMENT,
            "args->logits_dtype must be PSR_DTYPE_F32 for probabilities (PSR_SAMPLE_PROBS)");
    REQUIRE(!a->row_stride || a->row_stride >= a->vocab, PSR_ERR_INVALID_ARGUMENT,
            "args->row_stride %zu is smaller than args->vocab %zu", a->row_stride, a->vocab);
    REQUIRE(a->requests > 0, PSR_ERR_INVALID_ARGUMENT, "args->requests is 0 with args->row_request set");
    REQUIRE(a->requests <= INT32_MAX, PSR_ERR_INVALID_ARGUMENT, "args->requests %zu is too large",
            a->requests);
    REQUIRE(a->draft_cache_rows_total <= INT32_MAX, PSR_ERR_INVALID_ARGUMENT,
            "args->draft_cache_rows_total %zu is too large", a->draft_cache_rows_total);
    REQUIRE(a->row_request || a->requests >= a->rows, PSR_ERR_INVALID_ARGUMENT,
            "args->requests %zu < args->rows %zu, and there is no args->row_request", a->requests,
            a->rows);
    REQUIRE(a->num_events_in_wait_list == 0 || a->event_wait_list, PSR_ERR_NULL_ARGUMENT,
            "args->event_wait_list is NULL but args->num_events_in_wait_list is %u",
            a->num_events_in_wait_list);
    REQUIRE(!a->draft_cache_k || !a->draft_cache_rows, PSR_ERR_INVALID_ARGUMENT,
            "args->draft_cache_k and args->draft_cache_rows are both set: choose one layout");
    REQUIRE(a->draft_step < a->draft_cache_k || (!a->draft_cache_k && !a->draft_step),
            PSR_ERR_INVALID_ARGUMENT, "args->draft_step %zu is not below args->draft_cache_k %zu",
            a->draft_step, a->draft_cache_k);
    REQUIRE(a->draft_cache_k <= INT32_MAX / a->requests, PSR_ERR_INVALID_ARGUMENT,
            "args->requests x draft_cache_k is too large");
    st = check_shard(ctx, a);
    return st == PSR_OK ? psr_filter_check(ctx, a, flags) : st;
}

/* Bytes of the draft cache the call writes (0 without a cache). */
static psr_status draft_cache_bytes(psr_context *ctx, const psr_sample_args *a, size_t *bytes)
{
    *bytes = 0;
    if (!a->draft_cache)
        return PSR_OK;
    size_t cache_rows = a->draft_cache_rows ? a->draft_cache_rows_total
                        : a->draft_cache_k  ? a->requests * a->draft_cache_k
                                            : a->rows;
    REQUIRE(cache_rows > 0, PSR_ERR_INVALID_ARGUMENT,
            "args->draft_cache_rows_total is 0 with args->draft_cache_rows set");
    REQUIRE(cache_rows <= SIZE_MAX / 4 / a->vocab, PSR_ERR_INVALID_ARGUMENT,
            "args->draft_cache_rows_total %zu x vocab overflows the address space", cache_rows);
    *bytes = cache_rows * a->vocab * 4;
    return PSR_OK;
}

/* The buffers of a call; for the filters' rounds (filter_rounds) the
 * noise inputs and the outputs may be absent: the rounds read neither. */
static psr_status check_buffers(psr_context *ctx, const psr_sample_args *a, bool filter_rounds)
{
    const psr_buffer_need required[] = {{a->logits, 0, "args->logits", false},
                                        {a->temperatures, 0, "args->temperatures", false},
                                        {a->seeds, 0, "args->seeds", false},
                                        {a->positions, 0, "args->positions", false},
                                        a->shard_count ? (psr_buffer_need){a->shard_records, 0,
                                                                           "args->shard_records", true}
                                                       : (psr_buffer_need){a->tokens, 0, "args->tokens", true}};
    psr_status st = psr_check_required(ctx, required, filter_rounds ? 2 : sizeof required / sizeof required[0]);
    size_t stride = a->row_stride ? a->row_stride : a->vocab, cache_bytes = 0;
    size_t logits_bytes =
        psr_logits_bytes(a->logits_offset, a->rows, stride, a->vocab, psr_dtype_size(a->logits_dtype));
    REQUIRE(st != PSR_OK || logits_bytes > 0, PSR_ERR_INVALID_ARGUMENT,
            "args->logits_offset %zu + (rows - 1) x row_stride %zu overflows the address space",
            a->logits_offset, stride);
    if (st == PSR_OK)
        st = draft_cache_bytes(ctx, a, &cache_bytes);
    if (st != PSR_OK)
        return st;
    size_t token_bytes = a->tokens_dtype == PSR_TOKENS_I64 ? 8 : 4;
    const psr_buffer_need needs[] = {
        {a->logits, logits_bytes, "args->logits", false},
        PSR_NOISE_INPUT_NEEDS(a),
        {a->row_request, a->rows * 4, "args->row_request", false},
        {a->draft_cache_rows, a->rows * 4, "args->draft_cache_rows", false},
        {a->top_k, a->requests * 4, "args->top_k", false},
        {a->top_p, a->requests * 4, "args->top_p", false},
        {a->min_p, a->requests * 4, "args->min_p", false},
        {a->tokens, a->rows * token_bytes, "args->tokens", true},
        {a->shard_records, (a->shard_records_offset + a->rows) * sizeof(psr_shard_record), "args->shard_records",
         true},
        {a->shard_filter_state, a->rows * PSR_SHARD_FILTER_STATE_BYTES, "args->shard_filter_state", false},
        {a->row_flags, a->rows * 4, "args->row_flags", true},
        {a->draft_cache, cache_bytes, "args->draft_cache", true}};
    return psr_check_buffers(ctx, needs, sizeof needs / sizeof needs[0]);
}

/* Checks the call's own copy of the caller's args (psr_enqueue_begin
 * filled in the 0.2 defaults), with the flags made internal (the noise as
 * two bits) and resolved. */
static psr_status check_args(psr_context *ctx, psr_sample_args *a, unsigned *flags, bool filter_rounds)
{
    psr_status st = psr_call_flags(ctx, a->flags, a->noise, legacy_layout(a), "args->", &a->flags);
    if (st == PSR_OK)
        st = psr_resolve_flags(ctx, a->flags, "args->flags", flags);
    if (st == PSR_OK && a->requests == 0 && !a->row_request)
        a->requests = a->rows;
    if (st == PSR_OK)
        st = check_shape(ctx, a, *flags);
    if (st == PSR_OK)
        st = check_buffers(ctx, a, filter_rounds);
    return st;
}

void psr_arg_rows(psr_kernel_args *b, const void *params, size_t size, const psr_sample_args *a)
{
    psr_arg_value(b, "p", params, size);
    psr_arg_mem(b, "logits", a->logits);
    psr_arg_mem(b, "row_request", a->row_request);
}

void psr_arg_partials(psr_kernel_args *b, bool split)
{
    psr_arg_mem(b, "part_value", split ? b->ctx->part_value.buffer : NULL);
    psr_arg_mem(b, "part_index", split ? b->ctx->part_index.buffer : NULL);
}

/* What both sampling kernels write, and the draft cache's row map. */
static void bind_row_outputs(psr_kernel_args *b, const psr_sample_args *a)
{
    psr_arg_mem(b, "tokens", a->shard_count ? a->shard_records : a->tokens);
    psr_arg_mem(b, "row_flags", a->row_flags);
    psr_arg_mem(b, "draft_cache", a->draft_cache);
    psr_arg_mem(b, "draft_cache_rows", a->draft_cache_rows);
}

static psr_status bind_sample(psr_context *ctx, cl_kernel k, const psr_sample_args *a,
                              const psr_sample_params *params, bool split, cl_mem best_scratch, cl_mem cut)
{
    psr_kernel_args b = psr_kernel_args_begin(ctx, k, "psr_gumbel_sample");
    psr_arg_rows(&b, params, sizeof *params, a);
    psr_arg_mem(&b, "seeds", a->seeds);
    psr_arg_mem(&b, "temperatures", a->temperatures);
    psr_arg_mem(&b, "positions", a->positions);
    psr_arg_partials(&b, split);
    bind_row_outputs(&b, a);
    psr_arg_mem(&b, "best_scratch", best_scratch);
    psr_arg_mem(&b, "thresholds", cut);
    return psr_kernel_args_end(&b);
}

static psr_status bind_finalize(psr_context *ctx, cl_kernel k, const psr_sample_args *a,
                                const psr_sample_params *params, cl_mem cut)
{
    psr_kernel_args b = psr_kernel_args_begin(ctx, k, "psr_gumbel_finalize");
    psr_arg_value(&b, "p", params, sizeof *params);
    psr_arg_partials(&b, true);
    psr_arg_mem(&b, "row_request", a->row_request);
    psr_arg_mem(&b, "temperatures", a->temperatures);
    psr_arg_mem(&b, "positions", a->positions);
    bind_row_outputs(&b, a);
    psr_arg_mem(&b, "thresholds", cut);
    return psr_kernel_args_end(&b);
}

psr_status psr_enqueue_begin(psr_context *ctx, const void *args, const psr_struct_layout *layout,
                             const char *call, void *a, cl_event *first, cl_event *last)
{
    if (first)
        *first = NULL;
    if (last)
        *last = NULL;
    return psr_args_read(ctx, args, layout, call, a);
}

void psr_record_flags(psr_context *ctx, void *effective_noise, bool legacy, unsigned flags)
{
    ctx->last_sample_flags = flags;
    psr_report_noise(effective_noise, legacy, flags);
}

/* One call's launch: its kernels, geometry and parameters. */
typedef struct sample_plan {
    psr_variant v;
    cl_kernel sample, finalize; /* finalize: rows split without one pass */
    size_t parts;               /* sampling groups */
    bool one_pass;
    psr_filter_plan filter;     /* its kernels NULL without filters */
    cl_mem best_scratch;        /* one pass: ctx->best_scratch */
    psr_sample_params params;
} sample_plan;

static void plan_sample(psr_context *ctx, const psr_sample_args *a, unsigned flags, sample_plan *pl)
{
    memset(pl, 0, sizeof *pl);
    pl->v = psr_variant_of(PSR_KERNELS_SAMPLE, flags, a->logits_dtype);
    pl->v.filtered = psr_filter_requested(a);
    cl_uint chunk, groups;
    psr_split_rows(ctx, a->rows, a->vocab, &chunk, &groups);
    pl->parts = a->rows * groups;
    pl->one_pass = psr_one_pass(ctx, a->vocab, groups, false, pl->v.fp64);
    pl->params = (psr_sample_params){
        .rows = psr_rows_params_of(a->logits_offset, a->row_stride, a->vocab, a->requests, groups, chunk),
        .draft_cache_stride = a->vocab,
        .draft_cache_rows_total = (psr_uint32_t)(a->draft_cache_rows ? a->draft_cache_rows_total : a->rows),
        .draft_cache_k = (psr_uint32_t)a->draft_cache_k,
        .draft_step = (psr_uint32_t)a->draft_step,
        .tokens64 = a->tokens_dtype == PSR_TOKENS_I64,
        .token_base = (psr_uint32_t)a->vocab_offset,
        .shard_tag = a->shard_count ? (psr_uint32_t)(a->shard_index << 16 | a->shard_count << 24) : 0,
        .records_offset = (psr_uint32_t)a->shard_records_offset};
}

/* The call's kernels named before the first lookup: a first call builds
 * their programs side by side (psr_kernels_prefetch). */
static void prefetch_sample(psr_context *ctx, const psr_sample_args *a, const sample_plan *pl)
{
    psr_variant v[5];
    const char *names[5];
    size_t n = 0;
    v[n] = pl->v, names[n++] = "psr_gumbel_sample";
    if (!pl->one_pass && pl->params.rows.groups_per_row > 1)
        v[n] = pl->v, names[n++] = "psr_gumbel_finalize";
    if (pl->v.filtered && !a->shard_count)
        n += psr_filter_kernels(ctx, a, &pl->v, v + n, names + n);
    psr_kernels_prefetch(ctx, v, names, n);
}

/* The kernels and scratch of the plan: one pass keeps a count and a floor
 * per row and a slot per group (a key; two words for fp64 scores;
 * cl/gumbel.cl); other split rows keep partials for a finishing kernel.
 * Filters reserve theirs and bind their pre-pass. */
static psr_status reserve_sample(psr_context *ctx, const psr_sample_args *a, sample_plan *pl)
{
    cl_uint groups = pl->params.rows.groups_per_row;
    prefetch_sample(ctx, a, pl);
    psr_status st = psr_kernel_get(ctx, &pl->v, "psr_gumbel_sample", &pl->sample);
    if (st == PSR_OK && pl->one_pass) {
        /* a count and a shared floor per row (zero between launches), then the slots */
        const size_t need[2] = {(a->rows + 1) / 2 * sizeof(cl_ulong) + a->rows * sizeof(cl_ulong),
                                pl->parts * (pl->v.fp64 ? 2 : 1) * sizeof(cl_ulong)};
        st = psr_regions_reserve(ctx, &ctx->best_scratch, &ctx->best_scratch_regions, need, 2, sizeof(cl_ulong), "psr_sample");
        pl->best_scratch = ctx->best_scratch.buffer;
        pl->params.keys_at = (psr_uint32_t)(ctx->best_scratch_regions.at[1] / sizeof(cl_ulong));
    } else if (st == PSR_OK && groups > 1) {
        st = psr_reserve_partials(ctx, &pl->v, "psr_gumbel_finalize", pl->parts, &pl->finalize);
    }
    if (st == PSR_OK && pl->v.filtered && a->shard_count)
        pl->filter.cut = a->shard_filter_state; /* psr_shard_filter_round found the thresholds */
    else if (st == PSR_OK && pl->v.filtered)
        st = psr_filter_prepare(ctx, a, &pl->v, true, &pl->filter);
    pl->params.list_cap = pl->filter.list_cap;
    pl->params.list_at = pl->filter.list_at;
    return st;
}

static psr_status bind_plan(psr_context *ctx, const psr_sample_args *a, const sample_plan *pl)
{
    psr_status st = bind_sample(ctx, pl->sample, a, &pl->params, pl->finalize != NULL, pl->best_scratch,
                                pl->filter.cut);
    if (st == PSR_OK && pl->finalize)
        st = bind_finalize(ctx, pl->finalize, a, &pl->params, pl->filter.cut);
    return st;
}

/* Every argument is set, so nothing that can fail comes between the
 * launches (as in ops/verify.c). The pre-pass waits for the caller's
 * events, and the sampling kernel follows it by queue order. The pre-pass
 * may write tokens (rows it draws itself), so it comes after every step
 * that can fail for want of memory. *first is the pre-pass's event when
 * there is one, *last the finishing kernel's when there is one. */
static psr_status launch_sample(psr_context *ctx, const psr_sample_args *a, const sample_plan *pl,
                                cl_event *first, cl_event *last)
{
    cl_uint nwait = a->num_events_in_wait_list;
    const cl_event *wait = a->event_wait_list;
    cl_event ev_filter = NULL, ev_sample = NULL, ev_final = NULL;
    size_t wg = ctx->tuning.sample.work_group_size;
    psr_status st = PSR_OK;
    if (pl->filter.scan) {
        st = psr_filter_launch(ctx, a, &pl->filter, first ? &ev_filter : NULL);
        nwait = 0, wait = NULL;
    }
    if (st == PSR_OK && pl->best_scratch)
        st = psr_clear_if_dirty(ctx, &ctx->sample_dirty, &ctx->best_scratch, &nwait, &wait,
                                "the sampler's row counts");
    if (st == PSR_OK)
        st = psr_enqueue_groups(ctx, pl->sample, "psr_gumbel_sample", pl->parts, wg, nwait, wait,
                                (first || last) ? &ev_sample : NULL);
    if (st == PSR_OK && pl->finalize)
        st = psr_enqueue_groups(ctx, pl->finalize, "psr_gumbel_finalize", a->rows, wg, 0, NULL,
                                last ? &ev_final : NULL);
    if (st == PSR_OK && last) {
        *last = ev_final ? ev_final : ev_sample;
        if (!ev_final && ev_sample)
            clRetainEvent(ev_sample);
    }
    if (st == PSR_OK && first) {
        *first = ev_filter ? ev_filter : ev_sample;
        if (*first)
            clRetainEvent(*first);
    }
    if (ev_filter)
        clReleaseEvent(ev_filter);
    if (ev_sample)
        clReleaseEvent(ev_sample);
    if (st != PSR_OK && ev_final)
        clReleaseEvent(ev_final);
    return st;
}

/* Cold calls on the host (host_serve.c): what the oracle computes bit for
 * bit, unsharded (a shard's record holds the score, not only the token). */
static bool on_host(psr_context *ctx, const psr_sample_args *a, unsigned flags)
{
    psr_variant v = psr_variant_of(PSR_KERNELS_SAMPLE, flags, a->logits_dtype);
    if (a->shard_count || v.fast_math)
        return false;
    return psr_cold_call_on_host(ctx, PSR_WARM_SAMPLE, flags, a->logits_dtype, psr_filter_requested(a), a->rows,
                                 a->row_stride ? a->row_stride : a->vocab, 0) &&
           psr_host_can_wait(a->num_events_in_wait_list, a->event_wait_list);
}

psr_status psr_sample(psr_context *ctx, const psr_sample_args *args, cl_event *event)
{
    return psr_sample_enqueue(ctx, args, NULL, event);
}

psr_status psr_sample_read_args(psr_context *ctx, const psr_sample_args *args, const char *call,
                                psr_sample_args *a, unsigned *flags)
{
    psr_status st = psr_args_read(ctx, args, &psr_sample_args_layout, call, a);
    return st == PSR_OK ? check_args(ctx, a, flags, true) : st;
}

psr_status psr_sample_enqueue(psr_context *ctx, const psr_sample_args *args, cl_event *first,
                              cl_event *last)
{
    psr_sample_args a;
    unsigned flags;
    psr_status st = psr_enqueue_begin(ctx, args, &psr_sample_args_layout, "psr_sample", &a, first, last);
    if (st == PSR_OK)
        st = check_args(ctx, &a, &flags, false);
    if (st != PSR_OK)
        return st;
    if (on_host(ctx, &a, flags)) {
        st = psr_host_sample(ctx, &a, flags, first, last);
        if (st == PSR_OK)
            psr_record_flags(ctx, a.effective_noise, legacy_layout(&a), flags);
        ctx->host_served_last = st == PSR_OK;
        return st;
    }
    ctx->host_served_last = false;
    sample_plan pl;
    plan_sample(ctx, &a, flags, &pl);
    st = reserve_sample(ctx, &a, &pl);
    if (st == PSR_OK)
        st = bind_plan(ctx, &a, &pl);
    if (st == PSR_OK)
        st = launch_sample(ctx, &a, &pl, first, last);
    if (st == PSR_OK)
        psr_record_flags(ctx, a.effective_noise, legacy_layout(&a), flags);
    if (st == PSR_OK)
        psr_upgrade_after_call(ctx, PSR_WARM_SAMPLE, flags, a.logits_dtype, pl.v.filtered);
    return st;
}
