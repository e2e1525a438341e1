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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auto_prefers_gpu),  cmocka_unit_test(test_types),
        cmocka_unit_test(test_vendors),           cmocka_unit_test(test_indices),
        cmocka_unit_test(test_names),             cmocka_unit_test(test_bad_selectors),
        cmocka_unit_test(test_public_select_errors), cmocka_unit_test(test_tuning_fallbacks),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
