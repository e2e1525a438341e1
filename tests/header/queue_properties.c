/* An application that includes psr.h first and targets OpenCL 2.0 or later
 * (its own CL_TARGET_OPENCL_VERSION, or the headers' default) still sees
 * the OpenCL 2.0 API: psr.h must not pin the target. Compiled, never
 * linked (tests/header/meson.build). */
#include <psr/psr.h>

psr_status psr_header_wrap_queue(cl_context cl_ctx, cl_device_id device, psr_context **out);

psr_status psr_header_wrap_queue(cl_context cl_ctx, cl_device_id device, psr_context **out)
{
    cl_queue_properties props[3];
    cl_command_queue queue;
    cl_int err = CL_SUCCESS;
    psr_status st;

    props[0] = CL_QUEUE_PROPERTIES;
    props[1] = CL_QUEUE_PROFILING_ENABLE;
    props[2] = 0;
    queue = clCreateCommandQueueWithProperties(cl_ctx, device, props, &err);
    if (err != CL_SUCCESS)
        return PSR_ERR_OPENCL;
    st = psr_context_create_from_cl(cl_ctx, device, queue, NULL, out);
    clReleaseCommandQueue(queue);
    return st;
}
