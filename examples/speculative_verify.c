/* Speculative decoding (docs/speculative.md): K draft steps with PSR_SAMPLE_DRAFTING
 * fill the draft-logits cache, the target model scores the drafts plus a bonus row,
 * and psr_verify accepts a prefix of each request's drafts and samples one more
 * token, on the device. Request 0 is greedy with a known outcome; request 1 at T = 1. */
#include <psr/psr.h>

#include <stdio.h>
#include <stdlib.h>

enum { R = 2, K = 3, V = 64, ROWS = R * (K + 1) }; /* each request: K drafts + 1 bonus row */

/* Says why a call failed; exit status 77 (meson's "skipped") without a device. */
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

    /* Both models' logits in one buffer: draft step j's [R, V] at row j * R (really
     * the draft model run on step j - 1's tokens), then the target's [ROWS, V]. */
    static float logits[(K * R + ROWS) * V];
    float *target = logits + K * R * V;
    unsigned x = 4242;
    for (int i = 0; i < (K * R + ROWS) * V; i++) {
        x = x * 1664525u + 1013904223u;
        logits[i] = (float)(x >> 8) / (float)(1u << 24) * 6.0f - 3.0f;
    }
    /* Request 0 is greedy, with planted maxima: its drafts are 7 then 9, its
     * target agrees on 7 and then prefers 30. psr must emit 7, 30, -1, -1. */
    logits[7] = logits[R * V + 9] = target[7] = target[V + 30] = 10.0f;
    int64_t seeds[R] = {100, 200};
    float temps[R] = {0.0f, 1.0f};
    int32_t cu[R + 1] = {0, 4, 8};                         /* request r: rows cu[r] .. cu[r+1]-1 */
    int64_t tpos[ROWS] = {10, 11, 12, 13, 20, 21, 22, 23}; /* each target row's position */

    cl_mem d_logits = buffer(cl, sizeof logits, logits), d_tpos = buffer(cl, sizeof tpos, tpos);
    cl_mem d_seeds = buffer(cl, sizeof seeds, seeds), d_temps = buffer(cl, sizeof temps, temps);
    cl_mem d_cache = buffer(cl, R * K * V * 4, NULL); /* [R, K, V]: pre-temperature drafts */
    cl_mem d_step = buffer(cl, R * 4, NULL), d_drafts = buffer(cl, ROWS * 4, NULL);
    cl_mem d_out = buffer(cl, R * (K + 1) * 4, NULL), d_n = buffer(cl, R * 4, NULL);
    cl_mem d_status = buffer(cl, 4, NULL), d_dpos = buffer(cl, R * 8, NULL);

    psr_sample_args s;
    psr_sample_args_init(&s, sizeof s);
    s.rows = R;
    s.vocab = V;
    s.logits = d_logits;
    s.requests = R;
    s.seeds = d_seeds; /* drafts and verification share seeds and temperatures */
    s.temperatures = d_temps;
    s.positions = d_dpos;
    s.tokens = d_step;
    s.flags = PSR_SAMPLE_DRAFTING; /* the salted stream, which keeps verification unbiased */
    s.draft_cache = d_cache;       /* request q's logits go to cache row q * K + draft_step */
    s.draft_cache_k = K;
    for (size_t j = 0; j < K; j++) {
        /* Draft j sits at target row cu[r] + j's position. Positions and tokens
         * take no stride, so rect copies gather the one and scatter the other. */
        size_t zero[3] = {0, 0, 0}, row_j[3] = {j * 8, 0, 0}, region[3] = {8, R, 1};
        cl_check(clEnqueueCopyBufferRect(queue, d_tpos, d_dpos, row_j, zero, region, (K + 1) * 8,
                                         0, 8, 0, 0, NULL, NULL), "gather positions");
        s.logits_offset = j * R * V;
        s.draft_step = j;
        if ((st = psr_sample(ctx, &s, NULL)) != PSR_OK)
            return fail(ctx, st, "psr_sample (draft)");
        row_j[0] = j * 4, region[0] = 4; /* now int32 tokens */
        cl_check(clEnqueueCopyBufferRect(queue, d_step, d_drafts, zero, row_j, region, 4, 0,
                                         (K + 1) * 4, 0, 0, NULL, NULL), "scatter drafts");
    }

    psr_verify_args v;
    psr_verify_args_init(&v, sizeof v);
    v.requests = R;
    v.cu = cu; /* a host array: psr checks the layout before enqueueing */
    v.rows = ROWS;
    v.max_drafts = K;
    v.vocab = V;
    v.target_logits = d_logits;
    v.target_offset = K * R * V;
    v.draft_cache = d_cache;
    v.draft_cache_k = K;
    v.draft_tokens = d_drafts; /* the bonus rows' entries are not read */
    v.seeds = d_seeds;
    v.temperatures = d_temps;
    v.positions = d_tpos;
    v.method = PSR_VERIFY_PROBABILISTIC; /* requests at T = 0 are verified greedily */
    v.tokens = d_out; /* [R, K + 1] of int32, the default tokens_dtype */
    v.num_sampled = d_n;
    v.status = d_status; /* bad ids, positions or temperatures only the device sees */
    cl_event done = NULL;
    if ((st = psr_verify(ctx, &v, &done)) != PSR_OK)
        return fail(ctx, st, "psr_verify");

    int32_t out[R][K + 1], n[R], drafts[ROWS];
    uint32_t status;
    cl_mem from[] = {d_out, d_n, d_status, d_drafts};
    void *to[] = {out, n, &status, drafts};
    size_t size[] = {sizeof out, sizeof n, sizeof status, sizeof drafts};
    for (int i = 0; i < 4; i++)
        cl_check(clEnqueueReadBuffer(queue, from[i], CL_TRUE, 0, size[i], to[i], 1, &done, NULL),
                 "read results");
    clReleaseEvent(done);

    int bad = status != 0;
    for (int r = 0; r < R; r++) {
        printf("request %d: %d tokens: %d %d %d %d\n", r, n[r], out[r][0], out[r][1], out[r][2],
               out[r][3]);
        /* n[r] - 1 accepted drafts, one new token, then -1 up to column K */
        int ok = n[r] >= 1 && n[r] <= K + 1 && out[r][n[r] - 1] >= 0 && out[r][n[r] - 1] < V;
        for (int i = 0; ok && i <= K; i++)
            ok = i < n[r] - 1 ? out[r][i] == drafts[cu[r] + i] : i < n[r] || out[r][i] == -1;
        bad |= !ok;
    }
    bad |= n[0] != 2 || out[0][0] != 7 || out[0][1] != 30;

    cl_mem all[] = {d_logits, d_tpos, d_seeds, d_temps, d_cache, d_step, d_drafts, d_out, d_n,
                    d_status, d_dpos};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        clReleaseMemObject(all[i]);
    psr_context_free(ctx);
    if (bad)
        fprintf(stderr, "FAIL: status %u, or the counts, drafts or -1 padding are wrong\n", status);
    return bad;
}
