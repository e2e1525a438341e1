/* The install test's application (tests/install/run.sh): built against an
 * installed psr, once through pkg-config and once through CMake, from
 * psr.h alone. It samples a few rows on the default device with
 * psr_sample_host and prints the tokens, then runs the LM head, which must
 * answer as the argument says:
 *   app lm-head-ok             CLBlast loads: PSR_OK, and the logits match a host GEMM
 *   app lm-head-not-supported  CLBlast does not: PSR_ERR_NOT_SUPPORTED, and the
 *                              detail names the libraries tried
 * Exit status 0 when all is as expected, else 1. */
#define CL_TARGET_OPENCL_VERSION 120
#include <psr/psr.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { ROWS = 4, VOCAB = 64, B = 2, H = 8, V = 5 };

static int fail(const psr_context *ctx, psr_status st, const char *what)
{
    fprintf(stderr, "FAIL: %s: %s\n  %s\n", what, psr_status_string(st), psr_last_error(ctx));
    return 1;
}

/* Rows of made-up logits, sampled at temperatures 0, 0.5, 1 and 2; one
 * line of tokens, the same for every build of the same psr. */
static int sample_rows(psr_context *ctx)
{
    static float logits[ROWS * VOCAB];
    for (int i = 0; i < ROWS * VOCAB; i++)
        logits[i] = (float)((i * 37) % 101) / 10.0f;
    const int64_t seeds[ROWS] = {1, 2, 3, 4}, positions[ROWS] = {0, 1, 2, 3};
    const float temps[ROWS] = {0.0f, 0.5f, 1.0f, 2.0f};
    int32_t tokens[ROWS];
    psr_sample_host_args a;
    psr_sample_host_args_init(&a, sizeof a);
    a.rows = ROWS, a.vocab = VOCAB, a.logits = logits;
    a.seeds = seeds, a.positions = positions, a.temperatures = temps, a.tokens = tokens;
    psr_status st = psr_sample_host(ctx, &a);
    if (st != PSR_OK)
        return fail(ctx, st, "psr_sample_host");
    printf("tokens:");
    for (int r = 0; r < ROWS; r++)
        printf(" %d", (int)tokens[r]);
    printf("\n");
    return 0;
}

static cl_mem buffer(cl_context cl, size_t bytes, const float *host)
{
    cl_int err;
    cl_mem m = clCreateBuffer(cl, CL_MEM_READ_WRITE | (host ? CL_MEM_COPY_HOST_PTR : 0), bytes,
                              (void *)host, &err);
    return err == CL_SUCCESS ? m : NULL;
}

/* The logits the device wrote against a GEMM on the host. */
static int check_logits(cl_command_queue queue, cl_mem d_logits, const float *hidden,
                        const float *weights)
{
    float logits[B * V];
    if (clEnqueueReadBuffer(queue, d_logits, CL_TRUE, 0, sizeof logits, logits, 0, NULL, NULL) !=
        CL_SUCCESS) {
        fprintf(stderr, "FAIL: reading the logits\n");
        return 1;
    }
    for (int b = 0; b < B; b++)
        for (int v = 0; v < V; v++) {
            float want = 0.0f;
            for (int h = 0; h < H; h++)
                want += hidden[b * H + h] * weights[v * H + h];
            if (fabsf(logits[b * V + v] - want) > 1e-4f * (1.0f + fabsf(want))) {
                fprintf(stderr, "FAIL: logit [%d, %d] is %g, the host says %g\n", b, v,
                        (double)logits[b * V + v], (double)want);
                return 1;
            }
        }
    printf("lm head: %d x %d logits match the host\n", B, V);
    return 0;
}

static psr_status run_lm_head(psr_context *ctx, cl_mem *bufs, const float *hidden,
                              const float *weights)
{
    cl_context cl;
    psr_status st = psr_context_cl(ctx, &cl, NULL, NULL);
    if (st != PSR_OK)
        return st;
    bufs[0] = buffer(cl, sizeof(float) * B * H, hidden);
    bufs[1] = buffer(cl, sizeof(float) * V * H, weights);
    bufs[2] = buffer(cl, sizeof(float) * B * V, NULL);
    if (!bufs[0] || !bufs[1] || !bufs[2])
        return PSR_ERR_OPENCL;
    psr_lm_head_args a;
    psr_lm_head_args_init(&a, sizeof a);
    a.batch = B;
    a.hidden_size = H;
    a.vocab = V;
    a.hidden = bufs[0];
    a.weights = bufs[1];
    a.logits = bufs[2];
    return psr_lm_head(ctx, &a, NULL);
}

static int lm_head(psr_context *ctx, int want_ok)
{
    float hidden[B * H], weights[V * H];
    for (int i = 0; i < B * H; i++)
        hidden[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < V * H; i++)
        weights[i] = (float)(i % 5) * 0.25f;
    cl_mem bufs[3] = {NULL, NULL, NULL};
    psr_status st = run_lm_head(ctx, bufs, hidden, weights);
    int bad = 0;
    int has_clblast = (psr_features() & PSR_FEATURE_CLBLAST) != 0;
    if (has_clblast != want_ok) {
        fprintf(stderr, "FAIL: psr_features() says CLBlast is %s\n", has_clblast ? "loaded" : "absent");
        bad = 1;
    } else if (want_ok && st != PSR_OK) {
        bad = fail(ctx, st, "psr_lm_head");
    } else if (want_ok) {
        cl_command_queue queue;
        psr_context_cl(ctx, NULL, NULL, &queue);
        bad = check_logits(queue, bufs[2], hidden, weights);
    } else if (st != PSR_ERR_NOT_SUPPORTED) {
        bad = fail(ctx, st, "psr_lm_head (expected PSR_ERR_NOT_SUPPORTED)");
    } else {
        printf("lm head: %s: %s\n", psr_status_string(st), psr_last_error(ctx));
    }
    for (int i = 0; i < 3; i++)
        if (bufs[i])
            clReleaseMemObject(bufs[i]);
    return bad;
}

int main(int argc, char **argv)
{
    int want_ok = argc == 2 && strcmp(argv[1], "lm-head-ok") == 0;
    if (argc != 2 || (!want_ok && strcmp(argv[1], "lm-head-not-supported") != 0)) {
        fprintf(stderr, "usage: %s lm-head-ok|lm-head-not-supported\n", argv[0]);
        return 2;
    }
    if (psr_version_number() != PSR_VERSION_NUMBER) {
        fprintf(stderr, "FAIL: libpsr %s, headers %s\n", psr_version(), PSR_VERSION_STRING);
        return 1;
    }
    psr_context *ctx = NULL;
    psr_status st = psr_context_create(NULL, &ctx);
    if (st != PSR_OK)
        return fail(NULL, st, "psr_context_create on the default device");
    psr_device_info info;
    psr_context_device_info(ctx, &info);
    printf("psr %s on \"%s\"\n", psr_version(), info.name);
    int bad = sample_rows(ctx);
    bad |= lm_head(ctx, want_ok);
    psr_context_free(ctx);
    return bad;
}
