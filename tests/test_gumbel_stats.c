/* Statistics of Gumbel-max sampling on a real device, sized for PoCL in CI
 * (DESIGN section 8). Every test runs a control that must fail, to show
 * the test has the power to catch a wrong sampler. */
#include "common.h"
#include "stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static psr_context *ctx;
enum { BATCH = 2000 };

/* Samples one row of logits `trials` times (one seed, positions
 * first_pos + k) and counts the tokens. */
static void sample_counts(const float *logits, size_t vocab, float temp, unsigned flags,
                          int64_t seed, int64_t first_pos, uint64_t trials, uint64_t *counts)
{
    float *batch = malloc((size_t)BATCH * vocab * sizeof *batch);
    int64_t *seeds = malloc(BATCH * 8), *pos = malloc(BATCH * 8);
    float *temps = malloc(BATCH * 4);
    int32_t *tokens = malloc(BATCH * 4);
    for (size_t r = 0; r < BATCH; r++) {
        memcpy(batch + r * vocab, logits, vocab * sizeof *logits);
        seeds[r] = seed;
        temps[r] = temp;
    }
    memset(counts, 0, vocab * sizeof *counts);
    for (uint64_t done = 0; done < trials;) {
        size_t n = trials - done < BATCH ? (size_t)(trials - done) : BATCH;
        for (size_t r = 0; r < n; r++)
            pos[r] = first_pos + (int64_t)(done + r);
        psr_status st = sample_host(ctx, batch, PSR_DTYPE_F32, n, vocab, 0, seeds, pos, temps,
                                        flags, tokens, NULL, NULL);
        if (st != PSR_OK)
            fail_msg("%s: %s", psr_status_string(st), psr_last_error(ctx));
        for (size_t r = 0; r < n; r++) {
            assert_true(tokens[r] >= 0 && (size_t)tokens[r] < vocab);
            counts[tokens[r]]++;
        }
        done += n;
    }
    free(batch), free(seeds), free(pos), free(temps), free(tokens);
}

/* Samples at temperature `temp` and judges the counts against
 * softmax(logits / judged_temp[k]) for each k. */
static void fit(const float *logits, size_t vocab, float temp, const double *judged_temp,
                size_t judgements, unsigned flags, uint64_t trials, int64_t seed, chi2_result *out)
{
    uint64_t *counts = malloc(vocab * sizeof *counts);
    double *p = malloc(vocab * sizeof *p);
    sample_counts(logits, vocab, temp, flags, seed, 0, trials, counts);
    for (size_t k = 0; k < judgements; k++) {
        softmax(logits, vocab, judged_temp[k], p);
        out[k] = chi2_test(counts, p, vocab, trials);
    }
    free(counts);
    free(p);
}

static void test_goodness_of_fit(void **state)
{
    (void)state;
    const size_t vocabs[] = {999, 1024, 4097};
    const float temps[] = {0.5f, 1.0f, 2.0f};
    for (size_t v = 0; v < 3; v++) {
        size_t vocab = vocabs[v];
        float *logits = malloc(vocab * sizeof *logits);
        for (size_t i = 0; i < vocab; i++)
            logits[i] = 2.0f * normal();
        uint64_t trials = vocab > 2000 ? 12000 : 20000;
        for (size_t t = 0; t < 3; t++) {
            /* Control: the same samples judged against a 1.5x hotter
             * temperature must fail. */
            double judged[2] = {temps[t], temps[t] * 1.5};
            chi2_result r[2];
            fit(logits, vocab, temps[t], judged, 2, 0, trials, (int64_t)(v * 3 + t), r);
            print_message("V=%zu T=%.1f: chi2 %.1f, df %zu, threshold %.1f; control (judged at "
                          "T=%.2f) chi2 %.1f\n",
                          vocab, (double)temps[t], r[0].chi2, r[0].df, r[0].threshold, judged[1],
                          r[1].chi2);
            assert_true(r[0].chi2 < r[0].threshold);
            assert_true(r[1].chi2 >= r[1].threshold);
        }
        free(logits);
    }
    /* V = 1: the only token, always. */
    float one = 0.3f;
    uint64_t count;
    sample_counts(&one, 1, 1.0f, 0, 5, 0, 1000, &count);
    assert_int_equal(count, 1000);
}

/* vLLM's head/tail check, scaled down: one head token of probability 1/2
 * against a flat tail; the head's hits must be within 5 sigma. */
static void test_head_tail(void **state)
{
    (void)state;
    const size_t vocab = 4097;
    const uint64_t trials = 40000;
    float *logits = calloc(vocab, sizeof *logits);
    logits[1234] = logf(4096.0f); /* e^L = tail mass: p_head = 1/2 */
    uint64_t *counts = malloc(vocab * sizeof *counts);
    sample_counts(logits, vocab, 1.0f, 0, 99, 0, trials, counts);
    double sd = sqrt((double)trials * 0.25);
    double z = ((double)counts[1234] - 0.5 * (double)trials) / sd;
    /* Control: judged against the head 0.1 nats higher (p = 0.525), z must be large. */
    double p_wrong = exp(logits[1234] + 0.1) / (exp(logits[1234] + 0.1) + 4096.0);
    double z_wrong = ((double)counts[1234] - p_wrong * (double)trials) /
                     sqrt((double)trials * p_wrong * (1 - p_wrong));
    print_message("head hits %llu of %llu: z = %.2f (control z = %.2f)\n",
                  (unsigned long long)counts[1234], (unsigned long long)trials, z, z_wrong);
    assert_true(fabs(z) < 5.0);
    assert_true(fabs(z_wrong) >= 5.0);
    free(logits);
    free(counts);
}

/* The draft stream is another stream: it agrees with the target stream no
 * more than chance, has the same distribution, and is reproducible. */
static void test_draft_stream(void **state)
{
    (void)state;
    const size_t vocab = 1024, n = 4000;
    float *batch = calloc(n * vocab, sizeof *batch); /* uniform: any token equally likely */
    int64_t *seeds = malloc(n * 8), *pos = malloc(n * 8);
    float *temps = malloc(n * 4);
    int32_t *target = malloc(n * 4), *draft = malloc(n * 4), *again = malloc(n * 4);
    for (size_t r = 0; r < n; r++) {
        seeds[r] = 4242 + (int64_t)r;
        pos[r] = (int64_t)r;
        temps[r] = 1.0f;
    }
    assert_int_equal(sample_host(ctx, batch, PSR_DTYPE_F32, n, vocab, 0, seeds, pos, temps, 0,
                                     target, NULL, NULL),
                     PSR_OK);
    assert_int_equal(sample_host(ctx, batch, PSR_DTYPE_F32, n, vocab, 0, seeds, pos, temps,
                                     PSR_SAMPLE_DRAFTING, draft, NULL, NULL),
                     PSR_OK);
    assert_int_equal(sample_host(ctx, batch, PSR_DTYPE_F32, n, vocab, 0, seeds, pos, temps,
                                     PSR_SAMPLE_DRAFTING, again, NULL, NULL),
                     PSR_OK);
    size_t same = 0;
    for (size_t r = 0; r < n; r++)
        same += draft[r] == target[r];
    assert_memory_equal(draft, again, n * 4);
    /* Chance agreement is n / 1024 ~ 4; allow 20. The control (target vs
     * target) agrees everywhere. */
    print_message("draft == target on %zu of %zu rows\n", same, n);
    assert_true(same < 20);
    free(batch), free(seeds), free(pos), free(temps), free(target), free(draft), free(again);

    /* Same distribution: chi-square of drafted samples. */
    float logits[999];
    for (size_t i = 0; i < 999; i++)
        logits[i] = 1.5f * normal();
    double judged = 1.0;
    chi2_result r;
    fit(logits, 999, 1.0f, &judged, 1, PSR_SAMPLE_DRAFTING, 20000, 31337, &r);
    print_message("drafted V=999: chi2 %.1f, threshold %.1f\n", r.chi2, r.threshold);
    assert_true(r.chi2 < r.threshold);
}

static void test_impossible_and_certain_tokens(void **state)
{
    (void)state;
    const size_t vocab = 2048;
    float *logits = malloc(vocab * sizeof *logits);
    for (size_t i = 0; i < vocab; i++)
        logits[i] = i % 3 == 0 ? -INFINITY : normal();
    uint64_t *counts = malloc(vocab * sizeof *counts);
    sample_counts(logits, vocab, 1.5f, 0, 8, 0, 20000, counts);
    for (size_t i = 0; i < vocab; i += 3)
        assert_int_equal(counts[i], 0);
    /* A single finite logit wins every time. */
    for (size_t i = 0; i < vocab; i++)
        logits[i] = i == 777 ? -50.0f : NAN;
    sample_counts(logits, vocab, 0.7f, 0, 9, 0, 4000, counts);
    assert_int_equal(counts[777], 4000);
    free(logits);
    free(counts);
}

/* The lower tail of E (the exponential behind the Gumbel noise): all three
 * options match Exp(1) where fp32 resolves it, but only fp64 and wide-tail
 * noise reach below 2^-32. Drawing 2^32 times to see one such E is too
 * slow for CI, so the check conditions on the words whose 64-bit uniform is
 * in its top 2^-32 slice: exactly the draws that must give E < 2^-32. */
static void test_lower_tail(void **state)
{
    (void)state;
    psr_device_info info;
    psr_context_device_info(ctx, &info);
    const struct {
        psr_noise noise;
        bool resolves;
    } options[] = {{PSR_NOISE_FP32, false}, {PSR_NOISE_WIDE, true}, {PSR_NOISE_FP64, true}};
    for (int k = 0; k < 3; k++) {
        if (options[k].noise == PSR_NOISE_FP64 && !(info.capabilities & PSR_CAP_FP64))
            continue;
        unsigned long long c24, c32, s24, s32, done, slice_done;
        const unsigned long long draws = 1ull << 26, slice = 1ull << 16;
        assert_int_equal(psr_tail_census(ctx, options[k].noise, draws, false, &done, &c24, &c32), PSR_OK);
        assert_int_equal(psr_tail_census(ctx, options[k].noise, slice, true, &slice_done, &s24, &s32),
                         PSR_OK);
        assert_true(done == draws && slice_done == slice);
        print_message("noise %d: %llu draws: E < 2^-24 %llu (expected 4), E < 2^-32 %llu; top slice: "
                      "%llu of %llu below 2^-32\n",
                      (int)options[k].noise, draws, c24, c32, s32, slice);
        assert_true(c24 <= 20); /* Poisson(4): 20 is beyond 5 sigma */
        if (options[k].resolves)
            assert_int_equal(s32, slice);
        else
            assert_int_equal(s32, 0); /* the control: classic fp32 cannot get there */
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_goodness_of_fit),
        cmocka_unit_test(test_head_tail),
        cmocka_unit_test(test_draft_stream),
        cmocka_unit_test(test_impossible_and_certain_tokens),
        cmocka_unit_test(test_lower_tail),
    };
    return run_device_tests(tests, .ctx = &ctx, .seed = 777);
}
