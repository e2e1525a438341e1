/* The LM head: logits = hidden x weights^T through CLBlast's GEMM, so an
 * app can hand psr hidden states instead of logits. Without CLBlast in the
 * build the calls still exist, check their arguments, and say so. */
#include "ops/ops.h"

#include <limits.h>
#include <string.h>

#ifdef PSR_HAVE_CLBLAST
/* CLBlast's C header declares CLBlastClearCache() without (void): keep our
 * warnings-as-errors builds working where it is not a system header. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <clblast_c.h>
#pragma GCC diagnostic pop
#endif

static const psr_lm_head_args lm_head_defaults = {.dtype = PSR_DTYPE_F32};
static const psr_struct_layout lm_head_layout = {"psr_lm_head_args", sizeof(psr_lm_head_args),
                                                 sizeof(psr_lm_head_args), &lm_head_defaults};

psr_status psr_lm_head_args_init(psr_lm_head_args *args, size_t struct_size)
{
    return psr_struct_init(args, struct_size, &lm_head_layout);
}

/* rows x cols elements of esize bytes, or 0 when that overflows a size_t. */
static size_t matrix_bytes(size_t rows, size_t cols, size_t esize)
{
    if (cols > SIZE_MAX / rows || rows * cols > SIZE_MAX / esize)
        return 0;
    return rows * cols * esize;
}

static psr_status check_args(psr_context *ctx, const psr_lm_head_args *a)
{
    REQUIRE(a->hidden, PSR_ERR_NULL_ARGUMENT, "args->hidden is NULL");
    REQUIRE(a->weights, PSR_ERR_NULL_ARGUMENT, "args->weights is NULL");
    REQUIRE(a->logits, PSR_ERR_NULL_ARGUMENT, "args->logits is NULL");
    REQUIRE(a->num_events_in_wait_list == 0 || a->event_wait_list, PSR_ERR_NULL_ARGUMENT,
            "args->event_wait_list is NULL but args->num_events_in_wait_list is %u",
            a->num_events_in_wait_list);
    REQUIRE(a->batch > 0, PSR_ERR_INVALID_ARGUMENT, "args->batch is 0");
    REQUIRE(a->hidden_size > 0, PSR_ERR_INVALID_ARGUMENT, "args->hidden_size is 0");
    REQUIRE(a->vocab > 0, PSR_ERR_INVALID_ARGUMENT, "args->vocab is 0");
    REQUIRE(a->dtype == PSR_DTYPE_F32 || a->dtype == PSR_DTYPE_F16, PSR_ERR_INVALID_ARGUMENT,
            "args->dtype %d is not PSR_DTYPE_F32 or PSR_DTYPE_F16 (the LM head has no bf16 GEMM)",
            (int)a->dtype);
    REQUIRE(a->dtype != PSR_DTYPE_F16 || (ctx->info.capabilities & PSR_CAP_FP16),
            PSR_ERR_INVALID_ARGUMENT,
            "args->dtype is PSR_DTYPE_F16 but device \"%s\" has no cl_khr_fp16: use PSR_DTYPE_F32",
            ctx->info.name);

    size_t esize = psr_dtype_size(a->dtype);
    size_t hidden_bytes = matrix_bytes(a->batch, a->hidden_size, esize);
    size_t weights_bytes = matrix_bytes(a->vocab, a->hidden_size, esize);
    size_t logits_bytes = matrix_bytes(a->batch, a->vocab, esize);
    REQUIRE(hidden_bytes > 0, PSR_ERR_INVALID_ARGUMENT,
            "args->batch %zu x args->hidden_size %zu overflows the address space", a->batch,
            a->hidden_size);
    REQUIRE(weights_bytes > 0, PSR_ERR_INVALID_ARGUMENT,
            "args->vocab %zu x args->hidden_size %zu overflows the address space", a->vocab,
            a->hidden_size);
    REQUIRE(logits_bytes > 0, PSR_ERR_INVALID_ARGUMENT,
            "args->batch %zu x args->vocab %zu overflows the address space", a->batch, a->vocab);
    /* CLBlast hands each dimension to its kernels as an int. */
    REQUIRE(a->batch <= INT_MAX, PSR_ERR_INVALID_ARGUMENT,
            "args->batch %zu is too large (at most %d)", a->batch, INT_MAX);
    REQUIRE(a->hidden_size <= INT_MAX, PSR_ERR_INVALID_ARGUMENT,
            "args->hidden_size %zu is too large (at most %d)", a->hidden_size, INT_MAX);
    REQUIRE(a->vocab <= INT_MAX, PSR_ERR_INVALID_ARGUMENT,
            "args->vocab %zu is too large (at most %d)", a->vocab, INT_MAX);
    /* The GEMM reads its inputs while it writes C: no overlap. */
    const psr_buffer_need needs[] = {{a->hidden, hidden_bytes, "args->hidden", false},
                                     {a->weights, weights_bytes, "args->weights", false},
                                     {a->logits, logits_bytes, "args->logits", true}};
    return psr_check_buffers(ctx, needs, sizeof needs / sizeof needs[0]);
}

#ifdef PSR_HAVE_CLBLAST
static const char *clblast_status_name(CLBlastStatusCode s)
{
    switch (s) {
    case CLBlastOpenCLCompilerNotAvailable: return "no OpenCL compiler";
    case CLBlastTempBufferAllocFailure: return "temporary buffer allocation failed";
    case CLBlastOpenCLOutOfResources: return "out of resources";
    case CLBlastOpenCLOutOfHostMemory: return "out of host memory";
    case CLBlastOpenCLBuildProgramFailure: return "kernel build failed";
    case CLBlastInvalidCommandQueue: return "invalid command queue";
    case CLBlastInvalidMemObject: return "invalid buffer";
    case CLBlastInvalidLocalMemUsage: return "not enough local memory";
    case CLBlastNoHalfPrecision: return "no half precision on the device";
    case CLBlastNotImplemented: return "not implemented";
    case CLBlastDatabaseError: return "no tuning database entry for the device";
    default: return "CLBlast error";
    }
}

static psr_status run_gemm(psr_context *ctx, const psr_lm_head_args *a, cl_event *event)
{
    /* CLBlast takes no wait list: a barrier holds back what follows it. */
    if (a->num_events_in_wait_list > 0) {
        cl_int err = clEnqueueBarrierWithWaitList(ctx->queue, a->num_events_in_wait_list,
                                                  a->event_wait_list, NULL);
        if (err != CL_SUCCESS)
            return psr_fail_cl(ctx, err, "enqueueing a barrier on args->event_wait_list failed");
    }
    /* Row-major C[B, V] = A[B, H] x B[V, H]^T: B is read transposed. */
    size_t m = a->batch, n = a->vocab, k = a->hidden_size;
    cl_event ev = NULL;
    CLBlastStatusCode s;
    const char *routine;
    if (a->dtype == PSR_DTYPE_F32) {
        routine = "CLBlastSgemm";
        s = CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeYes, m, n, k,
                         1.0f, a->hidden, 0, k, a->weights, 0, k, 0.0f, a->logits, 0, n,
                         &ctx->queue, &ev);
    } else {
        const cl_half one = 0x3c00, zero = 0; /* fp16 bit patterns of 1 and 0 */
        routine = "CLBlastHgemm";
        s = CLBlastHgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeYes, m, n, k,
                         one, a->hidden, 0, k, a->weights, 0, k, zero, a->logits, 0, n,
                         &ctx->queue, &ev);
    }
    if (s != CLBlastSuccess) {
        if (ev)
            clReleaseEvent(ev);
        return psr_fail(ctx, PSR_ERR_OPENCL,
                        "%s (%zu x %zu x %zu) on device \"%s\" failed: CLBlast status %d (%s)",
                        routine, m, n, k, ctx->info.name, (int)s, clblast_status_name(s));
    }
    if (event)
        *event = ev;
    else if (ev)
        clReleaseEvent(ev);
    return PSR_OK;
}
#endif

psr_status psr_lm_head(psr_context *ctx, const psr_lm_head_args *caller, cl_event *event)
{
    if (event)
        *event = NULL;
    if (!ctx)
        return psr_fail(NULL, PSR_ERR_NULL_ARGUMENT, "psr_lm_head: ctx is NULL");
    if (!caller)
        return psr_fail(ctx, PSR_ERR_NULL_ARGUMENT, "psr_lm_head: args is NULL");
    psr_lm_head_args args;
    psr_status st = psr_struct_read(ctx, caller, &lm_head_layout, "args", &args);
    if (st == PSR_OK)
        st = check_args(ctx, &args);
    if (st != PSR_OK)
        return st;
#ifdef PSR_HAVE_CLBLAST
    return run_gemm(ctx, &args, event);
#else
    return psr_fail(ctx, PSR_ERR_NOT_SUPPORTED,
                    "psr_lm_head: psr was built without CLBlast; rebuild with "
                    "-Dclblast=enabled (Debian: libclblast-dev) for the LM head");
#endif
}
