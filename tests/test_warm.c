/* psr_context_warm with a list: exactly the programs of the variants
 * asked for, the progress callback, the launch on drivers that compile at
 * first launch, and refusals that name the argument. Programs only (no
 * launch) except in one case, so the test costs a few builds. */
#include "common.h"

#include <stdio.h>
#include <string.h>

static psr_cache_stats stats_of(psr_context *ctx)
{
    psr_cache_stats s;
    assert_int_equal(psr_context_cache_stats(ctx, &s), PSR_OK);
    return s;
}

/* Does the context build a program per kernel family (drivers that
 * compile at first launch, PoCL), or one per kernel? */
static bool family_programs(psr_context *ctx)
{
    psr_tuning t;
    assert_int_equal(psr_context_tuning(ctx, &t), PSR_OK);
    return !t.one_kernel_programs;
}

/* Options that warm the first `count` entries of `list`. */
static psr_warm_options list_options(const psr_warm_variant *list, size_t count, psr_warm_launch launch)
{
    psr_warm_options o;
    assert_int_equal(psr_warm_options_init(&o, sizeof o), PSR_OK);
    o.variants = list;
    o.variant_count = count;
    o.launch = launch;
    return o;
}

static void expect_detail(psr_context *ctx, const char *word)
{
    const char *detail = psr_last_error(ctx);
    if (!strstr(detail, word))
        fail_msg("error detail \"%s\" does not name \"%s\"", detail, word);
}

/* What the progress callback saw. */
typedef struct progress_log {
    size_t calls, last_index, total;
    bool consistent;
    char names[4][96];
} progress_log;

static void record_progress(size_t index, size_t total, const char *name, double seconds, void *user_data)
{
    progress_log *log = user_data;
    if (log->calls == 0)
        log->total = total;
    log->consistent = log->consistent && index == log->last_index + 1 && total == log->total &&
                      index <= total && seconds >= 0.0;
    if (log->calls < 4)
        snprintf(log->names[log->calls], sizeof log->names[0], "%s", name);
    log->last_index = index;
    log->calls++;
}

/* Plain sampling (the sample program) and filtered bf16 logprobs (the
 * logprobs and filter programs): three programs on PoCL, two variants;
 * elsewhere a program per kernel they launch. */
static void test_warm_builds_exactly_the_list(void **state)
{
    (void)state;
    psr_context *ctx = open_context(NULL);
    const psr_warm_variant list[] = {{PSR_WARM_SAMPLE, 0, PSR_NOISE_FP32, PSR_DTYPE_F32, 0},
                                     {PSR_WARM_LOGPROBS, 0, PSR_NOISE_FP32, PSR_DTYPE_BF16, 1}};
    progress_log log = {.consistent = true};
    psr_warm_options o = list_options(list, 2, PSR_WARM_LAUNCH_OFF);
    o.progress = record_progress;
    o.progress_user_data = &log;
    size_t n = 0;
    assert_int_equal(psr_context_warm(ctx, &o, &n), PSR_OK);
    assert_int_equal(n, 2);
    psr_cache_stats s = stats_of(ctx);
    size_t built = s.builds;
    if (family_programs(ctx))
        assert_int_equal(built, 3);
    else /* a program per kernel: the sampler, logprobs' partial and finish at least, scan, collect */
        assert_true(built >= 5);
    assert_int_equal(s.memory_hits, 0);
    assert_int_equal(log.calls, 2);
    assert_int_equal(log.total, 2);
    assert_true(log.consistent);
    assert_string_equal(log.names[0], "sample f32");
    assert_string_equal(log.names[1], "logprobs bf16 filtered");

    /* Again: served from memory, nothing built. */
    log = (progress_log){.consistent = true};
    assert_int_equal(psr_context_warm(ctx, &o, &n), PSR_OK);
    s = stats_of(ctx);
    assert_int_equal(s.builds, built);
    assert_int_equal(s.memory_hits, built);
    assert_int_equal(log.calls, 2);

    /* A sampling call of the warmed variant builds nothing either. */
    const float logits[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    const int64_t seed = 1, pos = 0;
    const float t = 1.0f;
    int32_t token = -1;
    assert_int_equal(sample_host(ctx, logits, PSR_DTYPE_F32, 1, 8, 0, &seed, &pos, &t, 0, &token, NULL, NULL),
                     PSR_OK);
    assert_int_equal(stats_of(ctx).builds, built);
    psr_context_free(ctx);
}

/* Variants that share programs build them once: the race's filtered
 * calls use the Gumbel-max filter program, verification's noise decides
 * its program. */
static void test_warm_shares_programs(void **state)
{
    (void)state;
    psr_context *ctx = open_context(NULL);
    const psr_warm_variant list[] = {{PSR_WARM_SAMPLE, 0, PSR_NOISE_WIDE, PSR_DTYPE_F16, 1},
                                     {PSR_WARM_SAMPLE, PSR_SAMPLE_RACE, PSR_NOISE_WIDE, PSR_DTYPE_F16, 1},
                                     {PSR_WARM_VERIFY, 0, PSR_NOISE_WIDE, PSR_DTYPE_F16, 0}};
    psr_warm_options o = list_options(list, 1, PSR_WARM_LAUNCH_OFF);
    assert_int_equal(psr_context_warm(ctx, &o, NULL), PSR_OK);
    size_t gumbel = stats_of(ctx).builds;
    /* the race adds its sampler only: the filters' programs are shared */
    o.variant_count = 2;
    assert_int_equal(psr_context_warm(ctx, &o, NULL), PSR_OK);
    assert_int_equal(stats_of(ctx).builds, gumbel + 1);
    size_t n = 0;
    o.variant_count = 3;
    assert_int_equal(psr_context_warm(ctx, &o, &n), PSR_OK);
    assert_int_equal(n, 3);
    if (family_programs(ctx)) /* sample (Gumbel-max, race), one filter program, verify */
        assert_int_equal(stats_of(ctx).builds, 4);
    psr_context_free(ctx);
}

/* With the launch, the variant's call runs on tiny inputs (on PoCL that
 * compiles its kernels); the programs are the same. */
static void test_warm_launch(void **state)
{
    (void)state;
    psr_context *ctx = open_context(NULL);
    const psr_warm_variant list[] = {{PSR_WARM_SAMPLE, 0, PSR_NOISE_FP32, PSR_DTYPE_F32, 0}};
    psr_warm_options o = list_options(list, 1, PSR_WARM_LAUNCH_ON);
    size_t n = 0;
    assert_int_equal(psr_context_warm(ctx, &o, &n), PSR_OK);
    assert_int_equal(n, 1);
    psr_cache_stats s = stats_of(ctx);
    assert_int_equal(s.builds, 1);
    assert_true(s.memory_hits >= 1); /* the launch found the program warmed */
    psr_context_free(ctx);
}

/* Where the driver compiles every kernel at its build (not PoCL: set
 * here through the tuning), a program holds one kernel: warming a
 * filtered call builds the sampler's and each filter kernel's, the call
 * then builds nothing, and its tokens are those of the family programs. */
static void test_warm_one_kernel_programs(void **state)
{
    (void)state;
    psr_context *family = open_context(NULL), *ctx = open_context(NULL), *cold = open_context(NULL);
    psr_tuning t;
    assert_int_equal(psr_context_tuning(ctx, &t), PSR_OK);
    t.one_kernel_programs = 1;
    t.build_threads = 3; /* the warm and the cold call build side by side, on every device */
    assert_int_equal(psr_context_set_tuning(ctx, &t), PSR_OK);
    assert_int_equal(psr_context_set_tuning(cold, &t), PSR_OK);
    t.one_kernel_programs = 0; /* and the other context builds family programs, one at a time */
    t.build_threads = 1;
    assert_int_equal(psr_context_set_tuning(family, &t), PSR_OK);
    const psr_warm_variant list[] = {{PSR_WARM_SAMPLE, 0, PSR_NOISE_FP32, PSR_DTYPE_F32, 1}};
    psr_warm_options o = list_options(list, 1, PSR_WARM_LAUNCH_OFF);
    assert_int_equal(psr_context_warm(ctx, &o, NULL), PSR_OK);
    size_t built = stats_of(ctx).builds;
    assert_true(built >= 4); /* sample (and its finishing kernel without one pass), scan, collect, collect_mass */
    enum { ROWS = 3, VOCAB = 700 };
    static float logits[ROWS * VOCAB];
    for (size_t i = 0; i < ROWS * VOCAB; i++)
        logits[i] = (float)((i * 7919u) % 1000u) / 100.0f;
    const int64_t seeds[ROWS] = {1, 2, 3}, pos[ROWS] = {0, 5, 9};
    const float temps[ROWS] = {1.0f, 0.7f, 1.3f}, top_p[ROWS] = {0.9f, 1.0f, 0.5f}, min_p[ROWS] = {0.0f, 0.1f, 0.0f};
    const int32_t top_k[ROWS] = {20, 0, 0};
    int32_t mine[ROWS], theirs[ROWS];
    assert_int_equal(sample_host_filtered(ctx, logits, PSR_DTYPE_F32, ROWS, VOCAB, 0, seeds, pos, temps, top_k, top_p,
                                          min_p, 0, mine, NULL, NULL),
                     PSR_OK);
    assert_int_equal(stats_of(ctx).builds, built);
    assert_int_equal(sample_host_filtered(family, logits, PSR_DTYPE_F32, ROWS, VOCAB, 0, seeds, pos, temps, top_k,
                                          top_p, min_p, 0, theirs, NULL, NULL),
                     PSR_OK);
    assert_memory_equal(mine, theirs, sizeof mine);
    /* A first filtered call names its kernels and builds their programs
     * on threads: the same programs, the same tokens. */
    captured_log[0] = '\0';
    assert_int_equal(sample_host_filtered(cold, logits, PSR_DTYPE_F32, ROWS, VOCAB, 0, seeds, pos, temps, top_k,
                                          top_p, min_p, 0, theirs, NULL, NULL),
                     PSR_OK);
    if (!strstr(captured_log, "side by side"))
        fail_msg("the first call built its programs one at a time:\n%.600s", captured_log);
    size_t cold_builds = stats_of(cold).builds; /* the warm built psr_filter_masses too */
    assert_true(cold_builds >= 4 && cold_builds < built);
    assert_memory_equal(mine, theirs, sizeof mine);
    psr_context_free(cold);
    psr_context_free(ctx);
    psr_context_free(family);
}

/* A build that fails on a thread is reported by the lookup that takes it,
 * as one on the calling thread would be, and the context frees the
 * builds nobody took. */
static void test_failed_build_on_a_thread(void **state)
{
    (void)state;
    psr_context *ctx = open_context(NULL);
    psr_tuning t = tuning_of(ctx);
    t.one_kernel_programs = 1;
    t.build_threads = 2;
    set_tuning(ctx, &t);
    assert_int_equal(psr_context_add_build_options(ctx, "-DPSR_WG_SIZE=nonsense"), PSR_OK);
    const float logits[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    const int64_t seed = 1, pos = 0;
    const float temp = 1.0f, top_p = 0.5f, min_p = 0.0f;
    const int32_t top_k = 3;
    int32_t token = -1;
    captured_log[0] = '\0';
    psr_status st = sample_host_filtered(ctx, logits, PSR_DTYPE_F32, 1, 8, 0, &seed, &pos, &temp, &top_k, &top_p,
                                         &min_p, 0, &token, NULL, NULL);
    if (!strstr(captured_log, "side by side"))
        fail_msg("no builds on threads:\n%.600s", captured_log);
    expect_status(ctx, st, PSR_ERR_BUILD_FAILED, "nonsense");
    assert_int_equal(token, -1);
    psr_context_free(ctx);
}

/* Builds of warming `list` on a fresh context of one program per kernel. */
static size_t kernel_builds(const psr_warm_variant *list, size_t count)
{
    psr_context *ctx = open_context(NULL);
    psr_tuning t;
    assert_int_equal(psr_context_tuning(ctx, &t), PSR_OK);
    t.one_kernel_programs = 1;
    assert_int_equal(psr_context_set_tuning(ctx, &t), PSR_OK);
    psr_warm_options o = list_options(list, count, PSR_WARM_LAUNCH_OFF);
    assert_int_equal(psr_context_warm(ctx, &o, NULL), PSR_OK);
    size_t built = stats_of(ctx).builds;
    psr_context_free(ctx);
    return built;
}

/* PSR_WARM_SHARDED adds exactly the sharded calls' kernels: the combine
 * and the filters' round for sampling, the token keys for logprobs, the
 * four rounds for verification; warming it with launches (the sharded
 * calls run as one shard of themselves) succeeds, and a sharded
 * verification then builds nothing. */
static void test_warm_sharded(void **state)
{
    (void)state;
    const psr_warm_variant plain[] = {{PSR_WARM_SAMPLE, 0, PSR_NOISE_FP32, PSR_DTYPE_F32, 1},
                                      {PSR_WARM_LOGPROBS, 0, PSR_NOISE_FP32, PSR_DTYPE_F32, 0},
                                      {PSR_WARM_VERIFY, 0, PSR_NOISE_FP32, PSR_DTYPE_F32, 0}};
    psr_warm_variant sharded[3];
    size_t extra[3] = {2, 1, 4};
    for (size_t i = 0; i < 3; i++) {
        sharded[i] = plain[i];
        sharded[i].flags |= PSR_WARM_SHARDED;
        assert_int_equal(kernel_builds(&sharded[i], 1), kernel_builds(&plain[i], 1) + extra[i]);
    }
    psr_context *ctx = open_context(NULL);
    progress_log log = {.consistent = true};
    psr_warm_options o = list_options(sharded, 3, PSR_WARM_LAUNCH_ON);
    o.progress = record_progress, o.progress_user_data = &log;
    if (psr_context_warm(ctx, &o, NULL) != PSR_OK)
        fail_msg("warm: %s", psr_last_error(ctx));
    assert_non_null(strstr(log.names[2], " sharded"));
    size_t built = stats_of(ctx).builds;
    /* one request of one draft over 100 tokens, verified as one shard */
    const int32_t cu[2] = {0, 2}, drafts[2] = {7, -1};
    const int64_t seeds[1] = {3}, pos[2] = {10, 11};
    const float temps[1] = {1.0f};
    float logits[200];
    for (int i = 0; i < 200; i++)
        logits[i] = (float)(i % 17) / 4.0f;
    psr_verify_args a;
    psr_verify_args_init(&a, sizeof a);
    a.requests = 1, a.cu = cu, a.rows = 2, a.max_drafts = 1, a.vocab = 100;
    a.target_logits = upload(ctx, logits, sizeof logits), a.draft_tokens = upload(ctx, drafts, sizeof drafts);
    a.seeds = upload(ctx, seeds, 8), a.temperatures = upload(ctx, temps, 4), a.positions = upload(ctx, pos, 16);
    a.tokens = device_buffer(ctx, 8), a.num_sampled = device_buffer(ctx, 4);
    a.shard_count = 1, a.vocab_total = 100, a.shard_slots = 1;
    a.shard_keys = device_buffer(ctx, 20), a.shard_partials = device_buffer(ctx, psr_verify_shard_slot_bytes(2));
    a.shard_records = device_buffer(ctx, 16);
    for (unsigned r = 0; r < PSR_VERIFY_SHARD_ROUNDS; r++)
        if (psr_verify_shard_round(ctx, &a, r, NULL) != PSR_OK)
            fail_msg("round %u: %s", r, psr_last_error(ctx));
    assert_int_equal(stats_of(ctx).builds, built);
    release_buffers((cl_mem[]){a.target_logits, a.draft_tokens, a.seeds, a.temperatures, a.positions, a.tokens,
                               a.num_sampled, a.shard_keys, a.shard_partials, a.shard_records},
                    10);
    psr_context_free(ctx);
}

/* Refused before anything is built, naming the argument. */
static void expect_refused(psr_context *ctx, const psr_warm_options *o, psr_status status, const char *word)
{
    size_t n = 12345;
    assert_int_equal(psr_context_warm(ctx, o, &n), status);
    expect_detail(ctx, word);
    assert_int_equal(n, 12345);
    assert_int_equal(stats_of(ctx).builds, 0);
}

static void test_warm_refusals(void **state)
{
    (void)state;
    psr_context *ctx = open_context(NULL);
    psr_warm_options o;
    memset(&o, 0, sizeof o);
    expect_refused(ctx, &o, PSR_ERR_STRUCT_SIZE, "options->struct_size");
    psr_warm_options_init(&o, sizeof o);
    o.variant_count = 2;
    expect_refused(ctx, &o, PSR_ERR_NULL_ARGUMENT, "options->variants");
    psr_warm_variant bad[2] = {{PSR_WARM_SAMPLE, 0, PSR_NOISE_FP32, PSR_DTYPE_F32, 0}, {(psr_warm_call)7, 0, PSR_NOISE_FP32, PSR_DTYPE_F32, 0}};
    o.variants = bad;
    o.variant_count = 0;
    expect_refused(ctx, &o, PSR_ERR_INVALID_ARGUMENT, "options->variant_count");
    o.variant_count = 2;
    expect_refused(ctx, &o, PSR_ERR_INVALID_ARGUMENT, "options->variants[1].call");
    const struct {
        psr_warm_variant v;
        const char *word;
    } cases[] = {
        {{PSR_WARM_SAMPLE, 0, PSR_NOISE_FP32, (psr_dtype)3, 0}, "options->variants[1].dtype"},
        {{PSR_WARM_SAMPLE, 1u << 20, PSR_NOISE_FP32, PSR_DTYPE_F32, 0}, "options->variants[1].flags"},
        {{PSR_WARM_SAMPLE, PSR_FLAG_WIDE_NOISE, PSR_NOISE_FP32, PSR_DTYPE_F32, 0}, "options->variants[1].flags"},
        {{PSR_WARM_SAMPLE, 0, (psr_noise)5, PSR_DTYPE_F32, 0}, "options->variants[1].noise"},
        {{PSR_WARM_SAMPLE, PSR_SAMPLE_PROBS, PSR_NOISE_FP32, PSR_DTYPE_F32, 0}, "options->variants[1].flags"},
        {{PSR_WARM_SAMPLE, PSR_SAMPLE_RACE | PSR_SAMPLE_PROBS, PSR_NOISE_FP32, PSR_DTYPE_F16, 0}, "options->variants[1].dtype"},
        {{PSR_WARM_SAMPLE, PSR_SAMPLE_RACE | PSR_SAMPLE_PROBS, PSR_NOISE_FP32, PSR_DTYPE_F32, 1}, "options->variants[1].filtered"},
        {{PSR_WARM_LOGPROBS, PSR_SAMPLE_DRAFTING, PSR_NOISE_FP32, PSR_DTYPE_F32, 0}, "options->variants[1].flags"},
        {{PSR_WARM_VERIFY, PSR_SAMPLE_RACE, PSR_NOISE_FP32, PSR_DTYPE_F32, 0}, "options->variants[1].flags"},
        {{PSR_WARM_LOGPROBS, 0, PSR_NOISE_WIDE, PSR_DTYPE_F32, 0}, "options->variants[1].noise"},
        {{PSR_WARM_VERIFY, 0, PSR_NOISE_FP32, PSR_DTYPE_F32, 1}, "options->variants[1].filtered"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bad[1] = cases[i].v;
        expect_refused(ctx, &o, PSR_ERR_INVALID_ARGUMENT, cases[i].word);
    }
    bad[1] = bad[0];
    o.launch = (psr_warm_launch)9;
    expect_refused(ctx, &o, PSR_ERR_INVALID_ARGUMENT, "options->launch");
    assert_int_equal(psr_context_warm(NULL, &o, NULL), PSR_ERR_NULL_ARGUMENT);
    psr_context_free(ctx);
}

/* fp64 noise on a device without fp64: the status of the call it stands
 * for, naming the entry. */
static void test_warm_fp64_unsupported(void **state)
{
    (void)state;
    psr_context_options co;
    psr_context_options_init(&co, sizeof co);
    co.disk_cache = PSR_DISK_CACHE_OFF;
    co.hide_capabilities = PSR_CAP_FP64;
    psr_context *ctx;
    assert_int_equal(psr_context_create(&co, &ctx), PSR_OK);
    const psr_warm_variant list[] = {{PSR_WARM_VERIFY, 0, PSR_NOISE_FP64, PSR_DTYPE_F32, 0}};
    psr_warm_options o = list_options(list, 1, PSR_WARM_LAUNCH_AUTO);
    expect_refused(ctx, &o, PSR_ERR_FP64_UNSUPPORTED, "options->variants[0]");
    psr_context_free(ctx);
}

/* The build logs psr logs at DEBUG: lines that name a compiler warning. */
typedef struct warning_log {
    size_t lines, warnings;
    char first[256];
} warning_log;

static void record_warnings(psr_log_level level, const char *message, void *user_data)
{
    warning_log *log = user_data;
    (void)level;
    log->lines++;
    if (strstr(message, "warning") && log->warnings++ == 0)
        snprintf(log->first, sizeof log->first, "%s", message);
}

/* No program draws a compiler warning: NVIDIA's compiler prints "1
 * warning generated." to the application's stderr. Every family of
 * f32 variants (with filters, the race, fp64 and wide noise, drafting),
 * on the vector path where the device has it and on the GPU path (the
 * code NVIDIA builds); the build logs come through the log callback. */
static void test_builds_without_warnings(void **state)
{
    (void)state;
    const psr_warm_variant list[] = {
        {PSR_WARM_SAMPLE, 0, PSR_NOISE_FP32, PSR_DTYPE_F32, 1},
        {PSR_WARM_SAMPLE, PSR_SAMPLE_DRAFTING, PSR_NOISE_WIDE, PSR_DTYPE_F32, 1},
        {PSR_WARM_SAMPLE, PSR_SAMPLE_RACE, PSR_NOISE_FP32, PSR_DTYPE_F32, 0},
        {PSR_WARM_LOGPROBS, 0, PSR_NOISE_FP32, PSR_DTYPE_F32, 1},
        {PSR_WARM_VERIFY, 0, PSR_NOISE_FP32, PSR_DTYPE_F32, 0},
        {PSR_WARM_SAMPLE, 0, PSR_NOISE_FP64, PSR_DTYPE_F32, 1},
    };
    for (int vector = 1; vector >= 0; vector--) {
        warning_log log = {0, 0, ""};
        psr_context_options co;
        assert_int_equal(psr_context_options_init(&co, sizeof co), PSR_OK);
        co.disk_cache = PSR_DISK_CACHE_OFF;
        co.log = record_warnings;
        co.log_user_data = &log;
        co.log_level = PSR_LOG_DEBUG;
        psr_context *ctx = NULL;
        assert_int_equal(psr_context_create(&co, &ctx), PSR_OK);
        psr_tuning t;
        assert_int_equal(psr_context_tuning(ctx, &t), PSR_OK);
        if (!vector)
            t.sample.vector_width = 0;
        t.quick_builds = 0;
        assert_int_equal(psr_context_set_tuning(ctx, &t), PSR_OK);
        psr_device_info info;
        assert_int_equal(psr_context_device_info(ctx, &info), PSR_OK);
        size_t count = sizeof list / sizeof list[0] - !(info.capabilities & PSR_CAP_FP64);
        psr_warm_options o = list_options(list, count, PSR_WARM_LAUNCH_OFF);
        assert_int_equal(psr_context_warm(ctx, &o, NULL), PSR_OK);
        psr_context_free(ctx);
        assert_true(log.lines > 0);
        if (log.warnings)
            fail_msg("%zu log lines name a warning (vector path %d), the first: %s", log.warnings, vector, log.first);
    }
}

int main(void)
{
    if (!have_device())
        return TEST_SKIP;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_warm_builds_exactly_the_list),
        cmocka_unit_test(test_warm_shares_programs),
        cmocka_unit_test(test_warm_launch),
        cmocka_unit_test(test_warm_one_kernel_programs),
        cmocka_unit_test(test_failed_build_on_a_thread),
        cmocka_unit_test(test_warm_sharded),
        cmocka_unit_test(test_warm_refusals),
        cmocka_unit_test(test_warm_fp64_unsupported),
        cmocka_unit_test(test_builds_without_warnings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
