/* The stream's probe kernel (cl/stream.cl psr_token_uniforms): row keys
 * and uniforms of (seed, position, token) triples, for the known-answer
 * check of psr verify. */
#include "check/check.h"
#include "ops/ops.h"

/* Device buffers of one probe: three inputs, three outputs. */
enum { IN_SEEDS, IN_POS, IN_TOKENS, OUT_KEYS, OUT_U32, OUT_U64, PROBE_BUFFERS };

static cl_int make_buffers(psr_context *ctx, size_t n, const int64_t *seeds, const int64_t *positions,
                           const uint32_t *tokens, cl_mem m[PROBE_BUFFERS])
{
    const cl_mem_flags in = CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR;
    const void *host[3] = {seeds, positions, tokens};
    const size_t in_bytes[3] = {n * 8, n * 8, n * 4};
    cl_int err = CL_SUCCESS;
    for (int b = 0; b < PROBE_BUFFERS && err == CL_SUCCESS; b++)
        m[b] = b < 3 ? clCreateBuffer(ctx->cl_ctx, in, in_bytes[b], (void *)host[b], &err)
                     : clCreateBuffer(ctx->cl_ctx, CL_MEM_WRITE_ONLY, n * 8, NULL, &err);
    return err;
}

psr_status psr_probe_uniforms(psr_context *ctx, bool drafting, size_t n, const int64_t *seeds,
                              const int64_t *positions, const uint32_t *tokens, uint32_t *row_keys,
                              uint32_t *u32_bits, uint64_t *u64_bits)
{
    bool fp64 = ctx->info.capabilities & PSR_CAP_FP64;
    psr_variant v = {.set = PSR_KERNELS_STREAM, .drafting = drafting, .fp64 = fp64};
    cl_kernel k;
    psr_status st = psr_kernel_get(ctx, &v, "psr_token_uniforms", &k);
    if (st != PSR_OK || n == 0)
        return st;
    cl_mem m[PROBE_BUFFERS] = {NULL};
    cl_int err = make_buffers(ctx, n, seeds, positions, tokens, m);
    cl_uint count = (cl_uint)n;
    psr_kernel_args args = psr_kernel_args_begin(ctx, k, "psr_token_uniforms");
    psr_arg_mem(&args, "seeds", m[IN_SEEDS]);
    psr_arg_mem(&args, "positions", m[IN_POS]);
    psr_arg_mem(&args, "tokens", m[IN_TOKENS]);
    psr_arg_value(&args, "n", &count, sizeof count);
    psr_arg_mem(&args, "row_keys", m[OUT_KEYS]);
    psr_arg_mem(&args, "u32_bits", m[OUT_U32]);
    psr_arg_mem(&args, "u64_bits", m[OUT_U64]);
    if (err == CL_SUCCESS && (st = psr_kernel_args_end(&args)) == PSR_OK) {
        size_t global = n;
        err = clEnqueueNDRangeKernel(ctx->queue, k, 1, NULL, &global, NULL, 0, NULL, NULL);
        if (err == CL_SUCCESS)
            err = clEnqueueReadBuffer(ctx->queue, m[OUT_KEYS], CL_TRUE, 0, n * 4, row_keys, 0, NULL, NULL);
        if (err == CL_SUCCESS)
            err = clEnqueueReadBuffer(ctx->queue, m[OUT_U32], CL_TRUE, 0, n * 4, u32_bits, 0, NULL, NULL);
        if (err == CL_SUCCESS)
            err = clEnqueueReadBuffer(ctx->queue, m[OUT_U64], CL_TRUE, 0, n * 8, u64_bits, 0, NULL, NULL);
    }
    for (int b = 0; b < PROBE_BUFFERS; b++)
        if (m[b])
            clReleaseMemObject(m[b]);
    if (st == PSR_OK && err != CL_SUCCESS)
        st = psr_fail_cl(ctx, err, "the stream probe failed");
    return st;
}
