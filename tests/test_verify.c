/* Speculative-draft verification on a real device: tokens equal the host
 * oracle's on every request (greedy and probabilistic, with and without a
 * draft cache, every noise option), the narrow unbiasedness test and its
 * control, the acceptance rate, streams, edge cases and bad input. The
 * default suite verifies f32 logits with fp32 noise (and runs every
 * control); the long suite adds wide and fp64 noise, bf16 and the
 * full-size statistics. */
#include "common.h"
#include "verify_case.h"
#include "stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static psr_context *ctx;
static bool has_fp64;

/* Sets the verification's launch values (launch-time, so any time). */
static void set_verify_tuning(psr_context *c, size_t skip_groups, size_t fused_groups)
{
    psr_tuning t = tuning_of(c);
    t.verify.skip_groups = skip_groups;
    t.verify.fused_groups = fused_groups;
    set_tuning(c, &t);
}

static void prepare(psr_context *c)
{
    /* Every launch decides drafts in the statistics and skips rows past a
     * rejection, however small (by default only launches of more than
     * about a wave do); test_skip_records_per_launch also runs without.
     * The two-kernel path everywhere; test_one_launch runs the one-launch
     * kernel (the default for small batches on some devices). */
    set_verify_tuning(c, 0, 0);
}

/* One verification batch in host memory. */
/* psr_verify of a case on the suite's context (verify_case.c). */
static psr_status run_verify(vcase *c, const vrun *run, int32_t *tokens, int32_t *num, uint32_t *status)
{
    return vcase_run(ctx, c, run, tokens, num, status);
}

/* A case's outputs from psr_verify and from the oracle. */
typedef struct vouts {
    int32_t *tokens, *num;     /* the device's, [requests, cols] and [requests] */
    int32_t *want, *want_num;  /* the oracle's */
    uint32_t status;           /* the device-side status word */
} vouts;

static vouts run_with_oracle(vcase *c, const vrun *run)
{
    size_t cols = c->max_drafts + 1;
    vouts o = {malloc(c->requests * cols * 4), malloc(c->requests * 4), malloc(c->requests * cols * 4),
               malloc(c->requests * 4), 0};
    psr_status st = run_verify(c, run, o.tokens, o.num, &o.status);
    if (st != PSR_OK)
        fail_msg("psr_verify: %s: %s", psr_status_string(st), psr_last_error(ctx));
    psr_oracle_verify_in in = {.requests = c->requests, .rows = c->rows, .vocab = c->vocab,
                               .max_drafts = c->max_drafts, .cu = c->cu, .target = c->target,
                               .draft_cache = c->cache, .cache_k = c->cache_k, .draft_tokens = c->drafts,
                               .seeds = c->seeds, .temperatures = c->temps, .positions = c->positions,
                               .greedy_all = run->method == PSR_VERIFY_GREEDY,
                               .noise = noise_of(run->flags)};
    psr_oracle_verify(&in, o.want, o.want_num);
    return o;
}

static void free_outs(vouts *o)
{
    free(o->tokens), free(o->num), free(o->want), free(o->want_num);
}

/* Device == oracle on every request; returns how many drafts were accepted. */
static size_t check_against_oracle(vcase *c, const vrun *run)
{
    size_t cols = c->max_drafts + 1;
    vouts o = run_with_oracle(c, run);
    assert_int_equal(o.status, 0);
    size_t accepted = 0;
    for (size_t r = 0; r < c->requests; r++) {
        if (o.num[r] != o.want_num[r])
            fail_msg("vocab %zu request %zu (T %g, %d rows): num_sampled %d, oracle %d", c->vocab, r,
                     (double)c->temps[r], c->cu[r + 1] - c->cu[r], o.num[r], o.want_num[r]);
        for (size_t j = 0; j < cols; j++)
            if (o.tokens[r * cols + j] != o.want[r * cols + j])
                fail_msg("vocab %zu request %zu column %zu: token %d, oracle %d", c->vocab, r, j,
                         o.tokens[r * cols + j], o.want[r * cols + j]);
        for (size_t j = 0; j < (size_t)o.num[r]; j++)
            assert_true(o.tokens[r * cols + j] >= 0 && (size_t)o.tokens[r * cols + j] < c->vocab);
        accepted += (size_t)o.num[r] - 1;
    }
    free_outs(&o);
    return accepted;
}

static void test_matches_oracle(void **state)
{
    (void)state;
    const vrun prob = {PSR_VERIFY_PROBABILISTIC, 0, PSR_TOKENS_I32, PSR_DTYPE_F32, NULL};
    size_t accepted = 0;
    for (int cache = 0; cache <= 1; cache++) {
        vcase c = make_case(96, 1000, 4, cache);
        accepted += check_against_oracle(&c, &prob);
        free_case(&c);
        /* Two super-blocks and rows split over several work-groups. */
        c = make_case(12, 20000, 3, cache);
        c.temps[5] = 3e38f; /* its reciprocal is held at 2^-126 */
        c.target[(size_t)c.cu[5] * c.vocab + 17] = INFINITY;
        accepted += check_against_oracle(&c, &prob);
        free_case(&c);
        /* A row of one vector and 4 more (the vector path's tail): a fifth
         * of each residual, the draft cache's too, read one by one. */
        c = make_case(256, 20, 3, cache);
        accepted += check_against_oracle(&c, &prob);
        free_case(&c);
    }
    assert_true(accepted > 20); /* the walk really accepts, not just rejects */
    /* Rows split over as many groups as a GPU gives them (9 per request,
     * then 3), whose best the last of them gathers; the second split's
     * words lie where the first's were. */
    const psr_tuning before = tuning_of(ctx);
    psr_tuning t = before;
    t.verify.resident_per_unit = 64;
    set_tuning(ctx, &t);
    vcase split = make_case(12, 20000, 3, true);
    check_against_oracle(&split, &prob);
    free_case(&split);
    split = make_case(8, 5000, 2, false);
    check_against_oracle(&split, &prob);
    free_case(&split);
    set_tuning(ctx, &before);

    vcase c = make_case(64, 777, 5, true);
    const vrun greedy = {PSR_VERIFY_GREEDY, 0, PSR_TOKENS_I64, PSR_DTYPE_F32, NULL};
    assert_true(check_against_oracle(&c, &greedy) > 10);
    if (test_long()) { /* a build each */
        const vrun wide = {PSR_VERIFY_PROBABILISTIC, PSR_FLAG_WIDE_NOISE, PSR_TOKENS_I64,
                           PSR_DTYPE_F32, NULL};
        check_against_oracle(&c, &wide);
        if (has_fp64) {
            const vrun fp64 = {PSR_VERIFY_PROBABILISTIC, PSR_FLAG_FP64_NOISE, PSR_TOKENS_I32,
                               PSR_DTYPE_F32, NULL};
            check_against_oracle(&c, &fp64);
        }
        const vrun bf16 = {PSR_VERIFY_PROBABILISTIC, 0, PSR_TOKENS_I32, PSR_DTYPE_BF16, NULL};
        check_against_oracle(&c, &bf16);
    }
    c.stride = c.vocab + 13;
    check_against_oracle(&c, &prob);
    free_case(&c);
}

/* A context whose kernels are built with a test-only define (a control
 * that must fail), without the disk cache. */
static psr_context *open_control(const char *define)
{
    psr_context *control = NULL;
    psr_context_options o;
    psr_context_options_init(&o, sizeof o);
    o.disk_cache = 0;
    assert_int_equal(psr_context_create(&o, &control), PSR_OK);
    assert_int_equal(psr_context_add_build_options(control, define), PSR_OK);
    return control;
}

/* How many requests' outputs differ from the oracle's. */
static size_t oracle_mismatches(vcase *c, const vrun *run)
{
    size_t cols = c->max_drafts + 1, bad = 0;
    vouts o = run_with_oracle(c, run);
    for (size_t r = 0; r < c->requests; r++)
        bad += o.num[r] != o.want_num[r] || memcmp(o.tokens + r * cols, o.want + r * cols, cols * 4) != 0;
    free_outs(&o);
    return bad;
}

/* The residual's pruning is exact where it is as tight as it gets. Each
 * row holds 256 equal tokens over a floor of -20: 0 .. 127, inside every
 * work-group size's first step, whose best becomes the group's floor, and
 * 128 more from 1024 on, met after it. When one of those wins it often
 * wins by little. The drafts are random one-hot tokens outside both sets,
 * so every request with a draft samples a residual (the others, about a
 * third, sample their bonus row). The fp32 noise bound is loose by
 * ln 2 to 2 ln 2 (a power of two of the folded word), so a floor less than
 * ln 2 too high can change no token; the control's, 1 nat too high, must
 * change some, or this test could not fail. */
static void test_residual_pruning(void **state)
{
    (void)state;
    const vrun prob = {PSR_VERIFY_PROBABILISTIC, 0, PSR_TOKENS_I32, PSR_DTYPE_F32, NULL};
    psr_context *control = open_control("-DPSR_TEST_FLOOR_SLACK=1.0f");
    vcase c = make_case(1024, 4000, 2, false);
    for (size_t row = 0; row < c.rows; row++)
        for (size_t i = 0; i < c.vocab; i++)
            c.target[row * c.vocab + i] = i < 128 || (i >= 1024 && i < 2048 && i % 8 == 0) ? 0.0f : -20.0f;
    for (size_t r = 0; r < c.requests; r++)
        c.temps[r] = 1.0f;
    for (size_t row = 0; row < c.rows; row++)
        c.drafts[row] = (int32_t)(2048 + rnd() % 1000);
    check_against_oracle(&c, &prob);
    psr_context *saved = ctx;
    ctx = control;
    size_t control_bad = oracle_mismatches(&c, &prob);
    ctx = saved;
    printf("control (floor 1 nat too high): %zu of %zu requests differ from the oracle\n", control_bad,
           c.requests);
    if (control_bad == 0)
        fail_msg("%s", "the control's floor changed no token: the pruning test cannot fail");
    free_case(&c);
    psr_context_free(control);
}

/* The statistics of a request's later rows are skipped once its
 * rejection is recorded for the launch (cl/verify.cl), and the sampling
 * kernel takes the first rejection from the record. One call's records
 * must not reach the next: call A rejects every request's first draft (a
 * -1 placeholder), and call B, on other logits, accepts every draft (the
 * draft distribution is the target's), so a record left from A would
 * reject B's drafts (and skip rows). B is also the call at which the
 * launch count starts again, and A runs once more after it, which needs
 * the old words cleared. The control reads records of any launch and must
 * get B wrong, or this test could not fail. */
static void test_skip_records_per_launch(void **state)
{
    (void)state;
    const vrun prob = {PSR_VERIFY_PROBABILISTIC, 0, PSR_TOKENS_I32, PSR_DTYPE_F32, NULL};
    vcase a = make_case(48, 3000, 6, true);
    for (size_t r = 0; r < a.requests; r++)
        a.drafts[a.cu[r]] = -1;
    vcase b = make_case(48, 3000, 6, true);
    for (size_t r = 0; r < b.requests; r++) {
        b.temps[r] = 1.0f;
        for (int32_t row = b.cu[r]; row < b.cu[r + 1]; row++) {
            float *x = b.target + (size_t)row * b.vocab;
            for (size_t i = 0; i < b.vocab; i++)
                x[i] = 3.0f * normal();
            b.drafts[row] = host_argmax(x, b.vocab);
            if (row + 1 < b.cu[r + 1])
                memcpy(b.cache + (r * b.cache_k + (size_t)(row - b.cu[r])) * b.vocab, x, b.vocab * 4);
        }
    }
    set_verify_epoch(ctx, PSR_VERIFY_EPOCHS - 2); /* A runs at the last number, B at the first */
    check_against_oracle(&a, &prob);
    assert_int_equal(check_against_oracle(&b, &prob), b.rows - b.requests);
    assert_int_equal(verify_epoch(ctx), 1);
    /* Words left from before the wrap would outrank this launch's, so its
     * rejections would go unrecorded and A's drafts read as accepted. */
    check_against_oracle(&a, &prob);
    set_verify_tuning(ctx, SIZE_MAX, 0); /* nothing decided, skipped or counted */
    check_against_oracle(&a, &prob);
    check_against_oracle(&b, &prob);
    set_verify_tuning(ctx, 0, 0);

    psr_context *control = open_control("-DPSR_TEST_ANY_EPOCH");
    set_verify_tuning(control, 0, tuning_of(control).verify.fused_groups);
    psr_context *saved = ctx;
    ctx = control;
    check_against_oracle(&a, &prob);
    size_t control_bad = oracle_mismatches(&b, &prob);
    ctx = saved;
    printf("control (records of other launches read): %zu of %zu requests differ from the oracle\n",
           control_bad, b.requests);
    if (control_bad == 0)
        fail_msg("%s", "the control skipped nothing: the test cannot fail");
    free_case(&a);
    free_case(&b);
    psr_context_free(control);
}

/* R requests of exactly K drafts each at T = 0, whose target logits,
 * drafts and positions (rows of R x (K + 1)) the caller fills. */
static vcase greedy_case(size_t R, size_t V, size_t K)
{
    vcase c = make_case(R, V, K, false);
    c.cu[0] = 0;
    for (size_t r = 0; r < R; r++) {
        c.cu[r + 1] = (int32_t)((r + 1) * (K + 1));
        c.temps[r] = 0.0f;
    }
    free(c.target), free(c.drafts), free(c.positions);
    c.rows = R * (K + 1);
    c.target = malloc(c.rows * V * 4);
    c.drafts = malloc(c.rows * 4);
    c.positions = malloc(c.rows * 8);
    return c;
}

/* The bonus token is psr_sample's token for the bonus row, and greedy
 * requests follow the target's argmax exactly. */
static void test_bonus_and_greedy(void **state)
{
    (void)state;
    const size_t R = 8, V = 3000, K = 3;
    vcase c = greedy_case(R, V, K);
    /* Every request: K drafts equal to the argmax (greedy accepts all), T = 0. */
    for (size_t i = 0; i < c.rows * V; i++)
        c.target[i] = normal();
    for (size_t row = 0; row < c.rows; row++) {
        c.drafts[row] = host_argmax(c.target + row * V, V);
        c.positions[row] = (int64_t)(100 + row);
    }
    /* Request r's draft r % K is wrong: greedy stops there and emits the argmax. */
    for (size_t r = 0; r < R / 2; r++)
        c.drafts[r * (K + 1) + r % K] = (c.drafts[r * (K + 1) + r % K] + 1) % (int32_t)V;
    int32_t tokens[8 * 4], num[8];
    uint32_t status;
    const vrun greedy = {PSR_VERIFY_PROBABILISTIC, 0, PSR_TOKENS_I32, PSR_DTYPE_F32, NULL};
    assert_int_equal(run_verify(&c, &greedy, tokens, num, &status), PSR_OK);
    for (size_t r = 0; r < R; r++) {
        size_t stop = r < R / 2 ? r % K : K;
        assert_int_equal(num[r], (int)stop + 1);
        for (size_t j = 0; j <= K; j++) {
            int32_t want = j < stop ? c.drafts[r * (K + 1) + j]
                           : j == stop ? host_argmax(c.target + (r * (K + 1) + j) * V, V)
                                       : -1;
            assert_int_equal(tokens[r * (K + 1) + j], want);
        }
    }
    /* Sampled bonus: K = 0 requests at T = 1 get psr_sample's token. */
    vcase b = make_case(R, V, 0, false);
    for (size_t r = 0; r < R; r++)
        b.temps[r] = 1.0f;
    int32_t btokens[8], bnum[8], sampled[8];
    assert_int_equal(run_verify(&b, &greedy, btokens, bnum, &status), PSR_OK);
    assert_int_equal(sample_host(ctx, b.target, PSR_DTYPE_F32, R, V, 0, b.seeds, b.positions,
                                     b.temps, 0, sampled, NULL, NULL),
                     PSR_OK);
    for (size_t r = 0; r < R; r++) {
        assert_int_equal(bnum[r], 1);
        assert_int_equal(btokens[r], sampled[r]);
    }
    free_case(&c);
    free_case(&b);
}

/* Greedy requests over rows that hold their largest value many times
 * (every token of a flat row, or every 37th): the argmax is the lowest
 * index, whatever lanes or vectors the tied tokens fall in (the CPU's
 * vector path holds 16 lanes, each meeting its tokens in order), and a
 * draft of a later tied token is rejected. */
static void test_greedy_ties(void **state)
{
    (void)state;
    const size_t R = 12, V = 5000, K = 2;
    vcase c = greedy_case(R, V, K);
    for (size_t row = 0; row < c.rows; row++) {
        float *x = c.target + row * V;
        size_t first = 1 + row % 37, every = row % 3 ? 37 : 1;
        for (size_t i = 0; i < V; i++)
            x[i] = row % 3 ? normal() : 0.5f;
        for (size_t i = first; i < V; i += every)
            x[i] = 7.0f;
        /* even requests draft the lowest tied index (accepted), odd ones a later one */
        c.drafts[row] = (int32_t)(first + ((row / (K + 1)) % 2 ? 4 * every : 0));
        c.positions[row] = (int64_t)(300 + row);
    }
    const vrun greedy = {PSR_VERIFY_GREEDY, 0, PSR_TOKENS_I32, PSR_DTYPE_F32, NULL};
    const vrun prob = {PSR_VERIFY_PROBABILISTIC, 0, PSR_TOKENS_I32, PSR_DTYPE_F32, NULL};
    assert_int_equal(check_against_oracle(&c, &greedy), R / 2 * K);
    assert_int_equal(check_against_oracle(&c, &prob), R / 2 * K);
    free_case(&c);
}

/* One-hot drafts never re-emit a rejected draft (the residual masks it),
 * -1 drafts are rejected, all-NaN rows stay in range. */
static void test_edge_cases(void **state)
{
    (void)state;
    const size_t R = 200, V = 50;
    vcase c = make_case(R, V, 2, false);
    for (size_t r = 0; r < R; r++)
        c.temps[r] = 1.0f;
    int32_t *tokens = malloc(R * 3 * 4), num[200];
    uint32_t status;
    const vrun prob = {PSR_VERIFY_PROBABILISTIC, 0, PSR_TOKENS_I32, PSR_DTYPE_F32, NULL};
    assert_int_equal(run_verify(&c, &prob, tokens, num, &status), PSR_OK);
    size_t rejections = 0;
    for (size_t r = 0; r < R; r++) {
        size_t n = (size_t)(c.cu[r + 1] - c.cu[r]), a = (size_t)num[r] - 1;
        assert_true(a + 1 <= n);
        for (size_t j = 0; j < a; j++)
            assert_int_not_equal(c.drafts[c.cu[r] + (int32_t)j], -1);
        int32_t last = tokens[r * 3 + a];
        assert_true(last >= 0 && last < (int32_t)V);
        if (a + 1 < n) { /* rejected: never the rejected one-hot draft itself */
            int32_t d = c.drafts[c.cu[r] + (int32_t)a];
            const float *x = c.target + (size_t)(c.cu[r] + (int32_t)a) * V;
            if (!isnan(x[0]))
                assert_int_not_equal(last, d);
            rejections++;
        }
        for (size_t j = a + 1; j < 3; j++)
            assert_int_equal(tokens[r * 3 + j], -1);
    }
    assert_true(rejections > 10);
    free(tokens);
    free_case(&c);
}

static void print_positions(const char *what, const psr_unbiased_result *res, chi2_result *out)
{
    for (size_t j = 0; j <= res->k; j++) {
        out[j] = chi2_test(res->counts[j], res->p, PSR_UNBIASED_VOCAB, res->reached[j]);
        print_message("%s k=%zu position %zu: chi2 %.1f (df %zu, threshold %.1f) over %llu\n", what,
                      res->k, j, out[j].chi2, out[j].df, out[j].threshold,
                      (unsigned long long)res->reached[j]);
    }
}

/* DESIGN section 8: with the salt every position is distributed as p;
 * built without it, position 0 must fail (vLLM saw about 1500 against 70
 * at 200,000 trials; the control's chi2 grows with the trials, so the
 * quick size still fails it by a wide margin). */
static void test_unbiased_and_control(void **state)
{
    (void)state;
    psr_context *control = open_control("-DPSR_TEST_DISABLE_DRAFT_SALT=1");
    psr_unbiased_result *res = malloc(sizeof *res);
    chi2_result chi[PSR_UNBIASED_MAX_K + 1];
    const size_t ks[] = {1, 3};
    const size_t trials = test_long() ? 200000 : 50000;
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(psr_unbiased_run(ctx, ks[i], trials, 11, res), PSR_OK);
        print_positions("salted", res, chi);
        for (size_t j = 0; j <= ks[i]; j++)
            if (!(chi[j].chi2 < chi[j].threshold))
                fail_msg("k=%zu position %zu: chi2 %.1f >= %.1f", ks[i], j, chi[j].chi2, chi[j].threshold);
        assert_int_equal(res->reached[0], trials);
        assert_int_equal(psr_unbiased_run(control, ks[i], trials, 11, res), PSR_OK);
        print_positions("control", res, chi);
        if (chi[0].chi2 < chi[0].threshold)
            fail_msg("control k=%zu: chi2 %.1f passes (threshold %.1f): the test cannot fail", ks[i],
                     chi[0].chi2, chi[0].threshold);
    }
    free(res);
    psr_context_free(control);
}

/* The acceptance rate is sum min(p, q), within 5 sigma over 10^6 trials
 * (250,000 in the quick suite). */
static void test_acceptance_rate(void **state)
{
    (void)state;
    psr_unbiased_result *res = malloc(sizeof *res);
    const size_t trials = test_long() ? 1000000 : 250000;
    assert_int_equal(psr_unbiased_run(ctx, 1, trials, 23, res), PSR_OK);
    double want = 0;
    for (int i = 0; i < PSR_UNBIASED_VOCAB; i++)
        want += fmin(res->p[i], res->q[i]);
    double got = (double)res->accepted / (double)trials;
    double sigma = sqrt(want * (1 - want) / (double)trials);
    print_message("acceptance %.5f, sum min(p, q) %.5f, %.2f sigma\n", got, want, (got - want) / sigma);
    assert_true(fabs(got - want) < 5 * sigma);
    free(res);
}

/* The draft stream is reproducible and differs from the target stream. */
static void test_streams(void **state)
{
    (void)state;
    const size_t rows = 2000, V = 64;
    float *x = malloc(rows * V * 4);
    int64_t *seeds = malloc(rows * 8), *pos = malloc(rows * 8);
    float *temps = malloc(rows * 4);
    int32_t *a = malloc(rows * 4), *b = malloc(rows * 4), *t = malloc(rows * 4);
    for (size_t i = 0; i < rows * V; i++)
        x[i] = normal();
    for (size_t r = 0; r < rows; r++) {
        seeds[r] = (int64_t)r;
        pos[r] = (int64_t)(r % 1000);
        temps[r] = 1.0f;
    }
    assert_int_equal(sample_host(ctx, x, PSR_DTYPE_F32, rows, V, 0, seeds, pos, temps,
                                     PSR_SAMPLE_DRAFTING, a, NULL, NULL), PSR_OK);
    assert_int_equal(sample_host(ctx, x, PSR_DTYPE_F32, rows, V, 0, seeds, pos, temps,
                                     PSR_SAMPLE_DRAFTING, b, NULL, NULL), PSR_OK);
    assert_int_equal(sample_host(ctx, x, PSR_DTYPE_F32, rows, V, 0, seeds, pos, temps, 0, t, NULL,
                                     NULL), PSR_OK);
    size_t same = 0;
    for (size_t r = 0; r < rows; r++) {
        assert_int_equal(a[r], b[r]);
        same += a[r] == t[r];
    }
    /* Independent streams agree with probability sum p^2 (about 4% here). */
    print_message("draft and target tokens agree on %zu of %zu rows\n", same, rows);
    assert_true(same < rows / 5);
    free(x), free(seeds), free(pos), free(temps), free(a), free(b), free(t);
}

/* psr_sample's [requests, K, vocab] cache layout is the one psr_verify reads. */
static void test_draft_cache_layout(void **state)
{
    (void)state;
    const size_t R = 5, K = 3, V = 40;
    float *x = malloc(R * V * 4), *cache = malloc(R * K * V * 4);
    int64_t seeds[5], pos[5];
    float temps[5];
    for (size_t i = 0; i < R * V; i++)
        x[i] = normal();
    for (size_t i = 0; i < R * K * V; i++)
        cache[i] = -1234.0f;
    for (size_t r = 0; r < R; r++)
        seeds[r] = (int64_t)r, pos[r] = 7, temps[r] = 0.5f;
    cl_mem bx = upload(ctx, x, R * V * 4), bc = upload(ctx, cache, R * K * V * 4), bs = upload(ctx, seeds, R * 8);
    cl_mem bp = upload(ctx, pos, R * 8), bt = upload(ctx, temps, R * 4), bo = device_buffer(ctx, R * 4);
    psr_sample_args s;
    psr_sample_args_init(&s, sizeof s);
    s.rows = R;
    s.vocab = V;
    s.logits = bx;
    s.requests = R;
    s.seeds = bs;
    s.temperatures = bt;
    s.positions = bp;
    s.tokens = bo;
    s.draft_cache = bc;
    s.draft_cache_k = K;
    s.draft_step = 1;
    s.flags = PSR_SAMPLE_DRAFTING;
    assert_int_equal(psr_sample(ctx, &s, NULL), PSR_OK);
    download(ctx, bc, cache, R * K * V * 4);
    for (size_t r = 0; r < R; r++)
        for (size_t j = 0; j < K; j++)
            for (size_t i = 0; i < V; i++)
                assert_true(cache[(r * K + j) * V + i] == (j == 1 ? x[r * V + i] : -1234.0f));
    s.draft_step = K; /* past the cache */
    assert_int_equal(psr_sample(ctx, &s, NULL), PSR_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(psr_last_error(ctx), "draft_step"));
    release_buffers((cl_mem[]){bx, bc, bs, bp, bt, bo}, 6);
    free(x), free(cache);
}

/* ---- bad input: a status naming the argument, and nothing written ---- */

static vcase bad_case(void)
{
    return make_case(4, 100, 2, true);
}

static void expect_rejected(void (*tamper)(psr_verify_args *), psr_status want, const char *needle)
{
    vcase c = bad_case();
    int32_t tokens[4 * 3], num[4];
    uint32_t status;
    const vrun run = {PSR_VERIFY_PROBABILISTIC, 0, PSR_TOKENS_I32, PSR_DTYPE_F32, tamper};
    psr_status st = run_verify(&c, &run, tokens, num, &status);
    if (st != want)
        fail_msg("want %s, got %s: %s", psr_status_string(want), psr_status_string(st), psr_last_error(ctx));
    if (!strstr(psr_last_error(ctx), needle))
        fail_msg("message \"%s\" does not name %s", psr_last_error(ctx), needle);
    for (size_t i = 0; i < 12; i++)
        assert_int_equal(tokens[i], SENTINEL);
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(num[i], SENTINEL);
    assert_int_equal(status, SENTINEL);
    free_case(&c);
}

static int32_t bad_cu[5];
static void cu_decreasing(psr_verify_args *a)
{
    memcpy(bad_cu, a->cu, sizeof bad_cu);
    bad_cu[2] = bad_cu[1];
    a->cu = bad_cu;
}
static void cu_past_rows(psr_verify_args *a) { a->rows -= 1; }
static void cu_not_zero(psr_verify_args *a)
{
    memcpy(bad_cu, a->cu, sizeof bad_cu);
    bad_cu[0] = 1;
    a->cu = bad_cu;
}
static void k_past_cache(psr_verify_args *a) { a->draft_cache_k = 0; }
static void k_past_cache2(psr_verify_args *a)
{
    memcpy(bad_cu, a->cu, sizeof bad_cu);
    for (int r = 0; r < 4; r++)
        bad_cu[r + 1] = bad_cu[r] + 3; /* 2 drafts each = max_drafts */
    a->cu = bad_cu;
    a->rows = (size_t)bad_cu[4];
    a->draft_cache_k = 1;
}
static void too_many_drafts(psr_verify_args *a) { a->max_drafts = 0; }
static void vocab_past_buffer(psr_verify_args *a) { a->vocab = 101; }
static void no_tokens(psr_verify_args *a) { a->tokens = NULL; }
static void bad_flags(psr_verify_args *a) { a->flags = PSR_SAMPLE_DRAFTING; }
static void bad_method(psr_verify_args *a) { a->method = (psr_verify_method)7; }
static void bad_tokens_dtype(psr_verify_args *a) { a->tokens_dtype = (psr_token_dtype)2; }
static void small_stride(psr_verify_args *a) { a->target_row_stride = 99; }
static void no_init(psr_verify_args *a) { a->struct_size = 3; }

static void test_bad_input_host(void **state)
{
    (void)state;
    expect_rejected(cu_decreasing, PSR_ERR_INVALID_ARGUMENT, "cu");
    expect_rejected(cu_past_rows, PSR_ERR_INVALID_ARGUMENT, "args->rows");
    expect_rejected(cu_not_zero, PSR_ERR_INVALID_ARGUMENT, "cu[0]");
    expect_rejected(k_past_cache, PSR_ERR_INVALID_ARGUMENT, "draft_cache_k");
    expect_rejected(k_past_cache2, PSR_ERR_INVALID_ARGUMENT, "draft_cache_k");
    expect_rejected(too_many_drafts, PSR_ERR_INVALID_ARGUMENT, "max_drafts");
    expect_rejected(vocab_past_buffer, PSR_ERR_BUFFER_TOO_SMALL, "target_logits");
    expect_rejected(no_tokens, PSR_ERR_NULL_ARGUMENT, "args->tokens");
    expect_rejected(bad_flags, PSR_ERR_INVALID_ARGUMENT, "args->flags");
    expect_rejected(bad_method, PSR_ERR_INVALID_ARGUMENT, "args->method");
    expect_rejected(bad_tokens_dtype, PSR_ERR_INVALID_ARGUMENT, "tokens_dtype");
    expect_rejected(small_stride, PSR_ERR_INVALID_ARGUMENT, "target_row_stride");
    expect_rejected(no_init, PSR_ERR_STRUCT_SIZE, "psr_verify_args_init");
    assert_int_equal(psr_verify(ctx, NULL, NULL), PSR_ERR_NULL_ARGUMENT);
    assert_int_equal(psr_verify(NULL, NULL, NULL), PSR_ERR_NULL_ARGUMENT);
}

/* Values only the device sees: the status word says which, and the
 * outputs keep their old contents. The context stays usable. */
static void expect_device_rejected(vcase *c, uint32_t want)
{
    int32_t tokens[4 * 3], num[4];
    uint32_t status;
    const vrun run = {PSR_VERIFY_PROBABILISTIC, 0, PSR_TOKENS_I32, PSR_DTYPE_F32, NULL};
    assert_int_equal(run_verify(c, &run, tokens, num, &status), PSR_OK);
    assert_int_equal(status, want);
    for (size_t i = 0; i < 12; i++)
        assert_int_equal(tokens[i], SENTINEL);
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(num[i], SENTINEL);
}

static void test_bad_input_device(void **state)
{
    (void)state;
    vcase c = bad_case();
    c.drafts[0] = (int32_t)c.vocab; /* row 0 is a draft row: cu[1] >= 1 ... */
    if (c.cu[1] == 1) /* ... unless request 0 has no drafts: use one that has */
        for (size_t r = 1; r < 4; r++)
            if (c.cu[r + 1] - c.cu[r] > 1) {
                c.drafts[c.cu[r]] = (int32_t)c.vocab;
                break;
            }
    bool any_draft = false;
    for (size_t r = 0; r < 4; r++)
        any_draft |= c.cu[r + 1] - c.cu[r] > 1;
    if (any_draft)
        expect_device_rejected(&c, PSR_VERIFY_BAD_TOKEN);
    free_case(&c);

    c = bad_case();
    c.drafts[c.rows - 1] = 999999; /* a bonus row's entry is not read */
    check_against_oracle(&c, &(vrun){PSR_VERIFY_PROBABILISTIC, 0, PSR_TOKENS_I32, PSR_DTYPE_F32, NULL});
    c.positions[c.rows - 1] = PSR_MAX_POSITION;
    expect_device_rejected(&c, PSR_VERIFY_BAD_POSITION);
    c.positions[c.rows - 1] = 0;
    c.temps[2] = -1.0f;
    expect_device_rejected(&c, PSR_VERIFY_BAD_TEMPERATURE);
    c.temps[2] = NAN;
    c.positions[0] = -1;
    expect_device_rejected(&c, PSR_VERIFY_BAD_TEMPERATURE | PSR_VERIFY_BAD_POSITION);
    c.temps[2] = 1.0f;
    c.positions[0] = 0;
    check_against_oracle(&c, &(vrun){PSR_VERIFY_PROBABILISTIC, 0, PSR_TOKENS_I32, PSR_DTYPE_F32, NULL});
    free_case(&c);
}

/* The one-launch kernel (psr_verify_fused) gives the oracle's tokens and
 * statuses too, with and without a split of the sampled rows, across a
 * wrap of the launch numbers; batches past its tickets' 12 bits take the
 * two kernels. Where the driver builds it wrongly (PoCL 3.1) it is never
 * used, even when asked for. */
static void test_one_launch(void **state)
{
    const vrun prob = {PSR_VERIFY_PROBABILISTIC, 0, PSR_TOKENS_I32, PSR_DTYPE_F32, NULL};
    set_verify_tuning(ctx, 0, 4095);
    vcase c = make_case(16, 20000, 4, true);
    check_against_oracle(&c, &prob);
    free_case(&c);
    if (tuning_of(ctx).verify.fused_broken) {
        assert_false(last_paths(ctx).verify_one_launch);
        set_verify_tuning(ctx, 0, 0);
        printf("psr_verify_fused is not used on this driver (docs/devices.md): only the fallback is tested\n");
        skip();
    }
    assert_true(last_paths(ctx).verify_one_launch);
    c = make_case(40, 50, 3, false);
    check_against_oracle(&c, &prob);
    assert_true(last_paths(ctx).verify_one_launch);
    free_case(&c);
    test_matches_oracle(state);
    test_bonus_and_greedy(state);
    test_edge_cases(state);
    test_bad_input_device(state);
    test_skip_records_per_launch(state);
    c = make_case(1500, 3000, 4, true);
    check_against_oracle(&c, &prob);
    assert_false(last_paths(ctx).verify_one_launch);
    free_case(&c);
    set_verify_tuning(ctx, 0, 0);
}

/* On NVIDIA GPUs, the oracle cases again with the warp shuffles flipped
 * from the tuning's choice (cl/shuffle.cl), in two kernels and in one;
 * elsewhere the shuffles do not exist. */
static void test_other_shuffles(void **state)
{
    psr_context *saved = ctx;
    ctx = open_shuffles_flipped();
    if (!ctx) {
        ctx = saved;
        skip();
    }
    set_verify_tuning(ctx, 0, 0);
    test_matches_oracle(state);
    set_verify_tuning(ctx, 0, 4095);
    test_matches_oracle(state);
    assert_true(last_paths(ctx).verify_one_launch);
    psr_context_free(ctx);
    ctx = saved;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_oracle),
        cmocka_unit_test(test_bonus_and_greedy),
        cmocka_unit_test(test_greedy_ties),
        cmocka_unit_test(test_residual_pruning),
        cmocka_unit_test(test_skip_records_per_launch),
        cmocka_unit_test(test_edge_cases),
        cmocka_unit_test(test_streams),
        cmocka_unit_test(test_draft_cache_layout),
        cmocka_unit_test(test_bad_input_host),
        cmocka_unit_test(test_bad_input_device),
        cmocka_unit_test(test_one_launch),
        cmocka_unit_test(test_other_shuffles),
        cmocka_unit_test(test_acceptance_rate),
        cmocka_unit_test(test_unbiased_and_control),
    };
    return run_device_tests(tests, .ctx = &ctx, .has_fp64 = &has_fp64, .seed = 2718, .prepare = prepare);
}
