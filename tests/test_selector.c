/* Selector parsing and matching, on synthetic device lists (no device needed). */
#include "common.h"

#include <string.h>

static psr_found_device fake(unsigned p, unsigned d, psr_device_type type, const char *platform,
                             const char *platform_vendor, const char *name, const char *vendor)
{
    psr_found_device f;
    memset(&f, 0, sizeof f);
    f.info.platform_index = p;
    f.info.device_index = d;
    f.info.type = type;
    psr_strlcpy(f.info.platform_name, platform, sizeof f.info.platform_name);
    psr_strlcpy(f.info.platform_vendor, platform_vendor, sizeof f.info.platform_vendor);
    psr_strlcpy(f.info.name, name, sizeof f.info.name);
    psr_strlcpy(f.info.vendor, vendor, sizeof f.info.vendor);
    return f;
}

/* A machine with PoCL's CPU first, then NVIDIA, AMD and Intel GPUs. */
static psr_found_device machine[5];
static const size_t machine_size = 5;

static int setup(void **state)
{
    (void)state;
    machine[0] = fake(0, 0, PSR_DEVICE_CPU, "Portable Computing Language", "The pocl project",
                      "pthread-znver3", "AuthenticAMD");
    machine[1] = fake(1, 0, PSR_DEVICE_GPU, "NVIDIA CUDA", "NVIDIA Corporation", "NVIDIA H200",
                      "NVIDIA Corporation");
    machine[2] = fake(2, 0, PSR_DEVICE_GPU, "AMD Accelerated Parallel Processing",
                      "Advanced Micro Devices, Inc.", "gfx942", "Advanced Micro Devices, Inc.");
    machine[3] = fake(3, 0, PSR_DEVICE_CPU, "Intel(R) OpenCL", "Intel(R) Corporation",
                      "Intel(R) Xeon(R)", "Intel(R) Corporation");
    machine[4] = fake(3, 1, PSR_DEVICE_GPU, "Intel(R) OpenCL", "Intel(R) Corporation",
                      "Intel(R) Arc(TM) A770", "Intel(R) Corporation");
    return 0;
}

static long pick(const char *text)
{
    psr_selector sel;
    char err[256];
    psr_status st = psr_selector_parse(text, &sel, err, sizeof err);
    if (st != PSR_OK)
        fail_msg("selector \"%s\" did not parse: %s", text, err);
    return psr_selector_match(&sel, machine, machine_size);
}

static void test_auto_prefers_gpu(void **state)
{
    (void)state;
    assert_int_equal(pick("auto"), 1);
    assert_int_equal(psr_selector_match(&(psr_selector){.kind = PSR_SELECT_AUTO}, machine, 1), 0);
    assert_int_equal(psr_selector_match(&(psr_selector){.kind = PSR_SELECT_AUTO}, machine, 0), -1);
}

static void test_types(void **state)
{
    (void)state;
    assert_int_equal(pick("gpu"), 1);
    assert_int_equal(pick("CPU"), 0);
    assert_int_equal(pick("accelerator"), -1);
}

static void test_vendors(void **state)
{
    (void)state;
    assert_int_equal(pick("nvidia"), 1);
    assert_int_equal(pick("amd"), 2);
    /* Intel's GPU wins over Intel's CPU; PoCL's AuthenticAMD CPU is not "amd". */
    assert_int_equal(pick("intel"), 4);
    assert_int_equal(pick("pocl"), 0);
}

static void test_indices(void **state)
{
    (void)state;
    assert_int_equal(pick("0:0"), 0);
    assert_int_equal(pick("3:1"), 4);
    assert_int_equal(pick(" 2:0 "), 2);
    assert_int_equal(pick("9:0"), -1);
    assert_int_equal(pick("0:7"), -1);
}

static void test_names(void **state)
{
    (void)state;
    assert_int_equal(pick("h200"), 1);
    assert_int_equal(pick("Arc"), 4);
    assert_int_equal(pick("znver"), 0);
    assert_int_equal(pick("no such device"), -1);
}

static void test_bad_selectors(void **state)
{
    (void)state;
    const char *bad[] = {"", "   ", "1:", ":3", "a:b", "1:2:3", "-1:0", "0:x", "1234567:0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        psr_selector sel;
        char err[256] = "";
        psr_status st = psr_selector_parse(bad[i], &sel, err, sizeof err);
        if (st != PSR_ERR_BAD_SELECTOR)
            fail_msg("selector \"%s\" should be bad, got %s", bad[i], psr_status_string(st));
        assert_true(strlen(err) > 0);
    }
    char longer[300];
    memset(longer, 'x', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    psr_selector sel;
    char err[256];
    assert_int_equal(psr_selector_parse(longer, &sel, err, sizeof err), PSR_ERR_BAD_SELECTOR);
}

static void test_public_select_errors(void **state)
{
    (void)state;
    psr_device_info d;
    assert_int_equal(psr_device_select("1:", &d), PSR_ERR_BAD_SELECTOR);
    assert_non_null(strstr(psr_last_error(NULL), "1:"));
    assert_int_equal(psr_device_select("auto", NULL), PSR_ERR_NULL_ARGUMENT);
    assert_non_null(strstr(psr_last_error(NULL), "out"));
}

static void test_tuning_fallbacks(void **state)
{
    (void)state;
    psr_tuning t = psr_tuning_for(&machine[1].info);
    assert_string_equal(t.sample.rule, "nvidia-gpu");
    assert_int_equal(t.sample.work_group_size, 256);
    assert_false(t.logprobs.segment_tau); /* GPUs take the exact logprobs bound at once */
    assert_int_equal(t.verify.resident_per_unit, 4); /* the verification sampler's registers */
    assert_true(psr_tuning_for(&machine[3].info).logprobs.segment_tau);
    assert_string_equal(psr_tuning_for(&machine[2].info).sample.rule, "amd-gpu");
    assert_string_equal(psr_tuning_for(&machine[4].info).sample.rule, "intel-gpu");
    /* An Intel CPU is a CPU first: the vendor rows are for GPUs. */
    assert_string_equal(psr_tuning_for(&machine[3].info).sample.rule, "cpu");
    psr_device_info unknown = machine[1].info;
    psr_strlcpy(unknown.platform_vendor, "Mystery Silicon", sizeof unknown.platform_vendor);
    psr_strlcpy(unknown.vendor, "Mystery Silicon", sizeof unknown.vendor);
    assert_string_equal(psr_tuning_for(&unknown).sample.rule, "gpu");
    unknown.type = PSR_DEVICE_ACCELERATOR;
    assert_string_equal(psr_tuning_for(&unknown).sample.rule, "default");
    /* Never above the device's limit. */
    unknown.type = PSR_DEVICE_GPU;
    unknown.max_work_group_size = 100;
    assert_int_equal(psr_tuning_for(&unknown).sample.work_group_size, 64);
}

/* The experimental psr_device_tuning gives the table's rows, before any
 * PSR_TUNE_* variable, with the counts that scale with the device filled
 * in; the PoCL row's driver facts come from the platform. */
static void test_device_tuning(void **state)
{
    (void)state;
    const char *rules[] = {"cpu", "nvidia-gpu", "amd-gpu", "cpu", "intel-gpu"};
    setenv("PSR_TUNE_WG", "32", 1); /* not read by psr_device_tuning */
    for (size_t i = 0; i < machine_size; i++) {
        psr_device_info info = machine[i].info;
        info.compute_units = 10;
        info.max_work_group_size = 1024;
        psr_tuning t;
        assert_int_equal(psr_device_tuning(&info, &t), PSR_OK);
        assert_string_equal(t.sample.rule, rules[i]);
        assert_non_null(t.verify.rule);
        assert_non_null(t.logprobs.rule);
        assert_non_null(t.filter.rule);
        assert_true(t.sample.work_group_size >= 16 && t.sample.work_group_size <= 1024);
        assert_int_equal(t.sample.work_group_size & (t.sample.work_group_size - 1), 0);
        assert_true(t.sample.resident_per_unit > 0 && t.verify.resident_per_unit > 0);
        assert_true(t.sample.min_steps > 0);
        assert_int_equal(t.verify.skip_groups, 4 * 10); /* 4 per compute unit */
        assert_string_equal(t.extra_options, "");
        bool pocl = i == 0;
        assert_int_equal(t.driver_caches, pocl);
        assert_int_equal(t.verify.fused_broken, pocl);
        /* The internal table and the experimental call agree. */
        psr_tuning internal = psr_tuning_for(&info);
        assert_int_equal(internal.sample.work_group_size, t.sample.work_group_size);
        assert_string_equal(internal.sample.rule, t.sample.rule);
    }
    unsetenv("PSR_TUNE_WG");
    psr_tuning t;
    assert_int_equal(psr_device_tuning(&machine[1].info, &t), PSR_OK);
    assert_int_equal(t.sample.work_group_size, 256);
    assert_true(t.verify.warp_shuffle);     /* NVIDIA's row */
    assert_int_equal(t.sample.vector_width, 0);
    assert_int_equal(psr_device_tuning(&machine[0].info, &t), PSR_OK);
    assert_int_equal(t.sample.vector_width, 16); /* PoCL's explicit vectors */
    assert_false(t.verify.warp_shuffle);
    assert_true(t.logprobs.segment_tau);
    assert_int_equal(psr_device_tuning(NULL, &t), PSR_ERR_NULL_ARGUMENT);
    assert_int_equal(psr_device_tuning(&machine[0].info, NULL), PSR_ERR_NULL_ARGUMENT);
}

/* psr_tuning_variable_at lists every PSR_TUNE_* variable once, each with
 * the field it sets and its range, and NULL past the last. */
static void test_tuning_variables(void **state)
{
    (void)state;
    const char *expected[] = {"PSR_TUNE_WG", "PSR_TUNE_RESIDENT", "PSR_TUNE_VECTOR", "PSR_TUNE_MIN_STEPS",
                              "PSR_TUNE_TWO_PASS", "PSR_TUNE_MULHI", "PSR_TUNE_VERIFY_SKIP",
                              "PSR_TUNE_VERIFY_FUSED", "PSR_TUNE_SHUFFLE", "PSR_TUNE_LOGPROBS_ONE",
                              "PSR_TUNE_LOGPROBS_FEW", "PSR_TUNE_FILTER_DIRECT", "PSR_TUNE_ONE_KERNEL",
                              "PSR_TUNE_BUILD_OPTIONS"};
    const size_t n_expected = sizeof expected / sizeof expected[0];
    bool seen[sizeof expected / sizeof expected[0]] = {false};
    size_t n = 0;
    for (const psr_tuning_variable *v; (v = psr_tuning_variable_at(n)); n++) {
        assert_non_null(v->name);
        assert_non_null(v->field);
        assert_non_null(v->range);
        assert_int_equal(strncmp(v->name, "PSR_TUNE_", 9), 0);
        assert_true(strlen(v->field) > 0 && strlen(v->range) > 0);
        for (size_t j = 0; j < n; j++)
            assert_string_not_equal(psr_tuning_variable_at(j)->name, v->name);
        for (size_t j = 0; j < n_expected; j++)
            if (strcmp(expected[j], v->name) == 0)
                seen[j] = true;
        assert_true(n < 100);
    }
    for (size_t j = 0; j < n_expected; j++)
        if (!seen[j])
            fail_msg("%s is not listed", expected[j]);
    assert_null(psr_tuning_variable_at(n));
    assert_null(psr_tuning_variable_at(n + 1));
    assert_null(psr_tuning_variable_at((size_t)-1));
    assert_string_equal(psr_tuning_variable_at(0)->name, "PSR_TUNE_WG");
    assert_string_equal(psr_tuning_variable_at(0)->field, "sample.work_group_size");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auto_prefers_gpu),  cmocka_unit_test(test_types),
        cmocka_unit_test(test_vendors),           cmocka_unit_test(test_indices),
        cmocka_unit_test(test_names),             cmocka_unit_test(test_bad_selectors),
        cmocka_unit_test(test_public_select_errors), cmocka_unit_test(test_tuning_fallbacks),
        cmocka_unit_test(test_device_tuning),     cmocka_unit_test(test_tuning_variables),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
