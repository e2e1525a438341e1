/* Host side of Gumbel-max sampling (cl/gumbel.cl): argument checks,
 * launch geometry, and the host-pointer convenience call. */
#include "ops/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void psr_sample_args_init(psr_sample_args *args)
{
    if (!args)
        return;
    memset(args, 0, sizeof *args);
    args->struct_size = sizeof *args;
    args->logits_dtype = PSR_DTYPE_F32;
}

static psr_status check_args(psr_context *ctx, const psr_sample_args *a)
{
    REQUIRE(a->struct_size == sizeof *a, PSR_ERR_INVALID_ARGUMENT,
            "args->struct_size is %zu, expected %zu: call psr_sample_args_init() first",
            a->struct_size, sizeof *a);
    REQUIRE(a->rows > 0, PSR_ERR_INVALID_ARGUMENT, "args->rows is 0");
    REQUIRE(a->rows <= UINT32_MAX / 64, PSR_ERR_INVALID_ARGUMENT, "args->rows %zu is too large",
            a->rows);
    REQUIRE(a->vocab > 0, PSR_ERR_INVALID_ARGUMENT, "args->vocab is 0");
    REQUIRE(a->vocab <= INT32_MAX, PSR_ERR_INVALID_ARGUMENT,
            "args->vocab %zu does not fit an int32 token id", a->vocab);
    REQUIRE((unsigned)a->logits_dtype <= PSR_DTYPE_BF16, PSR_ERR_INVALID_ARGUMENT,
            "args->logits_dtype %d is not a psr_dtype", (int)a->logits_dtype);
    unsigned flags;
    psr_status fst = psr_resolve_flags(ctx, a->flags, "args->flags", &flags);
    if (fst != PSR_OK)
        return fst;
    REQUIRE(!(flags & PSR_SAMPLE_PROBS) || a->logits_dtype == PSR_DTYPE_F32, PSR_ERR_INVALID_ARGUMENT,
            "args->logits_dtype must be PSR_DTYPE_F32 for probabilities (PSR_SAMPLE_PROBS)");
    size_t stride = a->row_stride ? a->row_stride : a->vocab;
    REQUIRE(stride >= a->vocab, PSR_ERR_INVALID_ARGUMENT,
            "args->row_stride %zu is smaller than args->vocab %zu", stride, a->vocab);
    const psr_buffer_need required[] = {{a->logits, 0, "args->logits"},
                                        {a->seeds, 0, "args->seeds"},
                                        {a->temperatures, 0, "args->temperatures"},
                                        {a->positions, 0, "args->positions"},
                                        {a->tokens, 0, "args->tokens"}};
    fst = psr_check_required(ctx, required, sizeof required / sizeof required[0]);
    if (fst != PSR_OK)
        return fst;
    REQUIRE(a->requests > 0, PSR_ERR_INVALID_ARGUMENT, "args->requests is 0");
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

    size_t logits_bytes =
        psr_logits_bytes(a->logits_offset, a->rows, stride, a->vocab, psr_dtype_size(a->logits_dtype));
    REQUIRE(logits_bytes > 0, PSR_ERR_INVALID_ARGUMENT,
            "args->logits_offset %zu + (rows - 1) x row_stride %zu overflows the address space",
            a->logits_offset, stride);
    const psr_buffer_need needs[] = {
        {a->logits, logits_bytes, "args->logits"},
        {a->seeds, a->requests * 8, "args->seeds"},
        {a->temperatures, a->requests * 4, "args->temperatures"},
        {a->positions, a->rows * 8, "args->positions"},
        {a->tokens, a->rows * 4, "args->tokens"},
        {a->row_request, a->rows * 4, "args->row_request"},
        {a->row_flags, a->rows * 4, "args->row_flags"},
        {a->draft_cache_rows, a->rows * 4, "args->draft_cache_rows"}};
    psr_status st = psr_check_buffers(ctx, needs, sizeof needs / sizeof needs[0]);
    REQUIRE(!a->draft_cache_k || !a->draft_cache_rows, PSR_ERR_INVALID_ARGUMENT,
            "args->draft_cache_k and args->draft_cache_rows are both set: choose one layout");
    REQUIRE(a->draft_step < a->draft_cache_k || (!a->draft_cache_k && !a->draft_step),
            PSR_ERR_INVALID_ARGUMENT, "args->draft_step %zu is not below args->draft_cache_k %zu",
            a->draft_step, a->draft_cache_k);
    REQUIRE(a->draft_cache_k <= INT32_MAX / a->requests, PSR_ERR_INVALID_ARGUMENT,
            "args->requests x draft_cache_k is too large");
    if (st == PSR_OK && a->draft_cache) {
        size_t cache_rows = a->draft_cache_rows ? a->draft_cache_rows_total
                            : a->draft_cache_k  ? a->requests * a->draft_cache_k
                                                : a->rows;
        REQUIRE(cache_rows > 0, PSR_ERR_INVALID_ARGUMENT,
                "args->draft_cache_rows_total is 0 with args->draft_cache_rows set");
        REQUIRE(cache_rows <= SIZE_MAX / 4 / a->vocab, PSR_ERR_INVALID_ARGUMENT,
                "args->draft_cache_rows_total %zu x vocab overflows the address space", cache_rows);
        st = psr_check_buffer(ctx, a->draft_cache, cache_rows * a->vocab * 4, "args->draft_cache");
    }
    if (st == PSR_OK)
        st = psr_filter_check(ctx, a, flags);
    return st;
}

static psr_status bind_sample(psr_context *ctx, cl_kernel k, const psr_sample_args *a,
                              const psr_sample_params *params, cl_mem part_value, cl_mem part_index,
                              cl_mem best_keys, cl_mem best_count, cl_mem cut)
{
    psr_kernel_args b = psr_kernel_args_begin(ctx, k, "psr_gumbel_sample");
    psr_arg_value(&b, "p", params, sizeof *params);
    psr_arg_mem(&b, "logits", a->logits);
    psr_arg_mem(&b, "row_request", a->row_request);
    psr_arg_mem(&b, "seeds", a->seeds);
    psr_arg_mem(&b, "temperatures", a->temperatures);
    psr_arg_mem(&b, "positions", a->positions);
    psr_arg_mem(&b, "part_value", part_value);
    psr_arg_mem(&b, "part_index", part_index);
    psr_arg_mem(&b, "tokens", a->tokens);
    psr_arg_mem(&b, "row_flags", a->row_flags);
    psr_arg_mem(&b, "draft_cache", a->draft_cache);
    psr_arg_mem(&b, "draft_cache_rows", a->draft_cache_rows);
    psr_arg_mem(&b, "best_keys", best_keys);
    psr_arg_mem(&b, "best_count", best_count);
    psr_arg_mem(&b, "thresholds", cut);
    return psr_kernel_args_end(&b);
}

static psr_status bind_finalize(psr_context *ctx, cl_kernel k, const psr_sample_args *a,
                                const psr_sample_params *params, cl_mem part_value, cl_mem part_index,
                                cl_mem cut)
{
    psr_kernel_args b = psr_kernel_args_begin(ctx, k, "psr_gumbel_finalize");
    psr_arg_value(&b, "p", params, sizeof *params);
    psr_arg_mem(&b, "part_value", part_value);
    psr_arg_mem(&b, "part_index", part_index);
    psr_arg_mem(&b, "row_request", a->row_request);
    psr_arg_mem(&b, "temperatures", a->temperatures);
    psr_arg_mem(&b, "positions", a->positions);
    psr_arg_mem(&b, "tokens", a->tokens);
    psr_arg_mem(&b, "row_flags", a->row_flags);
    psr_arg_mem(&b, "draft_cache", a->draft_cache);
    psr_arg_mem(&b, "draft_cache_rows", a->draft_cache_rows);
    psr_arg_mem(&b, "thresholds", cut);
    return psr_kernel_args_end(&b);
}

/* After a launch is fully enqueued: the flags it used. */
static void record_flags(psr_context *ctx, const psr_sample_args *a, unsigned flags)
{
    ctx->last_sample_flags = flags;
    if (a->effective_flags)
        *a->effective_flags = flags;
}

/* One call's launch: its kernels, geometry and parameters. */
typedef struct sample_plan {
    psr_variant v;
    cl_kernel sample, finalize; /* finalize: rows split without one pass */
    size_t parts;               /* sampling groups */
    bool one_pass;
    psr_filter_plan filter;     /* its kernels NULL without filters */
    cl_mem part_value, part_index, best_keys, best_count;
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
    pl->one_pass = psr_one_pass(ctx, a->vocab, groups, pl->v.fp64);
    pl->params = (psr_sample_params){
        .rows = psr_rows_params_of(a->logits_offset, a->row_stride, a->vocab, a->requests, groups, chunk),
        .draft_cache_stride = a->vocab,
        .draft_cache_rows_total = (psr_uint32_t)(a->draft_cache_rows ? a->draft_cache_rows_total : a->rows),
        .draft_cache_k = (psr_uint32_t)a->draft_cache_k,
        .draft_step = (psr_uint32_t)a->draft_step};
}

/* The kernels and scratch of the plan: one pass keeps a key per group and
 * a count per row (cl/gumbel.cl); other split rows keep partials for a
 * finishing kernel. Filters reserve theirs and bind their pre-pass. */
static psr_status reserve_sample(psr_context *ctx, const psr_sample_args *a, sample_plan *pl)
{
    cl_uint groups = pl->params.rows.groups_per_row;
    psr_status st = psr_kernel_get(ctx, &pl->v, "psr_gumbel_sample", &pl->sample);
    if (st == PSR_OK && pl->one_pass) {
        st = psr_scratch_reserve(ctx, &ctx->best_keys, pl->parts * sizeof(cl_ulong));
        if (st == PSR_OK)
            st = psr_scratch_reserve(ctx, &ctx->best_count, a->rows * sizeof(cl_uint));
        pl->best_keys = ctx->best_keys.buffer;
        pl->best_count = ctx->best_count.buffer;
    } else if (st == PSR_OK && groups > 1) {
        st = psr_reserve_partials(ctx, &pl->v, "psr_gumbel_finalize", pl->parts, &pl->finalize);
        pl->part_value = ctx->part_value.buffer;
        pl->part_index = ctx->part_index.buffer;
    }
    if (st == PSR_OK && pl->v.filtered)
        st = psr_filter_prepare(ctx, a, &pl->v, true, &pl->filter);
    return st;
}

static psr_status bind_plan(psr_context *ctx, const psr_sample_args *a, const sample_plan *pl)
{
    psr_status st = bind_sample(ctx, pl->sample, a, &pl->params, pl->part_value, pl->part_index,
                                pl->best_keys, pl->best_count, pl->filter.cut);
    if (st == PSR_OK && pl->finalize)
        st = bind_finalize(ctx, pl->finalize, a, &pl->params, pl->part_value, pl->part_index,
                           pl->filter.cut);
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
    if (pl->v.filtered) {
        st = psr_filter_launch(ctx, a, &pl->filter, first ? &ev_filter : NULL);
        nwait = 0, wait = NULL;
    }
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

psr_status psr_sample_enqueue(psr_context *ctx, const psr_sample_args *a, cl_event *first,
                              cl_event *last)
{
    if (first)
        *first = NULL;
    if (last)
        *last = NULL;
    psr_status st = check_args(ctx, a);
    if (st != PSR_OK)
        return st;
    unsigned flags;
    psr_resolve_flags(ctx, a->flags, "args->flags", &flags); /* checked above */
    sample_plan pl;
    plan_sample(ctx, a, flags, &pl);
    st = reserve_sample(ctx, a, &pl);
    if (st == PSR_OK)
        st = bind_plan(ctx, a, &pl);
    if (st == PSR_OK)
        st = launch_sample(ctx, a, &pl, first, last);
    if (st == PSR_OK)
        record_flags(ctx, a, flags);
    return st;
}

psr_status psr_sample(psr_context *ctx, const psr_sample_args *args, cl_event *event)
{
    if (!ctx)
        return psr_fail(NULL, PSR_ERR_NULL_ARGUMENT, "psr_sample: ctx is NULL");
    if (!args)
        return psr_fail(ctx, PSR_ERR_NULL_ARGUMENT, "psr_sample: args is NULL");
    return psr_sample_enqueue(ctx, args, NULL, event);
}

/* ---- the host-pointer convenience call ---- */

static bool temperature_ok(float t)
{
    return t == 0.0f || (isnormal(t) && t > 0.0f);
}

psr_status psr_sample_host(psr_context *ctx, const void *logits, psr_dtype dtype, size_t rows,
                           size_t vocab, size_t row_stride, const int64_t *seeds,
                           const int64_t *positions, const float *temperatures, unsigned flags,
                           int32_t *tokens, uint32_t *row_flags, size_t *no_finite_rows)
{
    if (!ctx)
        return psr_fail(NULL, PSR_ERR_NULL_ARGUMENT, "psr_sample_host: ctx is NULL");
    return psr_sample_host_filtered(ctx, logits, dtype, rows, vocab, row_stride, seeds, positions,
                                    temperatures, NULL, NULL, NULL, flags, tokens, row_flags,
                                    no_finite_rows);
}

/* The host call's arrays, checked before anything reaches the device. */
typedef struct host_call {
    const void *logits;
    psr_dtype dtype;
    size_t rows, vocab, stride;
    const int64_t *seeds, *positions;
    const float *temperatures;
    const void *filters[3]; /* top_k, top_p, min_p */
    unsigned flags;
} host_call;

static psr_status check_host_rows(psr_context *ctx, const host_call *c)
{
    for (size_t r = 0; r < c->rows; r++) {
        REQUIRE(c->positions[r] >= 0 && c->positions[r] < PSR_MAX_POSITION, PSR_ERR_POSITION_RANGE,
                "psr_sample_host: positions[%zu] = %lld is outside [0, 2^30)", r,
                (long long)c->positions[r]);
        REQUIRE(temperature_ok(c->temperatures[r]), PSR_ERR_TEMPERATURE,
                "psr_sample_host: temperatures[%zu] = %g is not 0 or a positive normal number", r,
                (double)c->temperatures[r]);
        psr_status st = psr_filter_check_values(ctx, "psr_sample_host", r, c->filters[0], c->filters[1],
                                                c->filters[2]);
        if (st != PSR_OK)
            return st;
    }
    return PSR_OK;
}

static psr_status check_host_call(psr_context *ctx, const host_call *c, int32_t *tokens)
{
    REQUIRE(c->logits, PSR_ERR_NULL_ARGUMENT, "psr_sample_host: logits is NULL");
    REQUIRE(c->seeds, PSR_ERR_NULL_ARGUMENT, "psr_sample_host: seeds is NULL");
    REQUIRE(c->positions, PSR_ERR_NULL_ARGUMENT, "psr_sample_host: positions is NULL");
    REQUIRE(c->temperatures, PSR_ERR_NULL_ARGUMENT, "psr_sample_host: temperatures is NULL");
    REQUIRE(tokens, PSR_ERR_NULL_ARGUMENT, "psr_sample_host: tokens is NULL");
    REQUIRE(c->rows > 0, PSR_ERR_INVALID_ARGUMENT, "psr_sample_host: rows is 0");
    REQUIRE(c->vocab > 0, PSR_ERR_INVALID_ARGUMENT, "psr_sample_host: vocab is 0");
    REQUIRE((unsigned)c->dtype <= PSR_DTYPE_BF16, PSR_ERR_INVALID_ARGUMENT,
            "psr_sample_host: dtype %d is not a psr_dtype", (int)c->dtype);
    REQUIRE(c->stride >= c->vocab, PSR_ERR_INVALID_ARGUMENT,
            "psr_sample_host: row_stride %zu is smaller than vocab %zu", c->stride, c->vocab);
    REQUIRE(c->vocab <= INT32_MAX, PSR_ERR_INVALID_ARGUMENT,
            "psr_sample_host: vocab %zu does not fit an int32 token id", c->vocab);
    unsigned resolved;
    psr_status st = psr_resolve_flags(ctx, c->flags, "psr_sample_host: flags", &resolved);
    if (st == PSR_OK)
        st = check_host_rows(ctx, c);
    if (st != PSR_OK)
        return st;
    bool filtered = c->filters[0] || c->filters[1] || c->filters[2];
    REQUIRE(!filtered || !(resolved & PSR_SAMPLE_PROBS), PSR_ERR_INVALID_ARGUMENT,
            "psr_sample_host: top_k, top_p and min_p filter logits: not with PSR_SAMPLE_PROBS");
    REQUIRE(c->rows <= UINT32_MAX / 64, PSR_ERR_INVALID_ARGUMENT, "psr_sample_host: rows %zu is too large",
            c->rows);
    REQUIRE(psr_logits_bytes(0, c->rows, c->stride, c->vocab, psr_dtype_size(c->dtype)) > 0,
            PSR_ERR_INVALID_ARGUMENT, "psr_sample_host: rows x row_stride %zu overflows the address space",
            c->stride);
    return PSR_OK;
}

/* Device copies of the inputs and room for the outputs: logits, seeds,
 * positions, temperatures, tokens, row flags, then the three filters. */
enum { HOST_LOGITS, HOST_SEEDS, HOST_POSITIONS, HOST_TEMPS, HOST_TOKENS, HOST_FLAGS, HOST_FILTERS,
       HOST_BUFFERS = HOST_FILTERS + 3 };

static psr_status upload_host_call(psr_context *ctx, const host_call *c, cl_mem bufs[HOST_BUFFERS])
{
    const cl_mem_flags in = CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR;
    const void *host[HOST_BUFFERS] = {c->logits, c->seeds, c->positions, c->temperatures, NULL, NULL,
                                      c->filters[0], c->filters[1], c->filters[2]};
    size_t rows = c->rows;
    const size_t bytes[HOST_BUFFERS] = {psr_logits_bytes(0, rows, c->stride, c->vocab, psr_dtype_size(c->dtype)),
                                        rows * 8, rows * 8, rows * 4, rows * 4, rows * 4, rows * 4, rows * 4,
                                        rows * 4};
    cl_int err = CL_SUCCESS;
    for (int i = 0; i < HOST_BUFFERS && err == CL_SUCCESS; i++) {
        bool output = i == HOST_TOKENS || i == HOST_FLAGS;
        if (output || host[i])
            bufs[i] = clCreateBuffer(ctx->cl_ctx, output ? CL_MEM_WRITE_ONLY : in, bytes[i], (void *)host[i], &err);
    }
    if (err != CL_SUCCESS)
        return psr_fail(ctx, PSR_ERR_OPENCL, "psr_sample_host: allocating device buffers failed: %s (%d)",
                        psr_cl_error_string(err), err);
    return PSR_OK;
}

static psr_status run_host_call(psr_context *ctx, const host_call *c, const cl_mem bufs[HOST_BUFFERS],
                                int32_t *tok, uint32_t *fl)
{
    psr_sample_args a;
    psr_sample_args_init(&a);
    a.rows = c->rows;
    a.vocab = c->vocab;
    a.logits = bufs[HOST_LOGITS];
    a.logits_dtype = c->dtype;
    a.row_stride = c->stride;
    a.requests = c->rows;
    a.seeds = bufs[HOST_SEEDS];
    a.positions = bufs[HOST_POSITIONS];
    a.temperatures = bufs[HOST_TEMPS];
    a.tokens = bufs[HOST_TOKENS];
    a.row_flags = bufs[HOST_FLAGS];
    a.top_k = bufs[HOST_FILTERS];
    a.top_p = bufs[HOST_FILTERS + 1];
    a.min_p = bufs[HOST_FILTERS + 2];
    a.flags = c->flags;
    psr_status st = psr_sample(ctx, &a, NULL);
    if (st != PSR_OK)
        return st;
    cl_int err = clEnqueueReadBuffer(ctx->queue, a.tokens, CL_TRUE, 0, c->rows * 4, tok, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(ctx->queue, a.row_flags, CL_TRUE, 0, c->rows * 4, fl, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return psr_fail(ctx, PSR_ERR_OPENCL, "psr_sample_host: reading results failed: %s (%d)",
                        psr_cl_error_string(err), err);
    return PSR_OK;
}

psr_status psr_sample_host_filtered(psr_context *ctx, const void *logits, psr_dtype dtype,
                                    size_t rows, size_t vocab, size_t row_stride,
                                    const int64_t *seeds, const int64_t *positions,
                                    const float *temperatures, const int32_t *top_k,
                                    const float *top_p, const float *min_p, unsigned flags,
                                    int32_t *tokens, uint32_t *row_flags, size_t *no_finite_rows)
{
    if (!ctx)
        return psr_fail(NULL, PSR_ERR_NULL_ARGUMENT, "psr_sample_host: ctx is NULL");
    host_call c = {logits, dtype, rows, vocab, row_stride ? row_stride : vocab, seeds, positions,
                   temperatures, {top_k, top_p, min_p}, flags};
    psr_status st = check_host_call(ctx, &c, tokens);
    if (st != PSR_OK)
        return st;
    cl_mem bufs[HOST_BUFFERS] = {NULL};
    int32_t *tok = malloc(rows * sizeof *tok);
    uint32_t *fl = malloc(rows * sizeof *fl);
    st = tok && fl ? upload_host_call(ctx, &c, bufs)
                   : psr_fail(ctx, PSR_ERR_OUT_OF_HOST_MEMORY, "psr_sample_host: out of memory");
    if (st == PSR_OK)
        st = run_host_call(ctx, &c, bufs, tok, fl);
    if (st == PSR_OK) {
        /* Outputs only once the whole call has succeeded. */
        size_t no_finite = 0;
        for (size_t r = 0; r < rows; r++)
            no_finite += (fl[r] & PSR_ROW_NO_FINITE) != 0;
        memcpy(tokens, tok, rows * sizeof *tok);
        if (row_flags)
            memcpy(row_flags, fl, rows * sizeof *fl);
        if (no_finite_rows)
            *no_finite_rows = no_finite;
    }
    free(tok);
    free(fl);
    for (int i = 0; i < HOST_BUFFERS; i++)
        if (bufs[i])
            clReleaseMemObject(bufs[i]);
    return st;
}
