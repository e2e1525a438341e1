/* The LM head: logits = hidden x weights^T through CLBlast's GEMM, so an
 * app can hand psr hidden states instead of logits. libpsr does not link
 * CLBlast: it loads it at run time (dlopen), once per process, at the first
 * LM head call or psr_features(). Without it the calls still exist, check
 * their arguments, and say which libraries were tried. */
#include "ops/ops.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the part of CLBlast's C API psr calls, declared here ---- */

/* CLBlast's enum types, psr's stand-ins: status codes (CLBlastStatusCode:
 * 0 is success, the rest are errors; those named here get a word in psr's
 * message), the layout and the transposition. */
typedef enum psr_clb_status_own {
    PSR_CLB_SUCCESS = 0,
    PSR_CLB_COMPILER_NOT_AVAILABLE = -3,
    PSR_CLB_TEMP_BUFFER_ALLOC_FAILURE = -4,
    PSR_CLB_OUT_OF_RESOURCES = -5,
    PSR_CLB_OUT_OF_HOST_MEMORY = -6,
    PSR_CLB_BUILD_PROGRAM_FAILURE = -11,
    PSR_CLB_INVALID_COMMAND_QUEUE = -36,
    PSR_CLB_INVALID_MEM_OBJECT = -38,
    PSR_CLB_NOT_IMPLEMENTED = -1024,
    PSR_CLB_INVALID_LOCAL_MEM_USAGE = -2046,
    PSR_CLB_NO_HALF_PRECISION = -2045,
    PSR_CLB_DATABASE_ERROR = -2041
} psr_clb_status_own;
typedef enum psr_clb_layout_own { PSR_CLB_ROW_MAJOR = 101 } psr_clb_layout_own;
typedef enum psr_clb_transpose_own {
    PSR_CLB_TRANSPOSE_NO = 111,
    PSR_CLB_TRANSPOSE_YES = 112
} psr_clb_transpose_own;

#ifdef PSR_HAVE_CLBLAST_H
/* CLBlast's header at build time (-Dclblast): the function-pointer types
 * below are checked against its prototypes, over its own enum types, and
 * the stand-ins against those types. CLBlast's header declares
 * CLBlastClearCache() without (void): keep warnings-as-errors builds
 * working where it is not a system header. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <clblast_c.h>
#pragma GCC diagnostic pop
typedef CLBlastStatusCode psr_clb_status;
typedef CLBlastLayout psr_clb_layout;
typedef CLBlastTranspose psr_clb_transpose;

_Static_assert(sizeof(psr_clb_status_own) == sizeof(CLBlastStatusCode), "status size");
_Static_assert(sizeof(psr_clb_layout_own) == sizeof(CLBlastLayout), "layout size");
_Static_assert(sizeof(psr_clb_transpose_own) == sizeof(CLBlastTranspose), "transpose size");
_Static_assert(PSR_CLB_ROW_MAJOR == (int)CLBlastLayoutRowMajor, "CLBlastLayoutRowMajor");
_Static_assert(PSR_CLB_TRANSPOSE_NO == (int)CLBlastTransposeNo, "CLBlastTransposeNo");
_Static_assert(PSR_CLB_TRANSPOSE_YES == (int)CLBlastTransposeYes, "CLBlastTransposeYes");
_Static_assert(PSR_CLB_SUCCESS == (int)CLBlastSuccess &&
                   PSR_CLB_COMPILER_NOT_AVAILABLE == (int)CLBlastOpenCLCompilerNotAvailable &&
                   PSR_CLB_TEMP_BUFFER_ALLOC_FAILURE == (int)CLBlastTempBufferAllocFailure &&
                   PSR_CLB_OUT_OF_RESOURCES == (int)CLBlastOpenCLOutOfResources &&
                   PSR_CLB_OUT_OF_HOST_MEMORY == (int)CLBlastOpenCLOutOfHostMemory &&
                   PSR_CLB_BUILD_PROGRAM_FAILURE == (int)CLBlastOpenCLBuildProgramFailure &&
                   PSR_CLB_INVALID_COMMAND_QUEUE == (int)CLBlastInvalidCommandQueue &&
                   PSR_CLB_INVALID_MEM_OBJECT == (int)CLBlastInvalidMemObject &&
                   PSR_CLB_NOT_IMPLEMENTED == (int)CLBlastNotImplemented &&
                   PSR_CLB_INVALID_LOCAL_MEM_USAGE == (int)CLBlastInvalidLocalMemUsage &&
                   PSR_CLB_NO_HALF_PRECISION == (int)CLBlastNoHalfPrecision &&
                   PSR_CLB_DATABASE_ERROR == (int)CLBlastDatabaseError,
               "a CLBlast status code differs from clblast_c.h");
#else
typedef psr_clb_status_own psr_clb_status;
typedef psr_clb_layout_own psr_clb_layout;
typedef psr_clb_transpose_own psr_clb_transpose;
#endif

/* CLBlastSgemm and CLBlastHgemm: C = alpha op(A) op(B) + beta C on the
 * queue, *event (may be NULL) the last kernel's event. */
typedef psr_clb_status (*psr_clb_sgemm_fn)(
    psr_clb_layout layout, psr_clb_transpose a_transpose, psr_clb_transpose b_transpose,
    size_t m, size_t n, size_t k, float alpha, cl_mem a_buffer, size_t a_offset, size_t a_ld,
    cl_mem b_buffer, size_t b_offset, size_t b_ld, float beta, cl_mem c_buffer,
    size_t c_offset, size_t c_ld, cl_command_queue *queue, cl_event *event);
typedef psr_clb_status (*psr_clb_hgemm_fn)(
    psr_clb_layout layout, psr_clb_transpose a_transpose, psr_clb_transpose b_transpose,
    size_t m, size_t n, size_t k, cl_half alpha, cl_mem a_buffer, size_t a_offset, size_t a_ld,
    cl_mem b_buffer, size_t b_offset, size_t b_ld, cl_half beta, cl_mem c_buffer,
    size_t c_offset, size_t c_ld, cl_command_queue *queue, cl_event *event);

#ifdef PSR_HAVE_CLBLAST_H
_Static_assert(_Generic(&CLBlastSgemm, psr_clb_sgemm_fn: 1, default: 0),
               "psr_clb_sgemm_fn is not the type of clblast_c.h's CLBlastSgemm");
_Static_assert(_Generic(&CLBlastHgemm, psr_clb_hgemm_fn: 1, default: 0),
               "psr_clb_hgemm_fn is not the type of clblast_c.h's CLBlastHgemm");
#endif

/* ---- loading ---- */

/* The library names tried in order, unless PSR_CLBLAST_LIBRARY names one. */
static const char *const clblast_names[] = {"libclblast.so.1", "libclblast.so"};

typedef struct psr_clblast {
    psr_clb_sgemm_fn sgemm; /* both set, or both NULL */
    psr_clb_hgemm_fn hgemm;
    char tried[256];        /* the names tried, "a, b" */
    char why[640];          /* dlopen's or dlsym's word on each, "; "-separated */
    bool from_env;          /* the one name tried came from PSR_CLBLAST_LIBRARY */
} psr_clblast;

static psr_clblast clblast;
static pthread_once_t clblast_once = PTHREAD_ONCE_INIT;

static void append(char *buf, size_t size, const char *sep, const char *text)
{
    size_t used = strlen(buf);
    if (used < size)
        snprintf(buf + used, size - used, "%s%s", used ? sep : "", text);
}

/* dlsym gives an object pointer; the function pointer gets its bits (the
 * POSIX way, without a cast ISO C leaves undefined). */
static bool resolve(void *lib, const char *symbol, void *fn)
{
    _Static_assert(sizeof(psr_clb_sgemm_fn) == sizeof(void *) &&
                       sizeof(psr_clb_hgemm_fn) == sizeof(void *),
                   "function pointers the size of void *");
    void *p = dlsym(lib, symbol);
    if (!p)
        return false;
    memcpy(fn, &p, sizeof p);
    return true;
}

static bool try_library(const char *name)
{
    append(clblast.tried, sizeof clblast.tried, ", ", name);
    (void)dlerror();
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        append(clblast.why, sizeof clblast.why, "; ", e ? e : name);
        return false;
    }
    if (!resolve(lib, "CLBlastSgemm", &clblast.sgemm) ||
        !resolve(lib, "CLBlastHgemm", &clblast.hgemm)) {
        const char *e = dlerror();
        append(clblast.why, sizeof clblast.why, "; ", e ? e : "CLBlastSgemm or CLBlastHgemm missing");
        clblast.sgemm = NULL;
        clblast.hgemm = NULL;
        dlclose(lib);
        return false;
    }
    /* Never closed: CLBlast keeps its compiled kernels for the process. */
    return true;
}

static void load_clblast(void)
{
    const char *env = getenv("PSR_CLBLAST_LIBRARY");
    if (env && *env) {
        clblast.from_env = true;
        try_library(env);
        return;
    }
    for (size_t i = 0; i < sizeof clblast_names / sizeof clblast_names[0]; i++)
        if (try_library(clblast_names[i]))
            return;
}

/* CLBlast's GEMMs, loaded at the first call; NULL when it cannot be loaded. */
static const psr_clblast *clblast_library(void)
{
    pthread_once(&clblast_once, load_clblast);
    return clblast.sgemm ? &clblast : NULL;
}

unsigned psr_features(void)
{
    return clblast_library() ? PSR_FEATURE_CLBLAST : 0u;
}

PSR_ARGS_STRUCT(psr_lm_head_args, sizeof(psr_lm_head_args), .dtype = PSR_DTYPE_F32)

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

static const char *clblast_status_name(psr_clb_status s)
{
    switch ((int)s) {
    case PSR_CLB_COMPILER_NOT_AVAILABLE: return "no OpenCL compiler";
    case PSR_CLB_TEMP_BUFFER_ALLOC_FAILURE: return "temporary buffer allocation failed";
    case PSR_CLB_OUT_OF_RESOURCES: return "out of resources";
    case PSR_CLB_OUT_OF_HOST_MEMORY: return "out of host memory";
    case PSR_CLB_BUILD_PROGRAM_FAILURE: return "kernel build failed";
    case PSR_CLB_INVALID_COMMAND_QUEUE: return "invalid command queue";
    case PSR_CLB_INVALID_MEM_OBJECT: return "invalid buffer";
    case PSR_CLB_INVALID_LOCAL_MEM_USAGE: return "not enough local memory";
    case PSR_CLB_NO_HALF_PRECISION: return "no half precision on the device";
    case PSR_CLB_NOT_IMPLEMENTED: return "not implemented";
    case PSR_CLB_DATABASE_ERROR: return "no tuning database entry for the device";
    default: return "CLBlast error";
    }
}

static psr_status run_gemm(psr_context *ctx, const psr_clblast *lib, const psr_lm_head_args *a,
                           cl_event *event)
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
    const psr_clb_layout row_major = (psr_clb_layout)PSR_CLB_ROW_MAJOR;
    const psr_clb_transpose no = (psr_clb_transpose)PSR_CLB_TRANSPOSE_NO;
    const psr_clb_transpose yes = (psr_clb_transpose)PSR_CLB_TRANSPOSE_YES;
    psr_clb_status s;
    const char *routine;
    if (a->dtype == PSR_DTYPE_F32) {
        routine = "CLBlastSgemm";
        s = lib->sgemm(row_major, no, yes, m, n, k, 1.0f, a->hidden, 0, k, a->weights, 0, k,
                       0.0f, a->logits, 0, n, &ctx->queue, &ev);
    } else {
        const cl_half one = 0x3c00, zero = 0; /* fp16 bit patterns of 1 and 0 */
        routine = "CLBlastHgemm";
        s = lib->hgemm(row_major, no, yes, m, n, k, one, a->hidden, 0, k, a->weights, 0, k,
                       zero, a->logits, 0, n, &ctx->queue, &ev);
    }
    if ((int)s != PSR_CLB_SUCCESS) {
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

psr_status psr_lm_head(psr_context *ctx, const psr_lm_head_args *caller, cl_event *event)
{
    if (event)
        *event = NULL;
    psr_lm_head_args args;
    psr_status st = psr_args_read(ctx, caller, &psr_lm_head_args_layout, "psr_lm_head", &args);
    if (st == PSR_OK)
        st = check_args(ctx, &args);
    if (st != PSR_OK)
        return st;
    const psr_clblast *lib = clblast_library();
    if (!lib)
        return psr_fail(ctx, PSR_ERR_NOT_SUPPORTED,
                        "psr_lm_head: psr runs without CLBlast: it could not load %s%s "
                        "(%s); install CLBlast (Debian: libclblast1), or name its library file "
                        "in PSR_CLBLAST_LIBRARY",
                        clblast.from_env ? "PSR_CLBLAST_LIBRARY=" : "", clblast.tried,
                        clblast.why);
    return run_gemm(ctx, lib, &args, event);
}
