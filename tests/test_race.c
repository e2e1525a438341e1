/* The exponential race on a real device: tokens equal the host oracle's
 * on every row, over probabilities (fp32, wide and fp64 noise) and over
 * logits (rows split over groups too), whose token is also the Gumbel
 * token up to rounding; the distribution; bad input. The
 * default suite races over probabilities with fp32 noise only; the long
 * suite adds the other noises, the draft stream and the scalar loop. */
#include "common.h"
#include "stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static psr_context *ctx;
static bool has_fp64;

static void fill_rows(size_t rows, int64_t *seeds, int64_t *pos, float *temps, float temp)
{
    for (size_t r = 0; r < rows; r++) {
        seeds[r] = random_seed();
        pos[r] = rnd() % (1u << 30);
        temps[r] = temp;
    }
}

/* Probabilities e^(2 N(0, 1)), some zero, negative or NaN; where `peak`
 * is not 0 each row also gets it at one random place, and a quarter of it
 * at another (which wins on some rows). */
static void check_peaked_probs(size_t rows, size_t vocab, unsigned flags, float temp, float peak)
{
    psr_noise_kind noise = noise_of(flags);
    float *p = malloc(rows * vocab * sizeof *p);
    int64_t *seeds = malloc(rows * 8), *pos = malloc(rows * 8);
    float *temps = malloc(rows * 4);
    int32_t *tokens = malloc(rows * 4);
    for (size_t i = 0; i < rows * vocab; i++) {
        float x = expf(2.0f * normal());
        uint32_t k = rnd() % 50;
        p[i] = k == 0 ? 0.0f : k == 1 ? -x : k == 2 ? NAN : x; /* some zero, negative, NaN */
    }
    for (size_t r = 0; peak != 0.0f && r < rows; r++) {
        p[r * vocab + rnd() % vocab] = peak;
        p[r * vocab + rnd() % vocab] = peak / 4;
    }
    fill_rows(rows, seeds, pos, temps, temp);
    psr_status st = sample_host(ctx, p, PSR_DTYPE_F32, rows, vocab, 0, seeds, pos, temps,
                                    flags | PSR_SAMPLE_RACE | PSR_SAMPLE_PROBS, tokens, NULL, NULL);
    if (st != PSR_OK)
        fail_msg("%s: %s", psr_status_string(st), psr_last_error(ctx));
    for (size_t r = 0; r < rows; r++) {
        int32_t want = psr_oracle_race_row(p + r * vocab, vocab, temp, seeds[r], pos[r],
                                           flags & PSR_SAMPLE_DRAFTING, noise, NULL);
        if (tokens[r] != want)
            fail_msg("race over probabilities, vocab %zu flags %u row %zu: token %d, oracle %d", vocab,
                     flags, r, tokens[r], want);
    }
    free(p), free(seeds), free(pos), free(temps), free(tokens);
}

static void check_probs_against_oracle(size_t rows, size_t vocab, unsigned flags, float temp)
{
    check_peaked_probs(rows, vocab, flags, temp, 0.0f);
}

/* The race over logits with noise `noise_flags` into race[], each row's
 * token the oracle's at the context's split. */
static void check_race_logits(const float *logits, size_t rows, size_t vocab, const int64_t *seeds,
                              const int64_t *pos, const float *temps, unsigned noise_flags, int32_t *race)
{
    cl_uint chunk, groups;
    psr_split_rows(ctx, rows, vocab, &chunk, &groups);
    assert_int_equal(sample_host(ctx, logits, PSR_DTYPE_F32, rows, vocab, 0, seeds, pos, temps,
                                 PSR_SAMPLE_RACE | noise_flags, race, NULL, NULL),
                     PSR_OK);
    for (size_t r = 0; r < rows; r++) {
        int32_t want = psr_oracle_race_logits_row(logits + r * vocab, vocab, chunk, temps[r], seeds[r], pos[r],
                                                  false, noise_of(noise_flags), -INFINITY, NULL);
        if (race[r] != want)
            fail_msg("race over logits, vocab %zu, noise flags %u, row %zu: token %d, oracle %d", vocab,
                     noise_flags, r, race[r], want);
    }
}

/* Peaked rows under splits of one group per row, two, four and eight or
 * more: the CPU's vector path seeds floors from the largest probability
 * (over the whole row, or shared between a row's groups), and over logits
 * from each group's largest logit (gumbel.cl's psr_seed_floor). */
static void test_peaked_rows(void **state)
{
    (void)state;
    const psr_tuning suite = tuning_of(ctx);
    const size_t rows = 3, vocab = 65536;
    float *logits = malloc(rows * vocab * sizeof *logits);
    int64_t seeds[3], pos[3];
    float temps[3];
    int32_t race[3];
    for (size_t k = 1; k <= 4; k *= 2) {
        psr_tuning t = suite;
        t.sample.resident_per_unit = k * (suite.sample.vector_width ? 1 : 8);
        t.sample.min_steps = 1;
        set_tuning(ctx, &t);
        check_peaked_probs(1, vocab, 0, 1.0f, 1e12f);
        check_peaked_probs(4, vocab, 0, 1.0f, 1e12f);
        check_peaked_probs(2, vocab, 0, 1.0f, 0.0f); /* after the peaks */
        for (size_t r = 0; r < rows; r++) {
            for (size_t i = 0; i < vocab; i++)
                logits[r * vocab + i] = normal();
            logits[r * vocab + rnd() % vocab] += 25.0f;
        }
        fill_rows(rows, seeds, pos, temps, 0.8f);
        check_race_logits(logits, rows, vocab, seeds, pos, temps, 0, race);
    }
    set_tuning(ctx, &suite);
    free(logits);
}

/* Rows of N(0, 3) logits at the suite's split (on a CPU: long chunks, a
 * group per core): a group's floor rises early and most blocks are
 * measured against it (on the vector path: skipped on their raw logits,
 * psr_race_raw_below), while the winners lie anywhere in the row. */
static void test_long_chunks_equal_oracle(void **state)
{
    (void)state;
    const size_t rows = 4, vocab = 65536;
    float *logits = malloc(rows * vocab * sizeof *logits);
    int64_t seeds[4], pos[4];
    float temps[4];
    int32_t race[4];
    for (size_t i = 0; i < rows * vocab; i++)
        logits[i] = 3.0f * normal();
    unsigned noises[] = {0, PSR_FLAG_WIDE_NOISE, PSR_FLAG_FP64_NOISE};
    for (int n = 0; n < (has_fp64 ? 3 : 2); n++)
        for (int round = 0; round < 4; round++) {
            fill_rows(rows, seeds, pos, temps, round % 2 ? 0.8f : 1.7f);
            check_race_logits(logits, rows, vocab, seeds, pos, temps, noises[n], race);
        }
    free(logits);
}

static void test_probs_equal_oracle(void **state)
{
    (void)state;
    check_probs_against_oracle(64, 3000, 0, 1.0f);
    check_probs_against_oracle(3, 150000, 0, 1.0f); /* split rows */
    if (!test_long())
        return;
    check_probs_against_oracle(64, 3000, PSR_FLAG_WIDE_NOISE, 1.0f);
    check_probs_against_oracle(16, 3000, PSR_SAMPLE_DRAFTING, 0.0f); /* T = 0: argmax p */
    if (has_fp64) {
        check_probs_against_oracle(64, 3000, PSR_FLAG_FP64_NOISE, 1.0f);
        check_probs_against_oracle(3, 150000, PSR_FLAG_FP64_NOISE | PSR_SAMPLE_DRAFTING, 1.0f);
    }
}

/* Over logits, the race and Gumbel-max pick the same token but for
 * near-ties that rounding decides. */
static void test_race_matches_gumbel(void **state)
{
    (void)state;
    const size_t rows = 100000, vocab = 64;
    float *logits = malloc(rows * vocab * sizeof *logits);
    int64_t *seeds = malloc(rows * 8), *pos = malloc(rows * 8);
    float *temps = malloc(rows * 4);
    int32_t *race = malloc(rows * 4), *gumbel = malloc(rows * 4);
    for (size_t i = 0; i < rows * vocab; i++)
        logits[i] = 2.0f * normal();
    fill_rows(rows, seeds, pos, temps, 0.9f);
    assert_int_equal(sample_rows_f32(ctx, logits, rows, vocab, seeds, pos, temps, PSR_SAMPLE_RACE, race),
                     PSR_OK);
    assert_int_equal(sample_rows_f32(ctx, logits, rows, vocab, seeds, pos, temps, 0, gumbel), PSR_OK);
    /* Bit for bit, rounding included, the race's own oracle (launches of
     * SAMPLE_CHUNK rows, split as the launch splits them). */
    cl_uint chunk, groups;
    psr_split_rows(ctx, SAMPLE_CHUNK, vocab, &chunk, &groups);
    for (size_t r = 0; r < rows; r++) {
        int32_t want = psr_oracle_race_logits_row(logits + r * vocab, vocab, chunk, temps[r], seeds[r], pos[r],
                                                  false, PSR_ORACLE_FP32, -INFINITY, NULL);
        if (race[r] != want)
            fail_msg("row %zu: race %d, oracle %d", r, race[r], want);
    }
    size_t differ = 0;
    double worst = 0;
    for (size_t r = 0; r < rows; r++) {
        if (race[r] == gumbel[r])
            continue;
        differ++;
        /* The margin between the two tokens in the Gumbel domain. */
        uint32_t key = psr_oracle_row_key((uint64_t)seeds[r], (uint64_t)pos[r], false);
        double a = logits[r * vocab + race[r]] / 0.9 + psr_oracle_gumbel32(key, (uint32_t)race[r]);
        double b = logits[r * vocab + gumbel[r]] / 0.9 + psr_oracle_gumbel32(key, (uint32_t)gumbel[r]);
        double margin = fabs(a - b);
        print_message("row %zu: race %d, gumbel %d, margin %.3g\n", r, race[r], gumbel[r], margin);
        if (margin > worst)
            worst = margin;
    }
    print_message("race and Gumbel differ on %zu of %zu rows (largest margin %.3g)\n", differ, rows,
                  worst);
    assert_true(differ * 10000 <= rows); /* at least 99.99% agree */
    assert_true(worst < 1e-4);           /* and every difference is a near-tie */
    free(logits), free(seeds), free(pos), free(temps), free(race), free(gumbel);
}

/* Rows split over many work-groups compare m + log(score) across groups,
 * in one kernel or two: still the Gumbel token. The two-kernel round also
 * takes the scalar token loop (GPUs') where the device has the vector one,
 * and checks the race over probabilities there too: builds of their own,
 * for the long suite. The one-kernel round runs on the suite's context
 * (the resident count is a launch value). */
static void test_split_rows_match_gumbel(void **state)
{
    (void)state;
    psr_context *saved = ctx;
    const psr_tuning suite = tuning_of(ctx);
    for (int two_pass = 0; two_pass <= (test_long() ? 1 : 0); two_pass++) {
        psr_tuning t;
        if (two_pass) {
            setenv("PSR_TUNE_RESIDENT", "64", 1);
            setenv("PSR_TUNE_VECTOR", "0", 1);
            ctx = open_context(NULL);
            unsetenv("PSR_TUNE_RESIDENT");
            unsetenv("PSR_TUNE_VECTOR");
            t = tuning_of(ctx);
        } else {
            t = suite;
            t.sample.resident_per_unit = t.verify.resident_per_unit = 64;
        }
        t.sample.two_pass = two_pass;
        set_tuning(ctx, &t);
        if (two_pass) {
            assert_int_equal(tuning_of(ctx).sample.vector_width, 0);
            check_probs_against_oracle(16, 3000, 0, 1.0f);
            check_probs_against_oracle(16, 3000, PSR_SAMPLE_DRAFTING, 0.0f);
        }
        const size_t rows = 16, vocab = 20000;
        cl_uint chunk, groups;
        psr_split_rows(ctx, rows, vocab, &chunk, &groups);
        assert_true(groups > 1);
        float *logits = malloc(rows * vocab * sizeof *logits);
        int64_t *seeds = malloc(rows * 8), *pos = malloc(rows * 8);
        float *temps = malloc(rows * 4);
        int32_t *race = malloc(rows * 4), *gumbel = malloc(rows * 4);
        for (size_t i = 0; i < rows * vocab; i++)
            logits[i] = 3.0f * normal();
        fill_rows(rows, seeds, pos, temps, 1.3f);
        unsigned noises[] = {0, PSR_FLAG_WIDE_NOISE, PSR_FLAG_FP64_NOISE};
        for (int n = 0; n < (has_fp64 ? 3 : 2); n++) {
            check_race_logits(logits, rows, vocab, seeds, pos, temps, noises[n], race);
            assert_int_equal(sample_host(ctx, logits, PSR_DTYPE_F32, rows, vocab, 0, seeds, pos,
                                             temps, noises[n], gumbel, NULL, NULL),
                             PSR_OK);
            assert_memory_equal(race, gumbel, rows * 4);
        }
        free(logits), free(seeds), free(pos), free(temps), free(race), free(gumbel);
        if (ctx != saved)
            psr_context_free(ctx);
        ctx = saved;
    }
    set_tuning(ctx, &suite);
}

static void test_race_distribution(void **state)
{
    (void)state;
    const size_t vocab = 999, n = 20000;
    float *p = malloc(vocab * sizeof *p), *batch = malloc(n * vocab * sizeof *batch);
    double *expected = malloc(vocab * sizeof *expected), *wrong = malloc(vocab * sizeof *wrong);
    double sum = 0;
    for (size_t i = 0; i < vocab; i++) {
        p[i] = expf(1.5f * normal());
        sum += p[i];
    }
    for (size_t i = 0; i < vocab; i++) {
        expected[i] = p[i] / sum;
        wrong[i] = 1.0 / (double)vocab; /* the control: uniform */
    }
    for (size_t r = 0; r < n; r++)
        memcpy(batch + r * vocab, p, vocab * sizeof *p);
    int64_t *seeds = malloc(n * 8), *pos = malloc(n * 8);
    float *temps = malloc(n * 4);
    int32_t *tokens = malloc(n * 4);
    for (size_t r = 0; r < n; r++) {
        seeds[r] = 77;
        pos[r] = (int64_t)r;
        temps[r] = 1.0f;
    }
    assert_int_equal(sample_rows_f32(ctx, batch, n, vocab, seeds, pos, temps, PSR_SAMPLE_RACE | PSR_SAMPLE_PROBS,
                                     tokens),
                     PSR_OK);
    uint64_t *counts = calloc(vocab, sizeof *counts);
    for (size_t r = 0; r < n; r++)
        counts[tokens[r]]++;
    chi2_result ok = chi2_test(counts, expected, vocab, n), bad = chi2_test(counts, wrong, vocab, n);
    print_message("race over probabilities: chi2 %.1f (threshold %.1f); control chi2 %.1f\n", ok.chi2,
                  ok.threshold, bad.chi2);
    assert_true(ok.chi2 < ok.threshold);
    assert_true(bad.chi2 >= bad.threshold);
    free(p), free(batch), free(expected), free(wrong), free(seeds), free(pos), free(temps),
        free(tokens), free(counts);
}

static void test_bad_probabilities(void **state)
{
    (void)state;
    float p[6] = {0.0f, -1.0f, NAN, 0.0f, -0.0f, 0.0f};
    int64_t seed = 1, pos = 2;
    float t = 1.0f;
    int32_t token = -7;
    uint32_t flags = 0;
    /* No positive probability: an in-range token, flagged. */
    assert_int_equal(sample_host(ctx, p, PSR_DTYPE_F32, 1, 6, 0, &seed, &pos, &t,
                                     PSR_SAMPLE_RACE | PSR_SAMPLE_PROBS, &token, &flags, NULL),
                     PSR_OK);
    assert_true(token >= 0 && token < 6);
    assert_int_equal(flags, PSR_ROW_NO_FINITE);
    /* An infinite probability wins; zero, negative and NaN ones never do. */
    p[4] = INFINITY;
    p[5] = 0.5f;
    assert_int_equal(sample_host(ctx, p, PSR_DTYPE_F32, 1, 6, 0, &seed, &pos, &t,
                                     PSR_SAMPLE_RACE | PSR_SAMPLE_PROBS, &token, &flags, NULL),
                     PSR_OK);
    assert_int_equal(token, 4);
    p[4] = 0.0f;
    for (int k = 0; k < 20; k++) {
        seed = k;
        assert_int_equal(sample_host(ctx, p, PSR_DTYPE_F32, 1, 6, 0, &seed, &pos, &t,
                                         PSR_SAMPLE_RACE | PSR_SAMPLE_PROBS, &token, NULL, NULL),
                         PSR_OK);
        assert_int_equal(token, 5);
    }
    /* A logit whose x / T overflows is an infinite weight, as for Gumbel-max. */
    float l[3] = {1.0f, 3e38f, 2.0f};
    t = 0.5f;
    int32_t gumbel = -7;
    assert_int_equal(sample_host(ctx, l, PSR_DTYPE_F32, 1, 3, 0, &seed, &pos, &t, PSR_SAMPLE_RACE,
                                     &token, &flags, NULL),
                     PSR_OK);
    assert_int_equal(sample_host(ctx, l, PSR_DTYPE_F32, 1, 3, 0, &seed, &pos, &t, 0, &gumbel, NULL,
                                     NULL),
                     PSR_OK);
    assert_int_equal(token, 1);
    assert_int_equal(gumbel, 1);
    assert_int_equal(flags, 0);
    t = 1.0f;

    /* Probabilities need the race, and fp32. */
    token = -7;
    assert_int_equal(sample_host(ctx, p, PSR_DTYPE_F32, 1, 6, 0, &seed, &pos, &t, PSR_SAMPLE_PROBS,
                                     &token, NULL, NULL),
                     PSR_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(psr_last_error(ctx), "PSR_SAMPLE_PROBS"));
    uint16_t half[6] = {0};
    assert_int_equal(sample_host(ctx, half, PSR_DTYPE_F16, 1, 6, 0, &seed, &pos, &t,
                                     PSR_SAMPLE_RACE | PSR_SAMPLE_PROBS, &token, NULL, NULL),
                     PSR_ERR_INVALID_ARGUMENT);
    assert_int_equal(token, -7);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_probs_equal_oracle),
        cmocka_unit_test(test_race_matches_gumbel),
        cmocka_unit_test(test_split_rows_match_gumbel),
        cmocka_unit_test(test_peaked_rows),
        cmocka_unit_test(test_long_chunks_equal_oracle),
        cmocka_unit_test(test_race_distribution),
        cmocka_unit_test(test_bad_probabilities),
    };
    return run_device_tests(tests, .ctx = &ctx, .has_fp64 = &has_fp64, .seed = 4711);
}
