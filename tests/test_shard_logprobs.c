/* Logprobs across vocabulary shards on a real device: the three rounds of
 * psr_logprobs_shard_round for every shard of a split, the keys reduced and
 * the partials gathered here as an app would, against the unsharded
 * psr_logprobs. Shards that start on multiples of 16,384 tokens give the
 * same bits (processed and raw, top-N 0 to 20, filters, invalid tokens,
 * rows of -inf, NaN and +inf); other splits the same ranks and top ids,
 * and logprobs equal up to rounding. Controls: keys left unreduced and a
 * shard's partials left out each change the outputs. Bad shard arguments
 * each get their status. */
#include "common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static psr_context *ctx;

/* Rows of fp32 logits with their sampled tokens and temperatures: row 1
 * all -inf, row 2 all NaN, row 3 two +inf; token -1 in row 0 and vocab
 * (outside) in row 5. */
typedef struct batch {
    size_t rows, vocab;
    float *logits, *temps;
    int32_t *tokens, *top_k;
    float *top_p, *min_p;
} batch;

static batch make_batch(size_t rows, size_t vocab)
{
    batch b = {rows,           vocab,           malloc(rows * vocab * 4), malloc(rows * 4), malloc(rows * 4),
               malloc(rows * 4), malloc(rows * 4), malloc(rows * 4)};
    for (size_t r = 0; r < rows; r++) {
        float *x = b.logits + r * vocab;
        for (size_t i = 0; i < vocab; i++)
            x[i] = r == 1 ? -INFINITY : r == 2 ? NAN : 3.0f * normal();
        if (r == 3 && vocab > 2)
            x[vocab / 3] = x[vocab - 1] = INFINITY;
        b.temps[r] = r % 4 == 0 ? 0.0f : 0.5f + (float)(rnd() % 100) / 50.0f;
        b.tokens[r] = r == 0 ? -1 : r == 5 ? (int32_t)vocab : (int32_t)(rnd() % vocab);
        b.top_k[r] = r % 3 == 0 ? 0 : (int32_t)(1 + rnd() % 300);
        b.top_p[r] = r % 2 == 0 ? 1.0f : 0.5f + (float)(rnd() % 50) / 100.0f;
        b.min_p[r] = r % 5 == 0 ? (float)(rnd() % 10) / 100.0f : 0.0f;
    }
    return b;
}

static void free_batch(batch *b)
{
    free(b->logits), free(b->temps), free(b->tokens), free(b->top_k), free(b->top_p), free(b->min_p);
}

/* A call's outputs, read back. */
typedef struct outputs {
    float lp[64];
    int32_t rank[64];
    int32_t ids[64 * PSR_LOGPROBS_MAX_TOP_N];
    float top_lp[64 * PSR_LOGPROBS_MAX_TOP_N];
} outputs;

/* The device side of a batch and of one call's outputs. */
typedef struct dev {
    cl_mem logits, temps, tokens, top_k, top_p, min_p;
    cl_mem lp, rank, ids, top_lp;
} dev;

static dev upload_batch(const batch *b)
{
    size_t rows = b->rows, top = rows * PSR_LOGPROBS_MAX_TOP_N * 4;
    dev d = {upload(ctx, b->logits, rows * b->vocab * 4), upload(ctx, b->temps, rows * 4),
             upload(ctx, b->tokens, rows * 4),           upload(ctx, b->top_k, rows * 4),
             upload(ctx, b->top_p, rows * 4),            upload(ctx, b->min_p, rows * 4),
             device_buffer(ctx, rows * 4),               device_buffer(ctx, rows * 4),
             device_buffer(ctx, top),                    device_buffer(ctx, top)};
    return d;
}

static void release_dev(dev *d)
{
    release_buffers((cl_mem[]){d->logits, d->temps, d->tokens, d->top_k, d->top_p, d->min_p, d->lp, d->rank,
                               d->ids, d->top_lp},
                    10);
}

/* The unsharded call's args over the whole batch. */
static psr_logprobs_args whole_args(const batch *b, const dev *d, int top_n, unsigned flags, bool filtered)
{
    psr_logprobs_args a;
    psr_logprobs_args_init(&a, sizeof a);
    a.rows = b->rows, a.vocab = b->vocab, a.logits = d->logits, a.logits_dtype = PSR_DTYPE_F32;
    a.temperatures = flags & PSR_LOGPROBS_RAW ? NULL : d->temps, a.tokens = d->tokens;
    a.top_n = top_n, a.flags = flags;
    a.token_logprobs = d->lp, a.token_ranks = d->rank;
    a.top_ids = top_n ? d->ids : NULL, a.top_logprobs = top_n ? d->top_lp : NULL;
    if (filtered)
        a.top_k = d->top_k, a.top_p = d->top_p, a.min_p = d->min_p;
    return a;
}

static void read_outputs(const dev *d, size_t rows, int top_n, outputs *o)
{
    memset(o, 0, sizeof *o);
    download(ctx, d->lp, o->lp, rows * 4);
    download(ctx, d->rank, o->rank, rows * 4);
    if (top_n) {
        download(ctx, d->ids, o->ids, rows * (size_t)top_n * 4);
        download(ctx, d->top_lp, o->top_lp, rows * (size_t)top_n * 4);
    }
}

/* The filters' rounds (psr_shard_filter_round) for every shard, their
 * partials reduced on the host, leaving each shard's thresholds in
 * state[s]: the same rounds a sharded psr_sample takes, from sample args
 * without seeds, positions or records (the rounds read none of them). */
static void filter_rounds(const batch *b, const dev *d, const size_t *bounds, size_t shards, cl_mem *state)
{
    size_t rows = b->rows, words = rows * PSR_SHARD_FILTER_WORDS;
    cl_mem reduced = device_buffer(ctx, words * 8), partial[8];
    psr_sample_args sa[8];
    for (size_t s = 0; s < shards; s++) {
        psr_sample_args_init(&sa[s], sizeof sa[s]);
        sa[s].rows = rows, sa[s].vocab = bounds[s + 1] - bounds[s], sa[s].logits = d->logits;
        sa[s].logits_offset = bounds[s], sa[s].row_stride = b->vocab;
        sa[s].temperatures = d->temps;
        sa[s].top_k = d->top_k, sa[s].top_p = d->top_p, sa[s].min_p = d->min_p;
        sa[s].shard_count = shards, sa[s].shard_index = s, sa[s].vocab_offset = bounds[s];
        sa[s].vocab_total = b->vocab, sa[s].shard_filter_state = state[s];
        partial[s] = device_buffer(ctx, words * 8);
    }
    run_filter_rounds(ctx, sa, shards, partial, reduced, rows, false);
    for (size_t s = 0; s < shards; s++)
        clReleaseMemObject(partial[s]);
    clReleaseMemObject(reduced);
}

/* What a test leaves out on purpose. */
typedef enum control { NONE, UNREDUCED_KEYS, MISSING_SHARD } control;

/* The sharded rounds over bounds (shards + 1 entries), outputs read back
 * from shard 0 (every shard writes the same). */
static void sharded(const batch *b, const dev *d, const size_t *bounds, size_t shards, int top_n, unsigned flags,
                    bool filtered, control ctl, outputs *o)
{
    size_t rows = b->rows, slots = 0, first[9];
    for (size_t s = 0; s < shards; s++)
        first[s] = slots, slots += psr_logprobs_shard_slots(bounds[s + 1] - bounds[s]);
    size_t slot_bytes = psr_logprobs_shard_slot_bytes(rows, top_n);
    cl_mem partials = device_buffer(ctx, slots * slot_bytes), keys[8], state[8] = {NULL};
    for (size_t s = 0; s < shards; s++) {
        keys[s] = device_buffer(ctx, rows * 4);
        state[s] = filtered ? device_buffer(ctx, rows * PSR_SHARD_FILTER_STATE_BYTES) : NULL;
    }
    if (filtered)
        filter_rounds(b, d, bounds, shards, state);
    psr_logprobs_args a[8];
    for (size_t s = 0; s < shards; s++) {
        a[s] = whole_args(b, d, top_n, flags, filtered);
        a[s].vocab = bounds[s + 1] - bounds[s], a[s].logits_offset = bounds[s], a[s].row_stride = b->vocab;
        a[s].shard_count = shards, a[s].shard_index = s, a[s].vocab_offset = bounds[s];
        a[s].vocab_total = b->vocab, a[s].shard_slot = first[s], a[s].shard_slots = slots;
        a[s].shard_token_keys = keys[s], a[s].shard_partials = partials, a[s].shard_filter_state = state[s];
    }
    uint32_t reduced[64] = {0}, mine[64];
    for (size_t s = 0; s < shards; s++) {
        if (psr_logprobs_shard_round(ctx, &a[s], 0, NULL) != PSR_OK)
            fail_msg("round 0, shard %zu: %s", s, psr_last_error(ctx));
        download(ctx, keys[s], mine, rows * 4);
        for (size_t r = 0; r < rows; r++)
            reduced[r] = mine[r] > reduced[r] ? mine[r] : reduced[r];
    }
    for (size_t s = 0; s < shards && ctl != UNREDUCED_KEYS; s++)
        assert_int_equal(clEnqueueWriteBuffer(queue_of(ctx), keys[s], CL_TRUE, 0, rows * 4, reduced, 0, NULL, NULL),
                         CL_SUCCESS);
    /* One buffer holds every shard's slots, as an all-gather would leave it;
     * MISSING_SHARD: the last shard's slots stay zero bytes. */
    assert_int_equal(clEnqueueFillBuffer(queue_of(ctx), partials, (uint8_t[]){0}, 1, 0, slots * slot_bytes, 0,
                                         NULL, NULL),
                     CL_SUCCESS);
    for (size_t s = 0; s < shards - (ctl == MISSING_SHARD); s++)
        if (psr_logprobs_shard_round(ctx, &a[s], 1, NULL) != PSR_OK)
            fail_msg("round 1, shard %zu: %s", s, psr_last_error(ctx));
    if (psr_logprobs_shard_round(ctx, &a[0], 2, NULL) != PSR_OK)
        fail_msg("round 2: %s", psr_last_error(ctx));
    read_outputs(d, rows, top_n, o);
    for (size_t s = 0; s < shards; s++) {
        clReleaseMemObject(keys[s]);
        if (state[s])
            clReleaseMemObject(state[s]);
    }
    clReleaseMemObject(partials);
}

static void unsharded(const batch *b, const dev *d, int top_n, unsigned flags, bool filtered, outputs *o)
{
    psr_logprobs_args a = whole_args(b, d, top_n, flags, filtered);
    if (psr_logprobs(ctx, &a, NULL) != PSR_OK)
        fail_msg("unsharded: %s", psr_last_error(ctx));
    read_outputs(d, b->rows, top_n, o);
}

static bool same_or_close(float x, float y, bool exact)
{
    if (isnan(x) || isnan(y))
        return isnan(x) && isnan(y);
    if (exact || isinf(x) || isinf(y))
        return memcmp(&x, &y, 4) == 0;
    return fabsf(x - y) <= 1e-5f * (1.0f + fabsf(y));
}

/* Rows whose outputs differ: bits where `exact`, else ranks and ids
 * exactly and logprobs up to rounding. */
static size_t differences(const outputs *got, const outputs *want, size_t rows, int top_n, bool exact,
                          const char *what)
{
    size_t differ = 0;
    for (size_t r = 0; r < rows; r++) {
        bool same = same_or_close(got->lp[r], want->lp[r], exact) && got->rank[r] == want->rank[r];
        for (int n = 0; n < top_n; n++) {
            size_t i = r * (size_t)top_n + (size_t)n;
            same = same && got->ids[i] == want->ids[i] && same_or_close(got->top_lp[i], want->top_lp[i], exact);
        }
        if (!same && differ++ < 3 && what)
            print_message("%s, row %zu: logprob %a rank %d top %d (%a); unsharded %a rank %d top %d (%a)\n", what,
                          r, got->lp[r], got->rank[r], top_n ? got->ids[r * (size_t)top_n] : 0,
                          top_n ? got->top_lp[r * (size_t)top_n] : 0.0f, want->lp[r], want->rank[r],
                          top_n ? want->ids[r * (size_t)top_n] : 0, top_n ? want->top_lp[r * (size_t)top_n] : 0.0f);
    }
    return differ;
}

/* Bounds on multiples of 16,384: each shard a random number of whole
 * blocks (the last what is left). */
static size_t block_bounds(size_t vocab, size_t *bounds)
{
    size_t blocks = (vocab + PSR_LOGPROBS_SHARD_BLOCK - 1) / PSR_LOGPROBS_SHARD_BLOCK, shards = 0;
    bounds[0] = 0;
    for (size_t at = 0; at < blocks && shards < 8;) {
        size_t take = shards == 7 ? blocks - at : 1 + rnd() % 2;
        at = at + take < blocks ? at + take : blocks;
        bounds[++shards] = at * PSR_LOGPROBS_SHARD_BLOCK < vocab ? at * PSR_LOGPROBS_SHARD_BLOCK : vocab;
    }
    return shards;
}

/* Sharded against unsharded over one batch, for every top_n, raw and
 * processed, with and without filters. */
static size_t compare_batch(size_t rows, size_t vocab, const size_t *bounds, size_t shards, bool exact,
                            control ctl)
{
    batch b = make_batch(rows, vocab);
    dev d = upload_batch(&b);
    size_t differ = 0;
    static const int top_ns[] = {0, 5, 20};
    outputs *got = malloc(sizeof *got), *want = malloc(sizeof *want);
    for (size_t i = 0; i < 3; i++)
        for (int mode = 0; mode < 3; mode++) { /* processed, raw, filtered */
            unsigned flags = mode == 1 ? PSR_LOGPROBS_RAW : 0;
            bool filtered = mode == 2;
            char what[96];
            snprintf(what, sizeof what, "vocab %zu, %zu shards, top %d, %s", vocab, shards, top_ns[i],
                     mode == 0 ? "processed" : mode == 1 ? "raw" : "filtered");
            unsharded(&b, &d, top_ns[i], flags, filtered, want);
            sharded(&b, &d, bounds, shards, top_ns[i], flags, filtered, ctl, got);
            differ += differences(got, want, rows, top_ns[i], exact, ctl == NONE ? what : NULL);
        }
    free(got), free(want);
    release_dev(&d);
    free_batch(&b);
    return differ;
}

static void test_identical_on_block_boundaries(void **state)
{
    (void)state;
    static const size_t vocabs[] = {5000, 40000, 70000, 151936, 262144};
    size_t count = test_long() ? 5 : 2;
    for (size_t v = 0; v < count; v++) {
        size_t bounds[9], shards = block_bounds(vocabs[v], bounds);
        assert_int_equal(compare_batch(v < 3 ? 12 : 6, vocabs[v], bounds, shards, true, NONE), 0);
    }
    size_t one[2] = {0, 999};
    assert_int_equal(compare_batch(8, 999, one, 1, true, NONE), 0);
}

static void test_uneven_shards(void **state)
{
    (void)state;
    static const size_t vocabs[] = {1, 999, 40000, 70000};
    static const size_t counts[] = {1, 3, 5, 8};
    size_t count = test_long() ? 4 : 3;
    for (size_t v = 0; v < count; v++) {
        size_t shards = counts[v] < vocabs[v] ? counts[v] : vocabs[v], bounds[9];
        random_bounds(vocabs[v], shards, bounds);
        assert_int_equal(compare_batch(8, vocabs[v], bounds, shards, false, NONE), 0);
    }
}

/* The controls: each omission changes the outputs of most rows, so the
 * comparisons above can fail. */
static void test_controls(void **state)
{
    (void)state;
    size_t bounds[4] = {0, 16384, 32768, 40000};
    size_t unreduced = compare_batch(12, 40000, bounds, 3, true, UNREDUCED_KEYS);
    size_t missing = compare_batch(12, 40000, bounds, 3, true, MISSING_SHARD);
    print_message("keys not reduced: %zu of 108 rows differ; a shard's partials missing: %zu\n", unreduced,
                  missing);
    assert_true(unreduced >= 40);
    assert_true(missing >= 40);
}

static void test_bad_shard_arguments(void **state)
{
    (void)state;
    batch b = make_batch(4, 100);
    dev d = upload_batch(&b);
    cl_mem keys = device_buffer(ctx, 16), partials = device_buffer(ctx, psr_logprobs_shard_slot_bytes(4, 5) * 2);
    psr_logprobs_args a = whole_args(&b, &d, 5, 0, false);
    a.vocab = 50, a.row_stride = 100, a.shard_count = 2, a.shard_index = 1, a.vocab_offset = 50;
    a.vocab_total = 100, a.shard_slot = 1, a.shard_slots = 2, a.shard_token_keys = keys, a.shard_partials = partials;
    for (unsigned r = 0; r < PSR_LOGPROBS_SHARD_ROUNDS; r++)
        assert_int_equal(psr_logprobs_shard_round(ctx, &a, r, NULL), PSR_OK);
    expect_status(ctx, psr_logprobs_shard_round(ctx, &a, 3, NULL), PSR_ERR_INVALID_ARGUMENT, "round 3");
    expect_status(ctx, psr_logprobs(ctx, &a, NULL), PSR_ERR_INVALID_ARGUMENT, "psr_logprobs_shard_round");
    psr_logprobs_args c = a;
    c.shard_slot = 2;
    expect_status(ctx, psr_logprobs_shard_round(ctx, &c, 1, NULL), PSR_ERR_SHARD_MISMATCH, "args->shard_slot");
    c = a, c.vocab_offset = 60;
    expect_status(ctx, psr_logprobs_shard_round(ctx, &c, 0, NULL), PSR_ERR_SHARD_MISMATCH, "args->vocab_offset");
    c = a, c.shard_slots = PSR_LOGPROBS_MAX_SLOTS + 1;
    expect_status(ctx, psr_logprobs_shard_round(ctx, &c, 2, NULL), PSR_ERR_INVALID_ARGUMENT, "args->shard_slots");
    c = a, c.shard_index = 2;
    expect_status(ctx, psr_logprobs_shard_round(ctx, &c, 0, NULL), PSR_ERR_INVALID_ARGUMENT, "args->shard_index");
    c = a, c.vocab_total = (1u << 20) + 1;
    expect_status(ctx, psr_logprobs_shard_round(ctx, &c, 0, NULL), PSR_ERR_INVALID_ARGUMENT, "args->vocab_total");
    c = a, c.shard_token_keys = NULL;
    expect_status(ctx, psr_logprobs_shard_round(ctx, &c, 0, NULL), PSR_ERR_NULL_ARGUMENT, "args->shard_token_keys");
    cl_mem small = device_buffer(ctx, psr_logprobs_shard_slot_bytes(4, 5));
    c = a, c.shard_partials = small;
    expect_status(ctx, psr_logprobs_shard_round(ctx, &c, 1, NULL), PSR_ERR_BUFFER_TOO_SMALL, "args->shard_partials");
    clReleaseMemObject(small);
    c = a, c.top_k = d.top_k;
    expect_status(ctx, psr_logprobs_shard_round(ctx, &c, 0, NULL), PSR_ERR_NULL_ARGUMENT, "args->shard_filter_state");
    c = whole_args(&b, &d, 5, 0, false), c.shard_slots = 1;
    expect_status(ctx, psr_logprobs(ctx, &c, NULL), PSR_ERR_INVALID_ARGUMENT, "args->shard_count 0");
    expect_status(ctx, psr_logprobs_shard_round(ctx, &c, 0, NULL), PSR_ERR_INVALID_ARGUMENT, "args->shard_count 0");
    c.shard_slots = 0;
    expect_status(ctx, psr_logprobs_shard_round(ctx, &c, 0, NULL), PSR_ERR_INVALID_ARGUMENT, "psr_logprobs");
    assert_int_equal(psr_logprobs_shard_slots(0), 0);
    assert_int_equal(psr_logprobs_shard_slots(16384), 1);
    assert_int_equal(psr_logprobs_shard_slots(16385), 2);
    assert_int_equal(psr_logprobs_shard_slot_bytes(3, 1), 64); /* 3 x 20 = 60, rounded up */
    assert_int_equal(psr_logprobs_shard_slot_bytes(3, PSR_LOGPROBS_MAX_TOP_N + 1), 0);
    release_buffers((cl_mem[]){keys, partials}, 2);
    release_dev(&d);
    free_batch(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identical_on_block_boundaries),
        cmocka_unit_test(test_uneven_shards),
        cmocka_unit_test(test_controls),
        cmocka_unit_test(test_bad_shard_arguments),
    };
    return run_device_tests(tests, .ctx = &ctx, .seed = 0x1a9b);
}
