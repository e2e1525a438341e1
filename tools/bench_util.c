/* Timing helpers shared by the psr bench subcommands. */
#include "bench.h"

#include <stdlib.h>

int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double event_span_us(cl_event first, cl_event last)
{
    cl_ulong start = 0, end = 0;
    clGetEventProfilingInfo(first, CL_PROFILING_COMMAND_START, sizeof start, &start, NULL);
    clGetEventProfilingInfo(last, CL_PROFILING_COMMAND_END, sizeof end, &end, NULL);
    return (double)(end - start) / 1000.0;
}

/* Device copy bandwidth in bytes/s, counting bytes read plus written. */
double copy_bandwidth(psr_context *ctx, size_t bytes)
{
    cl_int err;
    cl_mem a = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
    cl_mem b = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (err != CL_SUCCESS)
        return 0;
    cl_uint zero = 0;
    clEnqueueFillBuffer(ctx->queue, a, &zero, sizeof zero, 0, bytes, 0, NULL, NULL);
    double times[20];
    for (int i = 0; i < 23; i++) {
        cl_event ev;
        clEnqueueCopyBuffer(ctx->queue, a, b, 0, 0, bytes, 0, NULL, &ev);
        clWaitForEvents(1, &ev);
        if (i >= 3)
            times[i - 3] = event_span_us(ev, ev);
        clReleaseEvent(ev);
    }
    qsort(times, 20, sizeof times[0], cmp_double);
    clReleaseMemObject(a);
    clReleaseMemObject(b);
    return 2.0 * (double)bytes / (times[10] * 1e-6);
}

/* Median span of a kernel that does nothing: the device's fixed cost per
 * launch as its profiling events see it, under every figure below. */
double empty_kernel_us(psr_context *ctx)
{
    psr_variant v = {.set = PSR_KERNELS_STREAM};
    cl_kernel k;
    if (psr_kernel_get(ctx, &v, "psr_philox_kat", &k) != PSR_OK)
        return -1;
    cl_mem none = NULL;
    cl_uint zero = 0;
    clSetKernelArg(k, 0, sizeof none, &none);
    clSetKernelArg(k, 1, sizeof none, &none);
    clSetKernelArg(k, 2, sizeof zero, &zero);
    double times[55];
    size_t one = 1;
    for (int i = 0; i < 55; i++) {
        cl_event ev;
        if (clEnqueueNDRangeKernel(ctx->queue, k, 1, NULL, &one, NULL, 0, NULL, &ev) != CL_SUCCESS)
            return -1;
        clWaitForEvents(1, &ev);
        times[i] = event_span_us(ev, ev);
        clReleaseEvent(ev);
    }
    qsort(times + 5, 50, sizeof times[0], cmp_double);
    return times[5 + 25];
}

