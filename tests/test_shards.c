/* Vocabulary shards on a real device: for random rows, every shard's
 * psr_sample writes a record, and psr_combine (and psr_combine_host) of
 * the records gives the unsharded call's tokens and flags, for every
 * noise, the draft stream, greedy rows, the race over probabilities and
 * each logit dtype; uneven shards, shards of one token, and shards where
 * every logit is -inf or NaN. The race over logits (its groups' shifts
 * depend on where a shard starts) agrees up to rounding. Bad shard
 * descriptions and records each get their status. The default suite keeps
 * the sizes PoCL runs in seconds; the long suite goes to 262,144 tokens. */
#include "common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static psr_context *ctx;
static bool has_fp64;

/* One batch of rows: logits [rows, vocab] of one dtype and the noise inputs. */
typedef struct batch {
    size_t rows, vocab;
    psr_dtype dtype;
    void *logits;
    int64_t *seeds, *positions;
    float *temps;
} batch;

/* fp32 to fp16 by truncation (any rounding serves: the rows are random),
 * keeping infinities and NaN; magnitudes below fp16's normals become 0. */
static uint16_t f32_to_f16(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    uint16_t sign = (uint16_t)(b >> 16 & 0x8000u);
    if (isnan(f))
        return 0x7e00u;
    float a = fabsf(f);
    if (a >= 65520.0f)
        return sign | 0x7c00u;
    if (a < 0x1p-14f)
        return sign;
    int e = (int)(b >> 23 & 0xff) - 127 + 15;
    return sign | (uint16_t)(e << 10) | (uint16_t)(b >> 13 & 0x3ffu);
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return (uint16_t)(b >> 16);
}

/* N(0, 3) rows with a few special ones: row 1 all -inf, row 2 all NaN,
 * row 3 with +inf at two tokens; every fourth row greedy when `greedy`. */
static batch make_batch(size_t rows, size_t vocab, psr_dtype dtype, bool greedy, bool probs)
{
    batch b = {rows, vocab, dtype, NULL, malloc(rows * 8), malloc(rows * 8), malloc(rows * 4)};
    float *x = malloc(rows * vocab * sizeof *x);
    for (size_t r = 0; r < rows; r++) {
        for (size_t i = 0; i < vocab; i++) {
            float v = 3.0f * normal();
            x[r * vocab + i] = probs ? (rnd() % 20 == 0 ? 0.0f : expf(v)) : v;
        }
        if (r == 1 && rows > 4)
            for (size_t i = 0; i < vocab; i++)
                x[r * vocab + i] = probs ? 0.0f : -INFINITY;
        if (r == 2 && rows > 4)
            for (size_t i = 0; i < vocab; i++)
                x[r * vocab + i] = NAN;
        if (r == 3 && rows > 4 && vocab > 2) {
            x[r * vocab + vocab - 1] = INFINITY;
            x[r * vocab + vocab / 2] = INFINITY;
        }
        b.seeds[r] = random_seed();
        b.positions[r] = rnd() % (1u << 30);
        b.temps[r] = greedy && r % 4 == 0 ? 0.0f : 0.5f + (float)(rnd() % 100) / 50.0f;
    }
    if (dtype == PSR_DTYPE_F32) {
        b.logits = x;
        return b;
    }
    uint16_t *h = malloc(rows * vocab * 2);
    for (size_t i = 0; i < rows * vocab; i++)
        h[i] = dtype == PSR_DTYPE_F16 ? f32_to_f16(x[i]) : f32_to_bf16(x[i]);
    free(x);
    b.logits = h;
    return b;
}

static void free_batch(batch *b)
{
    free(b->logits), free(b->seeds), free(b->positions), free(b->temps);
}

/* One shard's records through psr_sample_host. */
static psr_status sample_shard(const batch *b, const size_t *bounds, size_t shards, size_t s, unsigned flags,
                               psr_shard_record *records)
{
    psr_sample_host_args a;
    psr_sample_host_args_init(&a, sizeof a);
    size_t elem = b->dtype == PSR_DTYPE_F32 ? 4 : 2;
    a.logits = (const char *)b->logits + bounds[s] * elem, a.logits_dtype = b->dtype;
    a.rows = b->rows, a.vocab = bounds[s + 1] - bounds[s], a.row_stride = b->vocab;
    a.seeds = b->seeds, a.positions = b->positions, a.temperatures = b->temps;
    a.flags = flags & ~(PSR_FLAG_FP64_NOISE | PSR_FLAG_WIDE_NOISE), a.noise = psr_noise_of(flags);
    a.shard_count = shards, a.shard_index = s, a.vocab_offset = bounds[s], a.vocab_total = b->vocab;
    a.shard_records = records;
    return psr_sample_host(ctx, &a);
}

/* The device combine of records [shards, rows]. */
static psr_status combine_on_device(const psr_shard_record *records, size_t rows, size_t shards, int32_t *tokens,
                                    uint32_t *flags)
{
    cl_mem dr = upload(ctx, records, rows * shards * sizeof *records);
    cl_mem dt = device_buffer(ctx, rows * 4), df = device_buffer(ctx, rows * 4);
    psr_combine_args c;
    psr_combine_args_init(&c, sizeof c);
    c.rows = rows, c.shards = shards, c.records = dr, c.tokens = dt, c.row_flags = df;
    psr_status st = psr_combine(ctx, &c, NULL);
    if (st == PSR_OK) {
        download(ctx, dt, tokens, rows * 4);
        download(ctx, df, flags, rows * 4);
    }
    release_buffers((cl_mem[]){dr, dt, df}, 3);
    return st;
}

/* Rows whose sharded token or flags differ from the unsharded call's
 * (host and device combine both checked; they must agree). */
static size_t sharded_differences(const batch *b, size_t shards, unsigned flags)
{
    size_t rows = b->rows, bounds[PSR_MAX_SHARDS + 1];
    random_bounds(b->vocab, shards, bounds);
    int32_t *want = malloc(rows * 4), *got = malloc(rows * 4), *got_dev = malloc(rows * 4);
    uint32_t *want_f = malloc(rows * 4), *got_f = malloc(rows * 4), *got_dev_f = malloc(rows * 4);
    psr_shard_record *records = malloc(rows * shards * sizeof *records);
    psr_status st = sample_host(ctx, b->logits, b->dtype, rows, b->vocab, 0, b->seeds, b->positions, b->temps,
                                flags, want, want_f, NULL);
    if (st != PSR_OK)
        fail_msg("unsharded: %s", psr_last_error(ctx));
    for (size_t s = 0; s < shards; s++)
        if (sample_shard(b, bounds, shards, s, flags, records + s * rows) != PSR_OK)
            fail_msg("shard %zu of %zu: %s", s, shards, psr_last_error(ctx));
    psr_combine_host_args c;
    psr_combine_host_args_init(&c, sizeof c);
    c.rows = rows, c.shards = shards, c.records = records, c.tokens = got, c.row_flags = got_f;
    if (psr_combine_host(ctx, &c) != PSR_OK)
        fail_msg("psr_combine_host: %s", psr_last_error(ctx));
    if (combine_on_device(records, rows, shards, got_dev, got_dev_f) != PSR_OK)
        fail_msg("psr_combine: %s", psr_last_error(ctx));
    size_t differ = 0;
    for (size_t r = 0; r < rows; r++) {
        if (got[r] != got_dev[r] || got_f[r] != got_dev_f[r])
            fail_msg("row %zu: host combine %d (flags %u), device combine %d (flags %u)", r, got[r], got_f[r],
                     got_dev[r], got_dev_f[r]);
        if (got[r] != want[r] || got_f[r] != want_f[r]) {
            if (differ++ < 3)
                print_message("vocab %zu, %zu shards, flags %u, row %zu: sharded %d (flags %u), unsharded %d "
                              "(flags %u)\n",
                              b->vocab, shards, flags, r, got[r], got_f[r], want[r], want_f[r]);
        }
    }
    free(want), free(got), free(got_dev), free(want_f), free(got_f), free(got_dev_f), free(records);
    return differ;
}

/* Every shard count in `counts` over a batch of each vocabulary. */
static void check_identical(const size_t *vocabs, size_t nv, size_t rows, psr_dtype dtype, unsigned flags,
                            bool greedy)
{
    static const size_t counts[] = {1, 2, 3, 5, 8};
    bool probs = flags & PSR_SAMPLE_PROBS;
    for (size_t v = 0; v < nv; v++) {
        batch b = make_batch(rows, vocabs[v], dtype, greedy, probs);
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
            if (counts[c] > vocabs[v])
                continue;
            assert_int_equal(sharded_differences(&b, counts[c], flags), 0);
        }
        free_batch(&b);
    }
}

static void test_gumbel_identical(void **state)
{
    (void)state;
    static const size_t small[] = {1, 7, 999, 4097}, split[] = {70000};
    check_identical(small, 4, 24, PSR_DTYPE_F32, 0, true);
    check_identical(split, 1, 6, PSR_DTYPE_F32, 0, true); /* rows split over groups */
    if (!test_long())
        return;
    static const size_t large[] = {151936, 262144};
    check_identical(large, 2, 8, PSR_DTYPE_F32, 0, true);
}

static void test_noises_and_stream(void **state)
{
    (void)state;
    static const size_t vocabs[] = {3000};
    check_identical(vocabs, 1, 16, PSR_DTYPE_F32, PSR_FLAG_WIDE_NOISE, true);
    check_identical(vocabs, 1, 16, PSR_DTYPE_F32, PSR_SAMPLE_DRAFTING, false);
    if (has_fp64)
        check_identical(vocabs, 1, 16, PSR_DTYPE_F32, PSR_FLAG_FP64_NOISE, true);
    if (!test_long())
        return;
    static const size_t split[] = {70000};
    check_identical(split, 1, 6, PSR_DTYPE_F32, PSR_FLAG_WIDE_NOISE | PSR_SAMPLE_DRAFTING, true);
    if (has_fp64)
        check_identical(split, 1, 6, PSR_DTYPE_F32, PSR_FLAG_FP64_NOISE | PSR_SAMPLE_DRAFTING, true);
}

static void test_dtypes(void **state)
{
    (void)state;
    static const size_t vocabs[] = {2500};
    check_identical(vocabs, 1, 12, PSR_DTYPE_F16, 0, true);
    if (test_long())
        check_identical(vocabs, 1, 12, PSR_DTYPE_BF16, 0, true);
}

static void test_race_over_probabilities(void **state)
{
    (void)state;
    static const size_t vocabs[] = {5, 3000};
    check_identical(vocabs, 2, 16, PSR_DTYPE_F32, PSR_SAMPLE_RACE | PSR_SAMPLE_PROBS, false);
    if (!test_long())
        return;
    static const size_t split[] = {70000};
    check_identical(split, 1, 6, PSR_DTYPE_F32, PSR_SAMPLE_RACE | PSR_SAMPLE_PROBS | PSR_FLAG_WIDE_NOISE, false);
    if (has_fp64)
        check_identical(split, 1, 6, PSR_DTYPE_F32, PSR_SAMPLE_RACE | PSR_SAMPLE_PROBS | PSR_FLAG_FP64_NOISE,
                        false);
}

/* The race over logits scales each group by its own largest logit, so a
 * shard that starts inside a group moves the rounding: tokens agree on
 * all but near-ties. */
static void test_race_over_logits_up_to_rounding(void **state)
{
    (void)state;
    batch b = make_batch(200, 3000, PSR_DTYPE_F32, true, false);
    size_t differ = 0;
    for (size_t shards = 2; shards <= 4; shards++)
        differ += sharded_differences(&b, shards, PSR_SAMPLE_RACE);
    free_batch(&b);
    assert_true(differ <= 2); /* of 600 rows */
}

/* ---- filters across shards ---- */

/* The filters of one test: per-request arrays (NULL: off) or all_* values. */
typedef struct filters {
    const int32_t *top_k;
    const float *top_p, *min_p;
    int all_top_k;
    float all_top_p, all_min_p;
} filters;

/* Device buffers of a batch, for the device calls. */
typedef struct dev_batch {
    cl_mem logits, seeds, temps, positions, top_k, top_p, min_p;
} dev_batch;

static dev_batch upload_batch(const batch *b, const filters *f)
{
    size_t rows = b->rows, elem = b->dtype == PSR_DTYPE_F32 ? 4 : 2;
    dev_batch d = {upload(ctx, b->logits, rows * b->vocab * elem), upload(ctx, b->seeds, rows * 8),
                   upload(ctx, b->temps, rows * 4), upload(ctx, b->positions, rows * 8),
                   f->top_k ? upload(ctx, f->top_k, rows * 4) : NULL,
                   f->top_p ? upload(ctx, f->top_p, rows * 4) : NULL,
                   f->min_p ? upload(ctx, f->min_p, rows * 4) : NULL};
    return d;
}

static void release_batch(dev_batch *d)
{
    cl_mem all[] = {d->logits, d->seeds, d->temps, d->positions, d->top_k, d->top_p, d->min_p};
    for (size_t i = 0; i < 7; i++)
        if (all[i])
            clReleaseMemObject(all[i]);
}

/* Shard s's sampling args over the uploaded batch. */
static psr_sample_args filtered_shard_args(const batch *b, const dev_batch *d, const filters *f, const size_t *bounds,
                                           size_t shards, size_t s, unsigned flags, cl_mem records, cl_mem state)
{
    psr_sample_args a;
    psr_sample_args_init(&a, sizeof a);
    set_sample_flags(&a, flags);
    a.rows = b->rows, a.logits = d->logits, a.logits_dtype = b->dtype, a.row_stride = b->vocab;
    a.logits_offset = bounds[s], a.vocab = bounds[s + 1] - bounds[s];
    a.seeds = d->seeds, a.temperatures = d->temps, a.positions = d->positions;
    a.top_k = d->top_k, a.top_p = d->top_p, a.min_p = d->min_p;
    a.all_top_k = f->all_top_k, a.all_top_p = f->all_top_p, a.all_min_p = f->all_min_p;
    a.shard_count = shards, a.shard_index = s, a.vocab_offset = bounds[s], a.vocab_total = b->vocab;
    a.shard_records = records, a.shard_records_offset = s * b->rows, a.shard_filter_state = state;
    return a;
}

/* Rows whose sharded filtered token differs from the unsharded call's;
 * `control`: the reductions leave out the last shard's partials. */
static size_t filtered_differences(const batch *b, size_t shards, unsigned flags, const filters *f, bool control)
{
    size_t rows = b->rows, bounds[PSR_MAX_SHARDS + 1];
    random_bounds(b->vocab, shards, bounds);
    dev_batch d = upload_batch(b, f);
    cl_mem records = device_buffer(ctx, shards * rows * sizeof(psr_shard_record));
    cl_mem reduced = device_buffer(ctx, rows * PSR_SHARD_FILTER_WORDS * 8), partial[8], state[8];
    psr_sample_args args[8];
    for (size_t s = 0; s < shards; s++) {
        partial[s] = device_buffer(ctx, rows * PSR_SHARD_FILTER_WORDS * 8);
        state[s] = device_buffer(ctx, rows * PSR_SHARD_FILTER_STATE_BYTES);
        args[s] = filtered_shard_args(b, &d, f, bounds, shards, s, flags, records, state[s]);
    }
    run_filter_rounds(ctx, args, shards, partial, reduced, rows, control);
    for (size_t s = 0; s < shards; s++)
        if (psr_sample(ctx, &args[s], NULL) != PSR_OK)
            fail_msg("filtered shard %zu: %s", s, psr_last_error(ctx));
    psr_shard_record *rec = malloc(shards * rows * sizeof *rec);
    download(ctx, records, rec, shards * rows * sizeof *rec);
    int32_t *got = malloc(rows * 4), *want = malloc(rows * 4);
    uint32_t *got_f = malloc(rows * 4), *want_f = malloc(rows * 4);
    psr_combine_host_args c;
    psr_combine_host_args_init(&c, sizeof c);
    c.rows = rows, c.shards = shards, c.records = rec, c.tokens = got, c.row_flags = got_f;
    assert_int_equal(psr_combine_host(ctx, &c), PSR_OK);
    psr_sample_args u = filtered_shard_args(b, &d, f, bounds, 1, 0, flags, NULL, NULL);
    cl_mem dt = device_buffer(ctx, rows * 4), df = device_buffer(ctx, rows * 4);
    u.logits_offset = 0, u.vocab = b->vocab, u.row_stride = 0, u.shard_count = 0, u.shard_index = 0;
    u.vocab_offset = u.vocab_total = 0, u.shard_records = NULL, u.shard_records_offset = 0;
    u.tokens = dt, u.row_flags = df;
    if (psr_sample(ctx, &u, NULL) != PSR_OK)
        fail_msg("unsharded filtered: %s", psr_last_error(ctx));
    download(ctx, dt, want, rows * 4);
    download(ctx, df, want_f, rows * 4);
    size_t differ = 0;
    for (size_t r = 0; r < rows; r++)
        if ((got[r] != want[r] || got_f[r] != want_f[r]) && differ++ < 3 && !control)
            print_message("filtered, vocab %zu, %zu shards, row %zu: sharded %d (flags %u), unsharded %d (flags %u)\n",
                          b->vocab, shards, r, got[r], got_f[r], want[r], want_f[r]);
    for (size_t s = 0; s < shards; s++)
        release_buffers((cl_mem[]){partial[s], state[s]}, 2);
    release_buffers((cl_mem[]){records, reduced, dt, df}, 4);
    release_batch(&d);
    free(rec), free(got), free(want), free(got_f), free(want_f);
    return differ;
}

static void test_filters_identical(void **state)
{
    (void)state;
    batch b = make_batch(24, 3000, PSR_DTYPE_F32, true, false);
    int32_t ks[24];
    float ps[24], mps[24];
    for (size_t r = 0; r < 24; r++) {
        ks[r] = r % 5 == 0 ? 0 : (int32_t)(1 + rnd() % 200); /* some rows off */
        ps[r] = r % 3 == 0 ? 1.0f : 0.5f + (float)(rnd() % 50) / 100.0f;
        mps[r] = r % 4 == 0 ? 0.0f : (float)(rnd() % 20) / 100.0f;
    }
    const filters per_row = {ks, ps, mps, 0, 1.0f, 0.0f};
    const filters top_k_only = {NULL, NULL, NULL, 20, 1.0f, 0.0f};
    const filters top_p_only = {NULL, NULL, NULL, 0, 0.9f, 0.0f};
    const filters min_p_only = {NULL, NULL, NULL, 0, 1.0f, 0.05f};
    const filters *all[] = {&per_row, &top_k_only, &top_p_only, &min_p_only};
    for (size_t i = 0; i < 4; i++)
        for (size_t shards = 1; shards <= 4; shards += 3)
            assert_int_equal(filtered_differences(&b, shards, 0, all[i], false), 0);
    /* ties at every threshold: logits rounded to whole numbers */
    for (size_t i = 0; i < b.rows * b.vocab; i++)
        ((float *)b.logits)[i] = rintf(((float *)b.logits)[i]);
    assert_int_equal(filtered_differences(&b, 3, PSR_FLAG_WIDE_NOISE, &per_row, false), 0);
    assert_int_equal(filtered_differences(&b, 5, 0, &top_k_only, false), 0);
    free_batch(&b);
    if (!test_long())
        return;
    batch big = make_batch(6, 70000, PSR_DTYPE_F16, true, false);
    for (size_t shards = 2; shards <= 8; shards *= 2)
        for (size_t i = 0; i < 4; i++)
            assert_int_equal(filtered_differences(&big, shards, PSR_SAMPLE_DRAFTING, all[i], false), 0);
    free_batch(&big);
}

/* The control: a reduction that leaves out one shard finds other
 * thresholds, and the tokens differ on many rows; so do the filtered
 * tokens from the unfiltered ones (the filters matter in these rows). */
static void test_control_filter_reduction(void **state)
{
    (void)state;
    batch b = make_batch(64, 3000, PSR_DTYPE_F32, false, false);
    const filters top_k = {NULL, NULL, NULL, 5, 1.0f, 0.0f};
    size_t differ = filtered_differences(&b, 2, 0, &top_k, true);
    int32_t plain[64], filtered[64];
    assert_int_equal(sample_host(ctx, b.logits, PSR_DTYPE_F32, 64, b.vocab, 0, b.seeds, b.positions, b.temps, 0,
                                 plain, NULL, NULL),
                     PSR_OK);
    int32_t ks[64];
    for (int r = 0; r < 64; r++)
        ks[r] = 5;
    assert_int_equal(sample_host_filtered(ctx, b.logits, PSR_DTYPE_F32, 64, b.vocab, 0, b.seeds, b.positions,
                                          b.temps, ks, NULL, NULL, 0, filtered, NULL, NULL),
                     PSR_OK);
    size_t changed = 0;
    for (int r = 0; r < 64; r++)
        changed += plain[r] != filtered[r];
    print_message("forgotten shard: %zu of 64 rows differ; top-5 changes %zu of 64 tokens\n", differ, changed);
    assert_true(differ >= 3); /* 5 with this seed: the last shard holds a part of the top 5 */
    assert_true(changed >= 8);
    free_batch(&b);
}

/* The control: shards that draw noise for their own (local) token ids, as
 * a sharding that ignores vocab_offset would, then report global ids.
 * The tokens must differ from the unsharded call's on most rows, or the
 * identity tests above could not fail. */
static void test_control_local_noise_ids(void **state)
{
    (void)state;
    batch b = make_batch(64, 2000, PSR_DTYPE_F32, false, false);
    size_t bounds[4] = {0, 500, 1100, 2000}, rows = b.rows;
    psr_shard_record records[3 * 64];
    int32_t want[64], got[64];
    assert_int_equal(sample_host(ctx, b.logits, PSR_DTYPE_F32, rows, b.vocab, 0, b.seeds, b.positions, b.temps, 0,
                                 want, NULL, NULL),
                     PSR_OK);
    for (size_t s = 0; s < 3; s++) {
        size_t width = bounds[s + 1] - bounds[s];
        psr_sample_host_args a;
        psr_sample_host_args_init(&a, sizeof a);
        a.logits = (float *)b.logits + bounds[s], a.rows = rows, a.vocab = width, a.row_stride = b.vocab;
        a.seeds = b.seeds, a.positions = b.positions, a.temperatures = b.temps;
        a.shard_count = 3, a.shard_index = s, a.vocab_total = width; /* noise ids from 0 */
        a.shard_records = records + s * rows;
        assert_int_equal(psr_sample_host(ctx, &a), PSR_OK);
        for (size_t r = 0; r < rows; r++)
            records[s * rows + r].token += (int32_t)bounds[s];
    }
    psr_combine_host_args c;
    psr_combine_host_args_init(&c, sizeof c);
    c.rows = rows, c.shards = 3, c.records = records, c.tokens = got;
    assert_int_equal(psr_combine_host(ctx, &c), PSR_OK);
    size_t differ = 0;
    for (size_t r = 0; r < rows; r++)
        differ += got[r] != want[r];
    print_message("local noise ids: %zu of %zu rows differ\n", differ, rows);
    assert_true(differ > rows / 2);
    free_batch(&b);
}

/* ---- bad input ---- */

static psr_sample_args shard_args(cl_mem logits, cl_mem seeds, cl_mem temps, cl_mem pos, cl_mem records)
{
    psr_sample_args a;
    psr_sample_args_init(&a, sizeof a);
    a.rows = 2, a.vocab = 8, a.logits = logits, a.seeds = seeds, a.temperatures = temps, a.positions = pos;
    a.shard_count = 2, a.shard_index = 1, a.vocab_offset = 8, a.vocab_total = 16, a.shard_records = records;
    return a;
}

static void test_bad_shard_arguments(void **state)
{
    (void)state;
    float x[16] = {0};
    int64_t seeds[2] = {1, 2}, pos[2] = {3, 4};
    float temps[2] = {1.0f, 1.0f};
    cl_mem dl = upload(ctx, x, sizeof x), ds = upload(ctx, seeds, 16), dt = upload(ctx, temps, 8);
    cl_mem dp = upload(ctx, pos, 16), dr = device_buffer(ctx, 2 * sizeof(psr_shard_record));
    cl_mem small = device_buffer(ctx, 16), tokens = device_buffer(ctx, 8);
    psr_sample_args a = shard_args(dl, ds, dt, dp, dr);
    assert_int_equal(psr_sample(ctx, &a, NULL), PSR_OK);
    a.vocab_offset = 9;
    expect_status(ctx, psr_sample(ctx, &a, NULL), PSR_ERR_SHARD_MISMATCH, "args->vocab_offset 9 + vocab 8");
    a = shard_args(dl, ds, dt, dp, dr), a.vocab_offset = 16;
    expect_status(ctx, psr_sample(ctx, &a, NULL), PSR_ERR_SHARD_MISMATCH, "past args->vocab_total 16");
    a = shard_args(dl, ds, dt, dp, dr), a.shard_index = 2;
    expect_status(ctx, psr_sample(ctx, &a, NULL), PSR_ERR_INVALID_ARGUMENT, "args->shard_index 2");
    a = shard_args(dl, ds, dt, dp, dr), a.shard_count = PSR_MAX_SHARDS + 1;
    expect_status(ctx, psr_sample(ctx, &a, NULL), PSR_ERR_INVALID_ARGUMENT, "args->shard_count 256");
    a = shard_args(dl, ds, dt, dp, dr), a.vocab_total = (size_t)INT32_MAX + 1;
    expect_status(ctx, psr_sample(ctx, &a, NULL), PSR_ERR_INVALID_ARGUMENT, "args->vocab_total");
    a = shard_args(dl, ds, dt, dp, NULL);
    expect_status(ctx, psr_sample(ctx, &a, NULL), PSR_ERR_NULL_ARGUMENT, "args->shard_records");
    a = shard_args(dl, ds, dt, dp, small);
    expect_status(ctx, psr_sample(ctx, &a, NULL), PSR_ERR_BUFFER_TOO_SMALL, "args->shard_records");
    a = shard_args(dl, ds, dt, dp, dr), a.shard_records_offset = 1; /* 3 records into room for 2 */
    expect_status(ctx, psr_sample(ctx, &a, NULL), PSR_ERR_BUFFER_TOO_SMALL, "args->shard_records");
    a = shard_args(dl, ds, dt, dp, dr), a.tokens = tokens;
    expect_status(ctx, psr_sample(ctx, &a, NULL), PSR_ERR_INVALID_ARGUMENT, "args->tokens is set with shards");
    a = shard_args(dl, ds, dt, dp, dr), a.all_top_k = 3;
    expect_status(ctx, psr_sample(ctx, &a, NULL), PSR_ERR_NULL_ARGUMENT, "args->shard_filter_state is NULL");
    a = shard_args(dl, ds, dt, dp, dr), a.shard_count = 0;
    expect_status(ctx, psr_sample(ctx, &a, NULL), PSR_ERR_INVALID_ARGUMENT, "with args->shard_count 0");
    release_buffers((cl_mem[]){dl, ds, dt, dp, dr, small, tokens}, 7);
}

/* Records in the wrong place or from another shard count: the host
 * combine fails and writes nothing; the device combine flags the row. */
static void test_records_that_do_not_fit(void **state)
{
    (void)state;
    batch b = make_batch(3, 10, PSR_DTYPE_F32, false, false);
    size_t bounds[3] = {0, 4, 10};
    psr_shard_record records[6], other[6];
    for (size_t s = 0; s < 2; s++)
        assert_int_equal(sample_shard(&b, bounds, 2, s, 0, records + 3 * s), PSR_OK);
    int32_t tokens[3] = {7, 7, 7}, dev_tokens[3];
    uint32_t flags[3], dev_flags[3];
    psr_combine_host_args c;
    psr_combine_host_args_init(&c, sizeof c);
    c.rows = 3, c.shards = 2, c.records = records, c.tokens = tokens, c.row_flags = flags;
    assert_int_equal(psr_combine_host(ctx, &c), PSR_OK);
    /* the shards swapped */
    memcpy(other, records + 3, 3 * sizeof *other), memcpy(other + 3, records, 3 * sizeof *other);
    tokens[0] = 7;
    c.records = other;
    expect_status(ctx, psr_combine_host(ctx, &c), PSR_ERR_SHARD_MISMATCH, "args->records[0] (shard 0, row 0)");
    assert_int_equal(tokens[0], 7); /* nothing written */
    assert_int_equal(combine_on_device(other, 3, 2, dev_tokens, dev_flags), PSR_OK);
    for (int r = 0; r < 3; r++) {
        assert_int_equal(dev_tokens[r], -1);
        assert_int_equal(dev_flags[r], PSR_ROW_BAD_SHARD);
    }
    /* records of two shards read as three */
    c.records = records, c.rows = 2, c.shards = 3;
    expect_status(ctx, psr_combine_host(ctx, &c), PSR_ERR_SHARD_MISMATCH, "not shard 0 of 3");
    c.shards = 0;
    expect_status(ctx, psr_combine_host(ctx, &c), PSR_ERR_INVALID_ARGUMENT, "args->shards 0");
    c.shards = 2, c.records = NULL;
    expect_status(ctx, psr_combine_host(ctx, &c), PSR_ERR_NULL_ARGUMENT, "args->records");
    psr_combine_args d;
    psr_combine_args_init(&d, sizeof d);
    d.rows = 3, d.shards = 2;
    expect_status(ctx, psr_combine(ctx, &d, NULL), PSR_ERR_NULL_ARGUMENT, "args->records");
    cl_mem dr = upload(ctx, records, 3 * sizeof *records), dt = device_buffer(ctx, 12);
    d.records = dr, d.tokens = dt;
    expect_status(ctx, psr_combine(ctx, &d, NULL), PSR_ERR_BUFFER_TOO_SMALL, "args->records");
    release_buffers((cl_mem[]){dr, dt}, 2);
    free_batch(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gumbel_identical),
        cmocka_unit_test(test_noises_and_stream),
        cmocka_unit_test(test_dtypes),
        cmocka_unit_test(test_race_over_probabilities),
        cmocka_unit_test(test_race_over_logits_up_to_rounding),
        cmocka_unit_test(test_control_local_noise_ids),
        cmocka_unit_test(test_filters_identical),
        cmocka_unit_test(test_control_filter_reduction),
        cmocka_unit_test(test_bad_shard_arguments),
        cmocka_unit_test(test_records_that_do_not_fit),
    };
    return run_device_tests(tests, .ctx = &ctx, .has_fp64 = &has_fp64, .seed = 0x5a4d);
}
