/* A program built against psr 0.1's argument structs (psr_0_1.h), run
 * against this library: the 0.1 layouts keep working, with their 0.1
 * meaning (the noise in bits 1 and 3 of flags, effective_flags the flags
 * used), and their missing fields take the defaults (int32 tokens, no
 * all_* filters). Tokens and logprobs are checked against the oracle.
 * Structs the library fills (psr_device_info, ...) keep their layout only
 * within a soname, and 0.1's is another one: this program uses none. 
 * Exit 0: pass, 1: fail, 77: no device. */
#include "psr_0_1.h"
#include "oracle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ROWS = 4, VOCAB = 3001 };

static int failures;

#define CHECK(cond, ...)                   \
    do {                                   \
        if (!(cond)) {                     \
            fprintf(stderr, __VA_ARGS__);  \
            fputc('\n', stderr);           \
            failures++;                    \
        }                                  \
    } while (0)

typedef struct device_rows {
    cl_context cl;
    cl_command_queue queue;
    cl_mem logits, seeds, temps, positions, tokens;
} device_rows;

static cl_mem upload(const device_rows *d, const void *host, size_t bytes)
{
    cl_int err;
    cl_mem m = clCreateBuffer(d->cl, CL_MEM_READ_WRITE | (host ? CL_MEM_COPY_HOST_PTR : 0), bytes,
                              (void *)host, &err);
    return err == CL_SUCCESS ? m : NULL;
}

/* psr_sample with a 0.1 layout and 0.1 noise bits; tokens against the oracle. */
static void check_sample(psr_context *ctx, const device_rows *d, const float *x, const int64_t *seeds,
                         const int64_t *pos, const float *temps, unsigned noise_bit, psr_noise_kind kind)
{
    psr_sample_args a;
    CHECK(psr_sample_args_init(&a, sizeof a) == PSR_OK, "init of the 0.1 sample layout refused: %s",
          psr_last_error(NULL));
    CHECK(a.struct_size == sizeof a, "init wrote struct_size %zu", a.struct_size);
    unsigned effective = 0xdead;
    a.rows = a.requests = ROWS, a.vocab = VOCAB;
    a.logits = d->logits, a.seeds = d->seeds, a.temperatures = d->temps, a.positions = d->positions;
    a.tokens = d->tokens, a.flags = noise_bit, a.effective_flags = &effective;
    psr_status st = psr_sample(ctx, &a, NULL);
    CHECK(st == PSR_OK, "psr_sample (0.1 layout, flags 0x%x): %s", noise_bit, psr_last_error(ctx));
    CHECK(effective == noise_bit, "effective_flags 0x%x, want 0x%x", effective, noise_bit);
    int32_t tokens[ROWS];
    clEnqueueReadBuffer(d->queue, d->tokens, CL_TRUE, 0, sizeof tokens, tokens, 0, NULL, NULL);
    for (int r = 0; r < ROWS && st == PSR_OK; r++) {
        int32_t want = psr_oracle_sample_row(x + (size_t)r * VOCAB, VOCAB, temps[r], seeds[r], pos[r], false, kind, NULL);
        CHECK(tokens[r] == want, "flags 0x%x row %d: token %d, oracle %d", noise_bit, r, tokens[r], want);
    }
}

/* psr_logprobs with the 0.1 layout: int32 tokens, no all_* filters. */
static void check_logprobs(psr_context *ctx, const device_rows *d, const float *x, const float *temps)
{
    psr_logprobs_args a;
    CHECK(psr_logprobs_args_init(&a, sizeof a) == PSR_OK, "init of the 0.1 logprobs layout refused");
    cl_mem out = upload(d, NULL, ROWS * 4);
    a.rows = a.requests = ROWS, a.vocab = VOCAB;
    a.logits = d->logits, a.temperatures = d->temps, a.tokens = d->tokens, a.token_logprobs = out;
    CHECK(psr_logprobs(ctx, &a, NULL) == PSR_OK, "psr_logprobs (0.1 layout): %s", psr_last_error(ctx));
    float got[ROWS];
    int32_t tokens[ROWS];
    clEnqueueReadBuffer(d->queue, out, CL_TRUE, 0, sizeof got, got, 0, NULL, NULL);
    clEnqueueReadBuffer(d->queue, d->tokens, CL_TRUE, 0, sizeof tokens, tokens, 0, NULL, NULL);
    for (int r = 0; r < ROWS; r++) {
        float want;
        int32_t rank;
        psr_oracle_logprobs_row(x + (size_t)r * VOCAB, VOCAB, temps[r], false, -INFINITY, tokens[r], 0, &want,
                                &rank, NULL, NULL);
        CHECK(memcmp(&got[r], &want, sizeof want) == 0, "row %d: logprob %.9g, oracle %.9g", r, got[r], want);
    }
    clReleaseMemObject(out);
}

/* Sizes the library must refuse: smaller than 0.1's, and larger than its own. */
static void check_refused_sizes(void)
{
    psr_sample_args a;
    CHECK(psr_sample_args_init(&a, 8) != PSR_OK, "a struct_size of 8 was accepted");
    CHECK(a.struct_size == 0, "a refused init left struct_size %zu", a.struct_size);
    static char big[4096];
    CHECK(psr_sample_args_init((psr_sample_args *)(void *)big, sizeof big) != PSR_OK,
          "a struct_size of 4096 was accepted");
}

static int run(psr_context *ctx, device_rows *d)
{
    float *x = malloc(sizeof(float) * ROWS * VOCAB);
    int64_t seeds[ROWS], pos[ROWS];
    float temps[ROWS];
    uint32_t s = 12345;
    for (size_t i = 0; x && i < (size_t)ROWS * VOCAB; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)((double)(s >> 8) / 16777216.0 * 10.0 - 5.0);
    }
    for (int r = 0; r < ROWS; r++)
        seeds[r] = 40 + r, pos[r] = 7 * r, temps[r] = 0.7f + 0.1f * (float)r;
    d->logits = upload(d, x, sizeof(float) * ROWS * VOCAB);
    d->seeds = upload(d, seeds, sizeof seeds);
    d->positions = upload(d, pos, sizeof pos);
    d->temps = upload(d, temps, sizeof temps);
    d->tokens = upload(d, NULL, ROWS * 4);
    if (!x || !d->logits || !d->seeds || !d->positions || !d->temps || !d->tokens)
        return fprintf(stderr, "allocation failed\n"), 1;
    cl_device_id dev;
    char ext[8192] = "";
    psr_context_cl(ctx, NULL, &dev, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, sizeof ext - 1, ext, NULL);
    check_sample(ctx, d, x, seeds, pos, temps, 0, PSR_ORACLE_FP32);
    check_logprobs(ctx, d, x, temps);
    check_sample(ctx, d, x, seeds, pos, temps, PSR_SAMPLE_WIDE_NOISE, PSR_ORACLE_WIDE);
    if (strstr(ext, "cl_khr_fp64"))
        check_sample(ctx, d, x, seeds, pos, temps, PSR_SAMPLE_FP64_NOISE, PSR_ORACLE_FP64);
    check_refused_sizes();
    cl_mem all[] = {d->logits, d->seeds, d->positions, d->temps, d->tokens};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        clReleaseMemObject(all[i]);
    free(x);
    return failures ? 1 : 0;
}

int main(void)
{
    psr_context_options o;
    if (psr_context_options_init(&o, sizeof o) != PSR_OK)
        return fprintf(stderr, "options init refused: %s\n", psr_last_error(NULL)), 1;
    o.disk_cache = PSR_DISK_CACHE_OFF;
    psr_context *ctx = NULL;
    psr_status st = psr_context_create(&o, &ctx);
    if (st == PSR_ERR_NO_DEVICE || st == PSR_ERR_DEVICE_NOT_FOUND)
        return 77;
    if (st != PSR_OK)
        return fprintf(stderr, "no context: %s\n", psr_last_error(NULL)), 1;
    device_rows d;
    memset(&d, 0, sizeof d);
    psr_context_cl(ctx, &d.cl, NULL, &d.queue);
    int rc = run(ctx, &d);
    psr_context_free(ctx);
    if (rc == 0)
        printf("a program built against the 0.1 layouts runs against psr %s\n", psr_version());
    return rc;
}
