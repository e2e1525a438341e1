/* What an engine that embeds psr relies on: argument structs of any size
 * the library accepts, buffers of the right cl_context that do not
 * overlap, the OpenCL code of a failure, int64 tokens, one filter value
 * for every request, and the host-array calls of logprobs and
 * verification against the oracle. */
#include "common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static psr_context *ctx;

enum { R = 4, V = 3001 };

/* A small problem on the device: logits, seeds, temperatures, positions. */
typedef struct problem {
    float x[R * V];
    int64_t seeds[R], pos[R];
    float temps[R];
    cl_mem logits, seeds_m, temps_m, pos_m;
} problem;

static cl_mem buffer(cl_context cl, const void *host, size_t bytes)
{
    cl_int err;
    cl_mem m = clCreateBuffer(cl, CL_MEM_READ_WRITE | (host ? CL_MEM_COPY_HOST_PTR : 0), bytes, (void *)host, &err);
    assert_int_equal(err, CL_SUCCESS);
    return m;
}

static problem *make_problem(void)
{
    problem *p = malloc(sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < R * V; i++)
        p->x[i] = 3.0f * normal();
    for (int r = 0; r < R; r++)
        p->seeds[r] = 100 + r, p->pos[r] = 3 * r, p->temps[r] = 0.6f + 0.2f * (float)r;
    cl_context cl = cl_context_of(ctx);
    p->logits = buffer(cl, p->x, sizeof p->x);
    p->seeds_m = buffer(cl, p->seeds, sizeof p->seeds);
    p->temps_m = buffer(cl, p->temps, sizeof p->temps);
    p->pos_m = buffer(cl, p->pos, sizeof p->pos);
    return p;
}

static void free_problem(problem *p)
{
    clReleaseMemObject(p->logits);
    clReleaseMemObject(p->seeds_m);
    clReleaseMemObject(p->temps_m);
    clReleaseMemObject(p->pos_m);
    free(p);
}

static void sample_args(psr_sample_args *a, const problem *p, cl_mem tokens)
{
    assert_int_equal(psr_sample_args_init(a, sizeof *a), PSR_OK);
    a->rows = R, a->vocab = V; /* requests 0: one per row */
    a->logits = p->logits, a->seeds = p->seeds_m, a->temperatures = p->temps_m, a->positions = p->pos_m;
    a->tokens = tokens;
}

static void expect(psr_status got, psr_status want, const char *word)
{
    if (got != want)
        fail_msg("%s, expected %s (%s)", psr_status_string(got), psr_status_string(want), psr_last_error(ctx));
    if (!strstr(psr_last_error(ctx), word))
        fail_msg("detail \"%s\" does not name \"%s\"", psr_last_error(ctx), word);
}

static void test_struct_sizes(void **state)
{
    (void)state;
    psr_sample_args a;
    assert_int_equal(psr_sample_args_init(&a, sizeof a), PSR_OK);
    assert_int_equal(a.struct_size, sizeof a);
    assert_true(a.all_top_p == 1.0f && a.noise == PSR_NOISE_FP32 && a.tokens_dtype == PSR_TOKENS_I32);
    assert_int_equal(psr_sample_args_init(&a, 16), PSR_ERR_STRUCT_SIZE);
    assert_int_equal(a.struct_size, 0);
    assert_non_null(strstr(psr_last_error(NULL), "psr_sample_args"));
    static unsigned char big[1024];
    assert_int_equal(psr_verify_args_init((psr_verify_args *)(void *)big, sizeof big), PSR_ERR_STRUCT_SIZE);
    psr_logprobs_host_args h;
    assert_int_equal(psr_logprobs_host_args_init(&h, sizeof h - 1), PSR_ERR_STRUCT_SIZE);
    /* A call given a struct never set up says which. */
    psr_lm_head_args l;
    memset(&l, 0, sizeof l);
    expect(psr_lm_head(ctx, &l, NULL), PSR_ERR_STRUCT_SIZE, "psr_lm_head_args_init");
}

static void test_foreign_buffer(void **state)
{
    (void)state;
    problem *p = make_problem();
    cl_device_id dev;
    psr_context_cl(ctx, NULL, &dev, NULL);
    cl_int err;
    cl_context other = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    cl_mem foreign = buffer(other, p->seeds, sizeof p->seeds);
    cl_mem tokens = buffer(cl_context_of(ctx), NULL, R * 4);
    psr_sample_args a;
    sample_args(&a, p, tokens);
    a.seeds = foreign;
    expect(psr_sample(ctx, &a, NULL), PSR_ERR_FOREIGN_BUFFER, "args->seeds");
    /* Buffers come and go, and a driver hands a destroyed buffer's handle
     * out again (NVIDIA's does): each call sees the buffer it is given. */
    for (int i = 0; i < 8; i++) {
        cl_mem theirs = buffer(other, p->seeds, sizeof p->seeds);
        a.seeds = theirs;
        expect(psr_sample(ctx, &a, NULL), PSR_ERR_FOREIGN_BUFFER, "args->seeds");
        clReleaseMemObject(theirs);
        cl_mem ours = buffer(cl_context_of(ctx), p->seeds, i % 2 ? sizeof p->seeds : 8);
        a.seeds = ours;
        psr_status st = psr_sample(ctx, &a, NULL);
        assert_int_equal(st, i % 2 ? PSR_OK : PSR_ERR_BUFFER_TOO_SMALL);
        clFinish(queue_of(ctx));
        clReleaseMemObject(ours);
    }
    clReleaseMemObject(foreign);
    clReleaseMemObject(tokens);
    clReleaseContext(other);
    free_problem(p);
}

/* An OpenCL failure keeps its code and gets the status of what it means
 * (drivers differ in what they refuse, so the failure is recorded here as
 * the library records one). */
static void test_opencl_codes(void **state)
{
    (void)state;
    static const struct {
        cl_int code;
        psr_status status;
    } cases[] = {{CL_MEM_OBJECT_ALLOCATION_FAILURE, PSR_ERR_OUT_OF_DEVICE_MEMORY},
                 {CL_OUT_OF_RESOURCES, PSR_ERR_OUT_OF_DEVICE_MEMORY},
                 {CL_OUT_OF_HOST_MEMORY, PSR_ERR_OUT_OF_HOST_MEMORY},
                 {CL_INVALID_EVENT_WAIT_LIST, PSR_ERR_OPENCL}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(psr_fail_cl(ctx, cases[i].code, "enqueueing x"), cases[i].status);
        assert_int_equal(psr_last_cl_error(ctx), cases[i].code);
        assert_non_null(strstr(psr_last_error(ctx), psr_cl_error_string(cases[i].code)));
        assert_int_equal(psr_fail_cl(NULL, cases[i].code, "listing"), cases[i].status);
        assert_int_equal(psr_last_cl_error(NULL), cases[i].code);
    }
    /* A failure that is not OpenCL's clears the code. */
    psr_sample_args a;
    psr_sample_args_init(&a, sizeof a);
    expect(psr_sample(ctx, &a, NULL), PSR_ERR_INVALID_ARGUMENT, "args->rows");
    assert_int_equal(psr_last_cl_error(ctx), CL_SUCCESS);
}

static void test_overlapping_outputs(void **state)
{
    (void)state;
    problem *p = make_problem();
    cl_context cl = cl_context_of(ctx);
    psr_sample_args a;
    sample_args(&a, p, p->pos_m);
    expect(psr_sample(ctx, &a, NULL), PSR_ERR_BUFFER_OVERLAP, "args->tokens overlaps args->positions");
    /* Sub-buffers of one allocation: apart they are fine, overlapping they are not. */
    size_t align = 0;
    cl_device_id dev;
    psr_context_cl(ctx, NULL, &dev, NULL);
    cl_uint bits = 0;
    clGetDeviceInfo(dev, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof bits, &bits, NULL);
    align = bits / 8 > 64 ? bits / 8 : 64;
    cl_mem whole = buffer(cl, NULL, 4 * align);
    cl_buffer_region first = {0, R * 4}, second = {2 * align, R * 4}, inside = {8, R * 4};
    cl_int err;
    cl_mem flags_m = clCreateSubBuffer(whole, 0, CL_BUFFER_CREATE_TYPE_REGION, &first, &err);
    assert_int_equal(err, CL_SUCCESS);
    cl_mem tok_m = clCreateSubBuffer(whole, 0, CL_BUFFER_CREATE_TYPE_REGION, &second, &err);
    assert_int_equal(err, CL_SUCCESS);
    sample_args(&a, p, tok_m);
    a.row_flags = flags_m;
    assert_int_equal(psr_sample(ctx, &a, NULL), PSR_OK);
    clFinish(queue_of(ctx));
    a.tokens = whole; /* the parent holds both */
    expect(psr_sample(ctx, &a, NULL), PSR_ERR_BUFFER_OVERLAP, "args->tokens overlaps args->row_flags");
    cl_mem unaligned = clCreateSubBuffer(whole, 0, CL_BUFFER_CREATE_TYPE_REGION, &inside, &err);
    if (err == CL_SUCCESS) { /* drivers may refuse an unaligned origin */
        a.tokens = unaligned;
        expect(psr_sample(ctx, &a, NULL), PSR_ERR_BUFFER_OVERLAP, "args->tokens overlaps args->row_flags");
        clReleaseMemObject(unaligned);
    }
    clReleaseMemObject(flags_m);
    clReleaseMemObject(tok_m);
    clReleaseMemObject(whole);
    free_problem(p);
}

static void read_tokens(cl_mem m, void *out, size_t bytes)
{
    assert_int_equal(clEnqueueReadBuffer(queue_of(ctx), m, CL_TRUE, 0, bytes, out, 0, NULL, NULL), CL_SUCCESS);
}

/* int64 tokens are the int32 tokens, and logprobs read either. */
static void test_int64_tokens(void **state)
{
    (void)state;
    problem *p = make_problem();
    cl_context cl = cl_context_of(ctx);
    cl_mem t32 = buffer(cl, NULL, R * 4), t64 = buffer(cl, NULL, R * 8);
    psr_sample_args a;
    sample_args(&a, p, t32);
    assert_int_equal(psr_sample(ctx, &a, NULL), PSR_OK);
    a.tokens = t64, a.tokens_dtype = PSR_TOKENS_I64;
    assert_int_equal(psr_sample(ctx, &a, NULL), PSR_OK);
    int32_t v32[R];
    int64_t v64[R];
    read_tokens(t32, v32, sizeof v32);
    read_tokens(t64, v64, sizeof v64);
    for (int r = 0; r < R; r++) {
        assert_int_equal(v64[r], v32[r]);
        assert_int_equal(v32[r], psr_oracle_sample_row(p->x + (size_t)r * V, V, p->temps[r], p->seeds[r], p->pos[r],
                                                       false, PSR_ORACLE_FP32, NULL));
    }
    a.tokens = t32, a.tokens_dtype = (psr_token_dtype)2;
    expect(psr_sample(ctx, &a, NULL), PSR_ERR_INVALID_ARGUMENT, "args->tokens_dtype");
    a.tokens_dtype = PSR_TOKENS_I64;
    expect(psr_sample(ctx, &a, NULL), PSR_ERR_BUFFER_TOO_SMALL, "args->tokens");
    cl_mem lp32 = buffer(cl, NULL, R * 4), lp64 = buffer(cl, NULL, R * 4);
    psr_logprobs_args l;
    assert_int_equal(psr_logprobs_args_init(&l, sizeof l), PSR_OK);
    l.rows = R, l.vocab = V, l.logits = p->logits, l.temperatures = p->temps_m;
    l.tokens = t32, l.token_logprobs = lp32;
    assert_int_equal(psr_logprobs(ctx, &l, NULL), PSR_OK);
    l.tokens = t64, l.tokens_dtype = PSR_TOKENS_I64, l.token_logprobs = lp64;
    assert_int_equal(psr_logprobs(ctx, &l, NULL), PSR_OK);
    float f32[R], f64[R];
    read_tokens(lp32, f32, sizeof f32);
    read_tokens(lp64, f64, sizeof f64);
    assert_memory_equal(f32, f64, sizeof f32);
    cl_mem all[] = {t32, t64, lp32, lp64};
    for (size_t i = 0; i < 4; i++)
        clReleaseMemObject(all[i]);
    free_problem(p);
}

/* One filter value for every request is the buffer of that value. */
static void test_filter_for_every_request(void **state)
{
    (void)state;
    problem *p = make_problem();
    int32_t k[R] = {40, 40, 40, 40}, by_buffer[R], by_value[R];
    float tp[R] = {0.8f, 0.8f, 0.8f, 0.8f}, mp[R] = {0.02f, 0.02f, 0.02f, 0.02f};
    assert_int_equal(sample_host_filtered(ctx, p->x, PSR_DTYPE_F32, R, V, 0, p->seeds, p->pos, p->temps, k, tp, mp, 0,
                                          by_buffer, NULL, NULL),
                     PSR_OK);
    psr_sample_host_args h;
    assert_int_equal(psr_sample_host_args_init(&h, sizeof h), PSR_OK);
    h.rows = R, h.vocab = V, h.logits = p->x, h.seeds = p->seeds, h.positions = p->pos, h.temperatures = p->temps;
    h.all_top_k = 40, h.all_top_p = 0.8f, h.all_min_p = 0.02f, h.tokens = by_value;
    assert_int_equal(psr_sample_host(ctx, &h), PSR_OK);
    assert_memory_equal(by_buffer, by_value, sizeof by_value);
    for (int r = 0; r < R; r++) {
        float cut = psr_oracle_filter_threshold(p->x + (size_t)r * V, V, p->temps[r], 40, 0.8f, 0.02f);
        assert_true(psr_oracle_scaled(p->x[(size_t)r * V + (size_t)by_value[r]], p->temps[r]) >= cut);
    }
    h.all_top_p = 1.5f;
    expect(psr_sample_host(ctx, &h), PSR_ERR_FILTER_RANGE, "all_top_p");
    h.all_top_p = 0.8f, h.top_p = tp;
    expect(psr_sample_host(ctx, &h), PSR_ERR_INVALID_ARGUMENT, "all_top_p are both set");
    free_problem(p);
}

/* psr_logprobs_host is the oracle's, and a bad temperature names its entry. */
static void test_logprobs_host(void **state)
{
    (void)state;
    problem *p = make_problem();
    int64_t tokens[R] = {0, 17, V - 1, -1};
    float lp[R], top_lp[R * 3];
    int32_t ranks[R], top_ids[R * 3];
    psr_logprobs_host_args h;
    assert_int_equal(psr_logprobs_host_args_init(&h, sizeof h), PSR_OK);
    h.rows = R, h.vocab = V, h.logits = p->x, h.temperatures = p->temps;
    h.tokens = tokens, h.tokens_dtype = PSR_TOKENS_I64, h.top_n = 3;
    h.token_logprobs = lp, h.token_ranks = ranks, h.top_ids = top_ids, h.top_logprobs = top_lp;
    assert_int_equal(psr_logprobs_host(ctx, &h), PSR_OK);
    for (int r = 0; r < R; r++) {
        float want, want_top[3];
        int32_t want_rank, want_ids[3];
        psr_oracle_logprobs_row(p->x + (size_t)r * V, V, p->temps[r], false, -INFINITY, (int32_t)tokens[r], 3,
                                &want, &want_rank, want_ids, want_top);
        assert_true((isnan(want) && isnan(lp[r])) || memcmp(&want, &lp[r], 4) == 0);
        assert_int_equal(ranks[r], want_rank);
        assert_memory_equal(top_ids + 3 * r, want_ids, sizeof want_ids);
        assert_memory_equal(top_lp + 3 * r, want_top, sizeof want_top);
    }
    float bad[R] = {1, 1, -2, 1};
    h.temperatures = bad;
    lp[0] = 42.0f;
    expect(psr_logprobs_host(ctx, &h), PSR_ERR_TEMPERATURE, "temperatures[2]");
    assert_true(lp[0] == 42.0f); /* nothing written */
    free_problem(p);
}

/* psr_verify_host is the oracle's verification, and bad drafts name their entry. */
static void test_verify_host(void **state)
{
    (void)state;
    problem *p = make_problem(); /* 4 target rows: request 0 has 2 drafts, request 1 none */
    int32_t cu[3] = {0, 3, 4}, drafts[4] = {5, 9, 0, 0}, num[2], want_num[2];
    int32_t tokens[2 * 3], want[2 * 3];
    int64_t seeds[2] = {7, 8};
    float temps[2] = {0.9f, 0.0f};
    psr_verify_host_args h;
    assert_int_equal(psr_verify_host_args_init(&h, sizeof h), PSR_OK);
    h.requests = 2, h.cu = cu, h.rows = 4, h.max_drafts = 2, h.vocab = V;
    h.target_logits = p->x, h.draft_tokens = drafts, h.seeds = seeds, h.temperatures = temps, h.positions = p->pos;
    h.noise = PSR_NOISE_WIDE, h.tokens = tokens, h.num_sampled = num;
    assert_int_equal(psr_verify_host(ctx, &h), PSR_OK);
    psr_oracle_verify_in in = {2, 4, V, 2, cu, p->x, NULL, 0, drafts, seeds, temps, p->pos, false, PSR_ORACLE_WIDE};
    psr_oracle_verify(&in, want, want_num);
    assert_memory_equal(tokens, want, sizeof want);
    assert_memory_equal(num, want_num, sizeof want_num);
    drafts[1] = V;
    num[0] = 1234;
    expect(psr_verify_host(ctx, &h), PSR_ERR_TOKEN_RANGE, "draft_tokens[1]");
    assert_int_equal(num[0], 1234);
    free_problem(p);
}

/* Sampling (into a tokens buffer that starts as `tokens`: a kernel that
 * writes nothing leaves them, not what a freed buffer held) and the
 * logprobs of the problem. */
static void sample_and_logprobs(const problem *p, int32_t tokens[R], float lp[R])
{
    cl_mem dx = upload(ctx, p->x, sizeof(float) * R * V), ds = upload(ctx, p->seeds, 8 * R);
    cl_mem dt = upload(ctx, p->temps, 4 * R), dp = upload(ctx, p->pos, 8 * R), dk = upload(ctx, tokens, 4 * R);
    psr_sample_args a;
    psr_sample_args_init(&a, sizeof a);
    a.rows = R, a.vocab = V, a.logits = dx, a.seeds = ds, a.temperatures = dt, a.positions = dp, a.tokens = dk;
    assert_int_equal(psr_sample(ctx, &a, NULL), PSR_OK);
    download(ctx, dk, tokens, 4 * R);
    release_buffers((cl_mem[]){dx, ds, dt, dp, dk}, 5);
    psr_logprobs_host_args h;
    assert_int_equal(psr_logprobs_host_args_init(&h, sizeof h), PSR_OK);
    h.rows = R, h.vocab = V, h.logits = p->x, h.temperatures = p->temps, h.tokens = tokens, h.token_logprobs = lp;
    assert_int_equal(psr_logprobs_host(ctx, &h), PSR_OK);
}

/* The host-array calls stage their arrays in device buffers the context
 * keeps: calls of other shapes in turn (smaller ones in larger buffers,
 * then larger ones growing them) each give the oracle's tokens and their
 * flags, and a repeated shape allocates nothing new. */
static void test_host_calls_reuse_staging(void **state)
{
    (void)state;
    problem *p = make_problem();
    const size_t shapes[][2] = {{R, V}, {1, V / 2}, {R, V}, {2, V}, {1, 7}};
    size_t before = 0, after = 0;
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        size_t rows = shapes[c][0], vocab = shapes[c][1] - (shapes[c][1] == V ? c : 0); /* x stays in p->x */
        const float *x = p->x + c; /* other logits and seeds each call: a stale copy would show */
        int64_t seeds[R];
        int32_t tokens[R];
        uint32_t flags[R];
        for (int r = 0; r < R; r++)
            seeds[r] = p->seeds[r] + 1000 * (int64_t)c;
        memset(tokens, 0x55, sizeof tokens);
        memset(flags, 0x55, sizeof flags);
        if (c == 2)
            assert_int_equal(psr_context_scratch_bytes(ctx, &before), PSR_OK);
        assert_int_equal(sample_host(ctx, x, PSR_DTYPE_F32, rows, vocab, V, seeds, p->pos, p->temps, 0, tokens, flags,
                                     NULL),
                         PSR_OK);
        if (c == 2)
            assert_int_equal(psr_context_scratch_bytes(ctx, &after), PSR_OK);
        for (size_t r = 0; r < rows; r++) {
            int32_t want = psr_oracle_sample_row(x + r * V, vocab, p->temps[r], seeds[r], p->pos[r], false,
                                                 PSR_ORACLE_FP32, NULL);
            assert_int_equal(tokens[r], want);
            assert_int_equal(flags[r], 0);
        }
        for (size_t r = rows; r < R; r++) /* past the call's rows: the caller's values */
            assert_int_equal(tokens[r], 0x55555555);
    }
    assert_true(before > 0);
    assert_int_equal(after, before);
    free_problem(p);
}

/* A launch cut short on the device (a fault, a watchdog) leaves the
 * counters the kernels keep zero between launches half-counted; garbage
 * in them stands for that. After psr_context_recover the next calls give
 * what they gave before; without it (the control) neither call does. */
static void test_recover_after_cut_short_launch(void **state)
{
    (void)state;
    psr_tuning saved = tuning_of(ctx), t = saved;
    t.sample.resident_per_unit = 16; /* rows split over groups, which one kernel counts */
    t.logprobs.one_blocks = SIZE_MAX; /* one launch, which counts each row's blocks */
    set_tuning(ctx, &t);
    problem *p = make_problem();
    int32_t want[R] = {0}, got[R];
    float want_lp[R], got_lp[R];
    sample_and_logprobs(p, want, want_lp);
    for (int control = 1; control >= 0; control--) {
        poison_counters(ctx);
        if (!control)
            assert_int_equal(psr_context_recover(ctx), PSR_OK);
        memset(got, 0x7f, sizeof got);
        sample_and_logprobs(p, got, got_lp);
        bool tokens_same = memcmp(got, want, sizeof want) == 0;
        bool lp_same = memcmp(got_lp, want_lp, sizeof want_lp) == 0;
        if (control && (tokens_same || lp_same))
            fail_msg("control: garbage counters left sampling (%d) or logprobs (%d) right", tokens_same, lp_same);
        if (!control && !(tokens_same && lp_same))
            fail_msg("after psr_context_recover: tokens %s, logprobs %s", tokens_same ? "right" : "wrong",
                     lp_same ? "right" : "wrong");
    }
    /* verification's words carry launch numbers: its next launch clears them */
    uint32_t epoch = verify_epoch(ctx);
    assert_int_equal(psr_context_recover(ctx), PSR_OK);
    assert_int_equal(verify_epoch(ctx), epoch ? PSR_VERIFY_EPOCHS - 1 : 0);
    assert_int_equal(psr_context_recover(NULL), PSR_ERR_NULL_ARGUMENT);
    set_tuning(ctx, &saved);
    free_problem(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_struct_sizes),
        cmocka_unit_test(test_foreign_buffer),
        cmocka_unit_test(test_opencl_codes),
        cmocka_unit_test(test_overlapping_outputs),
        cmocka_unit_test(test_int64_tokens),
        cmocka_unit_test(test_filter_for_every_request),
        cmocka_unit_test(test_logprobs_host),
        cmocka_unit_test(test_verify_host),
        cmocka_unit_test(test_host_calls_reuse_staging),
        cmocka_unit_test(test_recover_after_cut_short_launch),
    };
    return run_device_tests(tests, .ctx = &ctx, .seed = 2026);
}
