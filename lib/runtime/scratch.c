/* Device scratch of the context: buffers that grow to the largest call
 * seen, and buffers of several regions. */
#include "runtime/runtime.h"

#include <stdint.h>

psr_status psr_scratch_reserve(psr_context *ctx, psr_scratch *s, size_t bytes)
{
    if (bytes <= s->bytes)
        return PSR_OK;
    if (s->buffer)
        clReleaseMemObject(s->buffer);
    s->buffer = NULL;
    s->bytes = 0;
    cl_int err;
    s->buffer = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (err != CL_SUCCESS) {
        s->buffer = NULL;
        return psr_fail_cl(ctx, err, "cannot allocate %zu bytes of scratch", bytes);
    }
    cl_uchar zero = 0;
    err = clEnqueueFillBuffer(ctx->queue, s->buffer, &zero, 1, 0, bytes, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
        clReleaseMemObject(s->buffer);
        s->buffer = NULL;
        return psr_fail_cl(ctx, err, "cannot clear %zu bytes of scratch", bytes);
    }
    s->bytes = bytes;
    return PSR_OK;
}

/* Offsets are multiples of this: any element type reads a region aligned. */
#define REGION_ALIGN 16

psr_status psr_regions_reserve(psr_context *ctx, psr_scratch *s, psr_regions *r, const size_t *need, size_t n,
                               size_t unit, const char *call)
{
    bool fits = s->buffer != NULL;
    for (size_t i = 0; i < n; i++)
        fits = fits && need[i] <= r->capacity[i];
    if (fits)
        return PSR_OK;
    size_t capacity[PSR_MAX_REGIONS], total = 0;
    for (size_t i = 0; i < n; i++) {
        capacity[i] = need[i] > r->capacity[i] ? need[i] : r->capacity[i];
        REQUIRE(capacity[i] <= SIZE_MAX - REGION_ALIGN - total && total / unit < UINT32_MAX,
                PSR_ERR_INVALID_ARGUMENT, "%s: the batch's scratch is too large (a region starts past 2^32 "
                "units of %zu bytes)", call, unit);
        capacity[i] = (capacity[i] + REGION_ALIGN - 1) / REGION_ALIGN * REGION_ALIGN;
        total += capacity[i];
    }
    if (s->buffer)
        clReleaseMemObject(s->buffer);
    *s = (psr_scratch){NULL, 0};
    *r = (psr_regions){{0}, {0}};
    psr_status st = psr_scratch_reserve(ctx, s, total ? total : REGION_ALIGN);
    if (st != PSR_OK)
        return st;
    for (size_t i = 0, at = 0; i < n; at += capacity[i], i++) {
        r->capacity[i] = capacity[i];
        r->at[i] = at;
    }
    return PSR_OK;
}
