/* Logit filters (min-p, top-k, top-p) on a real device: the kept set and
 * the token equal the host oracle's on random rows with ties and +-inf,
 * each request's filters stay its own within a batch, the distribution
 * after filtering passes chi-square (with a control that must fail), and
 * bad values are refused. Each filtered variant compiles four kernels of
 * seconds each on PoCL: the default suite filters f32 logits with fp32
 * noise, the long suite adds bf16 with wide noise and the draft stream,
 * the race, and fp64 noise. */
#include "common.h"
#include "stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static psr_context *ctx;
static bool has_fp64;

/* Rows the sampler drew from their candidate lists (off the vector path)
 * since the last reset, over check_rows calls. */
static size_t rows_listed;

/* The filter pass's output for `rows` rows: each row's threshold, and
 * how many rows it drew itself or left to the sampler to draw from their
 * candidate lists (two floats per row, cl/filter.cl: the second > 0 for
 * the first, < 0 for the second, counted in rows_listed too). */
static size_t download_cuts(float *cut, size_t rows)
{
    float *both = malloc(rows * 2 * sizeof *both);
    download(ctx, filter_scratch(ctx, FILTER_CUT, NULL, NULL), both, rows * 2 * sizeof *both);
    size_t drawn = 0;
    for (size_t r = 0; r < rows; r++) {
        cut[r] = both[2 * r];
        drawn += both[2 * r + 1] != 0.0f;
        rows_listed += both[2 * r + 1] < 0.0f;
    }
    free(both);
    return drawn;
}

/* Rows the filter pass drew since the last reset, over check_rows calls. */
static size_t rows_drawn;

/* Logits with ties (values on a coarse grid), some +-inf and NaN. */
static void random_logits(float *x, size_t n, bool with_inf)
{
    uint32_t grid = 1 + rnd() % 3; /* 1: many ties */
    for (size_t i = 0; i < n; i++) {
        float v = 3.0f * normal();
        if (grid == 1)
            v = roundf(v * 4.0f) / 4.0f;
        uint32_t c = rnd() % 200;
        x[i] = with_inf && c == 0 ? -INFINITY : c == 1 ? NAN : v;
    }
    if (with_inf && rnd() % 8 == 0)
        x[rnd() % n] = INFINITY;
}

/* Random per-request filters: each off, on, or at an edge. */
static void random_filters(size_t n, size_t vocab, int32_t *k, float *p, float *mp)
{
    for (size_t r = 0; r < n; r++) {
        uint32_t c = rnd() % 6;
        k[r] = c == 0 ? 0 : c == 1 ? (int32_t)vocab : c == 2 ? 1 : (int32_t)(1 + rnd() % (vocab < 200 ? vocab : 200));
        c = rnd() % 5;
        p[r] = c == 0 ? 1.0f : c == 1 ? 1e-6f : (float)(0.05 + 0.9 * uniform());
        c = rnd() % 5;
        mp[r] = c == 0 ? 0.0f : c == 1 ? 1.0f : (float)(0.2 * uniform());
    }
}

static float bf16_round(float x)
{
    uint32_t b;
    memcpy(&b, &x, 4);
    b &= 0xffff0000u; /* truncation: the value the kernel reads back */
    memcpy(&x, &b, 4);
    return x;
}

/* Samples `rows` rows with random filters through psr_sample and checks
 * each row's threshold (same kept set) and token against the oracle. */
static void check_rows(size_t rows, size_t vocab, unsigned flags, psr_dtype dtype, bool use_k,
                       bool use_p, bool use_mp)
{
    psr_noise_kind noise = noise_of(flags);
    float *x = malloc(rows * vocab * sizeof *x), *masked = malloc(vocab * sizeof *x);
    uint16_t *half = malloc(rows * vocab * 2);
    int64_t *seeds = malloc(rows * 8), *pos = malloc(rows * 8);
    float *temps = malloc(rows * 4), *p = malloc(rows * 4), *mp = malloc(rows * 4);
    float *cut = malloc(rows * 4);
    int32_t *k = malloc(rows * 4), *tokens = malloc(rows * 4);
    uint32_t *rf = malloc(rows * 4);
    for (size_t r = 0; r < rows; r++) {
        random_logits(x + r * vocab, vocab, true);
        seeds[r] = (int64_t)rnd();
        pos[r] = rnd() % (1u << 30);
        temps[r] = r % 7 == 3 ? 0.0f : (float)(0.3 + 1.7 * uniform());
    }
    if (dtype == PSR_DTYPE_BF16)
        for (size_t i = 0; i < rows * vocab; i++) {
            x[i] = bf16_round(x[i]);
            uint32_t b;
            memcpy(&b, &x[i], 4);
            half[i] = (uint16_t)(b >> 16);
        }
    random_filters(rows, vocab, k, p, mp);

    psr_sample_args a;
    psr_sample_args_init(&a, sizeof a);
    a.rows = rows;
    a.vocab = vocab;
    a.logits = upload(ctx, dtype == PSR_DTYPE_BF16 ? (void *)half : (void *)x,
                      rows * vocab * psr_dtype_size(dtype));
    a.logits_dtype = dtype;
    a.requests = rows;
    a.seeds = upload(ctx, seeds, rows * 8);
    a.positions = upload(ctx, pos, rows * 8);
    a.temperatures = upload(ctx, temps, rows * 4);
    a.tokens = upload(ctx, tokens, rows * 4);
    a.row_flags = upload(ctx, rf, rows * 4);
    a.top_k = use_k ? upload(ctx, k, rows * 4) : NULL;
    a.top_p = use_p ? upload(ctx, p, rows * 4) : NULL;
    a.min_p = use_mp ? upload(ctx, mp, rows * 4) : NULL;
    set_sample_flags(&a, flags);
    psr_status st = psr_sample(ctx, &a, NULL);
    if (st != PSR_OK)
        fail_msg("%s: %s", psr_status_string(st), psr_last_error(ctx));
    download(ctx, a.tokens, tokens, rows * 4);
    download(ctx, a.row_flags, rf, rows * 4);
    rows_drawn += download_cuts(cut, rows);

    size_t filtered_rows = 0;
    for (size_t r = 0; r < rows; r++) {
        const float *row = x + r * vocab;
        float want = psr_oracle_filter_threshold(row, vocab, temps[r], use_k ? k[r] : 0,
                                                 use_p ? p[r] : 1.0f, use_mp ? mp[r] : 0.0f);
        size_t removed = 0;
        for (size_t i = 0; i < vocab; i++) {
            float s = temps[r] == 0.0f ? row[i] : psr_oracle_scaled(row[i], temps[r]);
            bool keep_dev = !(s < cut[r]), keep_oracle = !(s < want);
            if (keep_dev != keep_oracle)
                fail_msg("vocab %zu flags %u row %zu token %zu (s = %a): device keeps %d "
                         "(threshold %a), oracle %d (%a); k %d p %g min-p %g T %g",
                         vocab, flags, r, i, (double)s, keep_dev, (double)cut[r], keep_oracle,
                         (double)want, k[r], (double)p[r], (double)mp[r], (double)temps[r]);
            masked[i] = keep_oracle ? row[i] : -INFINITY;
            removed += !keep_oracle && !isnan(row[i]) && row[i] > -INFINITY;
        }
        filtered_rows += removed > 0;
        assert_int_equal(rf[r] & ~PSR_ROW_NO_FINITE, 0);
        if (flags & PSR_SAMPLE_RACE) {
            /* the race over logits: its oracle, with the launch's split and the oracle's threshold */
            cl_uint chunk, groups;
            psr_split_rows(ctx, rows, vocab, &chunk, &groups);
            int32_t token = psr_oracle_race_logits_row(x + r * vocab, vocab, chunk, temps[r], seeds[r], pos[r],
                                                      flags & PSR_SAMPLE_DRAFTING, noise,
                                                      want, NULL);
            if (tokens[r] != token)
                fail_msg("vocab %zu flags %u row %zu: race token %d, oracle %d", vocab, flags, r, tokens[r], token);
            continue;
        }
        int32_t oracle = psr_oracle_sample_row(masked, vocab, temps[r], seeds[r], pos[r],
                                               flags & PSR_SAMPLE_DRAFTING, noise, NULL);
        if (tokens[r] != oracle)
            fail_msg("vocab %zu flags %u row %zu: token %d, oracle %d", vocab, flags, r, tokens[r],
                     oracle);
    }
    assert_true(filtered_rows > 0); /* the filters did something */
    release_buffers((cl_mem[]){a.logits, a.seeds, a.positions, a.temperatures, a.tokens, a.row_flags,
                               a.top_k, a.top_p, a.min_p},
                    9);
    free(x), free(masked), free(half), free(seeds), free(pos), free(temps), free(p), free(mp);
    free(cut), free(k), free(tokens), free(rf);
}

/* The oracle's token (target stream, fp32 noise) from `row` with every
 * token whose scaled logit is below `cut` removed. */
static int32_t oracle_token_kept(const float *row, size_t vocab, float temp, float cut,
                                 int64_t seed, int64_t pos)
{
    float *masked = malloc(vocab * sizeof *masked);
    for (size_t i = 0; i < vocab; i++)
        masked[i] = psr_oracle_scaled(row[i], temp) < cut ? -INFINITY : row[i];
    int32_t token = psr_oracle_sample_row(masked, vocab, temp, seed, pos, false, PSR_ORACLE_FP32,
                                          NULL);
    free(masked);
    return token;
}

/* Each call below also counts the rows that the filter pass drew from
 * their candidate lists instead of the sampler: both paths must meet the
 * oracle, so each must have run. */
static void test_kept_set_equals_oracle(void **state)
{
    (void)state;
    rows_drawn = 0;
    check_rows(64, 7, 0, PSR_DTYPE_F32, true, true, true);
    check_rows(64, 1000, 0, PSR_DTYPE_F32, true, true, true);
    check_rows(64, 1000, 0, PSR_DTYPE_F32, true, false, false);
    assert_true(rows_drawn > 0 && rows_drawn < 3 * 64);
    check_rows(64, 1000, 0, PSR_DTYPE_F32, false, true, false);
    check_rows(64, 1000, 0, PSR_DTYPE_F32, false, false, true);
    const bool all = test_long(); /* the other filtered builds */
    if (all) {
        rows_drawn = 0;
        check_rows(32, 3001, PSR_FLAG_WIDE_NOISE | PSR_SAMPLE_DRAFTING, PSR_DTYPE_BF16, true, true,
                   true);
        assert_true(rows_drawn > 0); /* the salted stream, drawn from the list */
        rows_drawn = 0;
        check_rows(32, 3001, PSR_SAMPLE_RACE, PSR_DTYPE_F32, true, true, true);
        assert_int_equal(rows_drawn, 0); /* the race is not drawn from lists */
    }
    rows_drawn = 0;
    check_rows(4, 70001, 0, PSR_DTYPE_F32, true, true, true); /* rows split over work-groups */
    assert_true(rows_drawn > 0); /* lists gathered by several groups */
    /* One filter program serves every noise and stream (they are its
     * arguments): rows drawn from lists with each. */
    rows_drawn = 0;
    check_rows(32, 3001, PSR_FLAG_WIDE_NOISE | PSR_SAMPLE_DRAFTING, PSR_DTYPE_F32, true, true, true);
    assert_true(rows_drawn > 0);
    rows_drawn = 0;
    check_rows(32, 3001, PSR_SAMPLE_DRAFTING, PSR_DTYPE_F32, true, true, true);
    assert_true(rows_drawn > 0);
    if (has_fp64) {
        rows_drawn = 0;
        check_rows(16, 3001, PSR_FLAG_FP64_NOISE, PSR_DTYPE_F32, true, true, true);
        assert_true(rows_drawn > 0);
    }
    /* The same rows (same seed) with drawing from lists off: they meet
     * the oracle through the sampler alone, and none is drawn. */
    const psr_tuning suite = tuning_of(ctx);
    for (int off = 0; off < 2; off++) {
        psr_tuning t = suite;
        t.filter.direct_max = off ? 0 : suite.filter.direct_max;
        set_tuning(ctx, &t);
        rows_drawn = 0;
        test_seed(4242);
        check_rows(64, 1000, 0, PSR_DTYPE_F32, true, true, true);
        if (all)
            check_rows(32, 3001, PSR_FLAG_WIDE_NOISE | PSR_SAMPLE_DRAFTING, PSR_DTYPE_BF16, true,
                       true, true);
        if (off)
            assert_int_equal(rows_drawn, 0);
        else
            assert_true(rows_drawn > 0);
    }
    set_tuning(ctx, &suite);
}

/* Off the vector path (GPUs; on a CPU a second context, PSR_TUNE_VECTOR=0)
 * the sampler draws top-p rows from their candidate lists, which it finds
 * in the filters' scratch through its thresholds argument: rows listed,
 * and every token the oracle's. */
static void test_sampler_draws_lists(void **state)
{
    (void)state;
    psr_context *saved = ctx;
    if (tuning_of(ctx).sample.vector_width)
        ctx = open_scalar_context();
    assert_int_equal(tuning_of(ctx).sample.vector_width, 0);
    rows_listed = 0;
    check_rows(64, 1000, 0, PSR_DTYPE_F32, false, true, false);
    assert_true(rows_listed > 0);
    if (ctx != saved)
        psr_context_free(ctx);
    ctx = saved;
}

/* The oracle against the definitions, on a small row worked by hand. */
static void test_oracle_definitions(void **state)
{
    (void)state;
    /* probabilities at T = 1 are proportional to e^x */
    const float x[6] = {1.0f, 3.0f, 3.0f, 2.0f, -INFINITY, NAN};
    assert_true(psr_oracle_filter_threshold(x, 6, 1.0f, 0, 1.0f, 0.0f) == -INFINITY);
    assert_true(psr_oracle_filter_threshold(x, 6, 1.0f, 6, 1.0f, 0.0f) == -INFINITY);
    assert_true(psr_oracle_filter_threshold(x, 6, 1.0f, 1, 1.0f, 0.0f) == 3.0f); /* ties kept */
    assert_true(psr_oracle_filter_threshold(x, 6, 1.0f, 3, 1.0f, 0.0f) == 2.0f);
    /* min-p 0.3: keep x >= 3 + log 0.3 = 1.796 */
    assert_true(psr_oracle_filter_threshold(x, 6, 1.0f, 0, 1.0f, 0.3f) == 3.0f + psr_oracle_log(0.3f));
    /* top-p: the two 3s hold 2e^3 / (2e^3 + e^2 + e) = 0.79 */
    assert_true(psr_oracle_filter_threshold(x, 6, 1.0f, 0, 0.5f, 0.0f) == 3.0f);
    assert_true(psr_oracle_filter_threshold(x, 6, 1.0f, 0, 0.79f, 0.0f) == 3.0f);
    assert_true(psr_oracle_filter_threshold(x, 6, 1.0f, 0, 0.8f, 0.0f) == 2.0f);
    /* after top-k 3 the 3s hold 2e^3 / (2e^3 + e^2) = 0.845 */
    assert_true(psr_oracle_filter_threshold(x, 6, 1.0f, 3, 0.84f, 0.0f) == 3.0f);
    assert_true(psr_oracle_filter_threshold(x, 6, 1.0f, 3, 0.85f, 0.0f) == 2.0f);
    assert_true(isnan(psr_oracle_filter_threshold(x, 6, 1.0f, 0, 0.0f, 0.0f)));
    assert_true(isnan(psr_oracle_filter_threshold(x, 6, 1.0f, 0, 1.0f, NAN)));
    assert_true(psr_oracle_filter_threshold(x, 6, 0.0f, 1, 0.5f, 0.5f) == -INFINITY); /* greedy */
}

/* Every request keeps its own filters: the same row under different
 * filters in one batch gives each the threshold it gets alone. */
static void test_requests_independent(void **state)
{
    (void)state;
    enum { R = 8, V = 500 };
    float *x = malloc(R * V * sizeof *x), base[V];
    random_logits(base, V, false);
    for (size_t r = 0; r < R; r++)
        memcpy(x + r * V, base, sizeof base);
    int32_t k[R] = {0, 5, 0, 0, 50, 1, 0, 20};
    float p[R] = {1.0f, 1.0f, 0.5f, 1.0f, 0.9f, 1.0f, 0.99f, 0.3f};
    float mp[R] = {0.0f, 0.0f, 0.0f, 0.1f, 0.0f, 0.5f, 0.01f, 0.05f};
    int64_t seeds[R], pos[R];
    float temps[R];
    int32_t tokens[R];
    for (size_t r = 0; r < R; r++)
        seeds[r] = 42, pos[r] = 7, temps[r] = 1.0f;
    assert_int_equal(sample_host_filtered(ctx, x, PSR_DTYPE_F32, R, V, 0, seeds, pos, temps, k,
                                              p, mp, 0, tokens, NULL, NULL),
                     PSR_OK);
    float cut[R];
    download_cuts(cut, R);
    for (size_t r = 0; r < R; r++) {
        float want = psr_oracle_filter_threshold(base, V, 1.0f, k[r], p[r], mp[r]);
        assert_true(cut[r] == want || (cut[r] == 0.0f && want == 0.0f));
        int32_t alone;
        assert_int_equal(sample_host_filtered(ctx, base, PSR_DTYPE_F32, 1, V, 0, seeds, pos,
                                                  temps, &k[r], &p[r], &mp[r], 0, &alone, NULL,
                                                  NULL),
                         PSR_OK);
        assert_int_equal(tokens[r], alone);
    }
    free(x);
}

/* Each way the device search can go, against the oracle, twice in a
 * row (the state the kernels leave must not leak into the next launch):
 * the candidate list for top-k and for top-p alone (short lists are
 * counted, long ones radix-searched), and rows whose top holds more
 * candidates than the list (16,384) takes, which search the whole row
 * instead. Top-p alone counts only the keys of the histogram bin (by
 * distance below the row's max) that holds its threshold, and radix-
 * searches the list when that bin holds more than 512. Rows whose list
 * holds every kept token are drawn from it,
 * the others by the sampler; the tokens must be the oracle's either way,
 * ties (several +inf) included. */
static void test_search_paths(void **state)
{
    (void)state;
    enum { R = 14, V = 20000 };
    float *x = malloc(R * V * sizeof *x);
    for (size_t i = 0; i < V; i++) {
        float n = 3.0f * normal();
        x[0 * V + i] = n;                           /* candidates, top-k then top-p */
        x[1 * V + i] = n;                           /* candidates, top-p alone */
        x[2 * V + i] = 0.5f;                        /* all tied: top-k overflows */
        x[3 * V + i] = 0.5f;                        /* all tied: top-p overflows */
        x[4 * V + i] = i < 17000 ? 2.0f : n - 10.0f; /* 17,000 tied at the top */
        x[5 * V + i] = n;                           /* min-p alone */
        x[6 * V + i] = 0.01f * normal();            /* a flat top: many candidates */
        x[7 * V + i] = i % 100 == 0 ? NAN : n;      /* fewer finite tokens than k (min-p keeps its list short) */
        x[8 * V + i] = i % 4999 == 17 ? INFINITY : n; /* four +inf tied: the lowest wins */
        x[9 * V + i] = i < 3000 ? 2.0f : n - 40.0f;  /* top-p alone: 3,000 tied in the top bin */
        x[10 * V + i] = i % 4999 == 17 ? INFINITY : n; /* top-p alone over four +inf */
        /* top-p alone: 30 above 600 tied, where p crosses */
        x[11 * V + i] = i < 30 ? 6.0f + 0.01f * (float)i : i < 630 ? 5.0f : n - 10.0f;
        x[12 * V + i] = n;                           /* min-p and top-p */
        x[13 * V + i] = i % 6 == 1 ? INFINITY : n;  /* top-p over 3,334 +inf: the lowest wins */
    }
    int32_t k[R] = {100, 0, 100, 0, 10, 0, 5000, V - 10, 50, 0, 0, 0, 0, 0};
    float p[R] = {0.95f, 0.9f, 1.0f, 0.5f, 0.9f, 1.0f, 0.7f, 0.99f, 1.0f, 0.6f, 0.9f, 0.5f, 0.8f, 0.9f};
    float mp[R] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.1f, 0.0f, 0.001f, 0.0f, 0.0f, 0.0f, 0.0f, 0.05f, 0.0f};
    /* 1: drawn from its list, 0: by the sampler (lists that overflow, and
     * min-p alone, which has no list) */
    const bool drawn_want[R] = {1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
    int64_t seeds[R], pos[R];
    float temps[R];
    int32_t tokens[R];
    for (size_t r = 0; r < R; r++)
        seeds[r] = 7 + (int64_t)r, pos[r] = 11, temps[r] = 0.8f;
    for (int round = 0; round < 2; round++) {
        assert_int_equal(sample_host_filtered(ctx, x, PSR_DTYPE_F32, R, V, 0, seeds, pos, temps,
                                                  k, p, mp, 0, tokens, NULL, NULL),
                         PSR_OK);
        float cut[R], both[2 * R];
        download_cuts(cut, R);
        download(ctx, filter_scratch(ctx, FILTER_CUT, NULL, NULL), both, sizeof both);
        for (size_t r = 0; r < R; r++) {
            if ((both[2 * r + 1] != 0.0f) != drawn_want[r])
                fail_msg("round %d row %zu: drawn %g, expected %d", round, r,
                         (double)both[2 * r + 1], drawn_want[r]);
            float want = psr_oracle_filter_threshold(x + r * V, V, temps[r], k[r], p[r], mp[r]);
            if (!(cut[r] == want))
                fail_msg("round %d row %zu: threshold %a, oracle %a", round, r, (double)cut[r],
                         (double)want);
            /* the token too: some of these rows are drawn from their lists */
            int32_t oracle = oracle_token_kept(x + r * V, V, temps[r], want, seeds[r], pos[r]);
            if (tokens[r] != oracle)
                fail_msg("round %d row %zu: token %d, oracle %d", round, r, tokens[r], oracle);
        }
        assert_int_equal(tokens[8], 17); /* the first of the tied +inf */
        assert_int_equal(tokens[10], 17);
        assert_int_equal(tokens[13], 1);
    }
    free(x);
}

/* Top-k rows in orders that stress a pass that keeps candidates as it
 * goes (CPU devices stream top-k rows up to PSR_FILTER_STREAM_K, raising
 * a bar to the k-th largest key seen so far): the row's top at its start
 * (the bar lands on the answer early), at its end, ties that fill the
 * candidates' room, ties across the k-th key, ties of the bar's value met
 * after it has risen, and k on both sides of the streaming limit.
 * Thresholds and tokens must be the oracle's. */
static void test_topk_orders(void **state)
{
    (void)state;
    enum { R = 15, V = 20000 };
    float *x = malloc(R * V * sizeof *x);
    for (size_t i = 0; i < V; i++) {
        float n = normal();
        x[0 * V + i] = 10.0f - 0.001f * (float)i;           /* descending */
        x[1 * V + i] = 0.001f * (float)i;                   /* ascending */
        x[2 * V + i] = i < 3000 ? 5.0f : n;                 /* 3,000 tied at the top */
        x[3 * V + i] = i < 39 ? 6.0f + 0.01f * (float)i : i < 639 ? 5.0f : n; /* 600 tied at the 40th */
        x[4 * V + i] = 10.0f - 0.001f * (float)i;           /* descending, k at the limit */
        x[5 * V + i] = 10.0f - 0.001f * (float)i;           /* descending, k past it */
        x[6 * V + i] = i % 1000 == 999 ? 3.0f + 0.001f * (float)i : n; /* the top spread thin */
        /* rows 7-14, eight seeds: 800 tied at the 40th spread over the row, the
         * bar's own value met again after it has risen (the winner is mostly one
         * of the late ties) */
        for (size_t r = 7; r < R; r++)
            x[r * V + i] = i < 39 ? 6.0f + 0.01f * (float)i : i % 25 == 3 ? 5.0f : n;
    }
    const int32_t k[R] = {40, 40, 40, 40, PSR_FILTER_STREAM_K, PSR_FILTER_STREAM_K + 1, 20,
                          40, 40, 40, 40, 40, 40, 40, 40};
    const float p[R] = {0.9f, 1.0f, 0.95f, 1.0f, 0.99f, 1.0f, 0.8f,
                        1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
    const float mp[R] = {0.0f, 0.0f, 0.0f, 0.01f}; /* the rest 0 */
    int64_t seeds[R], pos[R];
    float temps[R], cut[R];
    int32_t tokens[R];
    for (size_t r = 0; r < R; r++)
        seeds[r] = 3 + (int64_t)r, pos[r] = 5, temps[r] = 0.7f;
    assert_int_equal(sample_host_filtered(ctx, x, PSR_DTYPE_F32, R, V, 0, seeds, pos, temps, k, p, mp, 0,
                                          tokens, NULL, NULL),
                     PSR_OK);
    download_cuts(cut, R);
    for (size_t r = 0; r < R; r++) {
        float want = psr_oracle_filter_threshold(x + r * V, V, temps[r], k[r], p[r], mp[r]);
        if (!(cut[r] == want))
            fail_msg("row %zu: threshold %a, oracle %a", r, (double)cut[r], (double)want);
        int32_t oracle = oracle_token_kept(x + r * V, V, temps[r], want, seeds[r], pos[r]);
        if (tokens[r] != oracle)
            fail_msg("row %zu: token %d, oracle %d", r, tokens[r], oracle);
    }
    free(x);
}

/* Rows with no value above -inf (all -inf, all NaN) have no candidates:
 * the filter pass ends them without counting its groups. Each filter on
 * such rows, split over work-groups: the oracle's threshold, a token in
 * range flagged PSR_ROW_NO_FINITE; then the same rows with values, whose
 * thresholds and tokens meet the oracle only if nothing was left behind. */
static void test_rows_without_values(void **state)
{
    (void)state;
    enum { R = 8, V = 70001 };
    float *x = malloc(R * V * sizeof *x);
    int32_t k[R] = {10, 0, 10, 0, 10, 0, 10, 0};
    float p[R] = {1.0f, 0.5f, 0.9f, 1.0f, 1.0f, 0.5f, 0.9f, 1.0f};
    float mp[R] = {0.0f, 0.0f, 0.0f, 0.1f, 0.0f, 0.0f, 0.0f, 0.1f};
    int64_t seeds[R], pos[R];
    float temps[R];
    int32_t tokens[R];
    uint32_t rf[R];
    for (size_t r = 0; r < R; r++)
        seeds[r] = 31 + (int64_t)r, pos[r] = 5, temps[r] = 0.9f;
    for (int with_values = 0; with_values < 2; with_values++) {
        for (size_t r = 0; r < R; r++)
            for (size_t i = 0; i < V; i++)
                x[r * V + i] = with_values ? 3.0f * normal() : r < 4 ? -INFINITY : NAN;
        assert_int_equal(sample_host_filtered(ctx, x, PSR_DTYPE_F32, R, V, 0, seeds, pos, temps,
                                                  k, p, mp, 0, tokens, rf, NULL),
                         PSR_OK);
        float cut[R];
        download_cuts(cut, R);
        for (size_t r = 0; r < R; r++) {
            float want = psr_oracle_filter_threshold(x + r * V, V, temps[r], k[r], p[r], mp[r]);
            if (!(cut[r] == want))
                fail_msg("values %d row %zu: threshold %a, oracle %a", with_values, r,
                         (double)cut[r], (double)want);
            assert_true(tokens[r] >= 0 && tokens[r] < V);
            if (!with_values) {
                assert_int_equal(rf[r], PSR_ROW_NO_FINITE);
                continue;
            }
            assert_int_equal(rf[r], 0);
            int32_t oracle = oracle_token_kept(x + r * V, V, temps[r], want, seeds[r], pos[r]);
            if (tokens[r] != oracle)
                fail_msg("row %zu: token %d, oracle %d", r, tokens[r], oracle);
        }
    }
    free(x);
}

/* A launch cut short by a failed enqueue leaves the filters' state
 * dirty; the next launch must clear it first. Garbage in the state and
 * histograms with the dirty mark set gives the oracle's thresholds; the
 * same garbage without the mark (the control) does not. */
static void test_dirty_state_cleared(void **state)
{
    (void)state;
    enum { R = 4, V = 3000 };
    float *x = malloc(R * V * sizeof *x);
    for (size_t i = 0; i < R * V; i++)
        x[i] = 3.0f * normal();
    int32_t k[R] = {50, 0, 20, 0};
    float p[R] = {0.9f, 0.8f, 1.0f, 1.0f};
    float mp[R] = {0.0f, 0.0f, 0.05f, 0.1f};
    int64_t seeds[R] = {1, 2, 3, 4}, pos[R] = {5, 6, 7, 8};
    float temps[R] = {0.8f, 1.0f, 1.2f, 0.7f};
    int32_t tokens[R];
    for (int control = 0; control < 2; control++) {
        assert_int_equal(sample_host_filtered(ctx, x, PSR_DTYPE_F32, R, V, 0, seeds, pos, temps,
                                                  k, p, mp, 0, tokens, NULL, NULL),
                         PSR_OK);
        cl_uint junk = 0x7f7f7f7fu;
        const filter_scratch_kind dirty[] = {FILTER_STATE, FILTER_HIST};
        for (int b = 0; b < 2; b++) {
            size_t offset, bytes;
            cl_mem m = filter_scratch(ctx, dirty[b], &offset, &bytes);
            assert_int_equal(clEnqueueFillBuffer(queue_of(ctx), m, &junk, sizeof junk, offset, bytes, 0, NULL,
                                                 NULL),
                             CL_SUCCESS);
        }
        float sentinel = 12345.0f; /* so that a threshold left unwritten shows */
        size_t cut_at, cut_bytes;
        cl_mem cut_buffer = filter_scratch(ctx, FILTER_CUT, &cut_at, &cut_bytes);
        assert_int_equal(clEnqueueFillBuffer(queue_of(ctx), cut_buffer, &sentinel, sizeof sentinel, cut_at,
                                             cut_bytes, 0, NULL, NULL),
                         CL_SUCCESS);
        set_filter_dirty(ctx, !control);
        assert_int_equal(sample_host_filtered(ctx, x, PSR_DTYPE_F32, R, V, 0, seeds, pos, temps,
                                                  k, p, mp, 0, tokens, NULL, NULL),
                         PSR_OK);
        float cut[R];
        download_cuts(cut, R);
        size_t wrong = 0;
        for (size_t r = 0; r < R; r++)
            wrong += !(cut[r] == psr_oracle_filter_threshold(x + r * V, V, temps[r], k[r], p[r], mp[r]));
        if (control)
            assert_true(wrong > 0);
        else
            assert_int_equal(wrong, 0);
        set_filter_dirty(ctx, true); /* leave clean state for the next test */
        assert_int_equal(sample_host_filtered(ctx, x, PSR_DTYPE_F32, R, V, 0, seeds, pos, temps,
                                                  k, p, mp, 0, tokens, NULL, NULL),
                         PSR_OK);
    }
    free(x);
}

/* Samples one filtered row `trials` times and judges the counts. */
static void filtered_fit(const float *logits, size_t vocab, float temp, int32_t k, float p,
                         float mp, uint64_t trials, int64_t seed, chi2_result *fit,
                         chi2_result *control)
{
    enum { B = SAMPLE_CHUNK }; /* launches PoCL needs no other build for (common.h) */
    float *batch = malloc((size_t)B * vocab * sizeof *batch);
    int64_t *seeds = malloc(B * 8), *pos = malloc(B * 8);
    float *temps = malloc(B * 4), *ps = malloc(B * 4), *mps = malloc(B * 4);
    int32_t *ks = malloc(B * 4), *tokens = malloc(B * 4);
    uint64_t *counts = calloc(vocab, sizeof *counts);
    for (size_t r = 0; r < B; r++) {
        memcpy(batch + r * vocab, logits, vocab * sizeof *logits);
        seeds[r] = seed, temps[r] = temp, ks[r] = k, ps[r] = p, mps[r] = mp;
    }
    for (uint64_t done = 0; done < trials;) {
        size_t n = trials - done < B ? (size_t)(trials - done) : B;
        for (size_t r = 0; r < n; r++)
            pos[r] = (int64_t)(done + r);
        psr_status st = sample_host_filtered(ctx, batch, PSR_DTYPE_F32, n, vocab, 0, seeds, pos,
                                                 temps, ks, ps, mps, 0, tokens, NULL, NULL);
        if (st != PSR_OK)
            fail_msg("%s: %s", psr_status_string(st), psr_last_error(ctx));
        for (size_t r = 0; r < n; r++)
            counts[tokens[r]]++;
        done += n;
    }
    float cut = psr_oracle_filter_threshold(logits, vocab, temp, k, p, mp);
    float *masked = malloc(vocab * sizeof *masked);
    double *target = malloc(vocab * sizeof *target);
    for (size_t i = 0; i < vocab; i++)
        masked[i] = psr_oracle_scaled(logits[i], temp) >= cut ? logits[i] : -INFINITY;
    psr_softmax(masked, vocab, temp, target); /* renormalised over the kept set */
    *fit = psr_chi2_test(counts, target, vocab, trials);
    /* Control: the unfiltered distribution must be rejected. */
    psr_softmax(logits, vocab, temp, target);
    *control = psr_chi2_test(counts, target, vocab, trials);
    free(batch), free(seeds), free(pos), free(temps), free(ps), free(mps), free(ks);
    free(tokens), free(counts), free(masked), free(target);
}

static void test_distribution(void **state)
{
    (void)state;
    const size_t vocab = 1000;
    float *logits = malloc(vocab * sizeof *logits);
    for (size_t i = 0; i < vocab; i++)
        logits[i] = 1.5f * normal();
    const struct { int32_t k; float p, mp; } cases[] = {
        {50, 1.0f, 0.0f}, {0, 0.9f, 0.0f}, {0, 1.0f, 0.05f}, {100, 0.8f, 0.02f}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        chi2_result fit, control;
        filtered_fit(logits, vocab, 1.0f, cases[c].k, cases[c].p, cases[c].mp, 20000,
                     (int64_t)(100 + c), &fit, &control);
        print_message("top-k %d top-p %.2f min-p %.2f: chi2 %.1f, df %zu, threshold %.1f; "
                      "control (unfiltered) chi2 %.1f\n",
                      cases[c].k, (double)cases[c].p, (double)cases[c].mp, fit.chi2, fit.df,
                      fit.threshold, control.chi2);
        assert_true(fit.chi2 < fit.threshold);
        assert_true(control.chi2 >= control.threshold);
    }
    free(logits);
}

static void test_bad_values(void **state)
{
    (void)state;
    enum { R = 3, V = 64 };
    float x[R * V];
    random_logits(x, R * V, false);
    int64_t seeds[R] = {1, 2, 3}, pos[R] = {0, 1, 2};
    float temps[R] = {1.0f, 1.0f, 1.0f};
    int32_t tokens[R] = {-7, -7, -7};
    const float bad_p[] = {0.0f, -0.5f, 1.5f, NAN, INFINITY};
    const float bad_mp[] = {-0.1f, 1.1f, NAN, -INFINITY};
    for (size_t b = 0; b < sizeof bad_p / sizeof bad_p[0]; b++) {
        float p[R] = {0.5f, bad_p[b], 0.9f};
        assert_int_equal(sample_host_filtered(ctx, x, PSR_DTYPE_F32, R, V, 0, seeds, pos, temps,
                                                  NULL, p, NULL, 0, tokens, NULL, NULL),
                         PSR_ERR_FILTER_RANGE);
        assert_non_null(strstr(psr_last_error(ctx), "top_p[1]"));
    }
    for (size_t b = 0; b < sizeof bad_mp / sizeof bad_mp[0]; b++) {
        float mp[R] = {0.0f, 0.5f, bad_mp[b]};
        assert_int_equal(sample_host_filtered(ctx, x, PSR_DTYPE_F32, R, V, 0, seeds, pos, temps,
                                                  NULL, NULL, mp, 0, tokens, NULL, NULL),
                         PSR_ERR_FILTER_RANGE);
        assert_non_null(strstr(psr_last_error(ctx), "min_p[2]"));
    }
    for (size_t r = 0; r < R; r++)
        assert_int_equal(tokens[r], -7);
    /* Probabilities cannot be filtered. */
    float p1[R] = {0.5f, 0.5f, 0.5f};
    assert_int_equal(sample_host_filtered(ctx, x, PSR_DTYPE_F32, R, V, 0, seeds, pos, temps,
                                              NULL, p1, NULL,
                                              PSR_SAMPLE_RACE | PSR_SAMPLE_PROBS, tokens, NULL,
                                              NULL),
                     PSR_ERR_INVALID_ARGUMENT);

    /* On the device: bad values flag their row only (greedy rows too). */
    float p[R] = {0.5f, NAN, 0.9f}, mp[R] = {2.0f, 0.0f, 0.1f};
    float t2[R] = {0.0f, 1.0f, 1.0f};
    int32_t k[R] = {3, 3, 3};
    uint32_t rf[R];
    psr_sample_args a;
    psr_sample_args_init(&a, sizeof a);
    a.rows = R;
    a.vocab = V;
    a.logits = upload(ctx, x, sizeof x);
    a.requests = R;
    a.seeds = upload(ctx, seeds, sizeof seeds);
    a.positions = upload(ctx, pos, sizeof pos);
    a.temperatures = upload(ctx, t2, sizeof t2);
    a.tokens = upload(ctx, tokens, sizeof tokens);
    a.row_flags = upload(ctx, tokens, sizeof tokens);
    a.top_k = upload(ctx, k, sizeof k);
    a.top_p = upload(ctx, p, sizeof p);
    a.min_p = upload(ctx, mp, sizeof mp);
    assert_int_equal(psr_sample(ctx, &a, NULL), PSR_OK);
    download(ctx, a.tokens, tokens, sizeof tokens);
    download(ctx, a.row_flags, rf, sizeof rf);
    assert_int_equal(tokens[0], -1);
    assert_int_equal(rf[0], PSR_ROW_BAD_FILTER);
    assert_int_equal(tokens[1], -1);
    assert_int_equal(rf[1], PSR_ROW_BAD_FILTER);
    assert_true(tokens[2] >= 0 && tokens[2] < V);
    assert_int_equal(rf[2], 0);

    /* Host checks: a short filter buffer, and PROBS. */
    cl_mem small = upload(ctx, k, 4);
    cl_mem keep = a.top_k;
    a.top_k = small;
    assert_int_equal(psr_sample(ctx, &a, NULL), PSR_ERR_BUFFER_TOO_SMALL);
    assert_non_null(strstr(psr_last_error(ctx), "args->top_k"));
    a.top_k = keep;
    a.flags = PSR_SAMPLE_RACE | PSR_SAMPLE_PROBS;
    assert_int_equal(psr_sample(ctx, &a, NULL), PSR_ERR_INVALID_ARGUMENT);
    clReleaseMemObject(small);
    release_buffers((cl_mem[]){a.logits, a.seeds, a.positions, a.temperatures, a.tokens, a.row_flags,
                               a.top_k, a.top_p, a.min_p},
                    9);
    assert_string_equal(psr_status_string(PSR_ERR_FILTER_RANGE),
                        "PSR_ERR_FILTER_RANGE: a top-p is outside (0, 1] or a min-p outside [0, 1]");
}

/* Filters that are off change nothing; greedy rows ignore filters. */
static void test_off_and_greedy(void **state)
{
    (void)state;
    enum { R = 16, V = 777 };
    float *x = malloc(R * V * sizeof *x);
    random_logits(x, R * V, true);
    int64_t seeds[R], pos[R];
    float temps[R], p[R], mp[R];
    int32_t k[R], plain[R], off[R], greedy[R], greedy_f[R];
    for (size_t r = 0; r < R; r++) {
        seeds[r] = (int64_t)rnd(), pos[r] = r, temps[r] = 1.0f;
        k[r] = r % 2 ? 0 : V + (int32_t)r;
        p[r] = 1.0f;
        mp[r] = r % 3 ? 0.0f : 1e-40f; /* subnormal: off */
    }
    assert_int_equal(sample_host(ctx, x, PSR_DTYPE_F32, R, V, 0, seeds, pos, temps, 0, plain,
                                     NULL, NULL),
                     PSR_OK);
    assert_int_equal(sample_host_filtered(ctx, x, PSR_DTYPE_F32, R, V, 0, seeds, pos, temps, k,
                                              p, mp, 0, off, NULL, NULL),
                     PSR_OK);
    assert_memory_equal(plain, off, sizeof plain);
    for (size_t r = 0; r < R; r++)
        temps[r] = 0.0f, k[r] = 1, p[r] = 0.1f, mp[r] = 0.9f;
    assert_int_equal(sample_host(ctx, x, PSR_DTYPE_F32, R, V, 0, seeds, pos, temps, 0, greedy,
                                     NULL, NULL),
                     PSR_OK);
    assert_int_equal(sample_host_filtered(ctx, x, PSR_DTYPE_F32, R, V, 0, seeds, pos, temps, k,
                                              p, mp, 0, greedy_f, NULL, NULL),
                     PSR_OK);
    assert_memory_equal(greedy, greedy_f, sizeof greedy);
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oracle_definitions),
        cmocka_unit_test(test_kept_set_equals_oracle),
        cmocka_unit_test(test_sampler_draws_lists),
        cmocka_unit_test(test_requests_independent),
        cmocka_unit_test(test_search_paths),
        cmocka_unit_test(test_topk_orders),
        cmocka_unit_test(test_rows_without_values),
        cmocka_unit_test(test_dirty_state_cleared),
        cmocka_unit_test(test_off_and_greedy),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_distribution),
    };
    return run_device_tests(tests, .ctx = &ctx, .has_fp64 = &has_fp64, .seed = 9091);
}
