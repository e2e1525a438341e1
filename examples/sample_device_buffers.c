/* Sample one token per row from logits already in device memory, the usual
 * case in a server whose model wrote them there. psr makes the OpenCL
 * context; the app allocates its buffers in it. Greedy rows (temperature 0)
 * must come back as the argmax. */
#include <psr/psr.h>

#include <stdio.h>
#include <stdlib.h>

enum { ROWS = 4, VOCAB = 1000 };

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

/* A device buffer, filled from `host` when it is not NULL. */
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
    /* The default options (NULL would do as well): the device is $PSR_DEVICE,
     * else "auto". Always init before setting a field. */
    psr_context_options opt;
    psr_context_options_init(&opt, sizeof opt);
    psr_context *ctx = NULL;
    psr_status st = psr_context_create(&opt, &ctx);
    if (st != PSR_OK)
        return fail(NULL, st, "psr_context_create");

    /* Every cl_mem must belong to psr's cl_context; the queue is borrowed. */
    cl_context cl;
    cl_command_queue queue;
    if ((st = psr_context_cl(ctx, &cl, NULL, &queue)) != PSR_OK)
        return fail(ctx, st, "psr_context_cl");

    /* Stand-in for a model's output: pseudo-random logits in [-4, 4). */
    static float logits[ROWS * VOCAB];
    unsigned x = 12345;
    for (size_t i = 0; i < ROWS * VOCAB; i++) {
        x = x * 1664525u + 1013904223u;
        logits[i] = (float)(x >> 8) / (float)(1u << 24) * 8.0f - 4.0f;
    }
    int64_t seeds[ROWS] = {11, 22, 33, 44};      /* per request */
    float temps[ROWS] = {0.0f, 0.7f, 0.0f, 1.0f}; /* rows 0 and 2 are greedy */
    int64_t positions[ROWS] = {0, 5, 17, 17};    /* each row's place in its sequence */

    cl_mem d_logits = buffer(cl, sizeof logits, logits);
    cl_mem d_seeds = buffer(cl, sizeof seeds, seeds);
    cl_mem d_temps = buffer(cl, sizeof temps, temps);
    cl_mem d_pos = buffer(cl, sizeof positions, positions);
    cl_mem d_tokens = buffer(cl, ROWS * sizeof(int32_t), NULL);
    cl_mem d_flags = buffer(cl, ROWS * sizeof(uint32_t), NULL);

    psr_sample_args a;
    psr_sample_args_init(&a, sizeof a); /* sets struct_size and the defaults: always first */
    a.rows = ROWS;
    a.vocab = VOCAB;
    a.logits = d_logits;
    a.requests = ROWS; /* no row_request: row i is request i */
    a.seeds = d_seeds;
    a.temperatures = d_temps;
    a.positions = d_pos;
    a.tokens = d_tokens;
    a.row_flags = d_flags; /* optional: why a row got token -1 */

    cl_event done = NULL;
    if ((st = psr_sample(ctx, &a, &done)) != PSR_OK)
        return fail(ctx, st, "psr_sample");
    /* psr only enqueues; waiting on the event flushes the queue and blocks.
     * (A read with `done` in its wait list would do as well.) */
    cl_check(clWaitForEvents(1, &done), "clWaitForEvents");
    clReleaseEvent(done); /* the event is the caller's */

    int32_t tokens[ROWS];
    uint32_t flags[ROWS];
    cl_check(clEnqueueReadBuffer(queue, d_tokens, CL_TRUE, 0, sizeof tokens, tokens, 0, NULL, NULL),
             "read tokens");
    cl_check(clEnqueueReadBuffer(queue, d_flags, CL_TRUE, 0, sizeof flags, flags, 0, NULL, NULL),
             "read row flags");

    int bad = 0;
    for (int r = 0; r < ROWS; r++) {
        const float *row = logits + (size_t)r * VOCAB;
        int32_t best = 0; /* ties go to the lowest index, as in psr */
        for (int32_t i = 1; i < VOCAB; i++)
            if (row[i] > row[best])
                best = i;
        printf("row %d: T=%.1f token %d (argmax %d)\n", r, temps[r], tokens[r], best);
        /* Values psr can only check on the device come back as token -1 and a flag. */
        if (flags[r] != 0 || tokens[r] < 0 || tokens[r] >= VOCAB)
            bad = 1;
        if (temps[r] == 0.0f && tokens[r] != best)
            bad = 1;
    }

    cl_mem all[] = {d_logits, d_seeds, d_temps, d_pos, d_tokens, d_flags};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        clReleaseMemObject(all[i]);
    psr_context_free(ctx);
    if (bad)
        fprintf(stderr, "FAIL: a token is out of range, flagged, or not the greedy argmax\n");
    return bad;
}
