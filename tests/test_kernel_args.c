/* The host binds each kernel's arguments by name (lib/runtime/launch.c);
 * built with -cl-kernel-arg-info, the builder compares every name and the
 * count with what the driver reports, so each launch path below fails if
 * host and kernel disagree. A control binds a wrong name and must fail.
 * Every program builds again with the option: the long suite runs it. */
#include "common.h"

#include <stdlib.h>
#include <string.h>

static psr_context *ctx;

static void prepare(psr_context *c)
{
    assert_int_equal(psr_context_add_build_options(c, "-cl-kernel-arg-info"), PSR_OK);
}

enum { ROWS = 4, VOCAB = 40000 };

/* Sampling: one pass, two passes (the finishing kernel), filters, race. */
static void test_sample_paths(void **state)
{
    (void)state;
    float *x = malloc((size_t)ROWS * VOCAB * 4);
    for (size_t i = 0; i < (size_t)ROWS * VOCAB; i++)
        x[i] = normal();
    int64_t seeds[ROWS] = {1, 2, 3, 4}, pos[ROWS] = {5, 6, 7, 8};
    float temps[ROWS] = {1.0f, 0.5f, 0.0f, 2.0f}, top_p[ROWS] = {0.9f, 0.5f, 1.0f, 0.99f};
    int32_t top_k[ROWS] = {50, 0, 10, 5000}, tokens[ROWS];
    psr_tuning t;
    for (int two_pass = 0; two_pass <= 1; two_pass++) {
        assert_int_equal(psr_context_tuning(ctx, &t), PSR_OK);
        t.sample.two_pass = two_pass;
        assert_int_equal(psr_context_set_tuning(ctx, &t), PSR_OK);
        const unsigned flags[] = {0, PSR_SAMPLE_RACE};
        for (int f = 0; f < 2; f++)
            assert_int_equal(sample_host(ctx, x, PSR_DTYPE_F32, ROWS, VOCAB, 0, seeds, pos, temps, flags[f],
                                             tokens, NULL, NULL),
                             PSR_OK);
        assert_int_equal(sample_host_filtered(ctx, x, PSR_DTYPE_F32, ROWS, VOCAB, 0, seeds, pos, temps, top_k,
                                                  top_p, NULL, 0, tokens, NULL, NULL),
                         PSR_OK);
    }
    free(x);
}

/* Logprobs in two launches and in one. */
static void test_logprobs_paths(void **state)
{
    (void)state;
    float *x = malloc((size_t)ROWS * VOCAB * 4);
    for (size_t i = 0; i < (size_t)ROWS * VOCAB; i++)
        x[i] = normal();
    float temps[ROWS] = {1.0f, 0.5f, 1.0f, 2.0f};
    int32_t tokens[ROWS] = {0, 1, 2, 3};
    psr_logprobs_args a;
    psr_logprobs_args_init(&a, sizeof a);
    a.rows = ROWS;
    a.vocab = VOCAB;
    a.requests = ROWS;
    a.logits = upload(ctx, x, sizeof(float) * ROWS * VOCAB);
    a.temperatures = upload(ctx, temps, sizeof temps);
    a.tokens = upload(ctx, tokens, sizeof tokens);
    a.top_n = 5;
    a.token_logprobs = device_buffer(ctx, ROWS * 4);
    a.token_ranks = device_buffer(ctx, ROWS * 4);
    a.top_ids = device_buffer(ctx, ROWS * 5 * 4);
    a.top_logprobs = device_buffer(ctx, ROWS * 5 * 4);
    psr_tuning t;
    const size_t one_blocks[] = {0, SIZE_MAX};
    for (int one = 0; one < 2; one++) {
        assert_int_equal(psr_context_tuning(ctx, &t), PSR_OK);
        t.logprobs.one_blocks = one_blocks[one];
        assert_int_equal(psr_context_set_tuning(ctx, &t), PSR_OK);
        assert_int_equal(psr_logprobs(ctx, &a, NULL), PSR_OK);
    }
    clFinish(queue_of(ctx));
    cl_mem bufs[] = {a.logits, a.temperatures, a.tokens, a.token_logprobs, a.token_ranks, a.top_ids,
                     a.top_logprobs};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        clReleaseMemObject(bufs[i]);
    free(x);
}

/* Verification with a draft cache: statistics, sampling, and (with two
 * passes) the finishing kernel; one launch where the tuning allows it. */
static void test_verify_paths(void **state)
{
    (void)state;
    enum { R = 2, K = 2, ROWS_V = R * (K + 1) };
    float *x = malloc((size_t)ROWS_V * VOCAB * 4), *cache = malloc((size_t)R * K * VOCAB * 4);
    for (size_t i = 0; i < (size_t)ROWS_V * VOCAB; i++)
        x[i] = normal();
    for (size_t i = 0; i < (size_t)R * K * VOCAB; i++)
        cache[i] = normal();
    int32_t cu[R + 1] = {0, K + 1, 2 * (K + 1)}, drafts[ROWS_V] = {1, 2, -1, 3, 4, -1};
    int64_t seeds[R] = {9, 10}, pos[ROWS_V] = {1, 2, 3, 4, 5, 6};
    float temps[R] = {1.0f, 0.7f};
    psr_verify_args a;
    psr_verify_args_init(&a, sizeof a);
    a.requests = R;
    a.cu = cu;
    a.rows = ROWS_V;
    a.max_drafts = K;
    a.vocab = VOCAB;
    a.target_logits = upload(ctx, x, (size_t)ROWS_V * VOCAB * 4);
    a.draft_cache = upload(ctx, cache, (size_t)R * K * VOCAB * 4);
    a.draft_cache_k = K;
    a.draft_tokens = upload(ctx, drafts, sizeof drafts);
    a.seeds = upload(ctx, seeds, sizeof seeds);
    a.temperatures = upload(ctx, temps, sizeof temps);
    a.positions = upload(ctx, pos, sizeof pos);
    a.tokens = device_buffer(ctx, R * (K + 1) * 4);
    a.num_sampled = device_buffer(ctx, R * 4);
    psr_tuning t;
    for (int two_pass = 0; two_pass <= 1; two_pass++) {
        assert_int_equal(psr_context_tuning(ctx, &t), PSR_OK);
        t.sample.two_pass = two_pass;
        t.verify.fused_groups = two_pass ? 0 : SIZE_MAX; /* one launch where the driver allows it */
        assert_int_equal(psr_context_set_tuning(ctx, &t), PSR_OK);
        assert_int_equal(psr_verify(ctx, &a, NULL), PSR_OK);
    }
    clFinish(queue_of(ctx));
    cl_mem bufs[] = {a.target_logits, a.draft_cache, a.draft_tokens, a.seeds, a.temperatures, a.positions,
                     a.tokens, a.num_sampled};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        clReleaseMemObject(bufs[i]);
    free(x);
    free(cache);
}

/* The control: a name the kernel does not have must fail. */
static void test_wrong_name_fails(void **state)
{
    (void)state;
    cl_program p;
    const char *src = "__kernel void k(uint first, __global uint *second) { second[0] = first; }";
    assert_int_equal(psr_program_build_source(ctx, "control", src, "-cl-kernel-arg-info", &p), PSR_OK);
    cl_int err;
    cl_kernel k = clCreateKernel(p, "k", &err);
    assert_int_equal(err, CL_SUCCESS);
    char name[16] = "";
    if (clGetKernelArgInfo(k, 0, CL_KERNEL_ARG_NAME, sizeof name, name, NULL) != CL_SUCCESS) {
        clReleaseKernel(k);
        clReleaseProgram(p);
        skip(); /* this driver keeps no names: nothing to compare */
    }
    cl_uint v = 1;
    psr_kernel_args b = psr_kernel_args_begin(ctx, k, "k");
    psr_arg_value(&b, "first", &v, sizeof v);
    psr_arg_mem(&b, "third", NULL);
    assert_int_equal(psr_kernel_args_end(&b), PSR_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(psr_last_error(ctx), "\"second\""));
    b = psr_kernel_args_begin(ctx, k, "k");
    psr_arg_value(&b, "first", &v, sizeof v);
    assert_int_equal(psr_kernel_args_end(&b), PSR_ERR_INVALID_ARGUMENT); /* one argument short */
    clReleaseKernel(k);
    clReleaseProgram(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sample_paths),
        cmocka_unit_test(test_logprobs_paths),
        cmocka_unit_test(test_verify_paths),
        cmocka_unit_test(test_wrong_name_fails),
    };
    return run_device_tests(tests, .ctx = &ctx, .seed = 12345, .prepare = prepare);
}
