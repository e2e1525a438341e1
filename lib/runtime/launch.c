/* Launch helpers every operation shares: buffer and flag checks, how a
 * row is split over work-groups, argument binding and enqueueing. */
#include "runtime/runtime.h"

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

/* Fails unless buf holds at least `need` bytes. */
psr_status psr_check_buffer(psr_context *ctx, cl_mem buf, size_t need, const char *name)
{
    size_t size = 0;
    cl_int err = clGetMemObjectInfo(buf, CL_MEM_SIZE, sizeof size, &size, NULL);
    if (err != CL_SUCCESS)
        return psr_fail(ctx, PSR_ERR_INVALID_ARGUMENT, "%s is not a usable cl_mem: %s (%d)", name,
                        psr_cl_error_string(err), err);
    if (size < need)
        return psr_fail(ctx, PSR_ERR_BUFFER_TOO_SMALL, "%s holds %zu bytes; the shape needs %zu",
                        name, size, need);
    return PSR_OK;
}

psr_status psr_check_required(psr_context *ctx, const psr_buffer_need *needs, size_t count)
{
    for (size_t i = 0; i < count; i++)
        REQUIRE(needs[i].buffer, PSR_ERR_NULL_ARGUMENT, "%s is NULL", needs[i].name);
    return PSR_OK;
}

psr_status psr_check_buffers(psr_context *ctx, const psr_buffer_need *needs, size_t count)
{
    psr_status st = PSR_OK;
    for (size_t i = 0; i < count && st == PSR_OK; i++)
        if (needs[i].buffer)
            st = psr_check_buffer(ctx, needs[i].buffer, needs[i].bytes, needs[i].name);
    return st;
}

#define PSR_SAMPLE_ALL_FLAGS                                                                     \
    (PSR_SAMPLE_DRAFTING | PSR_SAMPLE_FP64_NOISE | PSR_SAMPLE_FAST_MATH | PSR_SAMPLE_WIDE_NOISE | \
     PSR_SAMPLE_RACE | PSR_SAMPLE_PROBS)

psr_status psr_resolve_flags(psr_context *ctx, unsigned flags, const char *name, unsigned *out)
{
    REQUIRE(!(flags & ~PSR_SAMPLE_ALL_FLAGS), PSR_ERR_INVALID_ARGUMENT, "%s has unknown bits 0x%x",
            name, flags & ~PSR_SAMPLE_ALL_FLAGS);
    REQUIRE(!((flags & PSR_SAMPLE_FP64_NOISE) && (flags & PSR_SAMPLE_WIDE_NOISE)),
            PSR_ERR_INVALID_ARGUMENT,
            "%s asks for both PSR_SAMPLE_FP64_NOISE and PSR_SAMPLE_WIDE_NOISE: choose one", name);
    if ((flags & PSR_SAMPLE_FP64_NOISE) && !(ctx->info.capabilities & PSR_CAP_FP64)) {
        if (ctx->fp64_policy != PSR_FP64_WIDE)
            return psr_fail(ctx, PSR_ERR_FP64_UNSUPPORTED,
                            "%s asks for fp64 noise but device \"%s\" has no fp64; use "
                            "PSR_SAMPLE_WIDE_NOISE, or fp64_policy = PSR_FP64_WIDE",
                            name, ctx->info.name);
        flags = (flags & ~PSR_SAMPLE_FP64_NOISE) | PSR_SAMPLE_WIDE_NOISE;
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
    if (flags & (PSR_SAMPLE_WIDE_NOISE | PSR_SAMPLE_RACE))
        flags &= ~PSR_SAMPLE_FAST_MATH;
    *out = flags;
    return PSR_OK;
}

void psr_split_rows(const psr_context *ctx, size_t rows, size_t vocab, cl_uint *chunk,
                    cl_uint *groups)
{
    psr_split_rows_for(ctx, rows, vocab, ctx->tuning.sample.resident_per_unit, chunk, groups);
}

void psr_split_rows_for(const psr_context *ctx, size_t rows, size_t vocab, size_t resident_per_unit,
                        cl_uint *chunk, cl_uint *groups)
{
    /* Pick the split G (groups per row) with the least modelled time: the
     * device runs `resident` groups at once, so rows * G groups take
     * ceil(rows * G / resident) waves, each as long as one chunk of
     * vocab / G tokens plus a fixed cost per group (reductions, the gather),
     * counted as two steps of tokens. Rows split into at most
     * vocab / (min_steps steps) groups, so chunks are about min_steps (2)
     * steps or longer.
     * Chunks are whole multiples of a work-item's step (4 tokens, or the
     * vector path's lanes). */
    size_t lanes = ctx->tuning.sample.vector_width > 4 ? ctx->tuning.sample.vector_width : 4;
    size_t step = lanes * ctx->tuning.sample.work_group_size;
    size_t resident = resident_per_unit * (ctx->info.compute_units ? ctx->info.compute_units : 1);
    size_t least = ctx->tuning.sample.min_steps * step;
    size_t g_max = (vocab + least - 1) / least;
    if (g_max > 4095)
        g_max = 4095;
    size_t best_g = 1;
    double best_cost = 0;
    for (size_t g = 1; g <= (g_max ? g_max : 1); g++) {
        double waves = (double)((rows * g + resident - 1) / resident);
        double cost = waves * ((double)((vocab + g - 1) / g) + 2.0 * (double)step);
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
_Static_assert(sizeof(psr_sample_params) == 56, "psr_sample_params is laid out as in OpenCL C");
_Static_assert(sizeof(psr_filter_params) == 40, "psr_filter_params is laid out as in OpenCL C");

bool psr_one_pass(const psr_context *ctx, size_t vocab, cl_uint groups_per_row, bool fp64)
{
    return groups_per_row > 1 && !fp64 && (ctx->info.capabilities & PSR_CAP_INT64_ATOMICS) &&
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
        return psr_fail(a->ctx, PSR_ERR_OPENCL, "clSetKernelArg(%s, %u: %s) failed: %s (%d)", a->kernel_name,
                        a->failed_at, a->failed_at < a->count ? a->names[a->failed_at] : "past the last",
                        psr_cl_error_string(a->err), a->err);
    return a->ctx->check_arg_names ? compare_with_driver(a) : PSR_OK;
}

psr_status psr_enqueue_groups(psr_context *ctx, cl_kernel k, const char *name, size_t groups,
                              size_t local, cl_uint nwait, const cl_event *wait, cl_event *event)
{
    size_t global = groups * local;
    cl_int err = clEnqueueNDRangeKernel(ctx->queue, k, 1, NULL, &global, &local, nwait, wait, event);
    if (err != CL_SUCCESS)
        return psr_fail(ctx, PSR_ERR_OPENCL, "enqueueing %s (%zu groups of %zu) failed: %s (%d)", name,
                        groups, local, psr_cl_error_string(err), err);
    return PSR_OK;
}

