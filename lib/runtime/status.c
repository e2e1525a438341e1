/* Status codes, error detail, logging and small string helpers. */
#include "runtime/runtime.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Detail of the last failed context-less call, per thread, and the
 * OpenCL code behind it. */
static _Thread_local char thread_error[PSR_ERROR_MAX];
static _Thread_local cl_int thread_cl_error;

const char *psr_status_string(psr_status status)
{
    switch (status) {
    case PSR_OK: return "PSR_OK: success";
    case PSR_ERR_NULL_ARGUMENT: return "PSR_ERR_NULL_ARGUMENT: a required argument is NULL";
    case PSR_ERR_INVALID_ARGUMENT: return "PSR_ERR_INVALID_ARGUMENT: an argument is out of range";
    case PSR_ERR_OUT_OF_HOST_MEMORY: return "PSR_ERR_OUT_OF_HOST_MEMORY: host allocation failed";
    case PSR_ERR_NO_DEVICE: return "PSR_ERR_NO_DEVICE: no OpenCL device found";
    case PSR_ERR_BAD_SELECTOR: return "PSR_ERR_BAD_SELECTOR: the device selector cannot be parsed";
    case PSR_ERR_DEVICE_NOT_FOUND: return "PSR_ERR_DEVICE_NOT_FOUND: no device matches the selector";
    case PSR_ERR_OPENCL: return "PSR_ERR_OPENCL: an OpenCL call failed";
    case PSR_ERR_BUILD_FAILED: return "PSR_ERR_BUILD_FAILED: kernel build failed";
    case PSR_ERR_FP64_UNSUPPORTED: return "PSR_ERR_FP64_UNSUPPORTED: the device has no fp64";
    case PSR_ERR_CACHE_IO: return "PSR_ERR_CACHE_IO: the cache directory cannot be used";
    case PSR_ERR_BUFFER_TOO_SMALL: return "PSR_ERR_BUFFER_TOO_SMALL: a buffer is too small for the shape";
    case PSR_ERR_POSITION_RANGE: return "PSR_ERR_POSITION_RANGE: a position is outside [0, 2^30)";
    case PSR_ERR_TEMPERATURE: return "PSR_ERR_TEMPERATURE: a temperature is not 0 or a positive normal number";
    case PSR_ERR_TOKEN_RANGE: return "PSR_ERR_TOKEN_RANGE: a token id is outside [-1, vocab)";
    case PSR_ERR_NOT_SUPPORTED: return "PSR_ERR_NOT_SUPPORTED: an optional part (CLBlast) is not available";
    case PSR_ERR_FILTER_RANGE: return "PSR_ERR_FILTER_RANGE: a top-p is outside (0, 1] or a min-p outside [0, 1]";
    case PSR_ERR_STRUCT_SIZE: return "PSR_ERR_STRUCT_SIZE: a struct_size this library does not accept";
    case PSR_ERR_FOREIGN_BUFFER: return "PSR_ERR_FOREIGN_BUFFER: a buffer belongs to another OpenCL context";
    case PSR_ERR_BUFFER_OVERLAP: return "PSR_ERR_BUFFER_OVERLAP: an output buffer overlaps another buffer of the call";
    case PSR_ERR_OUT_OF_DEVICE_MEMORY: return "PSR_ERR_OUT_OF_DEVICE_MEMORY: the device is out of memory or resources";
    case PSR_ERR_SHARD_MISMATCH: return "PSR_ERR_SHARD_MISMATCH: vocabulary shards do not fit together";
    case PSR_ERR_COLLECTIVE: return "PSR_ERR_COLLECTIVE: a collective across shards failed or another shard failed";
    }
    return "PSR_ERR_UNKNOWN: not a psr status code";
}

const char *psr_last_error(const psr_context *ctx)
{
    return ctx ? ctx->error : thread_error;
}

cl_int psr_last_cl_error(const psr_context *ctx)
{
    return ctx ? ctx->cl_error : thread_cl_error;
}

void psr_clear_thread_error(void)
{
    thread_error[0] = '\0';
    thread_cl_error = CL_SUCCESS;
}

static void deliver(const psr_context *ctx, psr_log_level level, const char *message)
{
    if (ctx && ctx->log && level >= ctx->log_level)
        ctx->log(level, message, ctx->log_user_data);
}

static psr_status record(psr_context *ctx, psr_status status, cl_int cl_error, const char *fmt,
                         va_list ap, bool with_code)
{
    char *dst = ctx ? ctx->error : thread_error;
    int n = vsnprintf(dst, PSR_ERROR_MAX, fmt, ap);
    if (with_code && n >= 0 && n < PSR_ERROR_MAX)
        snprintf(dst + n, (size_t)(PSR_ERROR_MAX - n), ": %s (%d)", psr_cl_error_string(cl_error),
                 cl_error);
    if (ctx)
        ctx->cl_error = cl_error;
    else
        thread_cl_error = cl_error;
    deliver(ctx, PSR_LOG_ERROR, dst);
    return status;
}

psr_status psr_fail(psr_context *ctx, psr_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    record(ctx, status, CL_SUCCESS, fmt, ap, false);
    va_end(ap);
    return status;
}

psr_status psr_cl_status(cl_int err)
{
    switch (err) {
    case CL_MEM_OBJECT_ALLOCATION_FAILURE:
    case CL_OUT_OF_RESOURCES: return PSR_ERR_OUT_OF_DEVICE_MEMORY;
    case CL_OUT_OF_HOST_MEMORY: return PSR_ERR_OUT_OF_HOST_MEMORY;
    default: return PSR_ERR_OPENCL;
    }
}

psr_status psr_fail_cl(psr_context *ctx, cl_int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    psr_status st = record(ctx, psr_cl_status(err), err, fmt, ap, true);
    va_end(ap);
    return st;
}

void psr_log(const psr_context *ctx, psr_log_level level, const char *fmt, ...)
{
    if (!ctx || !ctx->log || level < ctx->log_level)
        return;
    char message[PSR_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    deliver(ctx, level, message);
}

const char *psr_cl_error_string(cl_int err)
{
    switch (err) {
#define NAME(x) case x: return #x;
    NAME(CL_SUCCESS)
    NAME(CL_DEVICE_NOT_FOUND)
    NAME(CL_DEVICE_NOT_AVAILABLE)
    NAME(CL_COMPILER_NOT_AVAILABLE)
    NAME(CL_MEM_OBJECT_ALLOCATION_FAILURE)
    NAME(CL_OUT_OF_RESOURCES)
    NAME(CL_OUT_OF_HOST_MEMORY)
    NAME(CL_PROFILING_INFO_NOT_AVAILABLE)
    NAME(CL_BUILD_PROGRAM_FAILURE)
    NAME(CL_INVALID_VALUE)
    NAME(CL_INVALID_DEVICE_TYPE)
    NAME(CL_INVALID_PLATFORM)
    NAME(CL_INVALID_DEVICE)
    NAME(CL_INVALID_CONTEXT)
    NAME(CL_INVALID_QUEUE_PROPERTIES)
    NAME(CL_INVALID_COMMAND_QUEUE)
    NAME(CL_INVALID_MEM_OBJECT)
    NAME(CL_INVALID_BINARY)
    NAME(CL_INVALID_BUILD_OPTIONS)
    NAME(CL_INVALID_PROGRAM)
    NAME(CL_INVALID_PROGRAM_EXECUTABLE)
    NAME(CL_INVALID_KERNEL_NAME)
    NAME(CL_INVALID_KERNEL)
    NAME(CL_INVALID_ARG_INDEX)
    NAME(CL_INVALID_ARG_VALUE)
    NAME(CL_INVALID_ARG_SIZE)
    NAME(CL_INVALID_KERNEL_ARGS)
    NAME(CL_INVALID_WORK_GROUP_SIZE)
    NAME(CL_INVALID_WORK_ITEM_SIZE)
    NAME(CL_INVALID_GLOBAL_OFFSET)
    NAME(CL_INVALID_EVENT_WAIT_LIST)
    NAME(CL_INVALID_EVENT)
    NAME(CL_INVALID_BUFFER_SIZE)
    NAME(CL_INVALID_GLOBAL_WORK_SIZE)
#undef NAME
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
    default: return "unknown OpenCL error";
    }
}

size_t psr_strlcpy(char *dst, const char *src, size_t size)
{
    size_t n = strlen(src);
    if (size) {
        size_t k = n < size - 1 ? n : size - 1;
        memcpy(dst, src, k);
        dst[k] = '\0';
    }
    return n;
}

bool psr_contains_nocase(const char *haystack, const char *needle)
{
    size_t n = strlen(needle);
    if (n == 0)
        return true;
    for (; *haystack; haystack++) {
        size_t i = 0;
        while (i < n && haystack[i] &&
               tolower((unsigned char)haystack[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n)
            return true;
    }
    return false;
}

bool psr_env_flag(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}
