/* Errors, logging and small string helpers of the runtime (status.c). */
#ifndef PSR_RUNTIME_STATUS_H
#define PSR_RUNTIME_STATUS_H

#include <psr/psr_experimental.h>

#include <stdarg.h>
#include <stdbool.h>

#define PSR_ERROR_MAX 1024

/* ---- errors and logging (status.c) ---- */

/* Records the detail of a failure (on ctx, or per thread when ctx is NULL),
 * sends it to the log callback, and returns status. */
psr_status psr_fail(psr_context *ctx, psr_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* psr_fail for a failed OpenCL call: the status its code maps to
 * (psr_cl_status), the message followed by ": CL_NAME (code)", and the
 * code kept for psr_last_cl_error. */
psr_status psr_fail_cl(psr_context *ctx, cl_int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* PSR_ERR_OUT_OF_DEVICE_MEMORY, PSR_ERR_OUT_OF_HOST_MEMORY or PSR_ERR_OPENCL. */
psr_status psr_cl_status(cl_int err);
/* Argument checks: fail with `status` and a message unless cond holds.
 * Needs a psr_context *ctx in scope. */
#define REQUIRE(cond, status, ...)                     \
    do {                                               \
        if (!(cond))                                   \
            return psr_fail(ctx, status, __VA_ARGS__); \
    } while (0)
void psr_log(const psr_context *ctx, psr_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Clears the thread's context-less error detail at the start of a call. */
void psr_clear_thread_error(void);

/* ---- small string helpers (status.c) ---- */

/* Copies like strlcpy: always terminates, returns strlen(src). */
size_t psr_strlcpy(char *dst, const char *src, size_t size);
/* True when the environment variable is set to anything but "" or "0". */
bool psr_env_flag(const char *name);
/* Case-insensitive substring test. */
bool psr_contains_nocase(const char *haystack, const char *needle);

#endif
