/* A vocabulary split into shards, the way tensor parallelism splits an LM
 * head: each shard samples its own columns and writes one 16-byte record
 * per row, and psr_combine turns the records of all shards into the tokens
 * the unsharded call gives. Here the three shards share one device and one
 * logits buffer (logits_offset picks a shard's columns) and write into one
 * [shards, rows] records buffer; across devices or processes the app moves
 * the records with its own collectives (an all-gather of 16 bytes per row
 * and shard) and calls psr_combine on each. */
#include <psr/psr.h>

#include <stdio.h>
#include <stdlib.h>

enum { ROWS = 4, VOCAB = 1000, SHARDS = 3 };

/* Where each shard's columns start; uneven is fine. */
static const size_t shard_start[SHARDS + 1] = {0, 300, 301, VOCAB};

static int fail(const psr_context *ctx, psr_status st, const char *what)
{
    fprintf(stderr, "%s: %s\n  %s\n", what, psr_status_string(st), psr_last_error(ctx));
    return st == PSR_ERR_NO_DEVICE ? 77 : 1;
}

static cl_mem buffer(cl_context cl, size_t bytes, const void *host)
{
    cl_int err;
    cl_mem m = clCreateBuffer(cl, CL_MEM_READ_WRITE | (host ? CL_MEM_COPY_HOST_PTR : 0), bytes,
                              (void *)host, &err);
    if (err != CL_SUCCESS) {
        fprintf(stderr, "clCreateBuffer: OpenCL error %d\n", (int)err);
        exit(1);
    }
    return m;
}

/* The call's inputs, shared by the sharded and the unsharded calls. */
static psr_sample_args common_args(cl_mem logits, cl_mem seeds, cl_mem temps, cl_mem positions)
{
    psr_sample_args a;
    psr_sample_args_init(&a, sizeof a);
    a.rows = ROWS, a.vocab = VOCAB, a.logits = logits;
    a.seeds = seeds, a.temperatures = temps, a.positions = positions;
    return a;
}

/* Shard s: its columns of every row, noise for their global ids, and its
 * records at row s of the [SHARDS, ROWS] buffer. */
static psr_status sample_shard(psr_context *ctx, psr_sample_args a, size_t s, cl_mem records)
{
    a.row_stride = VOCAB;                  /* rows are still VOCAB apart */
    a.logits_offset = shard_start[s];      /* this shard's first column */
    a.vocab = shard_start[s + 1] - shard_start[s];
    a.shard_count = SHARDS, a.shard_index = s;
    a.vocab_offset = shard_start[s], a.vocab_total = VOCAB;
    a.shard_records = records, a.shard_records_offset = s * ROWS;
    return psr_sample(ctx, &a, NULL);
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
    unsigned x = 2024;
    for (size_t i = 0; i < ROWS * VOCAB; i++) {
        x = x * 1664525u + 1013904223u;
        logits[i] = (float)(x >> 8) / (float)(1u << 24) * 8.0f - 4.0f;
    }
    int64_t seeds[ROWS] = {5, 6, 7, 8}, positions[ROWS] = {0, 1, 2, 3};
    float temps[ROWS] = {1.0f, 0.8f, 0.0f, 1.2f};
    cl_mem d_logits = buffer(cl, sizeof logits, logits), d_seeds = buffer(cl, sizeof seeds, seeds);
    cl_mem d_temps = buffer(cl, sizeof temps, temps), d_pos = buffer(cl, sizeof positions, positions);
    cl_mem d_records = buffer(cl, SHARDS * ROWS * sizeof(psr_shard_record), NULL);
    cl_mem d_tokens = buffer(cl, ROWS * sizeof(int32_t), NULL), d_whole = buffer(cl, ROWS * sizeof(int32_t), NULL);
    psr_sample_args a = common_args(d_logits, d_seeds, d_temps, d_pos);

    for (size_t s = 0; s < SHARDS && st == PSR_OK; s++)
        st = sample_shard(ctx, a, s, d_records);
    if (st != PSR_OK)
        return fail(ctx, st, "psr_sample (a shard)");
    psr_combine_args c;
    psr_combine_args_init(&c, sizeof c);
    c.rows = ROWS, c.shards = SHARDS, c.records = d_records, c.tokens = d_tokens;
    if ((st = psr_combine(ctx, &c, NULL)) != PSR_OK)
        return fail(ctx, st, "psr_combine");

    a.tokens = d_whole; /* the same rows, unsharded */
    if ((st = psr_sample(ctx, &a, NULL)) != PSR_OK)
        return fail(ctx, st, "psr_sample");
    int32_t sharded[ROWS], whole[ROWS];
    clEnqueueReadBuffer(queue, d_tokens, CL_TRUE, 0, sizeof sharded, sharded, 0, NULL, NULL);
    clEnqueueReadBuffer(queue, d_whole, CL_TRUE, 0, sizeof whole, whole, 0, NULL, NULL);
    int rc = 0;
    for (int r = 0; r < ROWS; r++) {
        printf("row %d: sharded %d, unsharded %d\n", r, (int)sharded[r], (int)whole[r]);
        rc |= sharded[r] != whole[r];
    }
    cl_mem all[] = {d_logits, d_seeds, d_temps, d_pos, d_records, d_tokens, d_whole};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        clReleaseMemObject(all[i]);
    psr_context_free(ctx);
    return rc;
}
