/* Host side of speculative-draft verification (cl/verify.cl): argument
 * checks, the batch layout upload and the launches (two or three, or one
 * for small batches). */
#include "ops/ops.h"

#include <stdlib.h>
#include <string.h>

/* Must match cl/verify.cl. */
#define VERIFY_SB 16384u   /* tokens per super-block of the log-sum-exp */
#define VERIFY_LANES 256u  /* largest work-group of psr_verify_stats */
#define VERIFY_COUNT_BITS 12u /* PSR_REJECT_BITS: the low bits of the count and rejection words */
_Static_assert(PSR_VERIFY_EPOCHS == 1u << (32 - VERIFY_COUNT_BITS),
               "launch numbers fill the words' bits above the count");

/* ctx->verify[] scratch. */
enum { T_LSE, T_BEST, T_BEST_I, Q_LSE, WALKS, STATUS, DONE, REJECTED, TICKETS, REQ_DONE, BEST_COUNT,
       ROW_LSE, BEST_KEYS, VERIFY_SCRATCH };
_Static_assert(VERIFY_SCRATCH == sizeof ((psr_context *)0)->verify / sizeof(psr_scratch),
               "one scratch buffer of ctx->verify per entry");

void psr_verify_args_init(psr_verify_args *args)
{
    if (!args)
        return;
    memset(args, 0, sizeof *args);
    args->struct_size = sizeof *args;
    args->target_dtype = PSR_DTYPE_F32;
    args->tokens_dtype = PSR_TOKENS_I32;
}

static psr_status check_cu(psr_context *ctx, const psr_verify_args *a)
{
    REQUIRE(a->cu[0] == 0, PSR_ERR_INVALID_ARGUMENT, "args->cu[0] is %d, expected 0", (int)a->cu[0]);
    for (size_t r = 0; r < a->requests; r++) {
        int64_t n = (int64_t)a->cu[r + 1] - a->cu[r];
        REQUIRE(n >= 1, PSR_ERR_INVALID_ARGUMENT,
                "args->cu is not increasing at request %zu (cu[%zu] = %d, cu[%zu] = %d): every "
                "request needs its bonus row",
                r, r, (int)a->cu[r], r + 1, (int)a->cu[r + 1]);
        REQUIRE((uint64_t)(n - 1) <= a->max_drafts, PSR_ERR_INVALID_ARGUMENT,
                "request %zu has %lld drafts (args->cu), more than args->max_drafts %zu", r,
                (long long)(n - 1), a->max_drafts);
        REQUIRE(!a->draft_cache || (uint64_t)(n - 1) <= a->draft_cache_k, PSR_ERR_INVALID_ARGUMENT,
                "request %zu has %lld drafts (args->cu), more than the draft cache holds "
                "(args->draft_cache_k %zu)",
                r, (long long)(n - 1), a->draft_cache_k);
    }
    REQUIRE((size_t)a->cu[a->requests] == a->rows, PSR_ERR_INVALID_ARGUMENT,
            "args->cu[%zu] = %d, but args->rows is %zu", a->requests, (int)a->cu[a->requests],
            a->rows);
    return PSR_OK;
}

static psr_status check_args(psr_context *ctx, const psr_verify_args *a, unsigned *flags)
{
    REQUIRE(a->struct_size == sizeof *a, PSR_ERR_INVALID_ARGUMENT,
            "args->struct_size is %zu, expected %zu: call psr_verify_args_init() first",
            a->struct_size, sizeof *a);
    REQUIRE(a->requests > 0, PSR_ERR_INVALID_ARGUMENT, "args->requests is 0");
    REQUIRE(a->requests < INT32_MAX / 64, PSR_ERR_INVALID_ARGUMENT, "args->requests %zu is too large",
            a->requests);
    REQUIRE(a->rows > 0, PSR_ERR_INVALID_ARGUMENT, "args->rows is 0");
    REQUIRE(a->rows < INT32_MAX / 64, PSR_ERR_INVALID_ARGUMENT, "args->rows %zu is too large", a->rows);
    REQUIRE(a->max_drafts < INT32_MAX / 2, PSR_ERR_INVALID_ARGUMENT,
            "args->max_drafts %zu is too large", a->max_drafts);
    REQUIRE(a->vocab > 0, PSR_ERR_INVALID_ARGUMENT, "args->vocab is 0");
    REQUIRE(a->vocab <= INT32_MAX, PSR_ERR_INVALID_ARGUMENT,
            "args->vocab %zu does not fit an int32 token id", a->vocab);
    REQUIRE((unsigned)a->target_dtype <= PSR_DTYPE_BF16, PSR_ERR_INVALID_ARGUMENT,
            "args->target_dtype %d is not a psr_dtype", (int)a->target_dtype);
    REQUIRE((unsigned)a->tokens_dtype <= PSR_TOKENS_I64, PSR_ERR_INVALID_ARGUMENT,
            "args->tokens_dtype %d is not a psr_token_dtype", (int)a->tokens_dtype);
    REQUIRE((unsigned)a->method <= PSR_VERIFY_GREEDY, PSR_ERR_INVALID_ARGUMENT,
            "args->method %d is not a psr_verify_method", (int)a->method);
    REQUIRE(!(a->flags & ~(PSR_SAMPLE_FP64_NOISE | PSR_SAMPLE_WIDE_NOISE)), PSR_ERR_INVALID_ARGUMENT,
            "args->flags 0x%x: verification takes only PSR_SAMPLE_FP64_NOISE or "
            "PSR_SAMPLE_WIDE_NOISE",
            a->flags);
    psr_status st = psr_resolve_flags(ctx, a->flags, "args->flags", flags);
    if (st != PSR_OK)
        return st;
    size_t stride = a->target_row_stride ? a->target_row_stride : a->vocab;
    REQUIRE(stride >= a->vocab, PSR_ERR_INVALID_ARGUMENT,
            "args->target_row_stride %zu is smaller than args->vocab %zu", stride, a->vocab);
    REQUIRE(a->cu, PSR_ERR_NULL_ARGUMENT, "args->cu is NULL");
    REQUIRE(a->target_logits, PSR_ERR_NULL_ARGUMENT, "args->target_logits is NULL");
    REQUIRE(a->draft_tokens, PSR_ERR_NULL_ARGUMENT, "args->draft_tokens is NULL");
    REQUIRE(a->seeds, PSR_ERR_NULL_ARGUMENT, "args->seeds is NULL");
    REQUIRE(a->temperatures, PSR_ERR_NULL_ARGUMENT, "args->temperatures is NULL");
    REQUIRE(a->positions, PSR_ERR_NULL_ARGUMENT, "args->positions is NULL");
    REQUIRE(a->tokens, PSR_ERR_NULL_ARGUMENT, "args->tokens is NULL");
    REQUIRE(a->num_sampled, PSR_ERR_NULL_ARGUMENT, "args->num_sampled is NULL");
    REQUIRE(!a->draft_cache || a->draft_cache_k > 0, PSR_ERR_INVALID_ARGUMENT,
            "args->draft_cache_k is 0 with args->draft_cache set");
    REQUIRE(a->num_events_in_wait_list == 0 || a->event_wait_list, PSR_ERR_NULL_ARGUMENT,
            "args->event_wait_list is NULL but args->num_events_in_wait_list is %u",
            a->num_events_in_wait_list);
    st = check_cu(ctx, a);
    if (st != PSR_OK)
        return st;

    size_t logits_bytes = psr_logits_bytes(a->target_offset, a->rows, stride, a->vocab,
                                           psr_dtype_size(a->target_dtype));
    REQUIRE(logits_bytes > 0, PSR_ERR_INVALID_ARGUMENT,
            "args->target_offset %zu + (rows - 1) x target_row_stride %zu overflows the address "
            "space",
            a->target_offset, stride);
    size_t cols = a->max_drafts + 1;
    size_t tsize = a->tokens_dtype == PSR_TOKENS_I64 ? 8 : 4;
    REQUIRE(cols <= SIZE_MAX / tsize / a->requests, PSR_ERR_INVALID_ARGUMENT,
            "args->requests x (max_drafts + 1) overflows the address space");
    st = psr_check_buffer(ctx, a->target_logits, logits_bytes, "args->target_logits");
    if (st == PSR_OK)
        st = psr_check_buffer(ctx, a->draft_tokens, a->rows * 4, "args->draft_tokens");
    if (st == PSR_OK)
        st = psr_check_buffer(ctx, a->seeds, a->requests * 8, "args->seeds");
    if (st == PSR_OK)
        st = psr_check_buffer(ctx, a->temperatures, a->requests * 4, "args->temperatures");
    if (st == PSR_OK)
        st = psr_check_buffer(ctx, a->positions, a->rows * 8, "args->positions");
    if (st == PSR_OK)
        st = psr_check_buffer(ctx, a->tokens, a->requests * cols * tsize, "args->tokens");
    if (st == PSR_OK)
        st = psr_check_buffer(ctx, a->num_sampled, a->requests * 4, "args->num_sampled");
    if (st == PSR_OK && a->status)
        st = psr_check_buffer(ctx, a->status, 4, "args->status");
    if (st == PSR_OK && a->draft_cache) {
        REQUIRE(a->draft_cache_k <= SIZE_MAX / 4 / a->vocab / a->requests, PSR_ERR_INVALID_ARGUMENT,
                "args->requests x draft_cache_k x vocab overflows the address space");
        st = psr_check_buffer(ctx, a->draft_cache, a->requests * a->draft_cache_k * a->vocab * 4,
                              "args->draft_cache");
    }
    return st;
}

/* Uploads cu, the row-to-request map and the statistics' row order (each
 * request's first draft row, then each request's second, ..., then the
 * bonus rows: row, request, slot in the request and the request's rows),
 * or reuses the last upload when cu is the same (steady decoding repeats
 * its layout). The buffers are never written after creation, so reuse is
 * safe while kernels run. */
static psr_status upload_layout(psr_context *ctx, const psr_verify_args *a)
{
    size_t cu_bytes = (a->requests + 1) * sizeof(int32_t);
    if (ctx->verify_cu && ctx->verify_requests == a->requests &&
        memcmp(ctx->verify_cu, a->cu, cu_bytes) == 0)
        return PSR_OK;
    int32_t *cu = malloc(cu_bytes);
    int32_t *row_req = malloc(a->rows * sizeof *row_req);
    cl_int4 *order = malloc(a->rows * sizeof *order);
    if (!cu || !row_req || !order) {
        free(cu);
        free(row_req);
        free(order);
        return psr_fail(ctx, PSR_ERR_OUT_OF_HOST_MEMORY, "psr_verify: out of memory");
    }
    memcpy(cu, a->cu, cu_bytes);
    for (size_t r = 0; r < a->requests; r++)
        for (int32_t row = cu[r]; row < cu[r + 1]; row++)
            row_req[row] = (int32_t)r;
    size_t placed = 0;
    for (int32_t slot = 0; placed < a->rows - a->requests; slot++)
        for (size_t r = 0; r < a->requests; r++)
            if (slot + 1 < cu[r + 1] - cu[r])
                order[placed++] = (cl_int4){{cu[r] + slot, (cl_int)r, slot, cu[r + 1] - cu[r]}};
    for (size_t r = 0; r < a->requests; r++)
        order[placed++] = (cl_int4){{cu[r + 1] - 1, (cl_int)r, cu[r + 1] - cu[r] - 1, cu[r + 1] - cu[r]}};
    cl_int err = CL_SUCCESS;
    const cl_mem_flags in = CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR;
    cl_mem bufs[3] = {NULL, NULL, NULL};
    void *host[3] = {cu, row_req, order};
    size_t bytes[3] = {cu_bytes, a->rows * sizeof *row_req, a->rows * sizeof *order};
    for (int i = 0; i < 3 && err == CL_SUCCESS; i++)
        bufs[i] = clCreateBuffer(ctx->cl_ctx, in, bytes[i], host[i], &err);
    free(row_req);
    free(order);
    if (err != CL_SUCCESS) {
        for (int i = 0; i < 3; i++)
            if (bufs[i])
                clReleaseMemObject(bufs[i]);
        free(cu);
        return psr_fail(ctx, PSR_ERR_OPENCL, "psr_verify: uploading args->cu failed: %s (%d)",
                        psr_cl_error_string(err), err);
    }
    for (int i = 0; i < 3; i++) {
        if (ctx->verify_layout[i])
            clReleaseMemObject(ctx->verify_layout[i]);
        ctx->verify_layout[i] = bufs[i];
    }
    free(ctx->verify_cu);
    ctx->verify_cu = cu;
    ctx->verify_requests = a->requests;
    return PSR_OK;
}

/* The statistics kernel's launch number (cl/verify.cl's count and
 * rejection words): when it would leave 20 bits, the words are cleared and
 * it starts over. */
static psr_status next_epoch(psr_context *ctx)
{
    if (++ctx->verify_epoch < PSR_VERIFY_EPOCHS)
        return PSR_OK;
    ctx->verify_epoch = 1;
    cl_uint zero = 0;
    cl_int err = CL_SUCCESS;
    for (int i = DONE; i <= BEST_COUNT && err == CL_SUCCESS; i++)
        err = clEnqueueFillBuffer(ctx->queue, ctx->verify[i].buffer, &zero, sizeof zero, 0,
                                  ctx->verify[i].bytes, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
        ctx->verify_epoch = PSR_VERIFY_EPOCHS - 1; /* clear again next time */
        return psr_fail(ctx, PSR_ERR_OPENCL, "psr_verify: clearing the rejection words failed: %s (%d)",
                        psr_cl_error_string(err), err);
    }
    return PSR_OK;
}

psr_status psr_verify(psr_context *ctx, const psr_verify_args *a, cl_event *event)
{
    if (event)
        *event = NULL;
    if (!ctx)
        return psr_fail(NULL, PSR_ERR_NULL_ARGUMENT, "psr_verify: ctx is NULL");
    if (!a)
        return psr_fail(ctx, PSR_ERR_NULL_ARGUMENT, "psr_verify: args is NULL");
    return psr_verify_enqueue(ctx, a, NULL, event);
}

psr_status psr_verify_enqueue(psr_context *ctx, const psr_verify_args *a, cl_event *first,
                              cl_event *event)
{
    if (first)
        *first = NULL;
    if (event)
        *event = NULL;
    ctx->verify_fused_last = false;
    unsigned flags;
    psr_status st = check_args(ctx, a, &flags);
    if (st != PSR_OK)
        return st;
    psr_variant v = {.set = PSR_KERNELS_VERIFY,
                     .fp64 = (flags & PSR_SAMPLE_FP64_NOISE) != 0,
                     .wide = (flags & PSR_SAMPLE_WIDE_NOISE) != 0,
                     .dtype = a->target_dtype};
    cl_kernel stats = NULL, sample = NULL, finalize = NULL, one = NULL;

    cl_uint vocab = (cl_uint)a->vocab;
    cl_uint rows = (cl_uint)a->rows, requests = (cl_uint)a->requests;
    cl_uint nsb = (vocab + VERIFY_SB - 1) / VERIFY_SB;
    cl_uint chunk, groups;
    psr_split_rows_for(ctx, a->requests, a->vocab, ctx->tuning.verify.resident_per_unit, &chunk,
                       &groups);
    bool one_pass = groups > 1 && !v.fp64 && (ctx->info.capabilities & PSR_CAP_INT64_ATOMICS) &&
                    a->vocab <= (1u << 20) && groups < 4096 && !ctx->tuning.sample.two_pass;
    size_t acc = v.fp64 ? sizeof(cl_double) : sizeof(cl_float);
    size_t parts = a->requests * groups;
    size_t stat_n = a->rows * nsb;
    cl_uint draft_rows = (cl_uint)(a->rows - a->requests);
    size_t stats_groups = (size_t)draft_rows * nsb * (a->draft_cache ? 2 : 1) + a->requests * nsb;
    /* One launch where every ticket fits the count's bits (then so do every
     * row's groups and draft slots) and no finishing kernel is needed. */
    size_t fused_groups = stats_groups + 1 + parts;
    bool fused = fused_groups <= ctx->tuning.verify.fused_groups && fused_groups < (1u << VERIFY_COUNT_BITS) &&
                 ctx->tuning.sample.work_group_size <= VERIFY_LANES && (groups == 1 || one_pass) &&
                 !ctx->tuning.verify.fused_broken;
    const size_t need[VERIFY_SCRATCH] = {stat_n * 8,      stat_n * 4,       stat_n * 4, stat_n * 8,
                                         a->requests * 16, 4,               a->rows * 4, a->requests * 4,
                                         8,               a->requests * 4, a->requests * 4,
                                         a->rows * 8,     one_pass ? parts * 8 : 8};
    if (fused) {
        st = psr_kernel_get(ctx, &v, "psr_verify_fused", &one);
    } else {
        st = psr_kernel_get(ctx, &v, "psr_verify_stats", &stats);
        if (st == PSR_OK)
            st = psr_kernel_get(ctx, &v, "psr_verify_sample", &sample);
    }
    for (int i = 0; i < VERIFY_SCRATCH && st == PSR_OK; i++)
        st = psr_scratch_reserve(ctx, &ctx->verify[i], need[i]);
    /* One pass: each sampling group's best key, and per request a count of
     * the groups that stored theirs. */
    cl_mem best_keys = one_pass ? ctx->verify[BEST_KEYS].buffer : NULL;
    cl_mem best_count = ctx->verify[BEST_COUNT].buffer;
    cl_mem part_value = NULL, part_index = NULL;
    if (st == PSR_OK && !one_pass && groups > 1 && !fused) {
        st = psr_kernel_get(ctx, &v, "psr_verify_finalize", &finalize);
        if (st == PSR_OK)
            st = psr_scratch_reserve(ctx, &ctx->part_value, parts * acc);
        if (st == PSR_OK)
            st = psr_scratch_reserve(ctx, &ctx->part_index, parts * sizeof(cl_uint));
        part_value = ctx->part_value.buffer;
        part_index = ctx->part_index.buffer;
    }
    if (st == PSR_OK)
        st = upload_layout(ctx, a);
    if (st == PSR_OK)
        st = next_epoch(ctx);
    if (st != PSR_OK)
        return st;

    cl_mem cu = ctx->verify_layout[0], row_req = ctx->verify_layout[1], order = ctx->verify_layout[2];
    cl_mem done = ctx->verify[DONE].buffer, rejected = ctx->verify[REJECTED].buffer;
    cl_mem row_lse = ctx->verify[ROW_LSE].buffer;
    cl_uint epoch = ctx->verify_epoch;
    /* Decisions need a row's groups to fit the count's bits (any vocabulary
     * up to 33 M tokens). */
    cl_uint decide = stats_groups > ctx->tuning.verify.skip_groups && 2 * nsb < (1u << VERIFY_COUNT_BITS);
    cl_mem t_lse = ctx->verify[T_LSE].buffer, t_best = ctx->verify[T_BEST].buffer;
    cl_mem t_best_i = ctx->verify[T_BEST_I].buffer, q_lse = ctx->verify[Q_LSE].buffer;
    cl_mem walks = ctx->verify[WALKS].buffer, status = ctx->verify[STATUS].buffer;
    cl_ulong offset = a->target_offset;
    cl_ulong stride = a->target_row_stride ? a->target_row_stride : a->vocab;
    cl_uint greedy_all = a->method == PSR_VERIFY_GREEDY;
    cl_uint cache_k = (cl_uint)a->draft_cache_k;
    cl_uint cols = (cl_uint)(a->max_drafts + 1);
    cl_uint tokens64 = a->tokens_dtype == PSR_TOKENS_I64;
    const size_t ms = sizeof(cl_mem);
    if (fused) {
        cl_mem tickets = ctx->verify[TICKETS].buffer, req_done = ctx->verify[REQ_DONE].buffer;
        cl_uint first_sampling = (cl_uint)(stats_groups + 1); /* after the check's ticket */
        const size_t fsizes[] = {ms, 8,  8,  4,  4,  4,  4,  ms, ms, ms, ms, ms, 4,  ms,
                                 4,  ms, ms, ms, ms, ms, ms, ms, ms, 4,  ms, 4,  ms, 4,
                                 4,  ms, ms, ms, 4,  ms, 4,  ms, ms, ms, 4};
        const void *fvalues[] = {&a->target_logits, &offset,      &stride,         &vocab,
                                 &rows,             &requests,    &nsb,            &row_req,
                                 &cu,               &order,       &a->temperatures, &a->seeds,
                                 &greedy_all,       &a->draft_cache, &cache_k,     &a->draft_tokens,
                                 &a->positions,     &t_lse,       &t_best,         &t_best_i,
                                 &q_lse,            &done,        &rejected,       &epoch,
                                 &row_lse,          &draft_rows,  &status,         &groups,
                                 &chunk,            &best_keys,   &best_count,     &a->status,
                                 &cols,             &a->tokens,   &tokens64,       &a->num_sampled,
                                 &tickets,          &req_done,    &first_sampling};
        _Static_assert(sizeof fsizes / sizeof *fsizes == sizeof fvalues / sizeof *fvalues,
                       "one size per argument");
        st = psr_set_kernel_args(ctx, one, "psr_verify_fused", (int)(sizeof fsizes / sizeof *fsizes),
                                 fsizes, fvalues);
        cl_event done_event = NULL;
        if (st == PSR_OK)
            st = psr_enqueue_groups(ctx, one, "psr_verify_fused", fused_groups, ctx->tuning.sample.work_group_size,
                                    a->num_events_in_wait_list, a->event_wait_list,
                                    first || event ? &done_event : NULL);
        if (st != PSR_OK)
            return st;
        ctx->verify_fused_last = true;
        /* One kernel is both the first and the last. */
        if (first) {
            *first = done_event;
            if (event)
                clRetainEvent(done_event);
        }
        if (event)
            *event = done_event;
        if (a->effective_flags)
            *a->effective_flags = flags;
        return PSR_OK;
    }

    const size_t ssizes[] = {ms, 8,  8,  4,  4,  4,  4,  ms, ms, ms, ms, ms, 4,
                             ms, 4,  ms, ms, ms, ms, ms, ms, ms, ms, 4,  4, ms, 4, ms};
    const void *svalues[] = {&a->target_logits, &offset,      &stride,          &vocab,
                             &rows,             &requests,    &nsb,             &row_req,
                             &cu,               &order,       &a->temperatures, &a->seeds,
                             &greedy_all,       &a->draft_cache, &cache_k,      &a->draft_tokens,
                             &a->positions,     &t_lse,       &t_best,          &t_best_i,
                             &q_lse,            &done,        &rejected,        &epoch,
                             &decide,           &row_lse,     &draft_rows,      &status};
    st = psr_set_kernel_args(ctx, stats, "psr_verify_stats", 28, ssizes, svalues);
    if (st != PSR_OK)
        return st;

    cl_mem walks_arg = finalize ? walks : NULL;
    const size_t psizes[] = {ms, 8, 8, 4, 4, ms, ms, ms, ms, ms, 4, ms, 4, ms, ms, ms, ms,
                             4,  4, ms, ms, ms, ms, ms, ms, ms, 4, ms, 4, ms, 4, ms, 4, ms};
    const void *pvalues[] = {&a->target_logits, &offset,      &stride,        &vocab,
                             &nsb,              &cu,          &a->draft_tokens, &a->seeds,
                             &a->temperatures,  &a->positions, &greedy_all,   &a->draft_cache,
                             &cache_k,          &t_lse,       &t_best,        &t_best_i,
                             &q_lse,            &groups,      &chunk,         &best_keys,
                             &best_count,       &part_value,  &part_index,    &walks_arg,
                             &status,           &a->status,   &cols,          &a->tokens,
                             &tokens64,         &a->num_sampled, &decide,     &rejected,
                             &epoch,            &row_lse};
    st = psr_set_kernel_args(ctx, sample, "psr_verify_sample", 34, psizes, pvalues);
    if (st == PSR_OK && finalize) {
        const size_t fsizes[] = {4, ms, ms, ms, ms, ms, ms, 4, ms, 4, ms};
        const void *fvalues[] = {&groups, &part_value, &part_index, &walks,    &cu,        &a->draft_tokens,
                                 &status, &cols,       &a->tokens,  &tokens64, &a->num_sampled};
        st = psr_set_kernel_args(ctx, finalize, "psr_verify_finalize", 11, fsizes, fvalues);
    }
    if (st != PSR_OK)
        return st;

    /* Every argument is set before the first launch, so nothing that can
     * fail comes between the launches: a call is enqueued whole or not at
     * all, and only the driver's own enqueue cost separates them. */
    size_t stats_local = ctx->tuning.sample.work_group_size < VERIFY_LANES ? ctx->tuning.sample.work_group_size
                                                                    : VERIFY_LANES;
    st = psr_enqueue_groups(ctx, stats, "psr_verify_stats", stats_groups + 1, stats_local,
                            a->num_events_in_wait_list, a->event_wait_list, first);
    if (st == PSR_OK)
        st = psr_enqueue_groups(ctx, sample, "psr_verify_sample", parts, ctx->tuning.sample.work_group_size,
                                0, NULL, finalize ? NULL : event);
    if (st == PSR_OK && finalize)
        st = psr_enqueue_groups(ctx, finalize, "psr_verify_finalize", a->requests,
                                ctx->tuning.sample.work_group_size, 0, NULL, event);
    if (st == PSR_OK && a->effective_flags)
        *a->effective_flags = flags;
    if (st != PSR_OK && first && *first) {
        clReleaseEvent(*first);
        *first = NULL;
    }
    return st;
}
