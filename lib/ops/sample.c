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
    REQUIRE(a->logits, PSR_ERR_NULL_ARGUMENT, "args->logits is NULL");
    REQUIRE(a->seeds, PSR_ERR_NULL_ARGUMENT, "args->seeds is NULL");
    REQUIRE(a->temperatures, PSR_ERR_NULL_ARGUMENT, "args->temperatures is NULL");
    REQUIRE(a->positions, PSR_ERR_NULL_ARGUMENT, "args->positions is NULL");
    REQUIRE(a->tokens, PSR_ERR_NULL_ARGUMENT, "args->tokens is NULL");
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
    psr_status st = psr_check_buffer(ctx, a->logits, logits_bytes, "args->logits");
    if (st == PSR_OK)
        st = psr_check_buffer(ctx, a->seeds, a->requests * 8, "args->seeds");
    if (st == PSR_OK)
        st = psr_check_buffer(ctx, a->temperatures, a->requests * 4, "args->temperatures");
    if (st == PSR_OK)
        st = psr_check_buffer(ctx, a->positions, a->rows * 8, "args->positions");
    if (st == PSR_OK)
        st = psr_check_buffer(ctx, a->tokens, a->rows * 4, "args->tokens");
    if (st == PSR_OK && a->row_request)
        st = psr_check_buffer(ctx, a->row_request, a->rows * 4, "args->row_request");
    if (st == PSR_OK && a->row_flags)
        st = psr_check_buffer(ctx, a->row_flags, a->rows * 4, "args->row_flags");
    if (st == PSR_OK && a->draft_cache_rows)
        st = psr_check_buffer(ctx, a->draft_cache_rows, a->rows * 4, "args->draft_cache_rows");
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

/* After a launch is fully enqueued: the flags it used. */
static void record_flags(psr_context *ctx, const psr_sample_args *a, unsigned flags)
{
    ctx->last_sample_flags = flags;
    if (a->effective_flags)
        *a->effective_flags = flags;
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
    psr_variant v = {.set = PSR_KERNELS_GUMBEL,
                     .drafting = (flags & PSR_SAMPLE_DRAFTING) != 0,
                     .fp64 = (flags & PSR_SAMPLE_FP64_NOISE) != 0,
                     .wide = (flags & PSR_SAMPLE_WIDE_NOISE) != 0,
                     .dtype = a->logits_dtype,
                     .fast_math = (flags & PSR_SAMPLE_FAST_MATH) != 0,
                     .method = !(flags & PSR_SAMPLE_RACE) ? 0 : (flags & PSR_SAMPLE_PROBS) ? 2 : 1,
                     .filtered = psr_filter_requested(a)};
    cl_kernel sample, finalize = NULL;
    cl_mem cut = NULL;
    cl_event ev_filter = NULL;
    cl_uint nwait = a->num_events_in_wait_list;
    const cl_event *wait = a->event_wait_list;
    st = psr_kernel_get(ctx, &v, "psr_gumbel_sample", &sample);
    if (st != PSR_OK)
        return st;

    cl_uint chunk, groups;
    psr_split_rows(ctx, a->rows, a->vocab, &chunk, &groups);
    size_t parts = a->rows * groups;
    size_t acc = v.fp64 ? sizeof(cl_double) : sizeof(cl_float);
    cl_mem part_value = NULL, part_index = NULL, best_keys = NULL, best_count = NULL;
    /* One kernel when rows can finish themselves (see cl/gumbel.cl): a key
     * per group, a count per row. */
    bool one_pass = groups > 1 && !v.fp64 && (ctx->info.capabilities & PSR_CAP_INT64_ATOMICS) &&
                    a->vocab <= (1u << 20) && groups < 4096 && !ctx->tuning.sample.two_pass;
    if (one_pass) {
        st = psr_scratch_reserve(ctx, &ctx->best_keys, parts * sizeof(cl_ulong));
        if (st == PSR_OK)
            st = psr_scratch_reserve(ctx, &ctx->best_count, a->rows * sizeof(cl_uint));
        if (st != PSR_OK)
            goto fail;
        best_keys = ctx->best_keys.buffer;
        best_count = ctx->best_count.buffer;
    } else if (groups > 1) {
        st = psr_kernel_get(ctx, &v, "psr_gumbel_finalize", &finalize);
        if (st == PSR_OK)
            st = psr_scratch_reserve(ctx, &ctx->part_value, parts * acc);
        if (st == PSR_OK)
            st = psr_scratch_reserve(ctx, &ctx->part_index, parts * sizeof(cl_uint));
        if (st != PSR_OK)
            goto fail;
        part_value = ctx->part_value.buffer;
        part_index = ctx->part_index.buffer;
    }

    /* Filters: a threshold pre-pass, only when asked for. */
    psr_filter_plan filter = {0};
    bool filtered = psr_filter_requested(a);
    if (filtered) {
        st = psr_filter_prepare(ctx, a, &v, true, &filter);
        if (st != PSR_OK)
            return st;
        cut = filter.cut;
    }

    cl_ulong offset = a->logits_offset;
    cl_ulong stride = a->row_stride ? a->row_stride : a->vocab;
    cl_uint vocab = (cl_uint)a->vocab;
    cl_ulong cache_stride = a->vocab;
    const size_t ms = sizeof(cl_mem);
    cl_uint requests = (cl_uint)a->requests;
    cl_uint cache_rows = (cl_uint)(a->draft_cache_rows ? a->draft_cache_rows_total : a->rows);
    cl_uint cache_k = (cl_uint)a->draft_cache_k, draft_step = (cl_uint)a->draft_step;
    const size_t sizes[] = {ms, 8, 8, 4, ms, ms, ms, ms, 4, 4, ms, ms, ms, ms, ms, ms, 8, ms, ms, 4, 4, 4, 4, ms};
    const void *values[] = {&a->logits,      &offset,         &stride,       &vocab,
                            &a->row_request, &a->seeds,       &a->temperatures, &a->positions,
                            &groups,         &chunk,          &part_value,   &part_index,
                            &a->tokens,      &a->row_flags,   &a->draft_cache, &a->draft_cache_rows,
                            &cache_stride,   &best_keys,      &best_count,   &requests,
                            &cache_rows,     &cache_k,        &draft_step,   &cut};
    st = psr_set_kernel_args(ctx, sample, "psr_gumbel_sample", 24, sizes, values);
    if (st == PSR_OK && finalize) {
        const size_t fsizes[] = {4, ms, ms, ms, ms, ms, ms, ms, 4, ms, ms, 4, ms};
        const void *fvalues[] = {&groups,          &part_value,     &part_index,
                                 &a->row_request,  &a->temperatures, &a->positions,
                                 &a->tokens,       &a->row_flags,   &requests,
                                 &a->draft_cache,  &a->draft_cache_rows, &cache_rows,
                                 &cut};
        st = psr_set_kernel_args(ctx, finalize, "psr_gumbel_finalize", 13, fsizes, fvalues);
    }
    if (st != PSR_OK)
        goto fail;

    /* Every argument is set, so nothing that can fail comes between the
     * launches (as in lib/verify.c). The pre-pass waits for the caller's
     * events, and the sampling kernel follows it by queue order. The
     * pre-pass may write tokens (rows it draws itself), so it comes after
     * every step that can fail for want of memory. */
    if (filtered) {
        st = psr_filter_launch(ctx, a, &filter, first ? &ev_filter : NULL);
        if (st != PSR_OK)
            return st;
        nwait = 0;
        wait = NULL;
    }
    cl_event ev_sample = NULL;
    st = psr_enqueue_groups(ctx, sample, "psr_gumbel_sample", parts, ctx->tuning.sample.work_group_size,
                            nwait, wait, (first || last) ? &ev_sample : NULL);
    if (st == PSR_OK && finalize) {
        cl_event ev_final = NULL;
        st = psr_enqueue_groups(ctx, finalize, "psr_gumbel_finalize", a->rows,
                                ctx->tuning.sample.work_group_size, 0, NULL, last ? &ev_final : NULL);
        /* From here ev_sample is only a candidate for *first. */
        if (last && st == PSR_OK)
            *last = ev_final;
    } else if (st == PSR_OK && last && ev_sample) {
        *last = ev_sample;
        clRetainEvent(ev_sample);
    }
    if (st == PSR_OK) {
        record_flags(ctx, a, flags);
        if (first) {
            /* The first kernel: the pre-pass when there is one. */
            *first = ev_filter ? ev_filter : ev_sample;
            if (ev_filter)
                ev_filter = NULL;
            else
                ev_sample = NULL;
        }
    }
    if (ev_sample)
        clReleaseEvent(ev_sample);

fail:
    if (ev_filter)
        clReleaseEvent(ev_filter);
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

psr_status psr_sample_host_filtered(psr_context *ctx, const void *logits, psr_dtype dtype,
                                    size_t rows, size_t vocab, size_t row_stride,
                                    const int64_t *seeds, const int64_t *positions,
                                    const float *temperatures, const int32_t *top_k,
                                    const float *top_p, const float *min_p, unsigned flags,
                                    int32_t *tokens, uint32_t *row_flags, size_t *no_finite_rows)
{
    if (!ctx)
        return psr_fail(NULL, PSR_ERR_NULL_ARGUMENT, "psr_sample_host: ctx is NULL");
    REQUIRE(logits, PSR_ERR_NULL_ARGUMENT, "psr_sample_host: logits is NULL");
    REQUIRE(seeds, PSR_ERR_NULL_ARGUMENT, "psr_sample_host: seeds is NULL");
    REQUIRE(positions, PSR_ERR_NULL_ARGUMENT, "psr_sample_host: positions is NULL");
    REQUIRE(temperatures, PSR_ERR_NULL_ARGUMENT, "psr_sample_host: temperatures is NULL");
    REQUIRE(tokens, PSR_ERR_NULL_ARGUMENT, "psr_sample_host: tokens is NULL");
    REQUIRE(rows > 0, PSR_ERR_INVALID_ARGUMENT, "psr_sample_host: rows is 0");
    REQUIRE(vocab > 0, PSR_ERR_INVALID_ARGUMENT, "psr_sample_host: vocab is 0");
    REQUIRE((unsigned)dtype <= PSR_DTYPE_BF16, PSR_ERR_INVALID_ARGUMENT,
            "psr_sample_host: dtype %d is not a psr_dtype", (int)dtype);
    size_t stride = row_stride ? row_stride : vocab;
    REQUIRE(stride >= vocab, PSR_ERR_INVALID_ARGUMENT,
            "psr_sample_host: row_stride %zu is smaller than vocab %zu", stride, vocab);
    REQUIRE(vocab <= INT32_MAX, PSR_ERR_INVALID_ARGUMENT,
            "psr_sample_host: vocab %zu does not fit an int32 token id", vocab);
    unsigned resolved;
    psr_status fst = psr_resolve_flags(ctx, flags, "psr_sample_host: flags", &resolved);
    if (fst != PSR_OK)
        return fst;
    for (size_t r = 0; r < rows; r++) {
        REQUIRE(positions[r] >= 0 && positions[r] < PSR_MAX_POSITION, PSR_ERR_POSITION_RANGE,
                "psr_sample_host: positions[%zu] = %lld is outside [0, 2^30)", r,
                (long long)positions[r]);
        REQUIRE(temperature_ok(temperatures[r]), PSR_ERR_TEMPERATURE,
                "psr_sample_host: temperatures[%zu] = %g is not 0 or a positive normal number", r,
                (double)temperatures[r]);
        psr_status vst = psr_filter_check_values(ctx, "psr_sample_host", r, top_k, top_p, min_p);
        if (vst != PSR_OK)
            return vst;
    }
    REQUIRE(!(top_k || top_p || min_p) || !(resolved & PSR_SAMPLE_PROBS), PSR_ERR_INVALID_ARGUMENT,
            "psr_sample_host: top_k, top_p and min_p filter logits: not with PSR_SAMPLE_PROBS");

    REQUIRE(rows <= UINT32_MAX / 64, PSR_ERR_INVALID_ARGUMENT, "psr_sample_host: rows %zu is too large",
            rows);
    size_t logits_bytes = psr_logits_bytes(0, rows, stride, vocab, psr_dtype_size(dtype));
    REQUIRE(logits_bytes > 0, PSR_ERR_INVALID_ARGUMENT,
            "psr_sample_host: rows x row_stride %zu overflows the address space", stride);
    cl_int err = CL_SUCCESS;
    cl_mem bufs[9] = {NULL};
    const cl_mem_flags in = CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR;
    bufs[0] = clCreateBuffer(ctx->cl_ctx, in, logits_bytes, (void *)logits, &err);
    if (err == CL_SUCCESS)
        bufs[1] = clCreateBuffer(ctx->cl_ctx, in, rows * 8, (void *)seeds, &err);
    if (err == CL_SUCCESS)
        bufs[2] = clCreateBuffer(ctx->cl_ctx, in, rows * 8, (void *)positions, &err);
    if (err == CL_SUCCESS)
        bufs[3] = clCreateBuffer(ctx->cl_ctx, in, rows * 4, (void *)temperatures, &err);
    if (err == CL_SUCCESS)
        bufs[4] = clCreateBuffer(ctx->cl_ctx, CL_MEM_WRITE_ONLY, rows * 4, NULL, &err);
    if (err == CL_SUCCESS)
        bufs[5] = clCreateBuffer(ctx->cl_ctx, CL_MEM_WRITE_ONLY, rows * 4, NULL, &err);
    const void *filters[3] = {top_k, top_p, min_p};
    for (int f = 0; f < 3; f++)
        if (err == CL_SUCCESS && filters[f])
            bufs[6 + f] = clCreateBuffer(ctx->cl_ctx, in, rows * 4, (void *)filters[f], &err);
    psr_status st = PSR_OK;
    if (err != CL_SUCCESS)
        st = psr_fail(ctx, PSR_ERR_OPENCL, "psr_sample_host: allocating device buffers failed: %s (%d)",
                      psr_cl_error_string(err), err);

    int32_t *tok = NULL;
    uint32_t *fl = NULL;
    if (st == PSR_OK) {
        tok = malloc(rows * sizeof *tok);
        fl = malloc(rows * sizeof *fl);
        if (!tok || !fl)
            st = psr_fail(ctx, PSR_ERR_OUT_OF_HOST_MEMORY, "psr_sample_host: out of memory");
    }
    if (st == PSR_OK) {
        psr_sample_args a;
        psr_sample_args_init(&a);
        a.rows = rows;
        a.vocab = vocab;
        a.logits = bufs[0];
        a.logits_dtype = dtype;
        a.row_stride = stride;
        a.requests = rows;
        a.seeds = bufs[1];
        a.positions = bufs[2];
        a.temperatures = bufs[3];
        a.tokens = bufs[4];
        a.row_flags = bufs[5];
        a.top_k = bufs[6];
        a.top_p = bufs[7];
        a.min_p = bufs[8];
        a.flags = flags;
        st = psr_sample(ctx, &a, NULL);
    }
    if (st == PSR_OK) {
        err = clEnqueueReadBuffer(ctx->queue, bufs[4], CL_TRUE, 0, rows * 4, tok, 0, NULL, NULL);
        if (err == CL_SUCCESS)
            err = clEnqueueReadBuffer(ctx->queue, bufs[5], CL_TRUE, 0, rows * 4, fl, 0, NULL, NULL);
        if (err != CL_SUCCESS)
            st = psr_fail(ctx, PSR_ERR_OPENCL, "psr_sample_host: reading results failed: %s (%d)",
                          psr_cl_error_string(err), err);
    }
    if (st == PSR_OK) {
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
    for (int i = 0; i < 9; i++)
        if (bufs[i])
            clReleaseMemObject(bufs[i]);
    return st;
}
