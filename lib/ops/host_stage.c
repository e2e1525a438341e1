/* Host arrays on their way to a device call and back: each input is
 * written to a device buffer of the context's (kept from call to call),
 * each output is read back from one into a private copy, and the caller's
 * arrays receive the copies only once the whole call has succeeded. */
#include "ops/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

psr_status psr_stage_create(psr_context *ctx, const char *call, psr_staged *s, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        s[i].mem = NULL;
        s[i].copy = NULL;
    }
    for (size_t i = 0; i < count; i++) {
        if (s[i].bytes == 0 || (!s[i].in && !s[i].output))
            continue;
        if (s[i].output && !(s[i].copy = malloc(s[i].bytes)))
            return psr_fail(ctx, PSR_ERR_OUT_OF_HOST_MEMORY, "%s: out of host memory", call);
        psr_status st = psr_scratch_reserve(ctx, &ctx->stage[i], s[i].bytes);
        if (st != PSR_OK) {
            char why[256];
            snprintf(why, sizeof why, "%s", psr_last_error(ctx));
            return psr_fail(ctx, st, "%s: staging the arrays: %s", call, why);
        }
        s[i].mem = ctx->stage[i].buffer;
        /* Outputs start as all ones bits (token -1, NaN), not as the last
         * call's values, should a kernel cut short leave some unwritten.
         * Inputs are copied without blocking: psr_stage_run waits for the
         * queue before it returns. */
        static const cl_uchar ones = 0xff;
        cl_int err = s[i].output ? clEnqueueFillBuffer(ctx->queue, s[i].mem, &ones, 1, 0, s[i].bytes, 0, NULL, NULL)
                                 : clEnqueueWriteBuffer(ctx->queue, s[i].mem, CL_FALSE, 0, s[i].bytes, s[i].in, 0,
                                                        NULL, NULL);
        if (err != CL_SUCCESS)
            return psr_fail_cl(ctx, err, "%s: staging %zu bytes on the device failed", call, s[i].bytes);
    }
    return PSR_OK;
}

psr_status psr_stage_read(psr_context *ctx, const char *call, psr_staged *s, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        if (!s[i].output || !s[i].mem)
            continue;
        cl_int err = clEnqueueReadBuffer(ctx->queue, s[i].mem, CL_TRUE, 0, s[i].bytes, s[i].copy, 0, NULL, NULL);
        if (err != CL_SUCCESS)
            return psr_fail_cl(ctx, err, "%s: reading the results failed", call);
    }
    return PSR_OK;
}

psr_status psr_stage_run(psr_context *ctx, const char *call, psr_staged *s, size_t count,
                         psr_status (*device_call)(psr_context *ctx, const psr_staged *s, void *job), void *job)
{
    psr_status st = psr_stage_create(ctx, call, s, count);
    if (st == PSR_OK)
        st = device_call(ctx, s, job);
    if (st == PSR_OK)
        st = psr_stage_read(ctx, call, s, count);
    if (st != PSR_OK)
        clFinish(ctx->queue); /* no write may still read the caller's arrays */
    return st;
}

void psr_stage_commit(const psr_staged *s, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (s[i].output && s[i].out && s[i].copy)
            memcpy(s[i].out, s[i].copy, s[i].bytes);
}

void psr_stage_release(psr_staged *s, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        free(s[i].copy); /* the buffers stay the context's */
        s[i].mem = NULL;
        s[i].copy = NULL;
    }
}

bool psr_temperature_ok(float t)
{
    return t == 0.0f || (isnormal(t) && t > 0.0f);
}

psr_status psr_check_host_rows(psr_context *ctx, const int64_t *positions, size_t rows,
                               const float *temperatures, size_t temperature_count)
{
    for (size_t r = 0; r < rows; r++)
        REQUIRE(positions[r] >= 0 && positions[r] < PSR_MAX_POSITION, PSR_ERR_POSITION_RANGE,
                "args->positions[%zu] = %lld is outside [0, 2^30)", r, (long long)positions[r]);
    for (size_t r = 0; temperatures && r < temperature_count; r++)
        REQUIRE(psr_temperature_ok(temperatures[r]), PSR_ERR_TEMPERATURE,
                "args->temperatures[%zu] = %g is not 0 or a positive normal number", r,
                (double)temperatures[r]);
    return PSR_OK;
}

psr_status psr_check_host_filters(psr_context *ctx, size_t rows, const int32_t *top_k, const float *top_p,
                                  const float *min_p)
{
    psr_status st = PSR_OK;
    for (size_t r = 0; r < rows && st == PSR_OK && (top_p || min_p); r++)
        st = psr_filter_check_values(ctx, "args", r, top_k, top_p, min_p);
    return st;
}

size_t psr_token_size(psr_token_dtype dtype)
{
    return dtype == PSR_TOKENS_I64 ? 8 : 4;
}
