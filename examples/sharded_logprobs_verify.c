/* The rest of an engine's step with the vocabulary split into shards, as
 * tensor parallelism splits an LM head: the logprobs of the sampled tokens
 * (three rounds of psr_logprobs_shard_round) and the verification of
 * speculative drafts (four rounds of psr_verify_shard_round). No shard
 * ever sees another's logits; between rounds they exchange a few bytes per
 * row: keys reduced by maximum, then partial results gathered. Here three
 * shards share one device, so the reduction is a loop on the host and the
 * gathering is every shard writing its part into one shared buffer; across
 * devices or processes the app uses its own collectives (an all-reduce
 * with MAX, an all-gather) or psr_mpi.h. Shards that start on multiples of
 * 16,384 tokens give the unsharded calls' results bit for bit, which this
 * program checks. */
#include <psr/psr.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    VOCAB = 40000,
    SHARDS = 3,
    ROWS = 4,                 /* logprobs: rows of logits */
    TOP_N = 5,                /* and the top tokens each reports */
    REQUESTS = 3,             /* verification: requests */
    K = 3,                    /* the most drafts a request has */
    VROWS = 8,                /* target rows: each request's drafts and a bonus row */
    KEY_WORDS = 2 * VROWS + 1 /* verification's keys, the longer of the two calls' */
};

/* Shards on PSR_LOGPROBS_SHARD_BLOCK (16,384-token) boundaries, the last
 * one shorter: the split that gives the unsharded bits. */
static const size_t shard_start[SHARDS + 1] = {0, 16384, 32768, VOCAB};

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

static void read_back(cl_command_queue queue, cl_mem m, void *host, size_t bytes)
{
    cl_check(clEnqueueReadBuffer(queue, m, CL_TRUE, 0, bytes, host, 0, NULL, NULL), "clEnqueueReadBuffer");
}

/* Whether the unsharded call's outputs a[i] and the sharded call's b[i]
 * hold the same bytes: bit for bit, NaN included. */
static int same_outputs(cl_command_queue queue, const cl_mem *a, const cl_mem *b, const size_t *bytes, size_t n)
{
    int same = 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char *x = malloc(bytes[i]), *y = malloc(bytes[i]);
        if (!x || !y) {
            fprintf(stderr, "out of host memory\n");
            exit(1);
        }
        read_back(queue, a[i], x, bytes[i]);
        read_back(queue, b[i], y, bytes[i]);
        same &= memcmp(x, y, bytes[i]) == 0;
        free(x), free(y);
    }
    return same;
}

static void release(cl_mem *m, size_t n)
{
    for (size_t i = 0; i < n; i++)
        clReleaseMemObject(m[i]);
}

/* A deterministic logit in [-span / 2, span / 2). */
static float next_logit(unsigned *x, float span)
{
    *x = *x * 1664525u + 1013904223u;
    return ((float)(*x >> 8) / (float)(1u << 24) - 0.5f) * span;
}

/* Shard s's first slot of the shared partials: the slots (one per 16,384
 * tokens) of the shards before it. first_slot(SHARDS) counts them all. */
static size_t first_slot(size_t s)
{
    size_t slot = 0;
    for (size_t i = 0; i < s; i++)
        slot += psr_logprobs_shard_slots(shard_start[i + 1] - shard_start[i]);
    return slot;
}

/* The exchange after round 0 of both calls: every shard's keys reduced
 * element-wise by maximum and handed back to every shard, which is what
 * an all-reduce with MAX on uint32 does across devices. */
static void reduce_keys(cl_command_queue queue, const cl_mem *keys, size_t words)
{
    uint32_t mine[KEY_WORDS], max[KEY_WORDS] = {0};
    for (size_t s = 0; s < SHARDS; s++) {
        read_back(queue, keys[s], mine, words * 4);
        for (size_t i = 0; i < words; i++)
            max[i] = mine[i] > max[i] ? mine[i] : max[i];
    }
    for (size_t s = 0; s < SHARDS; s++)
        cl_check(clEnqueueWriteBuffer(queue, keys[s], CL_TRUE, 0, words * 4, max, 0, NULL, NULL),
                 "clEnqueueWriteBuffer");
}

/* ---- Logprobs ---- */

/* Shard s's view of the unsharded call: its columns of the shared logits
 * (rows are still VOCAB apart), its own keys, its slots of the shared
 * partials. Tokens stay global ids. */
static psr_logprobs_args logprobs_shard(psr_logprobs_args a, size_t s, cl_mem keys, cl_mem partials)
{
    a.vocab = shard_start[s + 1] - shard_start[s];
    a.logits_offset = shard_start[s], a.row_stride = VOCAB;
    a.shard_count = SHARDS, a.shard_index = s;
    a.vocab_offset = shard_start[s], a.vocab_total = VOCAB;
    a.shard_slot = first_slot(s), a.shard_slots = first_slot(SHARDS);
    a.shard_token_keys = keys, a.shard_partials = partials;
    return a;
}

static psr_status sharded_logprobs(psr_context *ctx, cl_command_queue queue, const psr_logprobs_args *whole,
                                   const cl_mem *keys, cl_mem partials)
{
    psr_logprobs_args a[SHARDS];
    psr_status st = PSR_OK;
    for (size_t s = 0; s < SHARDS; s++)
        a[s] = logprobs_shard(*whole, s, keys[s], partials);
    for (size_t s = 0; s < SHARDS && st == PSR_OK; s++)
        st = psr_logprobs_shard_round(ctx, &a[s], 0, NULL); /* the sampled token's key, where held */
    if (st != PSR_OK)
        return st;
    reduce_keys(queue, keys, ROWS);
    for (size_t s = 0; s < SHARDS && st == PSR_OK; s++)
        st = psr_logprobs_shard_round(ctx, &a[s], 1, NULL); /* its slots, into the shared buffer */
    /* Every shard would write the same outputs; one is enough here. */
    return st == PSR_OK ? psr_logprobs_shard_round(ctx, &a[0], 2, NULL) : st;
}

static void lp_outputs(psr_logprobs_args *a, const cl_mem *out)
{
    a->token_logprobs = out[0], a->token_ranks = out[1], a->top_ids = out[2], a->top_logprobs = out[3];
}

static int logprobs_part(psr_context *ctx, cl_context cl, cl_command_queue queue)
{
    static float logits[ROWS * VOCAB];
    unsigned x = 2024;
    for (size_t i = 0; i < ROWS * VOCAB; i++)
        logits[i] = next_logit(&x, 8.0f);
    /* The step's sampled tokens: one in each shard, and the very last token. */
    int32_t tokens[ROWS] = {123, 20000, 33000, VOCAB - 1};
    float temps[ROWS] = {1.0f, 0.7f, 0.0f, 1.3f}; /* processed logprobs: of logits / T (T = 0 as 1) */
    cl_mem d_logits = buffer(cl, sizeof logits, logits), d_tokens = buffer(cl, sizeof tokens, tokens);
    cl_mem d_temps = buffer(cl, sizeof temps, temps), out[2][4], keys[SHARDS];
    /* Logprobs, ranks, top ids, top logprobs; out[0] unsharded, out[1] sharded. */
    const size_t bytes[4] = {ROWS * 4, ROWS * 4, ROWS * TOP_N * 4, ROWS * TOP_N * 4};
    for (int i = 0; i < 8; i++)
        out[i / 4][i % 4] = buffer(cl, bytes[i % 4], NULL);
    for (size_t s = 0; s < SHARDS; s++)
        keys[s] = buffer(cl, ROWS * 4, NULL);
    cl_mem partials = buffer(cl, first_slot(SHARDS) * psr_logprobs_shard_slot_bytes(ROWS, TOP_N), NULL);

    psr_logprobs_args l;
    psr_logprobs_args_init(&l, sizeof l);
    l.rows = ROWS, l.vocab = VOCAB, l.logits = d_logits;
    l.temperatures = d_temps, l.tokens = d_tokens, l.top_n = TOP_N;
    lp_outputs(&l, out[0]);
    psr_status st = psr_logprobs(ctx, &l, NULL);
    if (st != PSR_OK)
        return fail(ctx, st, "psr_logprobs");
    lp_outputs(&l, out[1]);
    if ((st = sharded_logprobs(ctx, queue, &l, keys, partials)) != PSR_OK)
        return fail(ctx, st, "psr_logprobs_shard_round");

    int same = same_outputs(queue, out[0], out[1], bytes, 4);
    printf("logprobs: %d rows, %d tokens in %d shards: %s psr_logprobs bit for bit (logprobs, ranks, "
           "top-%d)\n",
           ROWS, VOCAB, SHARDS, same ? "equal to" : "DIFFERENT from", TOP_N);

    release((cl_mem[]){d_logits, d_tokens, d_temps, partials}, 4);
    release(keys, SHARDS), release(out[0], 4), release(out[1], 4);
    return !same;
}

/* ---- Verification ---- */

/* Shard s's columns of the draft cache, [REQUESTS, K, its vocab]: what a
 * draft model split the same way leaves on each shard (a sharded
 * psr_sample with draft_cache writes just these). Here a rect copy out
 * of the whole cache stands in for it. */
static cl_mem cache_columns(cl_context cl, cl_command_queue queue, cl_mem whole, size_t s)
{
    size_t n = shard_start[s + 1] - shard_start[s];
    cl_mem m = buffer(cl, REQUESTS * K * n * 4, NULL);
    size_t from[3] = {shard_start[s] * 4, 0, 0}, to[3] = {0, 0, 0}, region[3] = {n * 4, REQUESTS * K, 1};
    cl_check(clEnqueueCopyBufferRect(queue, whole, m, from, to, region, VOCAB * 4, 0, n * 4, 0, 0, NULL, NULL),
             "clEnqueueCopyBufferRect");
    return m;
}

/* Shard s's view of the unsharded call: its columns of the target logits
 * and of the draft cache, its own keys, its slots of the shared partials,
 * and the shared records (round 2 writes row s of them). */
static psr_verify_args verify_shard(psr_verify_args a, size_t s, cl_mem keys, cl_mem cache, cl_mem partials,
                                    cl_mem records)
{
    a.vocab = shard_start[s + 1] - shard_start[s];
    a.target_offset = shard_start[s], a.target_row_stride = VOCAB;
    a.draft_cache = cache;
    a.shard_count = SHARDS, a.shard_index = s;
    a.vocab_offset = shard_start[s], a.vocab_total = VOCAB;
    a.shard_slot = first_slot(s), a.shard_slots = first_slot(SHARDS);
    a.shard_keys = keys, a.shard_partials = partials, a.shard_records = records;
    return a;
}

static psr_status sharded_verify(psr_context *ctx, cl_command_queue queue, const psr_verify_args *whole,
                                 const cl_mem *keys, const cl_mem *caches, cl_mem partials, cl_mem records)
{
    psr_verify_args a[SHARDS];
    psr_status st = PSR_OK;
    for (size_t s = 0; s < SHARDS; s++)
        a[s] = verify_shard(*whole, s, keys[s], caches[s], partials, records);
    for (size_t s = 0; s < SHARDS && st == PSR_OK; s++)
        st = psr_verify_shard_round(ctx, &a[s], 0, NULL); /* the drafts' logits, where held */
    if (st != PSR_OK)
        return st;
    reduce_keys(queue, keys, 2 * VROWS + 1);
    /* Round 1: every shard's slots, then round 2: every shard's records.
     * Each round needs all shards' results of the one before. */
    for (unsigned round = 1; round <= 2; round++)
        for (size_t s = 0; s < SHARDS && st == PSR_OK; s++)
            st = psr_verify_shard_round(ctx, &a[s], round, NULL);
    return st == PSR_OK ? psr_verify_shard_round(ctx, &a[0], 3, NULL) : st;
}

static void v_outputs(psr_verify_args *a, const cl_mem *out)
{
    a->tokens = out[0], a->num_sampled = out[1], a->status = out[2];
}

/* The draft model: request q's draft j is the argmax of its draft logits,
 * which are the logits of the target row that scores it, a little off (so
 * some drafts are accepted and some rejected). Bonus rows draft nothing. */
static void make_drafts(const int32_t *cu, const float *target, float *cache, int32_t *drafts, unsigned x)
{
    for (size_t q = 0; q < REQUESTS; q++)
        for (size_t row = (size_t)cu[q]; row < (size_t)cu[q + 1]; row++) {
            drafts[row] = -1;
            if (row + 1 == (size_t)cu[q + 1])
                break; /* the bonus row */
            float *draft = cache + (q * K + row - (size_t)cu[q]) * VOCAB;
            for (size_t i = 0; i < VOCAB; i++) {
                draft[i] = target[row * VOCAB + i] + next_logit(&x, 0.1f);
                if (drafts[row] < 0 || draft[i] > draft[drafts[row]])
                    drafts[row] = (int32_t)i;
            }
        }
}

static int verify_part(psr_context *ctx, cl_context cl, cl_command_queue queue)
{
    static const int32_t cu[REQUESTS + 1] = {0, 4, 7, 8}; /* 3, 2 and 0 drafts, and a bonus row each */
    static float target[VROWS * VOCAB], cache[REQUESTS * K * VOCAB];
    int32_t drafts[VROWS];
    unsigned x = 4242;
    for (size_t i = 0; i < VROWS * VOCAB; i++)
        target[i] = next_logit(&x, 8.0f);
    make_drafts(cu, target, cache, drafts, x);
    int64_t seeds[REQUESTS] = {11, 12, 13}, positions[VROWS] = {10, 11, 12, 13, 20, 21, 22, 30};
    float temps[REQUESTS] = {1.0f, 0.0f, 0.8f}; /* request 1 is verified greedily */
    cl_mem d_target = buffer(cl, sizeof target, target), d_cache = buffer(cl, sizeof cache, cache);
    cl_mem d_drafts = buffer(cl, sizeof drafts, drafts), d_seeds = buffer(cl, sizeof seeds, seeds);
    cl_mem d_temps = buffer(cl, sizeof temps, temps), d_pos = buffer(cl, sizeof positions, positions);
    cl_mem out[2][3], keys[SHARDS], caches[SHARDS];
    /* Tokens, num_sampled, status; out[0] unsharded, out[1] sharded. */
    const size_t bytes[3] = {REQUESTS * (K + 1) * 4, REQUESTS * 4, 4};
    for (int i = 0; i < 6; i++)
        out[i / 3][i % 3] = buffer(cl, bytes[i % 3], NULL);
    for (size_t s = 0; s < SHARDS; s++)
        keys[s] = buffer(cl, (2 * VROWS + 1) * 4, NULL), caches[s] = cache_columns(cl, queue, d_cache, s);
    cl_mem partials = buffer(cl, first_slot(SHARDS) * psr_verify_shard_slot_bytes(VROWS), NULL);
    cl_mem records = buffer(cl, SHARDS * REQUESTS * sizeof(psr_shard_record), NULL);

    psr_verify_args v;
    psr_verify_args_init(&v, sizeof v);
    v.requests = REQUESTS, v.cu = cu, v.rows = VROWS, v.max_drafts = K, v.vocab = VOCAB;
    v.target_logits = d_target, v.draft_cache = d_cache, v.draft_cache_k = K, v.draft_tokens = d_drafts;
    v.seeds = d_seeds, v.temperatures = d_temps, v.positions = d_pos;
    v.method = PSR_VERIFY_PROBABILISTIC;
    v_outputs(&v, out[0]);
    psr_status st = psr_verify(ctx, &v, NULL);
    if (st != PSR_OK)
        return fail(ctx, st, "psr_verify");
    v_outputs(&v, out[1]);
    if ((st = sharded_verify(ctx, queue, &v, keys, caches, partials, records)) != PSR_OK)
        return fail(ctx, st, "psr_verify_shard_round");

    int same = same_outputs(queue, out[0], out[1], bytes, 3);
    int32_t num[REQUESTS];
    uint32_t status;
    read_back(queue, out[1][1], num, sizeof num);
    read_back(queue, out[1][2], &status, sizeof status);
    same &= status == 0; /* the inputs are good: a status bit would mean nothing was written */
    printf("verify: %d requests, %d drafts: %s psr_verify (tokens, num_sampled, status %u); "
           "num_sampled %d, %d, %d\n",
           REQUESTS, VROWS - REQUESTS, same ? "equal to" : "DIFFERENT from", status, (int)num[0], (int)num[1],
           (int)num[2]);

    release((cl_mem[]){d_target, d_cache, d_drafts, d_seeds, d_temps, d_pos, partials, records}, 8);
    release(keys, SHARDS), release(caches, SHARDS), release(out[0], 3), release(out[1], 3);
    return !same;
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

    int rc = logprobs_part(ctx, cl, queue), rc_verify = verify_part(ctx, cl, queue);
    psr_context_free(ctx);
    return rc ? rc : rc_verify;
}
