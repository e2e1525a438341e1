/* Warming's launches: each kernel once, through the calls themselves on
 * tiny inputs, as an application would, so that a driver that compiles
 * at first launch (PoCL, per work-group size) has done it. */
#include "ops/ops.h"

#include <stdlib.h>
#include <string.h>

#define WARM_BUFFERS 24

/* The device buffers of one warm launch; host data (zeros where NULL). */
typedef struct warm_inputs {
    psr_context *ctx;
    cl_mem mem[WARM_BUFFERS];
    size_t count;
    unsigned char *zeros; /* host zeros of the largest buffer */
    psr_status st;
} warm_inputs;

static cl_mem warm_buffer(warm_inputs *in, size_t bytes, const void *host)
{
    psr_context *ctx = in->ctx;
    if (in->st != PSR_OK || in->count == WARM_BUFFERS)
        return NULL;
    cl_int err;
    cl_mem m = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes,
                              (void *)(host ? host : in->zeros), &err);
    if (err != CL_SUCCESS) {
        in->st = psr_fail_cl(ctx, err, "warming: cannot allocate %zu bytes", bytes);
        return NULL;
    }
    return in->mem[in->count++] = m;
}

/* Waits for the launch, then releases its buffers; returns its status. */
static psr_status warm_finish(warm_inputs *in, psr_status st)
{
    if (st == PSR_OK) {
        cl_int err = clFinish(in->ctx->queue);
        if (err != CL_SUCCESS)
            st = psr_fail_cl(in->ctx, err, "warming: clFinish failed");
    }
    for (size_t i = 0; i < in->count; i++)
        clReleaseMemObject(in->mem[i]);
    free(in->zeros);
    return st;
}

static psr_status warm_begin(psr_context *ctx, warm_inputs *in, size_t largest)
{
    memset(in, 0, sizeof *in);
    in->ctx = ctx;
    in->zeros = calloc(1, largest);
    in->st = in->zeros ? PSR_OK : psr_fail(ctx, PSR_ERR_OUT_OF_HOST_MEMORY, "warming: out of memory");
    return in->st;
}

/* The smallest vocabulary whose one row splits over two groups, so that
 * the launch takes the split rows' kernels too. */
static size_t warm_split_vocab(psr_context *ctx, bool verify)
{
    for (size_t v = 256; v <= ((size_t)1 << 17); v *= 2) {
        cl_uint chunk, groups;
        if (verify)
            psr_split_verify(ctx, 1, v, &chunk, &groups);
        else
            psr_split_rows(ctx, 1, v, &chunk, &groups);
        if (groups >= 2)
            return v;
    }
    return 256;
}

/* The filters' rounds of a one-shard call (sample args a, shard fields
 * and shard_filter_state set): one shard's reduction is its own partial. */
static psr_status warm_filter_rounds(warm_inputs *in, const psr_sample_args *a)
{
    size_t rounds = 0, bytes = a->rows * PSR_SHARD_FILTER_WORDS * 8;
    psr_status st = psr_shard_filter_rounds(in->ctx, a, &rounds);
    cl_mem partial = warm_buffer(in, bytes, NULL), reduced = warm_buffer(in, bytes, NULL);
    for (size_t r = 0; r <= rounds && st == PSR_OK && in->st == PSR_OK; r++) {
        psr_shard_filter_args f;
        psr_shard_filter_args_init(&f, sizeof f);
        f.sample = a, f.round = r, f.partial = partial, f.reduced = reduced;
        st = psr_shard_filter_round(in->ctx, &f, NULL);
        cl_int err = st == PSR_OK && r < rounds
                         ? clEnqueueCopyBuffer(in->ctx->queue, partial, reduced, 0, 0, bytes, 0, NULL, NULL)
                         : CL_SUCCESS;
        if (err != CL_SUCCESS)
            st = psr_fail_cl(in->ctx, err, "warming: copying a filter round's partial");
    }
    return in->st != PSR_OK ? in->st : st;
}

/* The sampling call a as one shard of itself: its filters' rounds, the
 * shard's records, their combine into a's tokens. */
static psr_status warm_sharded_sample(warm_inputs *in, const psr_sample_args *whole)
{
    psr_sample_args a = *whole;
    a.shard_count = 1, a.vocab_total = a.vocab, a.tokens = NULL;
    a.shard_records = warm_buffer(in, a.rows * sizeof(psr_shard_record), NULL);
    bool filtered = a.top_k || a.top_p || a.min_p;
    a.shard_filter_state = filtered ? warm_buffer(in, a.rows * PSR_SHARD_FILTER_STATE_BYTES, NULL) : NULL;
    psr_status st = in->st == PSR_OK && filtered ? warm_filter_rounds(in, &a) : in->st;
    if (st == PSR_OK)
        st = psr_sample(in->ctx, &a, NULL);
    psr_combine_args c;
    psr_combine_args_init(&c, sizeof c);
    c.rows = a.rows, c.shards = 1, c.records = a.shard_records, c.tokens = whole->tokens;
    return st == PSR_OK ? psr_combine(in->ctx, &c, NULL) : st;
}

/* One sampling call of one row (split over groups), with every filter
 * when `filtered`; `sharded`: then again as one shard of itself. */
psr_status psr_warm_launch_sample(psr_context *ctx, unsigned flags, psr_dtype dtype, bool filtered, bool sharded)
{
    size_t vocab = warm_split_vocab(ctx, false);
    const float one = 1.0f, top_p = 0.5f, min_p = 0.1f;
    const int32_t top_k = 1;
    warm_inputs in;
    if (warm_begin(ctx, &in, vocab * 4) != PSR_OK)
        return in.st;
    psr_sample_args a;
    psr_sample_args_init(&a, sizeof a);
    a.rows = a.requests = 1;
    a.vocab = vocab;
    a.logits_dtype = dtype;
    a.flags = flags & ~(PSR_FLAG_FP64_NOISE | PSR_FLAG_WIDE_NOISE);
    a.noise = psr_noise_of(flags);
    a.logits = warm_buffer(&in, vocab * psr_dtype_size(dtype), NULL);
    a.seeds = warm_buffer(&in, 8, NULL);
    a.temperatures = warm_buffer(&in, 4, &one);
    a.positions = warm_buffer(&in, 8, NULL);
    a.tokens = warm_buffer(&in, 4, NULL);
    if (filtered) {
        a.top_k = warm_buffer(&in, 4, &top_k);
        a.top_p = warm_buffer(&in, 4, &top_p);
        a.min_p = warm_buffer(&in, 4, &min_p);
    }
    psr_status st = in.st == PSR_OK ? psr_sample(ctx, &a, NULL) : in.st;
    if (st == PSR_OK && filtered) {
        /* top-p for every row and no top-k: pass 2 is psr_filter_masses */
        psr_sample_args p = a;
        p.top_k = p.top_p = p.min_p = NULL;
        p.all_top_p = top_p;
        st = psr_sample(ctx, &p, NULL);
    }
    if (st == PSR_OK && sharded)
        st = warm_sharded_sample(&in, &a);
    return warm_finish(&in, st);
}

/* The logprobs call a as one shard of itself: with filters their rounds
 * first (from sample args of the same rows), then the three rounds; one
 * shard's reductions and gathers are its own writes. */
static psr_status warm_sharded_logprobs(warm_inputs *in, const psr_logprobs_args *whole)
{
    psr_logprobs_args a = *whole;
    a.shard_count = 1, a.vocab_total = a.vocab, a.shard_slots = psr_logprobs_shard_slots(a.vocab);
    a.shard_token_keys = warm_buffer(in, a.rows * 4, NULL);
    a.shard_partials = warm_buffer(in, a.shard_slots * psr_logprobs_shard_slot_bytes(a.rows, a.top_n), NULL);
    bool filtered = a.top_k || a.top_p || a.min_p;
    a.shard_filter_state = filtered ? warm_buffer(in, a.rows * PSR_SHARD_FILTER_STATE_BYTES, NULL) : NULL;
    psr_status st = in->st;
    if (st == PSR_OK && filtered) {
        psr_sample_args f;
        psr_sample_args_init(&f, sizeof f);
        f.rows = f.requests = a.rows, f.vocab = a.vocab, f.logits = a.logits, f.logits_dtype = a.logits_dtype;
        f.temperatures = a.temperatures, f.top_k = a.top_k, f.top_p = a.top_p, f.min_p = a.min_p;
        f.shard_count = 1, f.vocab_total = a.vocab, f.shard_filter_state = a.shard_filter_state;
        st = warm_filter_rounds(in, &f);
    }
    for (unsigned r = 0; r < PSR_LOGPROBS_SHARD_ROUNDS && st == PSR_OK; r++)
        st = psr_logprobs_shard_round(in->ctx, &a, r, NULL);
    return st;
}

/* A logprobs call of `rows` rows of 64 tokens (one block each); `sharded`:
 * then again as one shard of itself. */
static psr_status warm_launch_logprobs_rows(psr_context *ctx, psr_dtype dtype, bool filtered, size_t rows,
                                            bool sharded)
{
    warm_inputs in;
    if (warm_begin(ctx, &in, rows * 64 * 4) != PSR_OK)
        return in.st;
    float *host = malloc(rows * 3 * sizeof *host); /* temperatures 1, top_p 0.5, min_p 0.1 */
    if (!host)
        return warm_finish(&in, psr_fail(ctx, PSR_ERR_OUT_OF_HOST_MEMORY, "warming: out of memory"));
    for (size_t r = 0; r < rows; r++)
        host[r] = 1.0f, host[rows + r] = 0.5f, host[2 * rows + r] = 0.1f;
    psr_logprobs_args a;
    psr_logprobs_args_init(&a, sizeof a);
    a.rows = a.requests = rows;
    a.vocab = 64;
    a.logits_dtype = dtype;
    a.top_n = 1;
    a.logits = warm_buffer(&in, rows * 64 * psr_dtype_size(dtype), NULL);
    a.temperatures = warm_buffer(&in, rows * 4, host);
    a.tokens = warm_buffer(&in, rows * 4, NULL);
    a.token_logprobs = warm_buffer(&in, rows * 4, NULL);
    a.top_ids = warm_buffer(&in, rows * 4, NULL);
    a.top_logprobs = warm_buffer(&in, rows * 4, NULL);
    if (filtered) {
        a.top_k = warm_buffer(&in, rows * 4, NULL); /* k = 0: off, but the pre-pass runs */
        a.top_p = warm_buffer(&in, rows * 4, host + rows);
        a.min_p = warm_buffer(&in, rows * 4, host + 2 * rows);
    }
    psr_status st = in.st == PSR_OK ? psr_logprobs(ctx, &a, NULL) : in.st;
    if (st == PSR_OK && sharded)
        st = warm_sharded_logprobs(&in, &a);
    st = warm_finish(&in, st);
    free(host);
    return st;
}

/* One block, then more blocks than the tuning runs in one launch or with
 * the few-blocks kernel (where it does), so every kernel is launched. */
psr_status psr_warm_launch_logprobs(psr_context *ctx, psr_dtype dtype, bool filtered, bool sharded)
{
    size_t most = ctx->tuning.logprobs.one_blocks > ctx->tuning.logprobs.few_blocks ? ctx->tuning.logprobs.one_blocks
                                                                                     : ctx->tuning.logprobs.few_blocks;
    psr_status st = warm_launch_logprobs_rows(ctx, dtype, filtered, 1, sharded);
    if (st == PSR_OK && most > 0) /* a shard's partial kernel runs once the blocks pass few_blocks */
        st = warm_launch_logprobs_rows(ctx, dtype, filtered, most + 1, sharded);
    return st;
}

/* The verification call a as one shard of itself: its four rounds, one
 * shard's reductions and gathers being its own writes. */
static psr_status warm_sharded_verify(warm_inputs *in, const psr_verify_args *whole)
{
    psr_verify_args a = *whole;
    a.shard_count = 1, a.vocab_total = a.vocab, a.shard_slots = psr_logprobs_shard_slots(a.vocab);
    a.shard_keys = warm_buffer(in, (2 * a.rows + 1) * 4, NULL);
    a.shard_partials = warm_buffer(in, a.shard_slots * psr_verify_shard_slot_bytes(a.rows), NULL);
    a.shard_records = warm_buffer(in, a.requests * sizeof(psr_shard_record), NULL);
    psr_status st = in->st;
    for (unsigned r = 0; r < PSR_VERIFY_SHARD_ROUNDS && st == PSR_OK; r++)
        st = psr_verify_shard_round(in->ctx, &a, r, NULL);
    return st;
}

/* A verification call of `requests` requests of one draft and a bonus row
 * each; `sharded`: then again as one shard of itself. */
static psr_status warm_launch_verify_shape(psr_context *ctx, unsigned flags, psr_dtype dtype, size_t requests,
                                          size_t vocab, bool sharded)
{
    size_t rows = 2 * requests;
    warm_inputs in;
    int32_t *cu = malloc((requests + 1) * sizeof *cu);
    float *temps = malloc(requests * sizeof *temps);
    if (warm_begin(ctx, &in, rows * vocab * 4) != PSR_OK || !cu || !temps) {
        free(cu);
        free(temps);
        return warm_finish(&in, in.st == PSR_OK ? psr_fail(ctx, PSR_ERR_OUT_OF_HOST_MEMORY, "warming: out of memory")
                                                : in.st);
    }
    for (size_t r = 0; r <= requests; r++)
        cu[r] = (int32_t)(2 * r);
    for (size_t r = 0; r < requests; r++)
        temps[r] = 1.0f;
    psr_verify_args a;
    psr_verify_args_init(&a, sizeof a);
    a.requests = requests;
    a.cu = cu;
    a.rows = rows;
    a.max_drafts = 1;
    a.vocab = vocab;
    a.target_dtype = dtype;
    a.noise = psr_noise_of(flags);
    a.target_logits = warm_buffer(&in, rows * vocab * psr_dtype_size(dtype), NULL);
    a.draft_tokens = warm_buffer(&in, rows * 4, NULL);
    a.seeds = warm_buffer(&in, requests * 8, NULL);
    a.temperatures = warm_buffer(&in, requests * 4, temps);
    a.positions = warm_buffer(&in, rows * 8, NULL);
    a.tokens = warm_buffer(&in, rows * 4, NULL);
    a.num_sampled = warm_buffer(&in, requests * 4, NULL);
    psr_status st = in.st == PSR_OK ? psr_verify(ctx, &a, NULL) : in.st;
    if (st == PSR_OK && sharded)
        st = warm_sharded_verify(&in, &a);
    st = warm_finish(&in, st);
    free(cu);
    free(temps);
    return st;
}

/* One request split over groups, then (where the tuning runs small calls
 * as one launch) enough requests to take the separate kernels. */
psr_status psr_warm_launch_verify(psr_context *ctx, unsigned flags, psr_dtype dtype, bool sharded)
{
    size_t vocab = warm_split_vocab(ctx, true);
    psr_status st = warm_launch_verify_shape(ctx, flags, dtype, 1, vocab, sharded);
    if (st == PSR_OK && ctx->tuning.verify.fused_groups > 0)
        st = warm_launch_verify_shape(ctx, flags, dtype, ctx->tuning.verify.fused_groups / 2 + 1, 64, false);
    return st;
}
