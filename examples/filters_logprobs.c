/* Sampling with per-request top-k / top-p / min-p, then the logprobs vLLM
 * reports for the sampled tokens: each token's logprob and rank, and the
 * row's top-N. Passing the same filter buffers to psr_logprobs makes the
 * logprobs those of the filtered distribution that was sampled. */
#include <psr/psr.h>

#include <stdio.h>
#include <stdlib.h>

enum { ROWS = 3, VOCAB = 2000, TOP_N = 5 };

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

    static float logits[ROWS * VOCAB];
    unsigned x = 777;
    for (size_t i = 0; i < ROWS * VOCAB; i++) {
        x = x * 1664525u + 1013904223u;
        logits[i] = (float)(x >> 8) / (float)(1u << 24) * 10.0f - 5.0f;
    }
    int64_t seeds[ROWS] = {7, 8, 9}, pos[ROWS] = {3, 3, 3};
    float temps[ROWS] = {0.8f, 1.0f, 1.2f};
    /* One entry per request; the "off" values are k <= 0, p = 1, min-p = 0. */
    int32_t top_k[ROWS] = {10, 0, 50};
    float top_p[ROWS] = {1.0f, 0.8f, 0.9f};
    float min_p[ROWS] = {0.0f, 0.0f, 0.01f};

    cl_mem d_logits = buffer(cl, sizeof logits, logits), d_seeds = buffer(cl, sizeof seeds, seeds);
    cl_mem d_temps = buffer(cl, sizeof temps, temps), d_pos = buffer(cl, sizeof pos, pos);
    cl_mem d_k = buffer(cl, sizeof top_k, top_k), d_p = buffer(cl, sizeof top_p, top_p);
    cl_mem d_minp = buffer(cl, sizeof min_p, min_p), d_tokens = buffer(cl, ROWS * 4, NULL);
    cl_mem d_lp = buffer(cl, ROWS * 4, NULL), d_rank = buffer(cl, ROWS * 4, NULL);
    cl_mem d_top_ids = buffer(cl, ROWS * TOP_N * 4, NULL);
    cl_mem d_top_lp = buffer(cl, ROWS * TOP_N * 4, NULL);

    psr_sample_args a;
    psr_sample_args_init(&a, sizeof a);
    a.rows = ROWS;
    a.vocab = VOCAB;
    a.logits = d_logits;
    a.requests = ROWS;
    a.seeds = d_seeds;
    a.temperatures = d_temps;
    a.positions = d_pos;
    a.tokens = d_tokens;
    a.top_k = d_k; /* a bad top-p or min-p value would give token -1 */
    a.top_p = d_p;
    a.min_p = d_minp;
    /* The first filtered call builds the filter kernels: slow once on PoCL. */
    if ((st = psr_sample(ctx, &a, NULL)) != PSR_OK)
        return fail(ctx, st, "psr_sample");

    psr_logprobs_args l;
    psr_logprobs_args_init(&l, sizeof l);
    l.rows = ROWS;
    l.vocab = VOCAB;
    l.logits = d_logits;
    l.requests = ROWS;
    l.temperatures = d_temps; /* processed logprobs: of logits / T */
    l.tokens = d_tokens;      /* what psr_sample just wrote */
    l.top_k = d_k;
    l.top_p = d_p;
    l.min_p = d_minp;
    l.top_n = TOP_N;
    l.token_logprobs = d_lp;
    l.token_ranks = d_rank;
    l.top_ids = d_top_ids;
    l.top_logprobs = d_top_lp;
    /* Same queue: queue order puts logprobs after sampling, no event needed
     * between them. One for the end of the chain. */
    cl_event done = NULL;
    if ((st = psr_logprobs(ctx, &l, &done)) != PSR_OK)
        return fail(ctx, st, "psr_logprobs");

    int32_t tokens[ROWS], ranks[ROWS], top_ids[ROWS * TOP_N];
    float lp[ROWS], top_lp[ROWS * TOP_N];
    struct { cl_mem m; size_t n; void *p; } out[] = {
        {d_tokens, sizeof tokens, tokens}, {d_rank, sizeof ranks, ranks}, {d_lp, sizeof lp, lp},
        {d_top_ids, sizeof top_ids, top_ids}, {d_top_lp, sizeof top_lp, top_lp}};
    for (size_t i = 0; i < sizeof out / sizeof out[0]; i++)
        cl_check(clEnqueueReadBuffer(queue, out[i].m, CL_TRUE, 0, out[i].n, out[i].p, 1, &done,
                                     NULL), "read results");
    clReleaseEvent(done);

    int bad = 0;
    for (int r = 0; r < ROWS; r++) {
        const float *row = logits + (size_t)r * VOCAB;
        const float *tl = top_lp + r * TOP_N;
        int larger = 0; /* tokens strictly more likely than the sampled one */
        for (int i = 0; i < VOCAB && tokens[r] >= 0 && tokens[r] < VOCAB; i++)
            larger += row[i] > row[tokens[r]];
        printf("row %d: k=%d p=%.1f min_p=%.2f: token %d, logprob %.3f, rank %d; top %d %.3f\n", r,
               top_k[r], top_p[r], min_p[r], tokens[r], lp[r], ranks[r], top_ids[r * TOP_N], tl[0]);
        if (tokens[r] < 0 || tokens[r] >= VOCAB || (top_k[r] > 0 && larger >= top_k[r]))
            bad = 1; /* out of range, or outside the top-k */
        if (!(lp[r] <= 0.0f) || ranks[r] != larger + 1 || lp[r] > tl[0])
            bad = 1; /* a logprob is <= 0, the rank counts larger logits, top-1 bounds it */
        for (int j = 0; j < TOP_N; j++)
            if (!(tl[j] <= 0.0f) || (j > 0 && tl[j] > tl[j - 1]))
                bad = 1; /* top-N: <= 0 and descending (-inf where filtered out) */
    }

    cl_mem all[] = {d_logits, d_seeds, d_temps, d_pos, d_k, d_p, d_minp, d_tokens, d_lp, d_rank,
                    d_top_ids, d_top_lp};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        clReleaseMemObject(all[i]);
    psr_context_free(ctx);
    if (bad)
        fprintf(stderr, "FAIL: a token outside its filters, or logprobs not <= 0 and sorted\n");
    return bad;
}
