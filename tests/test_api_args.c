/* Every public call with NULL or invalid arguments returns its status,
 * names the argument, and does not crash (no device needed). */
#include "common.h"

#include <string.h>

static void test_status_strings(void **state)
{
    (void)state;
    for (int s = 0; s <= PSR_ERR_COLLECTIVE; s++) {
        const char *text = psr_status_string((psr_status)s);
        assert_non_null(text);
        assert_int_equal(strncmp(text, "PSR_", 4), 0);
    }
    assert_non_null(strstr(psr_status_string((psr_status)999), "UNKNOWN"));
    /* The numbers are part of the ABI. */
    assert_int_equal(PSR_ERR_FP64_UNSUPPORTED, 9);
    assert_int_equal(PSR_ERR_BUILD_FAILED, 8);
}

static void test_version(void **state)
{
    (void)state;
    assert_string_equal(psr_version(), PSR_VERSION_STRING);
    assert_int_equal(psr_version_number(), PSR_VERSION_NUMBER);
}

static void expect_detail(const char *word)
{
    const char *detail = psr_last_error(NULL);
    if (!strstr(detail, word))
        fail_msg("error detail \"%s\" does not name \"%s\"", detail, word);
}

static void test_context_creation_arguments(void **state)
{
    (void)state;
    psr_context *ctx = (psr_context *)0x1;
    assert_int_equal(psr_context_create(NULL, NULL), PSR_ERR_NULL_ARGUMENT);
    expect_detail("out");

    psr_context_options o;
    memset(&o, 0, sizeof o); /* not initialised */
    assert_int_equal(psr_context_create(&o, &ctx), PSR_ERR_STRUCT_SIZE);
    expect_detail("struct_size");
    assert_null(ctx);

    psr_context_options_init(&o, sizeof o);
    o.log_level = (psr_log_level)42;
    assert_int_equal(psr_context_create(&o, &ctx), PSR_ERR_INVALID_ARGUMENT);
    expect_detail("log_level");

    psr_context_options_init(&o, sizeof o);
    o.disk_cache = (psr_disk_cache_mode)7;
    assert_int_equal(psr_context_create(&o, &ctx), PSR_ERR_INVALID_ARGUMENT);
    expect_detail("disk_cache");

    psr_context_options_init(&o, sizeof o);
    o.device = "1:2:3";
    assert_int_equal(psr_context_create(&o, &ctx), PSR_ERR_BAD_SELECTOR);
    expect_detail("1:2:3");
    assert_null(ctx);

    assert_int_equal(psr_context_options_init(NULL, sizeof o), PSR_ERR_NULL_ARGUMENT);
}

static void test_create_from_cl_arguments(void **state)
{
    (void)state;
    psr_context *ctx = NULL;
    cl_context c = (cl_context)0x10;
    cl_device_id d = (cl_device_id)0x20;
    cl_command_queue q = (cl_command_queue)0x30;
    assert_int_equal(psr_context_create_from_cl(c, d, q, NULL, NULL), PSR_ERR_NULL_ARGUMENT);
    expect_detail("out");
    assert_int_equal(psr_context_create_from_cl(NULL, d, q, NULL, &ctx), PSR_ERR_NULL_ARGUMENT);
    expect_detail("cl_ctx");
    assert_int_equal(psr_context_create_from_cl(c, NULL, q, NULL, &ctx), PSR_ERR_NULL_ARGUMENT);
    expect_detail("device");
    assert_int_equal(psr_context_create_from_cl(c, d, NULL, NULL, &ctx), PSR_ERR_NULL_ARGUMENT);
    expect_detail("queue");
    assert_null(ctx);
}

static void test_context_calls_with_null(void **state)
{
    (void)state;
    psr_device_info info;
    psr_cache_stats stats;
    cl_context c;
    assert_int_equal(psr_context_device_info(NULL, &info), PSR_ERR_NULL_ARGUMENT);
    expect_detail("ctx");
    assert_int_equal(psr_context_cache_stats(NULL, &stats), PSR_ERR_NULL_ARGUMENT);
    expect_detail("ctx");
    assert_int_equal(psr_context_cl(NULL, &c, NULL, NULL), PSR_ERR_NULL_ARGUMENT);
    assert_int_equal(psr_context_warm(NULL, NULL, NULL), PSR_ERR_NULL_ARGUMENT);
    expect_detail("ctx");
    assert_string_equal(psr_context_build_log(NULL), "");
    assert_non_null(psr_last_error(NULL));
    psr_context_free(NULL);
}

static void test_discovery_and_cache_calls_with_null(void **state)
{
    (void)state;
    size_t n;
    psr_cache_entry entry;
    char buf[16];
    assert_int_equal(psr_device_list(NULL, 0, NULL), PSR_ERR_NULL_ARGUMENT);
    expect_detail("count");
    assert_int_equal(psr_device_list(NULL, 3, &n), PSR_ERR_NULL_ARGUMENT);
    expect_detail("devices");
    assert_int_equal(psr_device_select("auto", NULL), PSR_ERR_NULL_ARGUMENT);
    expect_detail("out");
    assert_int_equal(psr_cache_list(NULL, &entry, 1, NULL), PSR_ERR_NULL_ARGUMENT);
    expect_detail("count");
    assert_int_equal(psr_cache_list(NULL, NULL, 2, &n), PSR_ERR_NULL_ARGUMENT);
    expect_detail("entries");
    assert_int_equal(psr_cache_directory(NULL, 10), PSR_ERR_NULL_ARGUMENT);
    expect_detail("buf");
    assert_int_equal(psr_cache_directory(buf, 0), PSR_ERR_BUFFER_TOO_SMALL);
    expect_detail("capacity");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_strings),
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_context_creation_arguments),
        cmocka_unit_test(test_create_from_cl_arguments),
        cmocka_unit_test(test_context_calls_with_null),
        cmocka_unit_test(test_discovery_and_cache_calls_with_null),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
