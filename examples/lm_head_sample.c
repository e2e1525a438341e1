/* From hidden states to tokens without leaving the device: the LM head
 * (logits = hidden x weights^T, CLBlast's GEMM) feeds psr_sample, chained by
 * the GEMM's event. Where CLBlast cannot be loaded the library answers
 * PSR_ERR_NOT_SUPPORTED, and this program then exits 77 (skipped). */
#include <psr/psr.h>

#include <stdio.h>
#include <stdlib.h>

enum { B = 2, H = 64, V = 300 };

/* Prints why a call failed; the exit status is 77 (meson's "skipped") on
 * a machine without an OpenCL device, else 1. */
static int fail(const psr_context *ctx, psr_status st, const char *what)
{
    fprintf(stderr, "%s: %s\n  %s\n", what, psr_status_string(st), psr_last_error(ctx));
    return st == PSR_ERR_NO_DEVICE ? 77 : 1;
}

static void cl_check(cl_int err, const char *what)
{
    if (err != CL_SUCCESS) {
        fprintf(stderr, "%s: OpenCL error %d\n", what, (int)err);
        exit(1);
    }
}

static cl_mem buffer(cl_context cl, size_t bytes, const void *host)
{
    cl_int err;
    cl_mem m = clCreateBuffer(cl, CL_MEM_READ_WRITE | (host ? CL_MEM_COPY_HOST_PTR : 0), bytes,
                              (void *)host, &err);
    cl_check(err, "clCreateBuffer");
    return m;
}

static void release(cl_mem *m, size_t n, psr_context *ctx)
{
    for (size_t i = 0; i < n; i++)
        clReleaseMemObject(m[i]);
    psr_context_free(ctx);
}

int main(void)
{
    psr_context *ctx = NULL;
    psr_status st = psr_context_create(NULL, &ctx);
    if (st != PSR_OK)
        return fail(NULL, st, "psr_context_create");
    cl_context cl;
    cl_command_queue queue;
    if ((st = psr_context_cl(ctx, &cl, NULL, &queue)) != PSR_OK)
        return fail(ctx, st, "psr_context_cl");

    /* Random hidden states [B, H] and weights [V, H], as checkpoints store
     * them. Row b's hidden state is planted as weight row want[b], whose
     * logit |h|^2 then stands far above the others: greedy must pick it. */
    static float data[(B + V) * H];
    float *hidden = data, *weights = data + B * H;
    unsigned x = 99;
    for (int i = 0; i < (B + V) * H; i++) {
        x = x * 1664525u + 1013904223u;
        data[i] = (float)(x >> 8) / (float)(1u << 24) * 2.0f - 1.0f; /* [-1, 1) */
    }
    const int32_t want[B] = {17, 250};
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            weights[want[b] * H + h] = hidden[b * H + h];

    int64_t seeds[B] = {1, 2}, positions[B] = {0, 0};
    float temps[B] = {0.0f, 0.0f};
    cl_mem d_hidden = buffer(cl, B * H * 4, hidden), d_w = buffer(cl, V * H * 4, weights);
    cl_mem d_logits = buffer(cl, (size_t)B * V * 4, NULL), d_tokens = buffer(cl, B * 4, NULL);
    cl_mem d_seeds = buffer(cl, sizeof seeds, seeds), d_temps = buffer(cl, sizeof temps, temps);
    cl_mem d_pos = buffer(cl, sizeof positions, positions);
    cl_mem all[] = {d_hidden, d_w, d_logits, d_tokens, d_seeds, d_temps, d_pos};

    psr_lm_head_args lm;
    psr_lm_head_args_init(&lm, sizeof lm);
    lm.batch = B;
    lm.hidden_size = H;
    lm.vocab = V;
    lm.dtype = PSR_DTYPE_F32; /* fp16 only where the device has cl_khr_fp16 */
    lm.hidden = d_hidden;
    lm.weights = d_w;
    lm.logits = d_logits;
    cl_event gemm = NULL;
    st = psr_lm_head(ctx, &lm, &gemm);
    if (!(psr_features() & PSR_FEATURE_CLBLAST)) {
        /* No CLBlast on this machine: the call exists, checks its arguments and
         * says so. Anything else is a failure. */
        if (st != PSR_ERR_NOT_SUPPORTED)
            return fail(ctx, st, "psr_lm_head without CLBlast");
        fprintf(stderr, "skip: %s\n", psr_last_error(ctx));
        release(all, sizeof all / sizeof all[0], ctx);
        return 77;
    }
    if (st != PSR_OK)
        return fail(ctx, st, "psr_lm_head");

    psr_sample_args a;
    psr_sample_args_init(&a, sizeof a);
    a.rows = B;
    a.vocab = V;
    a.logits = d_logits;
    a.logits_dtype = lm.dtype; /* the logits have the inputs' dtype */
    a.requests = B;
    a.seeds = d_seeds;
    a.temperatures = d_temps;
    a.positions = d_pos;
    a.tokens = d_tokens;
    a.num_events_in_wait_list = 1; /* start after the GEMM */
    a.event_wait_list = &gemm;
    cl_event done = NULL;
    if ((st = psr_sample(ctx, &a, &done)) != PSR_OK)
        return fail(ctx, st, "psr_sample");
    clReleaseEvent(gemm); /* psr_sample holds what it needs */

    int32_t tokens[B];
    cl_check(clEnqueueReadBuffer(queue, d_tokens, CL_TRUE, 0, sizeof tokens, tokens, 1, &done,
                                 NULL), "read tokens");
    clReleaseEvent(done);

    int bad = 0;
    for (int b = 0; b < B; b++) {
        printf("row %d: token %d (want %d)\n", b, tokens[b], want[b]);
        bad |= tokens[b] != want[b];
    }

    release(all, sizeof all / sizeof all[0], ctx);
    if (bad)
        fprintf(stderr, "FAIL: the greedy token is not the planted one\n");
    return bad;
}
