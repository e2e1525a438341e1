/* An app that already runs OpenCL hands psr its own context, device and
 * queue, so psr samples the app's buffers in place. psr retains the three
 * objects and releases them in psr_context_free(): afterwards the app's
 * context and queue are exactly as usable as before. */
#include <psr/psr.h>

#include <stdio.h>
#include <stdlib.h>

enum { ROWS = 2, VOCAB = 50 };

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

static cl_uint refcount(cl_context cl)
{
    cl_uint n = 0;
    cl_check(clGetContextInfo(cl, CL_CONTEXT_REFERENCE_COUNT, sizeof n, &n, NULL), "refcount");
    return n;
}

int main(void)
{
    /* The app's own setup: here simply the first device of the first
     * platform that has one. */
    cl_platform_id platforms[8];
    cl_uint nplat = 0;
    cl_device_id dev = NULL;
    if (clGetPlatformIDs(8, platforms, &nplat) != CL_SUCCESS)
        nplat = 0; /* no ICD or no platform: CL_PLATFORM_NOT_FOUND_KHR */
    for (cl_uint p = 0; p < nplat && p < 8 && !dev; p++)
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 1, &dev, NULL) != CL_SUCCESS)
            dev = NULL;
    if (!dev) {
        fprintf(stderr, "skip: no OpenCL device\n");
        return 77;
    }
    cl_int err;
    cl_context cl = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    cl_check(err, "clCreateContext");
    /* psr needs an in-order queue (properties 0); it refuses an out-of-order one. */
    cl_command_queue queue = clCreateCommandQueue(cl, dev, 0, &err);
    cl_check(err, "clCreateCommandQueue");

    /* The app's buffers. Each row has one clear maximum, so greedy sampling
     * has a known answer. */
    float logits[ROWS * VOCAB];
    for (int i = 0; i < ROWS * VOCAB; i++)
        logits[i] = (float)(i % 7) * 0.1f;
    const int32_t want[ROWS] = {13, 42};
    for (int r = 0; r < ROWS; r++)
        logits[r * VOCAB + want[r]] = 5.0f;
    int64_t seeds[ROWS] = {1, 2}, pos[ROWS] = {0, 0};
    float temps[ROWS] = {0.0f, 0.0f};
    cl_mem d_logits = buffer(cl, sizeof logits, logits), d_seeds = buffer(cl, sizeof seeds, seeds);
    cl_mem d_temps = buffer(cl, sizeof temps, temps), d_pos = buffer(cl, sizeof pos, pos);
    cl_mem d_tokens = buffer(cl, sizeof want, NULL);

    cl_uint before = refcount(cl);
    psr_context *ctx = NULL;
    psr_status st = psr_context_create_from_cl(cl, dev, queue, NULL, &ctx);
    if (st != PSR_OK) {
        fprintf(stderr, "psr_context_create_from_cl: %s\n  %s\n", psr_status_string(st),
                psr_last_error(NULL)); /* a failed constructor reports on NULL */
        return 1;
    }
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
    /* No event asked for: the app's read below follows on the same
     * in-order queue. */
    if ((st = psr_sample(ctx, &a, NULL)) != PSR_OK) {
        fprintf(stderr, "psr_sample: %s\n  %s\n", psr_status_string(st), psr_last_error(ctx));
        return 1;
    }
    int32_t tokens[ROWS];
    cl_check(clEnqueueReadBuffer(queue, d_tokens, CL_TRUE, 0, sizeof tokens, tokens, 0, NULL,
                                 NULL), "read tokens");
    cl_uint during = refcount(cl);
    psr_context_free(ctx); /* releases psr's references, not the app's */
    cl_uint after = refcount(cl);

    /* The app's context and queue still work: a copy and a read-back. */
    cl_mem copy = buffer(cl, sizeof tokens, NULL);
    int32_t again[ROWS] = {-1, -1};
    cl_check(clEnqueueCopyBuffer(queue, d_tokens, copy, 0, 0, sizeof tokens, 0, NULL, NULL),
             "copy");
    cl_check(clEnqueueReadBuffer(queue, copy, CL_TRUE, 0, sizeof again, again, 0, NULL, NULL),
             "read copy");
    cl_check(clFinish(queue), "clFinish");

    /* Reference counts are a debugging aid, but they show the ownership. */
    printf("tokens %d %d (want %d %d); context refcount %u -> %u -> %u\n", tokens[0], tokens[1],
           want[0], want[1], before, during, after);
    int bad = 0;
    for (int r = 0; r < ROWS; r++)
        bad |= tokens[r] != want[r] || again[r] != want[r];
    bad |= during <= before || after != before;

    cl_mem all[] = {d_logits, d_seeds, d_temps, d_pos, d_tokens, copy};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        clReleaseMemObject(all[i]);
    clReleaseCommandQueue(queue);
    clReleaseContext(cl);
    if (bad)
        fprintf(stderr, "FAIL: wrong token, or the app's context changed hands\n");
    return bad;
}
