/* Verification across vocabulary shards on a real device: the four rounds
 * of psr_verify_shard_round for every shard of a split, the keys reduced
 * here and the slots and records written into shared buffers (as an
 * all-gather would leave them), against the unsharded psr_verify. Shards
 * on multiples of 16,384 tokens give the same tokens, num_sampled and
 * status: probabilistic and greedy, draft logits and one-hot drafts,
 * -1 drafts, rows of NaN, each noise. Other splits may differ only on
 * near-ties of the acceptance test. Controls: keys left unreduced and a
 * shard's records left out each change the tokens. Bad shard arguments
 * each get their status. */
#include "common.h"
#include "verify_case.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static psr_context *ctx;
static bool has_fp64;

/* One verification's outputs. */
typedef struct vout {
    int32_t *tokens, *num;
    uint32_t status;
} vout;

static vout new_out(const vcase *c)
{
    vout o = {malloc(c->requests * (c->max_drafts + 1) * 4), malloc(c->requests * 4), 0};
    memset(o.tokens, 0x5a, c->requests * (c->max_drafts + 1) * 4);
    memset(o.num, 0x5a, c->requests * 4);
    return o;
}

/* The device inputs of a case (the target whole; each call's view of it). */
typedef struct vdev {
    cl_mem target, drafts, seeds, temps, positions, tokens, num, status;
} vdev;

static vdev upload_case(const vcase *c, const vout *o)
{
    vdev d = {upload(ctx, c->target, c->rows * c->vocab * 4),  upload(ctx, c->drafts, c->rows * 4),
              upload(ctx, c->seeds, c->requests * 8),         upload(ctx, c->temps, c->requests * 4),
              upload(ctx, c->positions, c->rows * 8),         upload(ctx, o->tokens, c->requests * (c->max_drafts + 1) * 4),
              upload(ctx, o->num, c->requests * 4),           upload(ctx, &o->status, 4)};
    return d;
}

static void read_out(const vcase *c, const vdev *d, vout *o)
{
    download(ctx, d->tokens, o->tokens, c->requests * (c->max_drafts + 1) * 4);
    download(ctx, d->num, o->num, c->requests * 4);
    download(ctx, d->status, &o->status, 4);
}

static psr_verify_args base_args(const vcase *c, const vdev *d, psr_verify_method method, psr_noise noise)
{
    psr_verify_args a;
    psr_verify_args_init(&a, sizeof a);
    a.requests = c->requests, a.cu = c->cu, a.rows = c->rows, a.max_drafts = c->max_drafts, a.vocab = c->vocab;
    a.target_logits = d->target, a.draft_cache_k = c->cache ? c->cache_k : 0, a.draft_tokens = d->drafts;
    a.seeds = d->seeds, a.temperatures = d->temps, a.positions = d->positions, a.method = method;
    a.noise = noise, a.tokens = d->tokens, a.num_sampled = d->num, a.status = d->status;
    return a;
}

static void unsharded(const vcase *c, psr_verify_method method, psr_noise noise, vout *o)
{
    vdev d = upload_case(c, o);
    cl_mem cache = c->cache ? upload(ctx, c->cache, c->requests * c->cache_k * c->vocab * 4) : NULL;
    psr_verify_args a = base_args(c, &d, method, noise);
    a.draft_cache = cache;
    if (psr_verify(ctx, &a, NULL) != PSR_OK)
        fail_msg("unsharded: %s", psr_last_error(ctx));
    read_out(c, &d, o);
    release_buffers((cl_mem[]){d.target, d.drafts, d.seeds, d.temps, d.positions, d.tokens, d.num, d.status, cache},
                    9);
}

/* What a test leaves out on purpose. */
typedef enum control { NONE, UNREDUCED_KEYS, MISSING_RECORDS } control;

/* Shard s's columns of the draft cache: [requests, cache_k, its vocab]. */
static cl_mem cache_slice(const vcase *c, size_t lo, size_t hi)
{
    size_t n = hi - lo, rows = c->requests * c->cache_k;
    float *slice = malloc(rows * n * 4);
    for (size_t r = 0; r < rows; r++)
        memcpy(slice + r * n, c->cache + r * c->vocab + lo, n * 4);
    cl_mem m = upload(ctx, slice, rows * n * 4);
    free(slice);
    return m;
}

static void sharded(const vcase *c, const size_t *bounds, size_t shards, psr_verify_method method, psr_noise noise,
                    control ctl, vout *o)
{
    vdev d = upload_case(c, o);
    size_t slots = 0, first[9], rows = c->rows;
    for (size_t s = 0; s < shards; s++)
        first[s] = slots, slots += psr_logprobs_shard_slots(bounds[s + 1] - bounds[s]);
    cl_mem partials = device_buffer(ctx, slots * psr_verify_shard_slot_bytes(rows));
    cl_mem records = device_buffer(ctx, shards * c->requests * sizeof(psr_shard_record)), keys[8], caches[8];
    /* zero records: what MISSING_RECORDS leaves of the last shard, whatever the allocator hands out */
    assert_int_equal(clEnqueueFillBuffer(queue_of(ctx), records, (uint8_t[]){0}, 1, 0,
                                         shards * c->requests * sizeof(psr_shard_record), 0, NULL, NULL),
                     CL_SUCCESS);
    psr_verify_args a[8];
    for (size_t s = 0; s < shards; s++) {
        keys[s] = device_buffer(ctx, (2 * rows + 1) * 4);
        caches[s] = c->cache ? cache_slice(c, bounds[s], bounds[s + 1]) : NULL;
        a[s] = base_args(c, &d, method, noise);
        a[s].vocab = bounds[s + 1] - bounds[s], a[s].target_offset = bounds[s], a[s].target_row_stride = c->vocab;
        a[s].draft_cache = caches[s];
        a[s].shard_count = shards, a[s].shard_index = s, a[s].vocab_offset = bounds[s], a[s].vocab_total = c->vocab;
        a[s].shard_slot = first[s], a[s].shard_slots = slots;
        a[s].shard_keys = keys[s], a[s].shard_partials = partials, a[s].shard_records = records;
    }
    uint32_t *reduced = calloc(2 * rows + 1, 4), *mine = malloc((2 * rows + 1) * 4);
    for (size_t s = 0; s < shards; s++) {
        if (psr_verify_shard_round(ctx, &a[s], 0, NULL) != PSR_OK)
            fail_msg("round 0, shard %zu: %s", s, psr_last_error(ctx));
        download(ctx, keys[s], mine, (2 * rows + 1) * 4);
        for (size_t i = 0; i < 2 * rows + 1; i++)
            reduced[i] = mine[i] > reduced[i] ? mine[i] : reduced[i];
    }
    for (size_t s = 0; s < shards && ctl != UNREDUCED_KEYS; s++)
        assert_int_equal(clEnqueueWriteBuffer(queue_of(ctx), keys[s], CL_TRUE, 0, (2 * rows + 1) * 4, reduced, 0, NULL,
                                              NULL),
                         CL_SUCCESS);
    for (unsigned r = 1; r <= 2; r++)
        for (size_t s = 0; s < shards; s++) {
            if (r == 2 && ctl == MISSING_RECORDS && s == shards - 1)
                continue; /* its records stay zero */
            if (psr_verify_shard_round(ctx, &a[s], r, NULL) != PSR_OK)
                fail_msg("round %u, shard %zu: %s", r, s, psr_last_error(ctx));
        }
    if (psr_verify_shard_round(ctx, &a[0], 3, NULL) != PSR_OK)
        fail_msg("round 3: %s", psr_last_error(ctx));
    read_out(c, &d, o);
    for (size_t s = 0; s < shards; s++)
        release_buffers((cl_mem[]){keys[s], caches[s]}, 2);
    release_buffers((cl_mem[]){d.target, d.drafts, d.seeds, d.temps, d.positions, d.tokens, d.num, d.status, partials,
                               records},
                    10);
    free(reduced), free(mine);
}

/* Requests whose outputs differ. */
static size_t differences(const vcase *c, const vout *got, const vout *want, const char *what)
{
    size_t differ = 0, cols = c->max_drafts + 1;
    for (size_t r = 0; r < c->requests; r++) {
        bool same = got->num[r] == want->num[r] && !memcmp(got->tokens + r * cols, want->tokens + r * cols, cols * 4);
        if (!same && differ++ < 3 && what)
            print_message("%s, request %zu: sharded %d tokens (last %d), unsharded %d (last %d)\n", what, r,
                          got->num[r], got->tokens[r * cols + (got->num[r] > 0 ? got->num[r] - 1 : 0)], want->num[r],
                          want->tokens[r * cols + (want->num[r] > 0 ? want->num[r] - 1 : 0)]);
    }
    if (got->status != want->status && what)
        print_message("%s: status %u, unsharded %u\n", what, got->status, want->status);
    return differ + (got->status != want->status);
}

/* Sharded against unsharded on one case, for both methods and with and
 * without the draft logits. */
static size_t compare(size_t requests, size_t vocab, const size_t *bounds, size_t shards, psr_noise noise,
                      control ctl)
{
    size_t differ = 0;
    for (int cached = 0; cached < 2; cached++) {
        vcase c = make_case(requests, vocab, 4, cached);
        for (int m = 0; m < 2; m++) {
            psr_verify_method method = m ? PSR_VERIFY_GREEDY : PSR_VERIFY_PROBABILISTIC;
            vout want = new_out(&c), got = new_out(&c);
            unsharded(&c, method, noise, &want);
            sharded(&c, bounds, shards, method, noise, ctl, &got);
            char what[96];
            snprintf(what, sizeof what, "vocab %zu, %zu shards, %s, %s", vocab, shards, cached ? "draft logits" : "one-hot",
                     m ? "greedy" : "probabilistic");
            differ += differences(&c, &got, &want, ctl == NONE ? what : NULL);
            free(want.tokens), free(want.num), free(got.tokens), free(got.num);
        }
        free_case(&c);
    }
    return differ;
}

static void test_identical_on_block_boundaries(void **state)
{
    (void)state;
    size_t one[2] = {0, 3000};
    assert_int_equal(compare(24, 3000, one, 1, PSR_NOISE_WIDE, NONE), 0);
    size_t three[4] = {0, 16384, 32768, 40000};
    assert_int_equal(compare(24, 40000, three, 3, PSR_NOISE_FP32, NONE), 0);
    if (!test_long())
        return;
    size_t eight[9];
    for (size_t s = 0; s <= 8; s++)
        eight[s] = s == 8 ? 151936 : s * 16384;
    assert_int_equal(compare(16, 151936, eight, 8, has_fp64 ? PSR_NOISE_FP64 : PSR_NOISE_WIDE, NONE), 0);
}

static void test_uneven_shards(void **state)
{
    (void)state;
    size_t four[5] = {0, 1, 1000, 2999, 3000}; /* one-token shards */
    size_t differ = compare(24, 3000, four, 4, PSR_NOISE_FP32, NONE);
    print_message("uneven shards: %zu requests differ (near-ties of the acceptance test only)\n", differ);
    assert_true(differ <= 1);
}

static void test_controls(void **state)
{
    (void)state;
    size_t three[4] = {0, 16384, 32768, 40000};
    size_t unreduced = compare(24, 40000, three, 3, PSR_NOISE_FP32, UNREDUCED_KEYS);
    size_t missing = compare(24, 40000, three, 3, PSR_NOISE_FP32, MISSING_RECORDS);
    print_message("keys not reduced: %zu requests differ; a shard's records missing: %zu\n", unreduced, missing);
    assert_true(unreduced >= 5);
    assert_true(missing >= 5);
}

/* A bad draft token: the same status as unsharded, nothing written. */
static void test_bad_draft_token(void **state)
{
    (void)state;
    vcase c = make_case(6, 3000, 3, true);
    for (size_t r = 0; r < c.requests; r++)
        if (c.cu[r + 1] - c.cu[r] > 1) {
            c.drafts[c.cu[r]] = 3000; /* past the whole vocabulary */
            break;
        }
    size_t two[3] = {0, 1500, 3000};
    vout want = new_out(&c), got = new_out(&c);
    unsharded(&c, PSR_VERIFY_PROBABILISTIC, PSR_NOISE_FP32, &want);
    sharded(&c, two, 2, PSR_VERIFY_PROBABILISTIC, PSR_NOISE_FP32, NONE, &got);
    assert_int_equal(want.status, PSR_VERIFY_BAD_TOKEN);
    assert_int_equal(got.status, PSR_VERIFY_BAD_TOKEN);
    assert_int_equal(differences(&c, &got, &want, "bad draft token"), 0);
    assert_int_equal((uint32_t)got.num[0], 0x5a5a5a5au); /* nothing written */
    free(want.tokens), free(want.num), free(got.tokens), free(got.num);
    free_case(&c);
}

static void test_bad_shard_arguments(void **state)
{
    (void)state;
    vcase c = make_case(4, 100, 2, false);
    vout o = new_out(&c);
    vdev d = upload_case(&c, &o);
    cl_mem keys = device_buffer(ctx, (2 * c.rows + 1) * 4), partials = device_buffer(ctx, 2 * psr_verify_shard_slot_bytes(c.rows));
    cl_mem records = device_buffer(ctx, 2 * c.requests * 16);
    psr_verify_args a = base_args(&c, &d, PSR_VERIFY_PROBABILISTIC, PSR_NOISE_FP32);
    a.vocab = 50, a.target_row_stride = 100, a.shard_count = 2, a.shard_index = 1, a.vocab_offset = 50;
    a.vocab_total = 100, a.shard_slot = 1, a.shard_slots = 2;
    a.shard_keys = keys, a.shard_partials = partials, a.shard_records = records;
    for (unsigned r = 0; r < PSR_VERIFY_SHARD_ROUNDS; r++)
        if (psr_verify_shard_round(ctx, &a, r, NULL) != PSR_OK)
            fail_msg("round %u: %s", r, psr_last_error(ctx));
    expect_status(ctx, psr_verify_shard_round(ctx, &a, 4, NULL), PSR_ERR_INVALID_ARGUMENT, "round 4");
    expect_status(ctx, psr_verify(ctx, &a, NULL), PSR_ERR_INVALID_ARGUMENT, "psr_verify_shard_round");
    psr_verify_args b = a;
    b.shard_slot = 2;
    expect_status(ctx, psr_verify_shard_round(ctx, &b, 1, NULL), PSR_ERR_SHARD_MISMATCH, "args->shard_slot");
    b = a, b.vocab_offset = 60;
    expect_status(ctx, psr_verify_shard_round(ctx, &b, 0, NULL), PSR_ERR_SHARD_MISMATCH, "args->vocab_offset");
    b = a, b.shard_index = 2;
    expect_status(ctx, psr_verify_shard_round(ctx, &b, 0, NULL), PSR_ERR_INVALID_ARGUMENT, "args->shard_index");
    b = a, b.shard_keys = NULL;
    expect_status(ctx, psr_verify_shard_round(ctx, &b, 0, NULL), PSR_ERR_NULL_ARGUMENT, "args->shard_keys");
    cl_mem small = device_buffer(ctx, 16);
    b = a, b.shard_records = small;
    expect_status(ctx, psr_verify_shard_round(ctx, &b, 2, NULL), PSR_ERR_BUFFER_TOO_SMALL, "args->shard_records");
    b = base_args(&c, &d, PSR_VERIFY_PROBABILISTIC, PSR_NOISE_FP32), b.shard_slots = 1;
    expect_status(ctx, psr_verify(ctx, &b, NULL), PSR_ERR_INVALID_ARGUMENT, "args->shard_count 0");
    b.shard_slots = 0;
    expect_status(ctx, psr_verify_shard_round(ctx, &b, 0, NULL), PSR_ERR_INVALID_ARGUMENT, "psr_verify");
    assert_int_equal(psr_verify_shard_slot_bytes(3), 80); /* 72, rounded up */
    release_buffers((cl_mem[]){keys, partials, records, small, d.target, d.drafts, d.seeds, d.temps, d.positions,
                               d.tokens, d.num, d.status},
                    12);
    free(o.tokens), free(o.num);
    free_case(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identical_on_block_boundaries),
        cmocka_unit_test(test_uneven_shards),
        cmocka_unit_test(test_controls),
        cmocka_unit_test(test_bad_draft_token),
        cmocka_unit_test(test_bad_shard_arguments),
    };
    return run_device_tests(tests, .ctx = &ctx, .has_fp64 = &has_fp64, .seed = 0x7e51);
}
