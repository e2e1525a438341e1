/* Launch helpers every operation shares: buffer and flag checks, how a
 * row is split over work-groups, argument binding and enqueueing. */
#include "runtime/runtime.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

size_t psr_dtype_size(psr_dtype dtype)
{
    return dtype == PSR_DTYPE_F32 ? 4 : 2;
}

/* Bytes of logits a shape reads: (offset + (rows - 1) * stride + vocab) *
 * esize, or 0 when that does not fit a size_t. */
size_t psr_logits_bytes(size_t offset, size_t rows, size_t stride, size_t vocab, size_t esize)
{
    size_t span;
    if (rows == 0 || (stride && rows - 1 > (SIZE_MAX - vocab) / stride))
        return 0;
    span = (rows - 1) * stride + vocab;
    if (span > SIZE_MAX - offset || offset + span > SIZE_MAX / esize)
        return 0;
    return (offset + span) * esize;
}

/* Where a buffer lies: its root (itself, or the parent of a sub-buffer)
 * and its bytes there. */
typedef struct buffer_span {
    cl_mem root;
    size_t offset, size;
} buffer_span;

/* Where a buffer lies, and that it belongs to the context. The driver is
 * asked every call: a handle alone cannot name a buffer for long (a
 * destroyed buffer's handle is handed out again, and on NVIDIA's driver
 * before its destructor callbacks have run). */
static psr_status locate(psr_context *ctx, cl_mem buf, const char *name, buffer_span *f)
{
    cl_context owner = NULL;
    cl_mem parent = NULL;
    f->offset = f->size = 0;
    cl_int err = clGetMemObjectInfo(buf, CL_MEM_SIZE, sizeof f->size, &f->size, NULL);
    if (err == CL_SUCCESS)
        err = clGetMemObjectInfo(buf, CL_MEM_CONTEXT, sizeof owner, &owner, NULL);
    if (err == CL_SUCCESS)
        err = clGetMemObjectInfo(buf, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof parent, &parent, NULL);
    if (err == CL_SUCCESS && parent)
        err = clGetMemObjectInfo(buf, CL_MEM_OFFSET, sizeof f->offset, &f->offset, NULL);
    if (err != CL_SUCCESS)
        return psr_fail(ctx, PSR_ERR_INVALID_ARGUMENT, "%s is not a usable cl_mem: %s (%d)", name,
                        psr_cl_error_string(err), err);
    REQUIRE(owner == ctx->cl_ctx, PSR_ERR_FOREIGN_BUFFER, "%s belongs to another cl_context than the psr context's",
            name);
    f->root = parent ? parent : buf;
    return PSR_OK;
}

static psr_status check_size(psr_context *ctx, const psr_buffer_need *n, const buffer_span *span)
{
    REQUIRE(span->size >= n->bytes, PSR_ERR_BUFFER_TOO_SMALL, "%s holds %zu bytes; the shape needs %zu",
            n->name, span->size, n->bytes);
    return PSR_OK;
}

psr_status psr_check_buffer(psr_context *ctx, cl_mem buf, size_t need, const char *name)
{
    psr_buffer_need n = {buf, need, name, false};
    buffer_span span;
    psr_status st = locate(ctx, buf, name, &span);
    return st == PSR_OK ? check_size(ctx, &n, &span) : st;
}

psr_status psr_check_required(psr_context *ctx, const psr_buffer_need *needs, size_t count)
{
    for (size_t i = 0; i < count; i++)
        REQUIRE(needs[i].buffer, PSR_ERR_NULL_ARGUMENT, "%s is NULL", needs[i].name);
    return PSR_OK;
}

static bool spans_meet(const buffer_span *x, const buffer_span *y)
{
    return x->root == y->root && x->offset < y->offset + y->size && y->offset < x->offset + x->size;
}

/* Each buffer in turn: usable and of the context; then no output meets
 * another buffer; then the sizes. */
psr_status psr_check_buffers(psr_context *ctx, const psr_buffer_need *needs, size_t count)
{
    buffer_span spans[PSR_MAX_CALL_BUFFERS];
    REQUIRE(count <= PSR_MAX_CALL_BUFFERS, PSR_ERR_INVALID_ARGUMENT, "too many buffers in one call");
    for (size_t i = 0; i < count; i++) {
        spans[i].root = NULL;
        psr_status st = needs[i].buffer ? locate(ctx, needs[i].buffer, needs[i].name, &spans[i]) : PSR_OK;
        if (st != PSR_OK)
            return st;
    }
    for (size_t i = 0; i < count; i++)
        for (size_t j = 0; j < count && needs[i].output && spans[i].root; j++)
            REQUIRE(j == i || !spans_meet(&spans[i], &spans[j]), PSR_ERR_BUFFER_OVERLAP,
                    "%s overlaps %s: an output must not share memory with another buffer of the call",
                    needs[i].name, needs[j].name);
    for (size_t i = 0; i < count; i++) {
        psr_status st = spans[i].root ? check_size(ctx, &needs[i], &spans[i]) : PSR_OK;
        if (st != PSR_OK)
            return st;
    }
    return PSR_OK;
}

#define PSR_SAMPLE_ALL_FLAGS                                                                 \
    (PSR_SAMPLE_DRAFTING | PSR_FLAG_FP64_NOISE | PSR_SAMPLE_FAST_MATH | PSR_FLAG_WIDE_NOISE | \
     PSR_SAMPLE_RACE | PSR_SAMPLE_PROBS)
#define PSR_NOISE_BITS (PSR_FLAG_FP64_NOISE | PSR_FLAG_WIDE_NOISE)

psr_status psr_call_flags(psr_context *ctx, unsigned flags, psr_noise noise, bool legacy, const char *name,
                          unsigned *out)
{
    if (legacy) {
        *out = flags;
        return PSR_OK;
    }
    REQUIRE(!(flags & PSR_NOISE_BITS), PSR_ERR_INVALID_ARGUMENT,
            "%sflags has reserved bits 0x%x (the noise bits of the 0.1 layout): choose the noise "
            "with %snoise",
            name, flags & PSR_NOISE_BITS, name);
    REQUIRE((unsigned)noise <= PSR_NOISE_WIDE, PSR_ERR_INVALID_ARGUMENT, "%snoise %d is not a psr_noise",
            name, (int)noise);
    *out = flags | (noise == PSR_NOISE_FP64 ? PSR_FLAG_FP64_NOISE : noise == PSR_NOISE_WIDE ? PSR_FLAG_WIDE_NOISE : 0);
    return PSR_OK;
}

psr_noise psr_noise_of(unsigned flags)
{
    return (flags & PSR_FLAG_FP64_NOISE) ? PSR_NOISE_FP64 : (flags & PSR_FLAG_WIDE_NOISE) ? PSR_NOISE_WIDE : PSR_NOISE_FP32;
}

void psr_report_noise(void *effective, bool legacy, unsigned flags)
{
    if (!effective)
        return;
    if (legacy)
        memcpy(effective, &flags, sizeof flags);
    else
        *(psr_noise *)effective = psr_noise_of(flags);
}

psr_status psr_resolve_flags(psr_context *ctx, unsigned flags, const char *name, unsigned *out)
{
    REQUIRE(!(flags & ~PSR_SAMPLE_ALL_FLAGS), PSR_ERR_INVALID_ARGUMENT, "%s has unknown bits 0x%x",
            name, flags & ~PSR_SAMPLE_ALL_FLAGS);
    REQUIRE(!((flags & PSR_FLAG_FP64_NOISE) && (flags & PSR_FLAG_WIDE_NOISE)),
            PSR_ERR_INVALID_ARGUMENT, "%s asks for both fp64 and wide-tail noise: choose one", name);
    if ((flags & PSR_FLAG_FP64_NOISE) && !(ctx->info.capabilities & PSR_CAP_FP64)) {
        if (ctx->fp64_policy != PSR_FP64_WIDE)
            return psr_fail(ctx, PSR_ERR_FP64_UNSUPPORTED,
                            "%s asks for fp64 noise but device \"%s\" has no fp64; use "
                            "PSR_NOISE_WIDE, or fp64_policy = PSR_FP64_WIDE",
                            name, ctx->info.name);
        flags = (flags & ~PSR_FLAG_FP64_NOISE) | PSR_FLAG_WIDE_NOISE;
        if (!ctx->fp64_fallback_said) {
            psr_log(ctx, PSR_LOG_WARNING,
                    "device \"%s\" has no fp64: fp64 noise is replaced by wide-tail noise "
                    "(fp64_policy = PSR_FP64_WIDE)",
                    ctx->info.name);
            ctx->fp64_fallback_said = true;
        }
    }
    REQUIRE(!(flags & PSR_SAMPLE_PROBS) || (flags & PSR_SAMPLE_RACE), PSR_ERR_INVALID_ARGUMENT,
            "%s has PSR_SAMPLE_PROBS without PSR_SAMPLE_RACE: probabilities are sampled by the "
            "exponential race",
            name);
    /* Wide-tail noise and the race are built from the deterministic operations only. */
    if (flags & (PSR_FLAG_WIDE_NOISE | PSR_SAMPLE_RACE))
        flags &= ~PSR_SAMPLE_FAST_MATH;
    *out = flags;
    return PSR_OK;
}

void psr_split_rows(psr_context *ctx, size_t rows, size_t vocab, cl_uint *chunk,
                    cl_uint *groups)
{
    psr_split_rows_for(ctx, rows, vocab, ctx->tuning.sample.resident_per_unit, ctx->tuning.sample.min_steps, chunk,
                       groups);
}

void psr_split_verify(psr_context *ctx, size_t requests, size_t vocab, cl_uint *chunk, cl_uint *groups)
{
    size_t steps = ctx->tuning.sample.min_steps > 2 ? ctx->tuning.sample.min_steps : 2;
    psr_split_rows_for(ctx, requests, vocab, ctx->tuning.verify.resident_per_unit, steps, chunk, groups);
}

static void choose_split(const psr_context *ctx, size_t rows, size_t vocab, size_t resident_per_unit,
                         size_t min_steps, cl_uint *chunk, cl_uint *groups);

void psr_split_rows_for(psr_context *ctx, size_t rows, size_t vocab, size_t resident_per_unit,
                        size_t min_steps, cl_uint *chunk, cl_uint *groups)
{
    for (size_t i = 0; i < PSR_SPLIT_MEMOS; i++) {
        const psr_split_memo *m = &ctx->splits[i];
        if (m->rows == rows && m->vocab == vocab && m->resident_per_unit == resident_per_unit &&
            m->min_steps == min_steps) {
            *chunk = m->chunk;
            *groups = m->groups;
            return;
        }
    }
    choose_split(ctx, rows, vocab, resident_per_unit, min_steps, chunk, groups);
    ctx->splits[ctx->splits_next] = (psr_split_memo){rows, vocab, resident_per_unit, min_steps, *chunk, *groups};
    ctx->splits_next = (ctx->splits_next + 1) % PSR_SPLIT_MEMOS;
}

static void choose_split(const psr_context *ctx, size_t rows, size_t vocab, size_t resident_per_unit,
                         size_t min_steps, cl_uint *chunk, cl_uint *groups)
{
    /* Pick the split G (groups per row) with the least modelled time: the
     * device runs `resident` groups at once, so rows * G groups take
     * ceil(rows * G / resident) waves, each as long as one chunk of
     * vocab / G tokens plus a fixed cost per group (reductions, the gather),
     * counted as two steps of tokens. Rows split into at most
     * vocab / (min_steps steps) groups, so chunks are about min_steps
     * steps or longer. On a GPU a chunk lasts as long as its work-items'
     * longest share, whole steps: a chunk a few tokens over two steps
     * takes three. (On a CPU one thread runs the group's work-items in
     * turn, so there its tokens count.) Of equal costs the fewest groups
     * win. Chunks are whole multiples of a work-item's step (4 tokens, or
     * the vector path's lanes). */
    size_t lanes = ctx->tuning.sample.vector_width > 4 ? ctx->tuning.sample.vector_width : 4;
    size_t step = lanes * ctx->tuning.sample.work_group_size;
    size_t resident = resident_per_unit * (ctx->info.compute_units ? ctx->info.compute_units : 1);
    size_t least = min_steps * step;
    size_t g_max = (vocab + least - 1) / least;
    if (g_max > 4095)
        g_max = 4095;
    size_t best_g = 1;
    double best_cost = 0;
    for (size_t g = 1; g <= (g_max ? g_max : 1); g++) {
        double waves = (double)((rows * g + resident - 1) / resident);
        size_t tokens = (vocab + g - 1) / g;
        if (!ctx->tuning.sample.vector_width)
            tokens = (tokens + step - 1) / step * step;
        double cost = waves * ((double)tokens + 2.0 * (double)step);
        if (g == 1 || cost < best_cost) {
            best_cost = cost;
            best_g = g;
        }
    }
    size_t c = (vocab + best_g - 1) / best_g;
    c = (c + lanes - 1) / lanes * lanes;
    *chunk = (cl_uint)c;
    *groups = (cl_uint)((vocab + c - 1) / c);
}

/* The kernels read these structs by value: OpenCL C must lay them out as
 * C does, which fixed-width fields ordered widest first guarantee; the
 * sizes catch a field added out of order. */
_Static_assert(sizeof(psr_rows_params) == 32, "psr_rows_params is laid out as in OpenCL C");
_Static_assert(sizeof(psr_sample_params) == 80, "psr_sample_params is laid out as in OpenCL C");
_Static_assert(sizeof(psr_shard_rec) == sizeof(psr_shard_record) &&
                   offsetof(psr_shard_rec, token) == offsetof(psr_shard_record, token) &&
                   offsetof(psr_shard_rec, flags) == offsetof(psr_shard_record, flags),
               "psr_shard_rec is laid out as psr_shard_record");
_Static_assert(sizeof(psr_filter_params) == 80, "psr_filter_params is laid out as in OpenCL C");

bool psr_one_pass(const psr_context *ctx, size_t vocab, cl_uint groups_per_row, bool keys_only, bool fp64)
{
    return groups_per_row > 1 && !(keys_only && fp64) && (ctx->info.capabilities & PSR_CAP_INT64_ATOMICS) &&
           vocab <= (1u << 20) && groups_per_row < 4096 && !ctx->tuning.sample.two_pass;
}

psr_status psr_reserve_partials(psr_context *ctx, const psr_variant *v, const char *name, size_t parts,
                                cl_kernel *finalize)
{
    size_t acc = v->fp64 ? sizeof(cl_double) : sizeof(cl_float);
    psr_status st = psr_kernel_get(ctx, v, name, finalize);
    if (st == PSR_OK)
        st = psr_scratch_reserve(ctx, &ctx->part_value, parts * acc);
    if (st == PSR_OK)
        st = psr_scratch_reserve(ctx, &ctx->part_index, parts * sizeof(cl_uint));
    return st;
}

psr_rows_params psr_rows_params_of(size_t logits_offset, size_t row_stride, size_t vocab, size_t requests,
                                   cl_uint groups_per_row, cl_uint chunk)
{
    psr_rows_params r = {.logits_offset = logits_offset,
                         .row_stride = row_stride ? row_stride : vocab,
                         .vocab = (psr_uint32_t)vocab,
                         .requests = (psr_uint32_t)requests,
                         .groups_per_row = groups_per_row,
                         .chunk = chunk};
    return r;
}

psr_kernel_args psr_kernel_args_begin(psr_context *ctx, cl_kernel kernel, const char *kernel_name)
{
    psr_kernel_args a = {.ctx = ctx, .kernel = kernel, .kernel_name = kernel_name, .err = CL_SUCCESS};
    return a;
}

static void bind(psr_kernel_args *a, const char *name, size_t size, const void *value)
{
    if (a->count >= PSR_KERNEL_MAX_ARGS) {
        if (a->err == CL_SUCCESS)
            a->err = CL_INVALID_ARG_INDEX, a->failed_at = a->count;
        return;
    }
    a->names[a->count] = name;
    cl_int err = clSetKernelArg(a->kernel, a->count, size, value);
    if (err != CL_SUCCESS && a->err == CL_SUCCESS)
        a->err = err, a->failed_at = a->count;
    a->count++;
}

void psr_arg_mem(psr_kernel_args *a, const char *name, cl_mem buffer)
{
    bind(a, name, sizeof buffer, &buffer);
}

void psr_arg_value(psr_kernel_args *a, const char *name, const void *value, size_t size)
{
    bind(a, name, size, value);
}

void psr_arg_local(psr_kernel_args *a, const char *name, size_t bytes)
{
    bind(a, name, bytes, NULL);
}

/* With argument info (-cl-kernel-arg-info): the kernel's own count and
 * names against the builder's. */
static psr_status compare_with_driver(psr_kernel_args *a)
{
    psr_context *ctx = a->ctx;
    cl_uint declared = 0;
    clGetKernelInfo(a->kernel, CL_KERNEL_NUM_ARGS, sizeof declared, &declared, NULL);
    REQUIRE(declared == a->count, PSR_ERR_INVALID_ARGUMENT, "%s declares %u arguments; the host bound %u",
            a->kernel_name, declared, a->count);
    for (cl_uint i = 0; i < a->count; i++) {
        char name[64];
        if (clGetKernelArgInfo(a->kernel, i, CL_KERNEL_ARG_NAME, sizeof name, name, NULL) != CL_SUCCESS)
            return PSR_OK; /* the driver keeps no names */
        REQUIRE(strcmp(name, a->names[i]) == 0, PSR_ERR_INVALID_ARGUMENT,
                "%s's argument %u is \"%s\"; the host bound \"%s\"", a->kernel_name, i, name, a->names[i]);
    }
    return PSR_OK;
}

psr_status psr_kernel_args_end(psr_kernel_args *a)
{
    if (a->err != CL_SUCCESS)
        return psr_fail_cl(a->ctx, a->err, "clSetKernelArg(%s, %u: %s) failed", a->kernel_name, a->failed_at,
                           a->failed_at < a->count ? a->names[a->failed_at] : "past the last");
    return a->ctx->check_arg_names ? compare_with_driver(a) : PSR_OK;
}

psr_status psr_clear_if_dirty(psr_context *ctx, bool *dirty, const psr_scratch *buf, cl_uint *nwait,
                              const cl_event **wait, const char *what)
{
    if (!*dirty || !buf->buffer)
        return PSR_OK;
    cl_uint zero = 0;
    cl_int err = clEnqueueFillBuffer(ctx->queue, buf->buffer, &zero, sizeof zero, 0, buf->bytes / 4 * 4, *nwait,
                                     *wait, NULL);
    if (err != CL_SUCCESS)
        return psr_fail_cl(ctx, err, "clearing %s failed", what);
    *dirty = false;
    *nwait = 0;
    *wait = NULL;
    return PSR_OK;
}

psr_status psr_enqueue_groups(psr_context *ctx, cl_kernel k, const char *name, size_t groups,
                              size_t local, cl_uint nwait, const cl_event *wait, cl_event *event)
{
    size_t global = groups * local;
    cl_int err = clEnqueueNDRangeKernel(ctx->queue, k, 1, NULL, &global, &local, nwait, wait, event);
    if (err != CL_SUCCESS)
        return psr_fail_cl(ctx, err, "enqueueing %s (%zu groups of %zu) failed", name,
                        groups, local);
    return PSR_OK;
}

