/* The lower-tail census of the noise options (cl/gumbel.cl psr_tail_count). */
#include "check/check.h"
#include "ops/ops.h"
#include "oracle/oracle.h"

psr_status psr_tail_census(psr_context *ctx, psr_noise noise, unsigned long long draws,
                           bool top_slice, unsigned long long *done_out, unsigned long long *c24,
                           unsigned long long *c32)
{
    unsigned flags, resolved;
    psr_status st = psr_call_flags(ctx, 0, noise, false, "", &flags);
    if (st == PSR_OK)
        st = psr_resolve_flags(ctx, flags, "noise", &resolved);
    if (st != PSR_OK)
        return st;
    psr_variant v = psr_variant_of(PSR_KERNELS_NOISE, resolved & (PSR_FLAG_FP64_NOISE | PSR_FLAG_WIDE_NOISE),
                                   PSR_DTYPE_F32);
    cl_kernel k;
    st = psr_kernel_get(ctx, &v, "psr_tail_count", &k);
    if (st != PSR_OK)
        return st;
    cl_int err;
    cl_mem counts = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE, 8, NULL, &err);
    if (err != CL_SUCCESS)
        return psr_fail_cl(ctx, err, "cannot allocate counters");
    *c24 = *c32 = 0;
    /* Launches of 2^24 work-items x 256 draws (2^32 draws) at the most. */
    cl_uint per_item = 256, key = 0, slice = top_slice;
    unsigned long long done = 0;
    while (st == PSR_OK && done < draws) {
        unsigned long long left = draws - done;
        size_t items = left / per_item > (1u << 24) ? (1u << 24) : (size_t)(left / per_item);
        if (items == 0)
            break;
        size_t local = 64;
        items = items / local * local;
        if (items == 0)
            break;
        cl_uint zero[2] = {0, 0}, got[2];
        key++; /* a new row key per launch keeps every draw distinct */
        err = clEnqueueWriteBuffer(ctx->queue, counts, CL_TRUE, 0, 8, zero, 0, NULL, NULL);
        if (err == CL_SUCCESS)
            err = clSetKernelArg(k, 0, sizeof key, &key);
        if (err == CL_SUCCESS)
            err = clSetKernelArg(k, 1, sizeof per_item, &per_item);
        if (err == CL_SUCCESS)
            err = clSetKernelArg(k, 2, sizeof slice, &slice);
        if (err == CL_SUCCESS)
            err = clSetKernelArg(k, 3, sizeof counts, &counts);
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(ctx->queue, k, 1, NULL, &items, &local, 0, NULL, NULL);
        if (err == CL_SUCCESS)
            err = clEnqueueReadBuffer(ctx->queue, counts, CL_TRUE, 0, 8, got, 0, NULL, NULL);
        if (err != CL_SUCCESS) {
            st = psr_fail_cl(ctx, err, "lower-tail census failed");
            break;
        }
        *c24 += got[0];
        *c32 += got[1];
        done += (unsigned long long)items * per_item;
    }
    clReleaseMemObject(counts);
    if (done_out)
        *done_out = done;
    return st;
}

