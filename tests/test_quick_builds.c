/* Quick builds (docs/cache.md): a variant's first calls run programs
 * built with -cl-opt-disable; from its second call the optimized ones are
 * built and launched in the background and adopted at a later lookup.
 * Both tiers must give the same bits: tokens, logprobs and verification
 * outcomes, compared here call for call against a context that builds
 * optimized programs only. */
#include "common.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ROWS 6
#define VOCAB 40000
#define TOP_N 5

static psr_context *optimized; /* the fixture's context, quick builds off */
static float *logits;

static void prepare(psr_context *ctx)
{
    psr_tuning t;
    assert_int_equal(psr_context_tuning(ctx, &t), PSR_OK);
    t.quick_builds = 0;
    assert_int_equal(psr_context_set_tuning(ctx, &t), PSR_OK);
    logits = malloc(ROWS * VOCAB * sizeof *logits);
    assert_non_null(logits);
    uint64_t s = 12345;
    for (size_t i = 0; i < (size_t)ROWS * VOCAB; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        float u = (float)(s >> 40) / (float)(1u << 24);
        /* rows 0-1 wide, 2-3 narrow, 4 rounded (ties), 5 with one far-ahead logit */
        size_t row = i / VOCAB;
        float x = (u - 0.5f) * (row < 2 ? 12.0f : 3.0f);
        logits[i] = row == 4 ? (float)(int)x : row == 5 && i % VOCAB == 777 ? 40.0f : x;
    }
}

/* A context of the fixture's device with quick builds on or off, and
 * the disk tier in `cache_dir` (NULL: without it, which would serve the
 * optimized programs the fixture's context wrote there on drivers where
 * it is on). */
static psr_context *context_with(int quick_builds, const char *cache_dir)
{
    psr_device_info info;
    assert_int_equal(psr_context_device_info(optimized, &info), PSR_OK);
    cl_context cl;
    cl_device_id dev;
    cl_command_queue q;
    assert_int_equal(psr_context_cl(optimized, &cl, &dev, &q), PSR_OK);
    psr_context_options o;
    assert_int_equal(psr_context_options_init(&o, sizeof o), PSR_OK);
    o.disk_cache = cache_dir ? PSR_DISK_CACHE_ON : PSR_DISK_CACHE_OFF;
    o.cache_dir = cache_dir;
    psr_context *ctx = NULL;
    assert_int_equal(psr_context_create_from_cl(cl, dev, q, &o, &ctx), PSR_OK);
    psr_tuning t;
    assert_int_equal(psr_context_tuning(ctx, &t), PSR_OK);
    t.quick_builds = quick_builds;
    assert_int_equal(psr_context_set_tuning(ctx, &t), PSR_OK);
    return ctx;
}

static psr_context *quick_context(void)
{
    return context_with(1, NULL);
}

typedef struct sample_case {
    unsigned flags;
    psr_noise noise;
    int top_k;
    float top_p, min_p;
} sample_case;

static void sample(psr_context *ctx, const sample_case *c, int32_t tokens[ROWS])
{
    int64_t seeds[ROWS], positions[ROWS];
    float temps[ROWS];
    for (int r = 0; r < ROWS; r++)
        seeds[r] = 1000 + r, positions[r] = 7 * r, temps[r] = r == 3 ? 0.0f : 0.8f;
    psr_sample_host_args a;
    assert_int_equal(psr_sample_host_args_init(&a, sizeof a), PSR_OK);
    a.rows = ROWS, a.vocab = VOCAB, a.logits = logits, a.logits_dtype = PSR_DTYPE_F32;
    a.seeds = seeds, a.positions = positions, a.temperatures = temps;
    a.flags = c->flags, a.noise = c->noise;
    a.all_top_k = c->top_k, a.all_top_p = c->top_p, a.all_min_p = c->min_p;
    a.tokens = tokens;
    if (psr_sample_host(ctx, &a) != PSR_OK)
        fail_msg("psr_sample_host: %s", psr_last_error(ctx));
}

/* Each case in a quick context of its own, called once, so that no
 * background build can replace its programs: the quick tier's bits. */
static void test_sample_same_bits(void **state)
{
    (void)state;
    psr_device_info info;
    assert_int_equal(psr_context_device_info(optimized, &info), PSR_OK);
    const sample_case cases[] = {
        {0, PSR_NOISE_FP32, 0, 1.0f, 0.0f},
        {PSR_SAMPLE_DRAFTING, PSR_NOISE_WIDE, 0, 1.0f, 0.0f},
        {0, PSR_NOISE_FP64, 0, 1.0f, 0.0f},
        {PSR_SAMPLE_RACE, PSR_NOISE_FP32, 0, 1.0f, 0.0f},
        {0, PSR_NOISE_FP32, 20, 0.9f, 0.0f},
        {0, PSR_NOISE_FP32, 0, 0.9f, 0.0f},
        {0, PSR_NOISE_FP32, 0, 1.0f, 0.1f},
        {PSR_SAMPLE_RACE, PSR_NOISE_FP32, 700, 1.0f, 0.0f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].noise == PSR_NOISE_FP64 && !(info.capabilities & PSR_CAP_FP64))
            continue;
        int32_t want[ROWS], got[ROWS];
        sample(optimized, &cases[i], want);
        psr_context *ctx = quick_context();
        sample(ctx, &cases[i], got);
        bool quick = ctx->kernel_count > 0 && ctx->kernels[0].quick;
        psr_context_free(ctx);
        if (!quick)
            fail_msg("case %zu: the quick context ran no quick kernel", i);
        if (memcmp(want, got, sizeof want) != 0)
            fail_msg("case %zu: quick builds sampled other tokens (row 0: %d against %d)", i, got[0], want[0]);
    }
}

static void logprobs(psr_context *ctx, float top_p, float *lp, int32_t *rank, int32_t *ids, float *top)
{
    int32_t tokens[ROWS] = {1, 77, 777, 39999, 5, 777};
    float temps[ROWS] = {0.8f, 1.0f, 0.5f, 0.0f, 1.3f, 0.8f};
    psr_logprobs_host_args a;
    assert_int_equal(psr_logprobs_host_args_init(&a, sizeof a), PSR_OK);
    a.rows = ROWS, a.vocab = VOCAB, a.logits = logits, a.logits_dtype = PSR_DTYPE_F32;
    a.temperatures = temps, a.tokens = tokens, a.tokens_dtype = PSR_TOKENS_I32;
    a.all_top_p = top_p, a.top_n = TOP_N;
    a.token_logprobs = lp, a.token_ranks = rank, a.top_ids = ids, a.top_logprobs = top;
    if (psr_logprobs_host(ctx, &a) != PSR_OK)
        fail_msg("psr_logprobs_host: %s", psr_last_error(ctx));
}

static void test_logprobs_same_bits(void **state)
{
    (void)state;
    for (int filtered = 0; filtered < 2; filtered++) {
        float lp[2][ROWS], top[2][ROWS * TOP_N];
        int32_t rank[2][ROWS], ids[2][ROWS * TOP_N];
        logprobs(optimized, filtered ? 0.9f : 1.0f, lp[0], rank[0], ids[0], top[0]);
        psr_context *ctx = quick_context();
        logprobs(ctx, filtered ? 0.9f : 1.0f, lp[1], rank[1], ids[1], top[1]);
        psr_context_free(ctx);
        assert_memory_equal(lp[0], lp[1], sizeof lp[0]);
        assert_memory_equal(rank[0], rank[1], sizeof rank[0]);
        assert_memory_equal(ids[0], ids[1], sizeof ids[0]);
        assert_memory_equal(top[0], top[1], sizeof top[0]);
    }
}

static void verify(psr_context *ctx, int32_t *tokens, int32_t *num)
{
    enum { R = 2, K = 2 };
    int32_t cu[R + 1] = {0, K, 2 * K};
    int32_t drafts[2 * K] = {777, 3, 10, 11};
    int64_t seeds[R] = {5, 6}, positions[2 * K] = {0, 1, 0, 1};
    float temps[R] = {0.8f, 1.0f};
    psr_verify_host_args a;
    assert_int_equal(psr_verify_host_args_init(&a, sizeof a), PSR_OK);
    a.requests = R, a.cu = cu, a.rows = 2 * K, a.max_drafts = K, a.vocab = VOCAB;
    a.target_logits = logits, a.target_dtype = PSR_DTYPE_F32;
    a.draft_tokens = drafts, a.seeds = seeds, a.temperatures = temps, a.positions = positions;
    a.tokens = tokens, a.tokens_dtype = PSR_TOKENS_I32, a.num_sampled = num;
    if (psr_verify_host(ctx, &a) != PSR_OK)
        fail_msg("psr_verify_host: %s", psr_last_error(ctx));
}

static void test_verify_same_bits(void **state)
{
    (void)state;
    int32_t tokens[2][2 * 3], num[2][2];
    verify(optimized, tokens[0], num[0]);
    psr_context *ctx = quick_context();
    verify(ctx, tokens[1], num[1]);
    psr_context_free(ctx);
    assert_memory_equal(tokens[0], tokens[1], sizeof tokens[0]);
    assert_memory_equal(num[0], num[1], sizeof num[0]);
}

/* Is the context's kernel `name` from a quick program? */
static bool kernel_is_quick(const psr_context *ctx, const char *name)
{
    for (size_t i = 0; i < ctx->kernel_count; i++)
        if (strcmp(ctx->kernels[i].name, name) == 0)
            return ctx->kernels[i].quick;
    fail_msg("the context has no kernel %s", name);
    return false;
}

/* The second call schedules the optimized build; calls go on with the
 * quick kernel until a lookup adopts it, then run the optimized one, with
 * the same tokens throughout. */
static void test_upgrade_adopted(void **state)
{
    (void)state;
    const sample_case plain = {0, PSR_NOISE_FP32, 0, 1.0f, 0.0f};
    int32_t want[ROWS], got[ROWS];
    sample(optimized, &plain, want);
    psr_context *ctx = quick_context();
    time_t start = time(NULL);
    int calls = 0;
    for (; ctx->adopted == 0 && time(NULL) - start < 300; calls++) {
        sample(ctx, &plain, got);
        assert_memory_equal(want, got, sizeof want);
        if (calls == 0)
            assert_true(kernel_is_quick(ctx, "psr_gumbel_sample"));
        struct timespec pause = {0, 50 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    assert_true(ctx->adopted > 0);
    sample(ctx, &plain, got);
    assert_memory_equal(want, got, sizeof want);
    assert_false(kernel_is_quick(ctx, "psr_gumbel_sample"));
    assert_true(calls >= 2);
    psr_context_free(ctx);
}

/* Plain sampling of the first 1,000 logits as one row. */
static void sample_short_row(psr_context *ctx)
{
    int64_t seed = 1, position = 0;
    float temp = 0.8f;
    int32_t token;
    psr_sample_host_args a;
    assert_int_equal(psr_sample_host_args_init(&a, sizeof a), PSR_OK);
    a.rows = 1, a.vocab = 1000, a.logits = logits, a.logits_dtype = PSR_DTYPE_F32;
    a.seeds = &seed, a.positions = &position, a.temperatures = &temp, a.tokens = &token;
    if (psr_sample_host(ctx, &a) != PSR_OK)
        fail_msg("psr_sample_host: %s", psr_last_error(ctx));
}

/* A variant whose programs an earlier one built brings no program of
 * its own: logprobs without filters after logprobs with top-p, scheduled
 * while the first build runs. Its hand-over comes after the caller
 * adopted the first one's, or just before it (the threads decide); the
 * build after it must still hand its programs over (an empty hand-over
 * once freed the list, and the next one wrote into it). Lookups every
 * millisecond make the first order likely, three rounds more so. */
static void test_upgrade_with_nothing_new(void **state)
{
    (void)state;
    const sample_case plain = {0, PSR_NOISE_FP32, 0, 1.0f, 0.0f};
    int32_t want[ROWS], got[ROWS];
    float lp[ROWS], top[ROWS * TOP_N];
    int32_t rank[ROWS], ids[ROWS * TOP_N];
    sample(optimized, &plain, want);
    for (int round = 0; round < 3; round++) {
        psr_context *ctx = quick_context();
        for (int i = 0; i < 4; i++)
            logprobs(ctx, i < 2 ? 0.9f : 1.0f, lp, rank, ids, top);
        /* Plain sampling of one short row: a lookup (and adoption) every
         * millisecond or so, while the logprobs builds finish. */
        time_t start = time(NULL);
        for (int calls = 0; calls < 2 || (ctx->adopted < 2 && time(NULL) - start < 300); calls++)
            sample_short_row(ctx);
        assert_int_equal(ctx->adopted, 2);
        sample(ctx, &plain, got);
        assert_memory_equal(want, got, sizeof want);
        assert_false(kernel_is_quick(ctx, "psr_gumbel_sample"));
        psr_context_free(ctx);
    }
}

/* Where the disk tier holds the optimized program, a quick context
 * loads it rather than building a quick one. */
static void test_disk_tier_first(void **state)
{
    (void)state;
    char dir[256];
    make_temp_dir(dir, sizeof dir);
    const sample_case c = {0, PSR_NOISE_WIDE, 0, 1.0f, 0.0f};
    int32_t want[ROWS], got[ROWS];
    psr_context *ctx = context_with(0, dir);
    sample(ctx, &c, want);
    psr_context_free(ctx);
    ctx = context_with(1, dir);
    sample(ctx, &c, got);
    bool quick = kernel_is_quick(ctx, "psr_gumbel_sample");
    psr_cache_stats stats;
    assert_int_equal(psr_context_cache_stats(ctx, &stats), PSR_OK);
    psr_context_free(ctx);
    remove_tree(dir);
    assert_false(quick);
    assert_true(stats.disk_hits > 0);
    assert_memory_equal(want, got, sizeof want);
}

/* Freed with a background build scheduled or running: it waits for the
 * build and leaves nothing behind (the sanitizers' run checks). */
static void test_free_while_building(void **state)
{
    (void)state;
    const sample_case c = {PSR_SAMPLE_DRAFTING, PSR_NOISE_FP32, 0, 1.0f, 0.0f};
    int32_t got[ROWS];
    psr_context *ctx = quick_context();
    sample(ctx, &c, got);
    sample(ctx, &c, got);
    psr_context_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sample_same_bits),
        cmocka_unit_test(test_logprobs_same_bits),
        cmocka_unit_test(test_verify_same_bits),
        cmocka_unit_test(test_upgrade_adopted),
        cmocka_unit_test(test_upgrade_with_nothing_new),
        cmocka_unit_test(test_disk_tier_first),
        cmocka_unit_test(test_free_while_building),
    };
    int rc = run_device_tests(tests, .ctx = &optimized, .prepare = prepare);
    free(logits);
    return rc;
}
