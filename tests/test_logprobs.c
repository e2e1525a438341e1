/* Logprobs on a real device: bit for bit the host oracle's (raw and
 * processed, ties, NaN and infinities, several super-blocks, bf16, request
 * mapping), in two launches and in one, within fp32 tolerance of a
 * double-precision reference with exact ranks, and every bad argument
 * refused with nothing written. The default suite takes one and few
 * blocks on f32 logits and the tuning's bound; the long suite adds them on
 * bf16 and the other bound, builds of their own. */
#include "common.h"
#include "stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static psr_context *ctx;

/* The logprobs' launch values: one launch up to one_blocks blocks, the
 * few-blocks partial up to few_blocks (launch-time, so any time). */
static void set_logprobs_paths(psr_context *c, size_t one_blocks, size_t few_blocks)
{
    psr_tuning t = tuning_of(c);
    t.logprobs.one_blocks = one_blocks;
    t.logprobs.few_blocks = few_blocks;
    set_tuning(c, &t);
}

static void prepare(psr_context *c)
{
    /* two launches and psr_logprobs_partial, but in test_one_launch and test_few_blocks */
    set_logprobs_paths(c, 0, 0);
}

typedef struct lcase {
    size_t rows, vocab, requests;
    float *x;          /* [rows, vocab] */
    int32_t *tokens;   /* [rows] */
    int32_t *row_req;  /* [rows] or NULL */
    float *temps;      /* [requests] */
    int32_t *top_k;    /* optional filters, [requests] */
    float *top_p, *min_p;
} lcase;

/* Logits with ties (values on a coarse grid), a few NaN and infinities;
 * temperatures 0.7, 1, 0 and, past three requests, one above 2^126 (its
 * reciprocal is held at 2^-126, and infinities stay infinite). */
static lcase make_case(size_t rows, size_t vocab, bool mapped)
{
    lcase c = {rows, vocab, mapped ? 3 : rows, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    c.x = malloc(rows * vocab * 4);
    c.tokens = malloc(rows * 4);
    c.temps = malloc(c.requests * 4);
    for (size_t i = 0; i < rows * vocab; i++) {
        uint32_t k = rnd() % 1000;
        c.x[i] = k == 0 ? NAN : k == 1 ? -INFINITY : k == 2 && rnd() % 8 == 0 ? INFINITY
                                                                        : roundf(4.0f * normal()) * 0.5f;
    }
    for (size_t r = 0; r < rows; r++)
        c.tokens[r] = r % 7 == 6 ? -1 : (int32_t)(rnd() % vocab);
    for (size_t q = 0; q < c.requests; q++)
        c.temps[q] = q == 3 ? 3e38f : q % 3 == 0 ? 0.7f : q % 3 == 1 ? 1.0f : 0.0f;
    if (mapped) {
        c.row_req = malloc(rows * 4);
        for (size_t r = 0; r < rows; r++)
            c.row_req[r] = (int32_t)(r % 3);
    }
    return c;
}

static void free_case(lcase *c)
{
    free(c->x), free(c->tokens), free(c->row_req), free(c->temps);
    free(c->top_k), free(c->top_p), free(c->min_p);
}

static psr_status run_logprobs(const lcase *c, psr_dtype dtype, unsigned flags, int top_n, float *lp,
                               int32_t *rank, int32_t *ids, float *tlp,
                               void (*tamper)(psr_logprobs_args *))
{
    size_t esize = dtype == PSR_DTYPE_BF16 ? 2 : 4, n = top_n > 0 ? (size_t)top_n : 1;
    unsigned char *logits = malloc(c->rows * c->vocab * esize);
    for (size_t i = 0; i < c->rows * c->vocab; i++) {
        if (dtype == PSR_DTYPE_BF16) {
            uint32_t b;
            memcpy(&b, &c->x[i], 4);
            uint16_t h = (uint16_t)(b >> 16);
            memcpy(logits + 2 * i, &h, 2);
        } else {
            memcpy(logits + 4 * i, &c->x[i], 4);
        }
    }
    float *fill = malloc(c->rows * n * 4);
    for (size_t i = 0; i < c->rows * n; i++)
        fill[i] = 12345.0f;
    cl_mem bl = upload(ctx, logits, c->rows * c->vocab * esize), bt = upload(ctx, c->tokens, c->rows * 4);
    cl_mem btemp = upload(ctx, c->temps, c->requests * 4);
    cl_mem brr = c->row_req ? upload(ctx, c->row_req, c->rows * 4) : NULL;
    cl_mem blp = upload(ctx, fill, c->rows * 4), brank = upload(ctx, fill, c->rows * 4);
    cl_mem bids = upload(ctx, fill, c->rows * n * 4), btlp = upload(ctx, fill, c->rows * n * 4);
    cl_mem bk = c->top_k ? upload(ctx, c->top_k, c->requests * 4) : NULL;
    cl_mem bp = c->top_p ? upload(ctx, c->top_p, c->requests * 4) : NULL;
    cl_mem bm = c->min_p ? upload(ctx, c->min_p, c->requests * 4) : NULL;
    psr_logprobs_args a;
    psr_logprobs_args_init(&a, sizeof a);
    a.rows = c->rows;
    a.vocab = c->vocab;
    a.logits = bl;
    a.logits_dtype = dtype;
    a.row_request = brr;
    a.requests = c->requests;
    a.temperatures = btemp;
    a.tokens = bt;
    a.top_n = top_n;
    a.flags = flags;
    a.token_logprobs = blp;
    a.token_ranks = brank;
    a.top_ids = bids;
    a.top_logprobs = btlp;
    a.top_k = bk;
    a.top_p = bp;
    a.min_p = bm;
    if (tamper)
        tamper(&a);
    cl_event ev = NULL;
    psr_status st = psr_logprobs(ctx, &a, &ev);
    if (st == PSR_OK) {
        psr_tuning t = tuning_of(ctx);
        psr_last_paths paths = last_paths(ctx);
        assert_int_equal(paths.logprobs_one_launch, t.logprobs.one_blocks == SIZE_MAX);
        assert_int_equal(paths.logprobs_few_blocks, t.logprobs.few_blocks == SIZE_MAX);
    }
    if (ev) {
        clWaitForEvents(1, &ev);
        clReleaseEvent(ev);
    }
    download(ctx, blp, lp, c->rows * 4);
    download(ctx, brank, rank, c->rows * 4);
    download(ctx, bids, ids, c->rows * n * 4);
    download(ctx, btlp, tlp, c->rows * n * 4);
    release_buffers((cl_mem[]){bl, bt, btemp, brr, blp, brank, bids, btlp, bk, bp, bm}, 11);
    free(logits), free(fill);
    return st;
}

static void check_case(lcase *c, psr_dtype dtype, unsigned flags, int top_n)
{
    size_t n = top_n > 0 ? (size_t)top_n : 1;
    float *lp = malloc(c->rows * 4), *tlp = malloc(c->rows * n * 4);
    int32_t *rank = malloc(c->rows * 4), *ids = malloc(c->rows * n * 4);
    if (dtype == PSR_DTYPE_BF16) /* the oracle sees what the device reads */
        for (size_t i = 0; i < c->rows * c->vocab; i++) {
            uint32_t b;
            memcpy(&b, &c->x[i], 4);
            b &= 0xffff0000u;
            memcpy(&c->x[i], &b, 4);
        }
    psr_status st = run_logprobs(c, dtype, flags, top_n, lp, rank, ids, tlp, NULL);
    if (st != PSR_OK)
        fail_msg("psr_logprobs: %s: %s", psr_status_string(st), psr_last_error(ctx));
    float want_tlp[PSR_LOGPROBS_MAX_TOP_N];
    int32_t want_ids[PSR_LOGPROBS_MAX_TOP_N];
    for (size_t r = 0; r < c->rows; r++) {
        size_t q = c->row_req ? (size_t)c->row_req[r] : r;
        float t = c->temps[q];
        float want_lp;
        int32_t want_rank;
        float cut = c->top_k ? psr_oracle_filter_threshold(c->x + r * c->vocab, c->vocab, t, c->top_k[q],
                                                           c->top_p[q], c->min_p[q])
                             : -INFINITY;
        psr_oracle_logprobs_row(c->x + r * c->vocab, c->vocab, t, flags & PSR_LOGPROBS_RAW, cut, c->tokens[r],
                                top_n, &want_lp, &want_rank, want_ids, want_tlp);
        if (!same_float(lp[r], want_lp) || rank[r] != want_rank)
            fail_msg("vocab %zu row %zu token %d: logprob %.9g rank %d, oracle %.9g rank %d", c->vocab, r,
                     c->tokens[r], (double)lp[r], rank[r], (double)want_lp, want_rank);
        for (int k = 0; k < top_n; k++)
            if (ids[r * n + (size_t)k] != want_ids[k] || !same_float(tlp[r * n + (size_t)k], want_tlp[k]))
                fail_msg("vocab %zu row %zu top %d: id %d (%.9g), oracle %d (%.9g)", c->vocab, r, k,
                         ids[r * n + (size_t)k], (double)tlp[r * n + (size_t)k], want_ids[k],
                         (double)want_tlp[k]);
    }
    free(lp), free(tlp), free(rank), free(ids);
}

/* The oracle cases; with_bf16 false leaves out the one on bf16 logits
 * (the same rows on f32 still run, and the same random numbers are drawn). */
static void matches_oracle(bool with_bf16)
{
    lcase c = make_case(40, 1000, false);
    check_case(&c, PSR_DTYPE_F32, 0, 20);
    check_case(&c, PSR_DTYPE_F32, PSR_LOGPROBS_RAW, 5);
    check_case(&c, PSR_DTYPE_F32, 0, 0);
    free_case(&c);
    c = make_case(6, 40000, true); /* three super-blocks, mapped requests */
    check_case(&c, PSR_DTYPE_F32, 0, 20);
    if (with_bf16)
        check_case(&c, PSR_DTYPE_BF16, 0, 7);
    free_case(&c);
    c = make_case(30, 5000, true); /* filtered: processed logprobs see only the kept tokens */
    c.top_k = malloc(3 * 4), c.top_p = malloc(3 * 4), c.min_p = malloc(3 * 4);
    const int32_t ks[3] = {50, 0, 200};
    const float ps[3] = {0.9f, 1.0f, 0.5f}, mps[3] = {0.0f, 0.05f, 0.01f};
    for (int q = 0; q < 3; q++)
        c.top_k[q] = ks[q], c.top_p[q] = ps[q], c.min_p[q] = mps[q];
    c.temps[2] = 0.9f;
    check_case(&c, PSR_DTYPE_F32, 0, 20);
    free_case(&c);
    c = make_case(3, 20000, false); /* every token tied; all NaN; all -inf but two */
    for (size_t i = 0; i < 20000; i++) {
        c.x[i] = 1.5f;
        c.x[20000 + i] = NAN;
        c.x[40000 + i] = i == 7 || i == 19000 ? 2.0f : -INFINITY;
    }
    check_case(&c, PSR_DTYPE_F32, 0, 20);
    free_case(&c);
    /* High values crowded into 19 of a block's 32 segments of work-items
     * (cl/logprobs.cl): the cheap bound leaves too many candidates, so the
     * exact bound must take over. Token i of a block belongs to work-item
     * ((i / 4) mod 256) mod VWG. */
    size_t wg = tuning_of(ctx).sample.work_group_size, vwg = wg < 256 ? wg : 256;
    c = make_case(2, 16384, false);
    for (size_t r = 0; r < 2; r++)
        for (size_t i = 0; i < 16384; i++) {
            size_t segment = ((i / 4) % 256 % vwg) / (vwg >= 32 ? vwg / 32 : 1);
            bool high = r == 0 ? segment < 19 : segment >= 13;
            c.x[r * 16384 + i] = high ? 10.0f + 0.25f * normal() : normal();
        }
    check_case(&c, PSR_DTYPE_F32, 0, 20);
    free_case(&c);
    c = make_case(9, 3, false); /* fewer tokens than top_n: -1 and -inf after them */
    check_case(&c, PSR_DTYPE_F32, 0, 5);
    free_case(&c);
    c = make_case(3, 16389, false); /* a last block of 5 tokens: its list ends in absent ones */
    check_case(&c, PSR_DTYPE_F32, 0, 20);
    free_case(&c);
    c = make_case(2, 230000, false); /* 15 blocks: more partials than a work-item holds */
    check_case(&c, PSR_DTYPE_F32, 0, 20);
    free_case(&c);
}

static void test_matches_oracle(void **state)
{
    (void)state;
    matches_oracle(true);
}

/* The same cases with the other bound than the device's tuning chose
 * (docs/devices.md): both must give the oracle's results. The other bound
 * is a build option: its programs are the long suite's. */
static void test_other_bound_matches_oracle(void **state)
{
    (void)state;
    LONG_ONLY();
    psr_context *saved = ctx;
    ctx = open_suite_context();
    psr_tuning t = tuning_of(ctx);
    t.logprobs.segment_tau = !t.logprobs.segment_tau; /* before its first build */
    t.logprobs.one_blocks = t.logprobs.few_blocks = 0;
    set_tuning(ctx, &t);
    matches_oracle(true);
    psr_context_free(ctx);
    ctx = saved;
}

/* The same cases in one launch (psr_logprobs_one), each row merged by its
 * last block: the oracle's results again. */
static void test_one_launch(void **state)
{
    (void)state;
    set_logprobs_paths(ctx, SIZE_MAX, 0);
    matches_oracle(test_long());
    set_logprobs_paths(ctx, 0, 0);
}

/* The same cases through psr_logprobs_partial_few, which takes the segment
 * bound first whatever the tuning: the oracle's results again. */
static void test_few_blocks(void **state)
{
    (void)state;
    set_logprobs_paths(ctx, 0, SIZE_MAX);
    matches_oracle(test_long());
    set_logprobs_paths(ctx, 0, 0);
}

/* Against double precision: logprobs within fp32 tolerance, ranks exact. */
static void test_accuracy(void **state)
{
    (void)state;
    const size_t rows = 16, V = 5000;
    lcase c = make_case(rows, V, false);
    for (size_t i = 0; i < rows * V; i++)
        c.x[i] = 3.0f * normal(); /* no ties, all finite */
    for (size_t r = 0; r < rows; r++)
        c.temps[r] = 0.8f, c.tokens[r] = (int32_t)(rnd() % V);
    float lp[16], tlp[16 * 3];
    int32_t rank[16], ids[16 * 3];
    assert_int_equal(run_logprobs(&c, PSR_DTYPE_F32, 0, 3, lp, rank, ids, tlp, NULL), PSR_OK);
    double *p = malloc(V * sizeof *p);
    for (size_t r = 0; r < rows; r++) {
        const float *x = c.x + r * V;
        psr_softmax(x, V, 0.8, p);
        double want = log(p[c.tokens[r]]);
        int32_t want_rank = 1;
        for (size_t i = 0; i < V; i++)
            want_rank += p[i] > p[c.tokens[r]];
        if (fabs(lp[r] - want) > 1e-5 * (1 + fabs(want)))
            fail_msg("row %zu: logprob %.9g, double %.9g", r, (double)lp[r], want);
        assert_int_equal(rank[r], want_rank);
        size_t top = 0;
        for (size_t i = 1; i < V; i++)
            if (p[i] > p[top])
                top = i;
        assert_int_equal(ids[r * 3], (int32_t)top);
        assert_true(fabs(tlp[r * 3] - log(p[top])) < 1e-5 * (1 + fabs(log(p[top]))));
    }
    free(p);
    free_case(&c);
}

static void top_n_big(psr_logprobs_args *a) { a->top_n = 21; }
static void top_n_negative(psr_logprobs_args *a) { a->top_n = -1; }
static void no_tokens(psr_logprobs_args *a) { a->tokens = NULL; }
static void no_ids(psr_logprobs_args *a) { a->top_ids = NULL; }
static void bad_flags(psr_logprobs_args *a) { a->flags = 8; }
static void big_vocab(psr_logprobs_args *a) { a->vocab = 2000; }
static void no_init(psr_logprobs_args *a) { a->struct_size = 1; }
static void no_temps(psr_logprobs_args *a) { a->temperatures = NULL; }
static void raw_filtered(psr_logprobs_args *a)
{
    a->flags = PSR_LOGPROBS_RAW;
    a->top_p = a->temperatures; /* any buffer: refused before it is read */
}

static void test_bad_input(void **state)
{
    (void)state;
    struct {
        void (*tamper)(psr_logprobs_args *);
        psr_status want;
        const char *needle;
    } cases[] = {
        {top_n_big, PSR_ERR_INVALID_ARGUMENT, "top_n"},
        {top_n_negative, PSR_ERR_INVALID_ARGUMENT, "top_n"},
        {no_tokens, PSR_ERR_NULL_ARGUMENT, "args->tokens"},
        {no_ids, PSR_ERR_NULL_ARGUMENT, "top_ids"},
        {bad_flags, PSR_ERR_INVALID_ARGUMENT, "args->flags"},
        {big_vocab, PSR_ERR_BUFFER_TOO_SMALL, "args->logits"},
        {no_init, PSR_ERR_STRUCT_SIZE, "psr_logprobs_args_init"},
        {no_temps, PSR_ERR_NULL_ARGUMENT, "temperatures"},
        {raw_filtered, PSR_ERR_INVALID_ARGUMENT, "PSR_LOGPROBS_RAW"},
    };
    lcase c = make_case(4, 1000, false);
    float lp[4], tlp[4 * 5];
    int32_t rank[4], ids[4 * 5];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        psr_status st = run_logprobs(&c, PSR_DTYPE_F32, 0, 5, lp, rank, ids, tlp, cases[i].tamper);
        if (st != cases[i].want || !strstr(psr_last_error(ctx), cases[i].needle))
            fail_msg("case %zu: %s \"%s\"", i, psr_status_string(st), psr_last_error(ctx));
        for (size_t k = 0; k < 4; k++)
            assert_true(lp[k] == 12345.0f);
        for (size_t k = 0; k < 20; k++)
            assert_true(tlp[k] == 12345.0f);
    }
    assert_int_equal(psr_logprobs(ctx, NULL, NULL), PSR_ERR_NULL_ARGUMENT);
    free_case(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_oracle),
        cmocka_unit_test(test_other_bound_matches_oracle),
        cmocka_unit_test(test_one_launch),
        cmocka_unit_test(test_few_blocks),
        cmocka_unit_test(test_accuracy),
        cmocka_unit_test(test_bad_input),
    };
    return run_device_tests(tests, .ctx = &ctx, .seed = 1618, .prepare = prepare);
}
