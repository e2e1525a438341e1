/* Host side of speculative-draft verification (cl/verify.cl): argument
 * checks, the batch layout upload and the launches (two or three, or one
 * for small batches). */
#include "ops/ops.h"

#include <stdlib.h>
#include <string.h>

_Static_assert(PSR_VERIFY_EPOCHS == 1u << (32 - PSR_REJECT_BITS),
               "launch numbers fill the words' bits above the count");
_Static_assert(sizeof(psr_verify_params) == 128, "psr_verify_params is laid out as in OpenCL C");

/* The 0.1 layout ended at event_wait_list; it chose the noise with flags. */
PSR_ARGS_STRUCT(psr_verify_args, PSR_LAYOUT_END(psr_verify_args, event_wait_list),
                .target_dtype = PSR_DTYPE_F32, .tokens_dtype = PSR_TOKENS_I32,
                .method = PSR_VERIFY_PROBABILISTIC, .noise = PSR_NOISE_FP32)

static bool legacy_layout(const psr_verify_args *a)
{
    return a->struct_size < PSR_LAYOUT_END(psr_verify_args, noise);
}

psr_status psr_verify_check_cu(psr_context *ctx, const psr_verify_args *a)
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
    REQUIRE(a->requests > 0, PSR_ERR_INVALID_ARGUMENT, "args->requests is 0");
    REQUIRE(a->requests < INT32_MAX / 64, PSR_ERR_INVALID_ARGUMENT, "args->requests %zu is too large",
            a->requests);
    REQUIRE(a->rows > 0, PSR_ERR_INVALID_ARGUMENT, "args->rows is 0");
    REQUIRE(a->rows < INT32_MAX / 64, PSR_ERR_INVALID_ARGUMENT, "args->rows %zu is too large", a->rows);
    REQUIRE(a->max_drafts < INT32_MAX / 2, PSR_ERR_INVALID_ARGUMENT,
            "args->max_drafts %zu is too large", a->max_drafts);
    psr_status st = psr_check_vocab_types(ctx, a->vocab, a->target_dtype, "target_dtype", a->tokens_dtype);
    if (st != PSR_OK)
        return st;
    REQUIRE((unsigned)a->method <= PSR_VERIFY_GREEDY, PSR_ERR_INVALID_ARGUMENT,
            "args->method %d is not a psr_verify_method", (int)a->method);
    bool legacy = legacy_layout(a);
    REQUIRE(!(a->flags & ~(legacy ? PSR_FLAG_FP64_NOISE | PSR_FLAG_WIDE_NOISE : 0u)), PSR_ERR_INVALID_ARGUMENT,
            "args->flags 0x%x: reserved, must be 0 (choose the noise with args->noise)", a->flags);
    st = psr_call_flags(ctx, a->flags, a->noise, legacy, "args->", flags);
    if (st == PSR_OK)
        st = psr_resolve_flags(ctx, *flags, "args->noise", flags);
    if (st != PSR_OK)
        return st;
    size_t stride = a->target_row_stride ? a->target_row_stride : a->vocab;
    REQUIRE(stride >= a->vocab, PSR_ERR_INVALID_ARGUMENT,
            "args->target_row_stride %zu is smaller than args->vocab %zu", stride, a->vocab);
    REQUIRE(a->cu, PSR_ERR_NULL_ARGUMENT, "args->cu is NULL");
    const psr_buffer_need required[] = {
        {a->target_logits, 0, "args->target_logits", false}, {a->draft_tokens, 0, "args->draft_tokens", false},
        {a->seeds, 0, "args->seeds", false},                 {a->temperatures, 0, "args->temperatures", false},
        {a->positions, 0, "args->positions", false},         {a->tokens, 0, "args->tokens", true},
        {a->num_sampled, 0, "args->num_sampled", true}};
    st = psr_check_required(ctx, required, sizeof required / sizeof required[0]);
    if (st != PSR_OK)
        return st;
    REQUIRE(!a->draft_cache || a->draft_cache_k > 0, PSR_ERR_INVALID_ARGUMENT,
            "args->draft_cache_k is 0 with args->draft_cache set");
    REQUIRE(a->num_events_in_wait_list == 0 || a->event_wait_list, PSR_ERR_NULL_ARGUMENT,
            "args->event_wait_list is NULL but args->num_events_in_wait_list is %u",
            a->num_events_in_wait_list);
    st = psr_verify_check_cu(ctx, a);
    if (st == PSR_OK)
        st = psr_verify_check_shard(ctx, a);
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
    REQUIRE(!a->draft_cache || a->draft_cache_k <= SIZE_MAX / 4 / a->vocab / a->requests,
            PSR_ERR_INVALID_ARGUMENT, "args->requests x draft_cache_k x vocab overflows the address space");
    const psr_buffer_need needs[] = {
        {a->target_logits, logits_bytes, "args->target_logits", false},
        {a->draft_tokens, a->rows * 4, "args->draft_tokens", false},
        PSR_NOISE_INPUT_NEEDS(a),
        {a->draft_cache, a->requests * a->draft_cache_k * a->vocab * 4, "args->draft_cache", false},
        {a->tokens, a->requests * cols * tsize, "args->tokens", true},
        {a->num_sampled, a->requests * 4, "args->num_sampled", true},
        {a->status, 4, "args->status", true}};
    return psr_check_buffers(ctx, needs, sizeof needs / sizeof needs[0]);
}

/* Uploads cu, the row-to-request map and the statistics' row order (each
 * request's first draft row, then each request's second, ..., then the
 * bonus rows: row, request, slot in the request and the request's rows),
 * or reuses the last upload when cu is the same (steady decoding repeats
 * its layout). The buffers are never written after creation, so reuse is
 * safe while kernels run. */
psr_status psr_verify_upload_layout(psr_context *ctx, const psr_verify_args *a)
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
        return psr_fail_cl(ctx, err, "psr_verify: uploading args->cu failed");
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

/* Grows the state buffer's regions to at least need[] bytes. A region
 * that grows starts zeroed, which its words read as "nothing yet" at any
 * launch number; the others keep what they hold, copied to their new
 * places, as if each region were a buffer of its own. */
static psr_status reserve_state(psr_context *ctx, const size_t need[PSR_VS_REGIONS])
{
    bool kept[PSR_VS_REGIONS], grow = false;
    for (int i = 0; i < PSR_VS_REGIONS; i++) {
        kept[i] = need[i] <= ctx->verify_capacity[i];
        grow |= !kept[i];
    }
    if (!grow)
        return PSR_OK;
    size_t capacity[PSR_VS_REGIONS], at[PSR_VS_REGIONS], total = 0;
    for (int i = 0; i < PSR_VS_REGIONS; i++) {
        capacity[i] = kept[i] ? ctx->verify_capacity[i] : need[i];
        at[i] = total;
        total += (capacity[i] + 63) / 64 * 64; /* aligned for any vector type */
    }
    REQUIRE(total < PSR_VS_NONE, PSR_ERR_INVALID_ARGUMENT, "psr_verify: the batch needs %zu bytes of state",
            total);
    cl_uint old_at[PSR_VS_REGIONS];
    memcpy(old_at, ctx->verify_at, sizeof old_at);
    for (int i = 0; i < PSR_VS_REGIONS; i++) {
        ctx->verify_capacity[i] = capacity[i];
        ctx->verify_at[i] = (cl_uint)at[i];
    }
    psr_scratch old = ctx->verify_state;
    ctx->verify_state = (psr_scratch){NULL, 0};
    psr_status st = psr_scratch_reserve(ctx, &ctx->verify_state, total);
    cl_int err = CL_SUCCESS;
    for (int i = 0; i < PSR_VS_REGIONS && st == PSR_OK && old.buffer && err == CL_SUCCESS; i++)
        if (kept[i] && ctx->verify_capacity[i])
            err = clEnqueueCopyBuffer(ctx->queue, old.buffer, ctx->verify_state.buffer, old_at[i],
                                      ctx->verify_at[i], ctx->verify_capacity[i], 0, NULL, NULL);
    if (old.buffer)
        clReleaseMemObject(old.buffer); /* once the copies are done */
    if (st == PSR_OK && err != CL_SUCCESS)
        st = psr_fail_cl(ctx, err, "psr_verify: moving the state failed");
    if (st != PSR_OK)
        memset(ctx->verify_capacity, 0, sizeof ctx->verify_capacity); /* start afresh next time */
    return st;
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
    size_t from = ctx->verify_at[PSR_VS_DONE];
    size_t to = ctx->verify_at[PSR_VS_BEST_COUNT] + ctx->verify_capacity[PSR_VS_BEST_COUNT];
    cl_int err = clEnqueueFillBuffer(ctx->queue, ctx->verify_state.buffer, &zero, sizeof zero, from,
                                     (to - from + 3) / 4 * 4, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
        ctx->verify_epoch = PSR_VERIFY_EPOCHS - 1; /* clear again next time */
        return psr_fail_cl(ctx, err, "psr_verify: clearing the rejection words failed");
    }
    return PSR_OK;
}

psr_status psr_verify(psr_context *ctx, const psr_verify_args *args, cl_event *event)
{
    return psr_verify_enqueue(ctx, args, NULL, event);
}

psr_status psr_verify_read_args(psr_context *ctx, const psr_verify_args *args, const char *call,
                                psr_verify_args *a, unsigned *flags)
{
    psr_status st = psr_args_read(ctx, args, &psr_verify_args_layout, call, a);
    return st == PSR_OK ? check_args(ctx, a, flags) : st;
}

bool psr_verify_legacy_layout(const psr_verify_args *a)
{
    return legacy_layout(a);
}

/* One call's launch: its geometry, kernels and parameters. */
typedef struct verify_plan {
    psr_variant v;
    bool one_pass;       /* sampling groups gather their request's best themselves */
    bool fused;          /* everything in psr_verify_fused */
    size_t parts;        /* sampling groups */
    size_t stats_groups; /* statistics groups, the check's not counted */
    cl_kernel stats, sample, finalize, one;
    psr_verify_params params;
} verify_plan;

/* How the call splits into groups, and whether it runs as one launch. */
static void plan_launch(psr_context *ctx, const psr_verify_args *a, unsigned flags, verify_plan *pl)
{
    memset(pl, 0, sizeof *pl);
    pl->v = psr_variant_of(PSR_KERNELS_VERIFY, flags, a->target_dtype); /* noise flags only */
    psr_verify_params *p = &pl->params;
    p->vocab = (cl_uint)a->vocab;
    p->rows = (cl_uint)a->rows;
    p->requests = (cl_uint)a->requests;
    p->blocks_per_row = (p->vocab + PSR_SB - 1) / PSR_SB;
    psr_split_verify(ctx, a->requests, a->vocab, &p->chunk, &p->groups_per_row);
    cl_uint groups = p->groups_per_row, nsb = p->blocks_per_row;
    pl->one_pass = psr_one_pass(ctx, a->vocab, groups, true, pl->v.fp64);
    pl->parts = a->requests * groups;
    p->draft_rows = (cl_uint)(a->rows - a->requests);
    pl->stats_groups = (size_t)p->draft_rows * nsb * (a->draft_cache ? 2 : 1) + a->requests * nsb;
    /* One launch where every ticket fits the count's bits (then so do every
     * row's groups and draft slots) and no finishing kernel is needed. */
    size_t fused_groups = pl->stats_groups + 1 + pl->parts;
    pl->fused = fused_groups <= ctx->tuning.verify.fused_groups && fused_groups < (1u << PSR_REJECT_BITS) &&
                ctx->tuning.sample.work_group_size <= PSR_LANES && (groups == 1 || pl->one_pass) &&
                !ctx->tuning.verify.fused_broken;
    /* Decisions need a row's groups to fit the count's bits (any vocabulary
     * up to 33 M tokens). */
    p->decide = pl->stats_groups > ctx->tuning.verify.skip_groups && 2 * nsb < (1u << PSR_REJECT_BITS);
    p->logits_offset = a->target_offset;
    p->row_stride = a->target_row_stride ? a->target_row_stride : a->vocab;
    p->greedy_all = a->method == PSR_VERIFY_GREEDY;
    p->cache_k = (cl_uint)a->draft_cache_k;
    p->cols = (cl_uint)(a->max_drafts + 1);
    p->tokens64 = a->tokens_dtype == PSR_TOKENS_I64;
    p->first_sampling = (cl_uint)(pl->stats_groups + 1); /* after the check's ticket */
}

/* The kernels, the state and partials the plan needs, the batch layout
 * and this launch's number; then each region's place in the parameters. */
static psr_status reserve(psr_context *ctx, const psr_verify_args *a, verify_plan *pl)
{
    size_t stat_n = a->rows * pl->params.blocks_per_row;
    const size_t need[PSR_VS_REGIONS] = {
        [PSR_VS_T_LSE] = stat_n * 8,       [PSR_VS_T_BEST] = stat_n * 4,      [PSR_VS_T_BEST_I] = stat_n * 4,
        [PSR_VS_Q_LSE] = stat_n * 8,       [PSR_VS_WALKS] = a->requests * 16, [PSR_VS_STATUS] = 4,
        [PSR_VS_DONE] = a->rows * 4,       [PSR_VS_REJECTED] = a->requests * 4, [PSR_VS_TICKETS] = 8,
        [PSR_VS_REQ_DONE] = a->requests * 4, [PSR_VS_BEST_COUNT] = a->requests * 4,
        [PSR_VS_ROW_LSE] = a->rows * 8,    [PSR_VS_BEST_KEYS] = pl->one_pass ? pl->parts * 8 : 8};
    psr_status st;
    bool finalize = !pl->one_pass && pl->params.groups_per_row > 1 && !pl->fused;
    const psr_variant wants[3] = {pl->v, pl->v, pl->v};
    const char *names[3] = {"psr_verify_stats", "psr_verify_sample", "psr_verify_finalize"};
    if (!pl->fused)
        psr_kernels_prefetch(ctx, wants, names, finalize ? 3 : 2);
    if (pl->fused) {
        st = psr_kernel_get(ctx, &pl->v, "psr_verify_fused", &pl->one);
    } else {
        st = psr_kernel_get(ctx, &pl->v, "psr_verify_stats", &pl->stats);
        if (st == PSR_OK)
            st = psr_kernel_get(ctx, &pl->v, "psr_verify_sample", &pl->sample);
    }
    if (st == PSR_OK)
        st = reserve_state(ctx, need);
    if (st == PSR_OK && finalize) {
        st = psr_reserve_partials(ctx, &pl->v, "psr_verify_finalize", pl->parts, &pl->finalize);
    }
    if (st == PSR_OK)
        st = psr_verify_upload_layout(ctx, a);
    if (st == PSR_OK)
        st = next_epoch(ctx);
    pl->params.epoch = ctx->verify_epoch;
    for (int i = 0; i < PSR_VS_REGIONS; i++)
        pl->params.at[i] = ctx->verify_at[i];
    /* Absent: the best keys without one pass, the walks without a finishing kernel. */
    if (!pl->one_pass)
        pl->params.at[PSR_VS_BEST_KEYS] = PSR_VS_NONE;
    if (!pl->finalize)
        pl->params.at[PSR_VS_WALKS] = PSR_VS_NONE;
    return st;
}

/* The request inputs the statistics (and the one-launch kernel) start with. */
static void bind_inputs(psr_kernel_args *b, psr_context *ctx, const psr_verify_args *a,
                        const verify_plan *pl)
{
    psr_arg_value(b, "p", &pl->params, sizeof pl->params);
    psr_arg_mem(b, "logits", a->target_logits);
    psr_arg_mem(b, "row_req", ctx->verify_layout[1]);
    psr_arg_mem(b, "cu", ctx->verify_layout[0]);
    psr_arg_mem(b, "order", ctx->verify_layout[2]);
    psr_arg_mem(b, "temperatures", a->temperatures);
    psr_arg_mem(b, "seeds", a->seeds);
    psr_arg_mem(b, "draft_cache", a->draft_cache);
    psr_arg_mem(b, "draft_tokens", a->draft_tokens);
    psr_arg_mem(b, "positions", a->positions);
    psr_arg_mem(b, "state", ctx->verify_state.buffer);
}

static void bind_outputs(psr_kernel_args *b, const psr_verify_args *a)
{
    psr_arg_mem(b, "tokens", a->tokens);
    psr_arg_mem(b, "num_sampled", a->num_sampled);
}

static psr_status bind_fused(psr_context *ctx, const psr_verify_args *a, const verify_plan *pl)
{
    psr_kernel_args b = psr_kernel_args_begin(ctx, pl->one, "psr_verify_fused");
    bind_inputs(&b, ctx, a, pl);
    psr_arg_mem(&b, "user_status", a->status);
    bind_outputs(&b, a);
    return psr_kernel_args_end(&b);
}

static psr_status bind_split(psr_context *ctx, const psr_verify_args *a, const verify_plan *pl)
{
    psr_kernel_args b = psr_kernel_args_begin(ctx, pl->stats, "psr_verify_stats");
    bind_inputs(&b, ctx, a, pl);
    psr_status st = psr_kernel_args_end(&b);
    if (st != PSR_OK)
        return st;
    b = psr_kernel_args_begin(ctx, pl->sample, "psr_verify_sample");
    psr_arg_value(&b, "p", &pl->params, sizeof pl->params);
    psr_arg_mem(&b, "logits", a->target_logits);
    psr_arg_mem(&b, "cu", ctx->verify_layout[0]);
    psr_arg_mem(&b, "draft_tokens", a->draft_tokens);
    psr_arg_mem(&b, "seeds", a->seeds);
    psr_arg_mem(&b, "temperatures", a->temperatures);
    psr_arg_mem(&b, "positions", a->positions);
    psr_arg_mem(&b, "draft_cache", a->draft_cache);
    psr_arg_partials(&b, pl->finalize != NULL);
    psr_arg_mem(&b, "state", ctx->verify_state.buffer);
    psr_arg_mem(&b, "user_status", a->status);
    bind_outputs(&b, a);
    st = psr_kernel_args_end(&b);
    if (st != PSR_OK || !pl->finalize)
        return st;
    b = psr_kernel_args_begin(ctx, pl->finalize, "psr_verify_finalize");
    psr_arg_value(&b, "p", &pl->params, sizeof pl->params);
    psr_arg_partials(&b, true);
    psr_arg_mem(&b, "cu", ctx->verify_layout[0]);
    psr_arg_mem(&b, "draft_tokens", a->draft_tokens);
    psr_arg_mem(&b, "state", ctx->verify_state.buffer);
    bind_outputs(&b, a);
    return psr_kernel_args_end(&b);
}

/* One kernel is both the first and the last. */
static psr_status launch_fused(psr_context *ctx, const psr_verify_args *a, const verify_plan *pl,
                               cl_event *first, cl_event *event)
{
    cl_event done_event = NULL;
    psr_status st = psr_enqueue_groups(ctx, pl->one, "psr_verify_fused", pl->params.first_sampling + pl->parts,
                                       ctx->tuning.sample.work_group_size, a->num_events_in_wait_list,
                                       a->event_wait_list, first || event ? &done_event : NULL);
    if (st != PSR_OK)
        return st;
    ctx->verify_fused_last = true;
    if (first) {
        *first = done_event;
        if (event)
            clRetainEvent(done_event);
    }
    if (event)
        *event = done_event;
    return PSR_OK;
}

/* Every argument is set before the first launch, so nothing that can fail
 * comes between the launches: a call is enqueued whole or not at all, and
 * only the driver's own enqueue cost separates them. */
static psr_status launch_split(psr_context *ctx, const psr_verify_args *a, const verify_plan *pl,
                               cl_event *first, cl_event *event)
{
    size_t wg = ctx->tuning.sample.work_group_size;
    size_t stats_local = wg < PSR_LANES ? wg : PSR_LANES;
    psr_status st = psr_enqueue_groups(ctx, pl->stats, "psr_verify_stats", pl->stats_groups + 1, stats_local,
                                       a->num_events_in_wait_list, a->event_wait_list, first);
    if (st == PSR_OK)
        st = psr_enqueue_groups(ctx, pl->sample, "psr_verify_sample", pl->parts, wg, 0, NULL,
                                pl->finalize ? NULL : event);
    if (st == PSR_OK && pl->finalize)
        st = psr_enqueue_groups(ctx, pl->finalize, "psr_verify_finalize", a->requests, wg, 0, NULL, event);
    if (st != PSR_OK && first && *first) {
        clReleaseEvent(*first);
        *first = NULL;
    }
    return st;
}

/* Cold calls on the host (host_verify.c), counting the draft cache's
 * rows with the target's. */
static bool on_host(psr_context *ctx, const psr_verify_args *a, unsigned flags)
{
    size_t cache_rows = a->draft_cache ? a->requests * a->draft_cache_k : 0;
    size_t cache = cache_rows <= SIZE_MAX / a->vocab ? cache_rows * a->vocab : SIZE_MAX;
    return psr_cold_call_on_host(ctx, PSR_WARM_VERIFY, flags, a->target_dtype, false, a->rows,
                                 a->target_row_stride ? a->target_row_stride : a->vocab, cache) &&
           psr_host_can_wait(a->num_events_in_wait_list, a->event_wait_list);
}

psr_status psr_verify_enqueue(psr_context *ctx, const psr_verify_args *args, cl_event *first,
                              cl_event *event)
{
    psr_verify_args call;
    unsigned flags;
    psr_status st = psr_enqueue_begin(ctx, args, &psr_verify_args_layout, "psr_verify", &call, first, event);
    if (st != PSR_OK)
        return st;
    ctx->verify_fused_last = false;
    st = check_args(ctx, &call, &flags);
    if (st != PSR_OK)
        return st;
    REQUIRE(!call.shard_count, PSR_ERR_INVALID_ARGUMENT,
            "args->shard_count %zu: verification across shards runs in rounds (psr_verify_shard_round)",
            call.shard_count);
    const psr_verify_args *a = &call;
    if (on_host(ctx, a, flags)) {
        st = psr_host_verify(ctx, a, flags, event);
        if (st == PSR_OK)
            psr_record_flags(ctx, a->effective_noise, legacy_layout(a), flags);
        ctx->host_served_last = st == PSR_OK;
        return st;
    }
    ctx->host_served_last = false;
    verify_plan pl;
    plan_launch(ctx, a, flags, &pl);
    st = reserve(ctx, a, &pl);
    if (st == PSR_OK)
        st = pl.fused ? bind_fused(ctx, a, &pl) : bind_split(ctx, a, &pl);
    if (st == PSR_OK)
        st = pl.fused ? launch_fused(ctx, a, &pl, first, event) : launch_split(ctx, a, &pl, first, event);
    if (st == PSR_OK)
        psr_record_flags(ctx, a->effective_noise, legacy_layout(a), flags);
    if (st == PSR_OK)
        psr_upgrade_after_call(ctx, PSR_WARM_VERIFY, flags, a->target_dtype, false);
    return st;
}
