/* The LM head on a real device: logits = hidden x weights^T against a host
 * GEMM in double, fp32 and (where the device has it) fp16, odd shapes, the
 * wait list and the event, logits fed straight to psr_sample, and bad
 * input that leaves the output untouched. Where CLBlast cannot be loaded,
 * valid calls must say PSR_ERR_NOT_SUPPORTED. */
#include "common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static psr_context *ctx;
static psr_device_info info;
static bool have_clblast, has_fp16;

static void prepare(psr_context *c)
{
    psr_context_device_info(c, &info);
    has_fp16 = info.capabilities & PSR_CAP_FP16;
    have_clblast = psr_features() & PSR_FEATURE_CLBLAST;
    print_message("device \"%s\": fp16 %s; psr %s CLBlast\n", info.name, has_fp16 ? "yes" : "no",
                  have_clblast ? "with" : "without");
}

/* ---- fp16 on the host (round to nearest even; no NaN or overflow needed) ---- */

static uint16_t to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    float a = fabsf(f);
    if (a < 0x1p-24f * 0.5f)
        return sign;
    int e;
    frexpf(a, &e);                          /* a = m 2^e, m in [0.5, 1) */
    int exp = e - 1 < -14 ? -14 : e - 1;    /* subnormals share 2^-14 */
    float q = ldexpf(a, 10 - exp);          /* the 10-bit mantissa as an integer */
    float r = nearbyintf(q);                /* round to nearest even */
    uint32_t mant = (uint32_t)r;
    if (mant >= 2048u) {                    /* rounded up to the next binade */
        mant >>= 1;
        exp++;
    }
    if (mant < 1024u)                       /* subnormal */
        return (uint16_t)(sign | mant);
    return (uint16_t)(sign | (uint32_t)(exp + 15) << 10 | (mant & 0x3ffu));
}

static float from_half(uint16_t h)
{
    int e = (h >> 10) & 0x1f;
    float m = (float)(h & 0x3ff);
    float v = e == 0 ? ldexpf(m, -24) : ldexpf(1024.0f + m, e - 25);
    return h & 0x8000 ? -v : v;
}

/* ---- buffers ---- */

static const uint32_t SENTINEL = 0x7fc0dead; /* a NaN no GEMM writes */

static cl_mem sentinel_buffer(size_t bytes)
{
    cl_mem m = device_buffer(ctx, bytes);
    assert_int_equal(clEnqueueFillBuffer(queue_of(ctx), m, &SENTINEL, 4, 0, bytes, 0, NULL, NULL),
                     CL_SUCCESS);
    assert_int_equal(clFinish(queue_of(ctx)), CL_SUCCESS);
    return m;
}

static void assert_untouched(cl_mem m, size_t bytes, const char *what)
{
    uint32_t *back = malloc(bytes);
    assert_non_null(back);
    download(ctx, m, back, bytes);
    for (size_t i = 0; i < bytes / 4; i++)
        if (back[i] != SENTINEL)
            fail_msg("%s: output word %zu is 0x%08x, not the sentinel", what, i, back[i]);
    free(back);
}

/* ---- GEMM against the host ---- */

/* One problem: random inputs (rounded to the dtype), the host product in
 * double, and each term's magnitude for the tolerance. */
typedef struct problem {
    size_t b, h, v;
    psr_dtype dtype;
    void *hidden, *weights;  /* as stored on the device */
    double *ref;             /* [b, v] */
    double *scale;           /* [b, v]: sqrt(sum_k (h_k w_k)^2) */
} problem;

static void make_problem(problem *p, size_t b, size_t h, size_t v, psr_dtype dtype)
{
    p->b = b, p->h = h, p->v = v, p->dtype = dtype;
    size_t es = psr_dtype_size(dtype);
    float *hf = malloc(b * h * 4), *wf = malloc(v * h * 4);
    p->hidden = malloc(b * h * es);
    p->weights = malloc(v * h * es);
    p->ref = malloc(b * v * sizeof *p->ref);
    p->scale = malloc(b * v * sizeof *p->scale);
    assert_true(hf && wf && p->hidden && p->weights && p->ref && p->scale);
    /* Hidden states of a few units, weights small, as in a real LM head. */
    for (size_t i = 0; i < b * h; i++)
        hf[i] = 2.0f * normal();
    for (size_t i = 0; i < v * h; i++)
        wf[i] = 0.05f * normal();
    if (dtype == PSR_DTYPE_F16) {
        uint16_t *hh = p->hidden, *wh = p->weights;
        for (size_t i = 0; i < b * h; i++)
            hf[i] = from_half(hh[i] = to_half(hf[i]));
        for (size_t i = 0; i < v * h; i++)
            wf[i] = from_half(wh[i] = to_half(wf[i]));
    } else {
        memcpy(p->hidden, hf, b * h * 4);
        memcpy(p->weights, wf, v * h * 4);
    }
    for (size_t r = 0; r < b; r++)
        for (size_t c = 0; c < v; c++) {
            double acc = 0, sq = 0;
            for (size_t k = 0; k < h; k++) {
                double t = (double)hf[r * h + k] * (double)wf[c * h + k];
                acc += t;
                sq += t * t;
            }
            p->ref[r * v + c] = acc;
            p->scale[r * v + c] = sqrt(sq);
        }
    free(hf), free(wf);
}

static void free_problem(problem *p)
{
    free(p->hidden), free(p->weights), free(p->ref), free(p->scale);
}

static void fill_args(psr_lm_head_args *a, const problem *p, cl_mem dh, cl_mem dw, cl_mem dl)
{
    psr_lm_head_args_init(a, sizeof *a);
    a->batch = p->b;
    a->hidden_size = p->h;
    a->vocab = p->v;
    a->dtype = p->dtype;
    a->hidden = dh;
    a->weights = dw;
    a->logits = dl;
}

/* Reads the device logits as floats. */
static float *read_logits(cl_mem dl, const problem *p)
{
    size_t n = p->b * p->v;
    float *out = malloc(n * 4);
    assert_non_null(out);
    if (p->dtype == PSR_DTYPE_F16) {
        uint16_t *raw = malloc(n * 2);
        assert_non_null(raw);
        download(ctx, dl, raw, n * 2);
        for (size_t i = 0; i < n; i++)
            out[i] = from_half(raw[i]);
        free(raw);
    } else {
        download(ctx, dl, out, n * 4);
    }
    return out;
}

/* Every logit within rel * sqrt(H) of its terms' magnitude (plus, for fp16,
 * the rounding of the result itself). */
static void check_logits(const float *got, const problem *p, double rel)
{
    double worst = 0;
    for (size_t i = 0; i < p->b * p->v; i++) {
        double tol = rel * sqrt((double)p->h) * p->scale[i];
        if (p->dtype == PSR_DTYPE_F16)
            tol += fabs(p->ref[i]) * 0x1p-10;
        double err = fabs((double)got[i] - p->ref[i]);
        if (!(err <= tol))
            fail_msg("%s B=%zu H=%zu V=%zu: logit [%zu, %zu] is %.9g, host %.9g (error %.3g > %.3g)",
                     p->dtype == PSR_DTYPE_F16 ? "fp16" : "fp32", p->b, p->h, p->v, i / p->v,
                     i % p->v, (double)got[i], p->ref[i], err, tol);
        if (p->scale[i] > 0 && err / p->scale[i] > worst)
            worst = err / p->scale[i];
    }
    print_message("%s B=%zu H=%zu V=%zu: largest error %.3g of the terms' magnitude\n",
                  p->dtype == PSR_DTYPE_F16 ? "fp16" : "fp32", p->b, p->h, p->v, worst);
}

static void check_shape(size_t b, size_t h, size_t v, psr_dtype dtype, double rel)
{
    problem p;
    make_problem(&p, b, h, v, dtype);
    size_t es = psr_dtype_size(dtype);
    cl_mem dh = upload(ctx, p.hidden, b * h * es), dw = upload(ctx, p.weights, v * h * es);
    cl_mem dl = sentinel_buffer(b * v * es + 4);
    psr_lm_head_args a;
    fill_args(&a, &p, dh, dw, dl);
    cl_event ev = NULL;
    psr_status st = psr_lm_head(ctx, &a, &ev);
    if (st != PSR_OK)
        fail_msg("%s: %s", psr_status_string(st), psr_last_error(ctx));
    assert_non_null(ev);
    assert_int_equal(clWaitForEvents(1, &ev), CL_SUCCESS);
    clReleaseEvent(ev);
    float *got = read_logits(dl, &p);
    check_logits(got, &p, rel);
    /* Nothing written past [B, V]. */
    uint32_t tail;
    assert_int_equal(clEnqueueReadBuffer(queue_of(ctx), dl, CL_TRUE, b * v * es, 4, &tail, 0, NULL, NULL),
                     CL_SUCCESS);
    assert_int_equal(tail, SENTINEL);
    free(got);
    clReleaseMemObject(dh), clReleaseMemObject(dw), clReleaseMemObject(dl);
    free_problem(&p);
}

static void test_fp32_matches_host(void **state)
{
    (void)state;
    if (!have_clblast)
        skip();
    check_shape(1, 17, 1000, PSR_DTYPE_F32, 1e-4);
    check_shape(3, 17, 1031, PSR_DTYPE_F32, 1e-4);
    check_shape(1, 1, 7, PSR_DTYPE_F32, 1e-4);
    check_shape(5, 64, 1, PSR_DTYPE_F32, 1e-4);
    check_shape(3, 333, 2053, PSR_DTYPE_F32, 1e-4);
    check_shape(8, 1024, 4099, PSR_DTYPE_F32, 1e-4);
    check_shape(33, 128, 515, PSR_DTYPE_F32, 1e-4);
}

static void test_fp16(void **state)
{
    (void)state;
    psr_lm_head_args a;
    if (!has_fp16) {
        /* Refused up front, naming the device, with nothing written. */
        cl_mem dh = device_buffer(ctx, 64), dw = device_buffer(ctx, 64), dl = sentinel_buffer(64);
        psr_lm_head_args_init(&a, sizeof a);
        a.batch = 2, a.hidden_size = 4, a.vocab = 8, a.dtype = PSR_DTYPE_F16;
        a.hidden = dh, a.weights = dw, a.logits = dl;
        assert_int_equal(psr_lm_head(ctx, &a, NULL), PSR_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(psr_last_error(ctx), "cl_khr_fp16"));
        assert_non_null(strstr(psr_last_error(ctx), info.name));
        assert_untouched(dl, 64, "fp16 without cl_khr_fp16");
        clReleaseMemObject(dh), clReleaseMemObject(dw), clReleaseMemObject(dl);
        return;
    }
    if (!have_clblast)
        skip();
    /* CLBlast's Hgemm accumulates in fp16: about sqrt(H) roundings of 2^-11. */
    check_shape(1, 17, 1000, PSR_DTYPE_F16, 2e-3);
    check_shape(3, 17, 1031, PSR_DTYPE_F16, 2e-3);
    check_shape(3, 256, 2053, PSR_DTYPE_F16, 2e-3);
    check_shape(8, 1024, 4099, PSR_DTYPE_F16, 2e-3);
}

/* A context that hides fp16 refuses fp16 even where the device has it. */
static void test_fp16_hidden(void **state)
{
    (void)state;
    psr_context_options o;
    psr_context_options_init(&o, sizeof o);
    o.disk_cache = PSR_DISK_CACHE_OFF;
    o.hide_capabilities = PSR_CAP_FP16;
    psr_context *c2;
    assert_int_equal(psr_context_create(&o, &c2), PSR_OK);
    cl_mem dh = device_buffer(c2, 64), dw = device_buffer(c2, 64), dl = device_buffer(c2, 64);
    psr_lm_head_args a;
    psr_lm_head_args_init(&a, sizeof a);
    a.batch = 2, a.hidden_size = 4, a.vocab = 8, a.dtype = PSR_DTYPE_F16;
    a.hidden = dh, a.weights = dw, a.logits = dl;
    assert_int_equal(psr_lm_head(c2, &a, NULL), PSR_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(psr_last_error(c2), "cl_khr_fp16"));
    clReleaseMemObject(dh), clReleaseMemObject(dw), clReleaseMemObject(dl);
    psr_context_free(c2);
}

static bool event_complete(cl_event ev)
{
    cl_int status = CL_QUEUED;
    assert_int_equal(clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL),
                     CL_SUCCESS);
    return status == CL_COMPLETE;
}

/* The GEMM waits for the wait list; its event ends it; a NULL event is fine. */
static void test_wait_list_and_event(void **state)
{
    (void)state;
    if (!have_clblast)
        skip();
    problem p;
    make_problem(&p, 2, 40, 300, PSR_DTYPE_F32);
    cl_mem dh = upload(ctx, p.hidden, 2 * 40 * 4), dw = upload(ctx, p.weights, 300 * 40 * 4);
    cl_mem dl = sentinel_buffer(2 * 300 * 4);
    psr_lm_head_args a;
    fill_args(&a, &p, dh, dw, dl);

    /* No event asked for: the queue still orders the result. */
    assert_int_equal(psr_lm_head(ctx, &a, NULL), PSR_OK);
    assert_int_equal(clFinish(queue_of(ctx)), CL_SUCCESS);
    float *got = read_logits(dl, &p);
    check_logits(got, &p, 1e-4);
    free(got);

    /* Held back by a user event until it completes. */
    assert_int_equal(clEnqueueFillBuffer(queue_of(ctx), dl, &SENTINEL, 4, 0, 2 * 300 * 4, 0, NULL, NULL),
                     CL_SUCCESS);
    assert_int_equal(clFinish(queue_of(ctx)), CL_SUCCESS);
    cl_int err;
    cl_event gate = clCreateUserEvent(cl_context_of(ctx), &err);
    assert_int_equal(err, CL_SUCCESS);
    a.num_events_in_wait_list = 1;
    a.event_wait_list = &gate;
    cl_event ev = NULL;
    assert_int_equal(psr_lm_head(ctx, &a, &ev), PSR_OK);
    assert_non_null(ev);
    clFlush(queue_of(ctx));
    struct timespec pause = {0, 200 * 1000 * 1000};
    nanosleep(&pause, NULL);
    assert_false(event_complete(ev));
    assert_int_equal(clSetUserEventStatus(gate, CL_COMPLETE), CL_SUCCESS);
    assert_int_equal(clWaitForEvents(1, &ev), CL_SUCCESS);
    assert_true(event_complete(ev));
    got = read_logits(dl, &p);
    check_logits(got, &p, 1e-4);
    free(got);
    clReleaseEvent(ev);
    clReleaseEvent(gate);
    clReleaseMemObject(dh), clReleaseMemObject(dw), clReleaseMemObject(dl);
    free_problem(&p);
}

/* The logits buffer goes straight into psr_sample: the tokens are the host
 * oracle's over the logits the GEMM wrote. */
static void test_feeds_sample(void **state)
{
    (void)state;
    if (!have_clblast)
        skip();
    enum { B = 3, H = 17, V = 1000 };
    problem p;
    make_problem(&p, B, H, V, PSR_DTYPE_F32);
    cl_mem dh = upload(ctx, p.hidden, B * H * 4), dw = upload(ctx, p.weights, V * H * 4);
    cl_mem dl = device_buffer(ctx, B * V * 4);
    psr_lm_head_args a;
    fill_args(&a, &p, dh, dw, dl);
    cl_event gemm;
    assert_int_equal(psr_lm_head(ctx, &a, &gemm), PSR_OK);

    int64_t seeds[B] = {11, -5, 1ll << 40}, pos[B] = {0, 7, 12345};
    float temps[B] = {1.0f, 0.0f, 0.7f};
    cl_mem ds = upload(ctx, seeds, sizeof seeds), dp = upload(ctx, pos, sizeof pos);
    cl_mem dt = upload(ctx, temps, sizeof temps), dtok = device_buffer(ctx, B * 4);
    psr_sample_args s;
    psr_sample_args_init(&s, sizeof s);
    s.rows = B, s.vocab = V, s.logits = dl, s.requests = B;
    s.seeds = ds, s.temperatures = dt, s.positions = dp, s.tokens = dtok;
    s.num_events_in_wait_list = 1;
    s.event_wait_list = &gemm;
    assert_int_equal(psr_sample(ctx, &s, NULL), PSR_OK);
    int32_t tokens[B];
    download(ctx, dtok, tokens, sizeof tokens);
    float *logits = read_logits(dl, &p);
    for (size_t r = 0; r < B; r++)
        assert_int_equal(tokens[r], psr_oracle_sample_row(logits + r * V, V, temps[r], seeds[r], pos[r],
                                                          false, PSR_ORACLE_FP32, NULL));
    free(logits);
    clReleaseEvent(gemm);
    cl_mem all[] = {dh, dw, dl, ds, dp, dt, dtok};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        clReleaseMemObject(all[i]);
    free_problem(&p);
}

/* ---- bad input ---- */

static void expect(psr_status got, psr_status want, const char *word, const char *what)
{
    const char *detail = psr_last_error(ctx);
    if (got != want)
        fail_msg("%s: %s, expected %s (%s)", what, psr_status_string(got), psr_status_string(want),
                 detail);
    if (!strstr(detail, word))
        fail_msg("%s: error detail \"%s\" does not name \"%s\"", what, detail, word);
}

static void test_bad_input(void **state)
{
    (void)state;
    enum { B = 3, H = 17, V = 100 };
    cl_mem dh = device_buffer(ctx, B * H * 4), dw = device_buffer(ctx, V * H * 4);
    cl_mem small = device_buffer(ctx, B * V * 4 - 4);
    const size_t out_bytes = B * V * 4;
    cl_mem dl = sentinel_buffer(out_bytes);
    psr_lm_head_args good;
    psr_lm_head_args_init(&good, sizeof good);
    good.batch = B, good.hidden_size = H, good.vocab = V;
    good.hidden = dh, good.weights = dw, good.logits = dl;

    /* NULL context and args. */
    cl_event ev = (cl_event)0x1;
    assert_int_equal(psr_lm_head(NULL, &good, &ev), PSR_ERR_NULL_ARGUMENT);
    assert_non_null(strstr(psr_last_error(NULL), "ctx"));
    assert_null(ev);
    ev = (cl_event)0x1;
    expect(psr_lm_head(ctx, NULL, &ev), PSR_ERR_NULL_ARGUMENT, "args", "NULL args");
    assert_null(ev);
    assert_int_equal(psr_lm_head_args_init(NULL, sizeof good), PSR_ERR_NULL_ARGUMENT);

    struct {
        const char *what;
        psr_status want;
        const char *word;
        psr_lm_head_args a;
    } cases[24];
    size_t n = 0;
#define CASE(WHAT, WANT, WORD, EDIT)                     \
    do {                                                 \
        cases[n].what = WHAT;                            \
        cases[n].want = WANT;                            \
        cases[n].word = WORD;                            \
        cases[n].a = good;                               \
        psr_lm_head_args *a = &cases[n].a;               \
        EDIT;                                            \
        n++;                                             \
    } while (0)
    CASE("struct_size 0", PSR_ERR_STRUCT_SIZE, "struct_size", a->struct_size = 0);
    CASE("NULL hidden", PSR_ERR_NULL_ARGUMENT, "args->hidden is NULL", a->hidden = NULL);
    CASE("NULL weights", PSR_ERR_NULL_ARGUMENT, "args->weights is NULL", a->weights = NULL);
    CASE("NULL logits", PSR_ERR_NULL_ARGUMENT, "args->logits is NULL", a->logits = NULL);
    CASE("NULL wait list", PSR_ERR_NULL_ARGUMENT, "args->event_wait_list",
         a->num_events_in_wait_list = 1);
    CASE("batch 0", PSR_ERR_INVALID_ARGUMENT, "args->batch", a->batch = 0);
    CASE("hidden_size 0", PSR_ERR_INVALID_ARGUMENT, "args->hidden_size", a->hidden_size = 0);
    CASE("vocab 0", PSR_ERR_INVALID_ARGUMENT, "args->vocab", a->vocab = 0);
    CASE("bf16", PSR_ERR_INVALID_ARGUMENT, "args->dtype", a->dtype = PSR_DTYPE_BF16);
    CASE("dtype 7", PSR_ERR_INVALID_ARGUMENT, "args->dtype", a->dtype = (psr_dtype)7);
    CASE("B x H overflows", PSR_ERR_INVALID_ARGUMENT, "args->batch",
         (a->batch = SIZE_MAX / 2, a->hidden_size = 3, a->vocab = 1));
    CASE("V x H overflows", PSR_ERR_INVALID_ARGUMENT, "args->vocab",
         (a->vocab = SIZE_MAX / 2, a->hidden_size = 3, a->batch = 1));
    /* sqrt(SIZE_MAX + 1) rows and tokens: each input fits, the output not. */
    const size_t root = (SIZE_MAX >> (4 * sizeof(size_t))) + 1;
    CASE("B x V overflows", PSR_ERR_INVALID_ARGUMENT, "x args->vocab",
         (a->batch = root, a->vocab = root, a->hidden_size = 1));
    CASE("vocab past int", PSR_ERR_INVALID_ARGUMENT, "args->vocab", a->vocab = (size_t)INT32_MAX + 1);
    CASE("hidden too small", PSR_ERR_BUFFER_TOO_SMALL, "args->hidden", a->batch = B + 1);
    CASE("weights too small (H mismatch)", PSR_ERR_BUFFER_TOO_SMALL, "args->weights",
         (a->hidden_size = H + 1, a->batch = 1));
    CASE("logits too small", PSR_ERR_BUFFER_TOO_SMALL, "args->logits", a->logits = small);
    CASE("logits aliases hidden", PSR_ERR_BUFFER_OVERLAP, "args->logits overlaps args->hidden",
         a->logits = dh);
#undef CASE
    assert_true(n <= sizeof cases / sizeof cases[0]);
    for (size_t i = 0; i < n; i++) {
        ev = (cl_event)0x1;
        expect(psr_lm_head(ctx, &cases[i].a, &ev), cases[i].want, cases[i].word, cases[i].what);
        assert_null(ev);
        assert_int_equal(clFinish(queue_of(ctx)), CL_SUCCESS);
        assert_untouched(dl, out_bytes, cases[i].what);
    }

    /* The context is still usable. */
    psr_status st = psr_lm_head(ctx, &good, NULL);
    assert_int_equal(st, have_clblast ? PSR_OK : PSR_ERR_NOT_SUPPORTED);
    assert_int_equal(clFinish(queue_of(ctx)), CL_SUCCESS);
    clReleaseMemObject(dh), clReleaseMemObject(dw), clReleaseMemObject(dl), clReleaseMemObject(small);
}

/* Without CLBlast: valid calls say so and write nothing. */
static void test_not_supported(void **state)
{
    (void)state;
    if (have_clblast)
        skip();
    cl_mem dh = device_buffer(ctx, 2 * 8 * 4), dw = device_buffer(ctx, 5 * 8 * 4);
    cl_mem dl = sentinel_buffer(2 * 5 * 4);
    psr_lm_head_args a;
    psr_lm_head_args_init(&a, sizeof a);
    a.batch = 2, a.hidden_size = 8, a.vocab = 5;
    a.hidden = dh, a.weights = dw, a.logits = dl;
    cl_event ev = (cl_event)0x1;
    expect(psr_lm_head(ctx, &a, &ev), PSR_ERR_NOT_SUPPORTED, "without CLBlast",
           "no CLBlast");
    assert_null(ev);
    assert_int_equal(clFinish(queue_of(ctx)), CL_SUCCESS);
    assert_untouched(dl, 2 * 5 * 4, "no CLBlast");
    clReleaseMemObject(dh), clReleaseMemObject(dw), clReleaseMemObject(dl);
}

/* The host fp16 conversion the checks above rely on. */
static void test_half_conversion(void **state)
{
    (void)state;
    assert_int_equal(to_half(1.0f), 0x3c00);
    assert_int_equal(to_half(-2.0f), 0xc000);
    assert_int_equal(to_half(65504.0f), 0x7bff);
    assert_int_equal(to_half(0x1p-24f), 0x0001);
    assert_int_equal(to_half(1.0f + 0x1p-11f), 0x3c00); /* tie to even */
    assert_int_equal(to_half(1.0f + 3 * 0x1p-11f), 0x3c02);
    for (uint32_t h = 0; h < 0x7c00; h++)
        assert_int_equal(to_half(from_half((uint16_t)h)), h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_half_conversion),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_not_supported),
        cmocka_unit_test(test_fp16_hidden),
        cmocka_unit_test(test_fp32_matches_host),
        cmocka_unit_test(test_fp16),
        cmocka_unit_test(test_wait_list_and_event),
        cmocka_unit_test(test_feeds_sample),
    };
    return run_device_tests(tests, .ctx = &ctx, .seed = 6006, .prepare = prepare);
}
