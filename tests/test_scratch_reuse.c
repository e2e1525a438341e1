/* The scratch the kernels keep between calls: random sequences of
 * psr_sample, psr_verify and psr_logprobs calls of every shape on one
 * context, each call's outputs bit for bit the oracle's, and after each
 * call every word the kernels must leave zero (the sampler's row counts
 * and floors, the filters' state and histograms, psr_logprobs' row
 * counts) zero. A call that reads what an earlier call of another shape
 * left (rows, vocabulary, groups per row, noise, filters) gives a wrong
 * token or leaves a word set. The sequences run on the suite's context and
 * on a scalar-path one: 2,250 calls each in the long suite, the only one
 * that runs this test (tests/meson.build), 200 in a run of its own. A
 * failure names its seed: PSR_TEST_SEED=n replays the sequences (with
 * PSR_TEST_LONG=1, their long-suite length). */
#include "common.h"
#include "verify_case.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static psr_context *ctx;
static bool has_fp64;

/* Calls per sequence, each of the two contexts running one. */
enum { SHORT_CALLS = 200, LONG_CALLS = 2250 };

static uint64_t seed;
static const char *path_name = "";
static size_t call_index;
static char what[768]; /* the call under way, for failure messages */

/* Names the call under way, after what a replay needs. */
static void describe(const char *format, ...)
{
    int n = snprintf(what, sizeof what, "PSR_TEST_SEED=%llu, %s path, call %zu: ", (unsigned long long)seed,
                     path_name, call_index);
    va_list ap;
    va_start(ap, format);
    vsnprintf(what + n, sizeof what - (size_t)n, format, ap);
    va_end(ap);
}

/* ---- random inputs ---- */

/* Row shapes: N(0, 1), ties, offsets of +-100 (large exponents), N(0, 9),
 * and a peak of 25 or 80 above the rest (one group's floor far above the
 * others'); every shape with a few -inf. */
enum row_kind { NORMAL, TIES, HIGH, LOW, WIDE, PEAK, TALL_PEAK, ROW_KINDS };

static void random_row(float *x, size_t vocab, enum row_kind kind)
{
    for (size_t i = 0; i < vocab; i++) {
        float v = normal();
        v = kind == TIES ? roundf(6.0f * v) / 2.0f
            : kind == HIGH ? v + 100.0f
            : kind == LOW  ? v - 100.0f
            : kind == WIDE ? 3.0f * v
                           : v;
        x[i] = rnd() % 500 == 0 ? -INFINITY : v;
    }
    if (kind == PEAK || kind == TALL_PEAK) {
        x[rnd() % vocab] += kind == PEAK ? 25.0f : 80.0f;
        if (rnd() % 2)
            x[rnd() % vocab] += 20.0f;
    }
}

/* Rows of one shape, a third of them of another. */
static float *random_rows(size_t rows, size_t vocab)
{
    float *x = malloc(rows * vocab * sizeof *x);
    assert_non_null(x);
    enum row_kind kind = rnd() % ROW_KINDS;
    for (size_t r = 0; r < rows; r++)
        random_row(x + r * vocab, vocab, rnd() % 3 == 0 ? rnd() % ROW_KINDS : kind);
    return x;
}

/* Each request's temperature and filters. */
typedef struct request_values {
    float *temps, *top_p, *min_p;
    int32_t *top_k;
} request_values;

/* Temperatures, some 0 (greedy); filters each off, at an edge (top-k 1
 * or the vocabulary, top-p 1e-6, min-p 0.5) or random. */
static request_values random_requests(size_t n, size_t vocab)
{
    request_values q = {malloc(n * 4), malloc(n * 4), malloc(n * 4), malloc(n * 4)};
    for (size_t i = 0; i < n; i++) {
        q.temps[i] = rnd() % 6 == 0 ? 0.0f : (float)(0.3 + 1.5 * uniform());
        uint32_t c = rnd() % 6;
        q.top_k[i] = c == 0   ? 0
                     : c == 1 ? (int32_t)vocab
                     : c == 2 ? 1
                              : (int32_t)(1 + rnd() % (vocab < 700 ? vocab : 700));
        c = rnd() % 5;
        q.top_p[i] = c == 0 ? 1.0f : c == 1 ? 1e-6f : (float)(0.05 + 0.9 * uniform());
        c = rnd() % 5;
        q.min_p[i] = c == 0 ? 0.0f : c == 1 ? 0.5f : (float)(0.2 * uniform());
    }
    return q;
}

static void free_requests(request_values *q)
{
    free(q->temps), free(q->top_p), free(q->min_p), free(q->top_k);
}

/* fp32 noise half the time, else fp64 (where the device has it) or wide. */
static unsigned random_noise(void)
{
    uint32_t pick = rnd() % 4;
    return pick == 1 && has_fp64 ? PSR_FLAG_FP64_NOISE : pick == 2 ? PSR_FLAG_WIDE_NOISE : 0;
}

/* ---- psr_sample ---- */

/* How a sampling call filters: per-request arrays; one top-k of at most
 * 512 for every row (the vector path streams it); top-p alone (its pass
 * sums masses); a larger top-k with top-p; min-p alone. */
enum sample_filters { NO_FILTERS, PER_REQUEST, SMALL_TOP_K, TOP_P, TOP_K_AND_P, MIN_P, SAMPLE_FILTERS };

typedef struct sample_call {
    size_t rows, vocab, requests;
    cl_uint chunk, groups; /* the launch's split (the race's oracle splits rows the same way) */
    unsigned flags;
    bool padded;            /* row_request passed, with -1 rows and more requests than rows */
    enum sample_filters filters;
    bool arrays[3];         /* top_k, top_p, min_p passed per request */
    int32_t all_top_k;
    float all_top_p, all_min_p;
    float *logits;
    int32_t *row_request;   /* -1: a padding row */
    int64_t *seeds, *positions;
    request_values q;       /* with the all_* values where no array is passed */
    int32_t *tokens;
    uint32_t *row_flags;
} sample_call;

/* Tuning that changes the groups per row (1 to 128 on the vector path)
 * and the finish: resident groups, min_steps, two passes, and how many
 * candidates the filters draw from directly. */
static void random_sample_tuning(const psr_tuning *suite)
{
    static const size_t resident[] = {1, 2, 4, 8, 16, 64, 256}, direct[] = {0, 64, 512, 16384};
    psr_tuning t = *suite;
    t.sample.resident_per_unit = resident[rnd() % 7] * (suite->sample.vector_width ? 1 : 8);
    t.sample.min_steps = rnd() % 2 ? 1 : suite->sample.min_steps;
    t.sample.two_pass = rnd() % 5 == 0;
    t.filter.direct_max = direct[rnd() % 4];
    set_tuning(ctx, &t);
}

/* Halves the rows until the launch stays below 65,535 work-items, past
 * which PoCL compiles every kernel again. */
static void fit_launch(sample_call *c)
{
    size_t local = tuning_of(ctx).sample.work_group_size;
    for (;;) {
        psr_split_rows(ctx, c->rows, c->vocab, &c->chunk, &c->groups);
        if (c->rows * c->groups * local < 65535 || c->rows == 1)
            return;
        c->rows = (c->rows + 1) / 2;
    }
}

static void random_sample_filters(sample_call *c)
{
    c->filters = rnd() % SAMPLE_FILTERS;
    c->all_top_k = 0, c->all_top_p = 1.0f, c->all_min_p = 0.0f;
    if (c->filters == PER_REQUEST) {
        for (int i = 0; i < 3; i++)
            c->arrays[i] = rnd() % 2;
        c->arrays[0] |= !c->arrays[1] && !c->arrays[2];
    } else if (c->filters == SMALL_TOP_K) {
        c->all_top_k = (int32_t)(1 + rnd() % 512);
    } else if (c->filters == TOP_P) {
        c->all_top_p = (float)(0.05 + 0.9 * uniform());
    } else if (c->filters == TOP_K_AND_P) {
        c->all_top_k = (int32_t)(513 + rnd() % 2000);
        c->all_top_p = (float)(0.05 + 0.9 * uniform());
    } else if (c->filters == MIN_P) {
        c->all_min_p = (float)(0.3 * uniform());
    }
    for (size_t q = 0; q < c->requests; q++) {
        if (!c->arrays[0])
            c->q.top_k[q] = c->all_top_k;
        if (!c->arrays[1])
            c->q.top_p[q] = c->all_top_p;
        if (!c->arrays[2])
            c->q.min_p[q] = c->all_min_p;
    }
}

static sample_call random_sample_call(void)
{
    static const size_t vocabs[] = {7, 100, 1000, 5003, 20000, 65536, 70001, 131072};
    static const size_t rows[] = {1, 2, 3, 4, 5, 8, 13, 17, 33};
    sample_call c = {0}; /* one draw a statement: the order replays */
    c.rows = rows[rnd() % 9];
    c.vocab = vocabs[rnd() % 8];
    fit_launch(&c);
    c.flags = random_noise();
    c.flags |= rnd() % 4 == 0 ? PSR_SAMPLE_DRAFTING : 0;
    c.flags |= rnd() % 3 == 0 ? PSR_SAMPLE_RACE : 0;
    c.padded = rnd() % 3 == 0;
    c.requests = c.padded ? c.rows + 1 : c.rows;
    c.row_request = malloc(c.rows * 4);
    for (size_t r = 0; r < c.rows; r++)
        c.row_request[r] = !c.padded ? (int32_t)r : rnd() % 4 == 0 ? -1 : (int32_t)(rnd() % c.requests);
    c.logits = random_rows(c.rows, c.vocab);
    c.seeds = malloc(c.requests * 8);
    c.positions = malloc(c.rows * 8);
    c.q = random_requests(c.requests, c.vocab);
    for (size_t q = 0; q < c.requests; q++)
        c.seeds[q] = random_seed();
    for (size_t r = 0; r < c.rows; r++)
        c.positions[r] = rnd() % (1u << 30);
    random_sample_filters(&c);
    c.tokens = malloc(c.rows * 4);
    c.row_flags = malloc(c.rows * 4);
    describe("psr_sample of %zu rows of %zu tokens in %u groups each, flags %#x, filters %d (arrays %d%d%d, all "
             "top-k %d top-p %g min-p %g), padded %d",
             c.rows, c.vocab, c.groups, c.flags, c.filters, c.arrays[0], c.arrays[1], c.arrays[2], c.all_top_k,
             (double)c.all_top_p, (double)c.all_min_p, c.padded);
    return c;
}

static void run_sample_call(sample_call *c)
{
    size_t rows = c->rows, n = c->requests;
    psr_sample_args a;
    psr_sample_args_init(&a, sizeof a);
    a.rows = rows, a.vocab = c->vocab, a.requests = n;
    a.logits = upload(ctx, c->logits, rows * c->vocab * 4);
    a.row_request = c->padded ? upload(ctx, c->row_request, rows * 4) : NULL;
    a.seeds = upload(ctx, c->seeds, n * 8);
    a.positions = upload(ctx, c->positions, rows * 8);
    a.temperatures = upload(ctx, c->q.temps, n * 4);
    a.tokens = device_buffer(ctx, rows * 4);
    a.row_flags = device_buffer(ctx, rows * 4);
    a.top_k = c->arrays[0] ? upload(ctx, c->q.top_k, n * 4) : NULL;
    a.top_p = c->arrays[1] ? upload(ctx, c->q.top_p, n * 4) : NULL;
    a.min_p = c->arrays[2] ? upload(ctx, c->q.min_p, n * 4) : NULL;
    a.all_top_k = c->all_top_k, a.all_top_p = c->all_top_p, a.all_min_p = c->all_min_p;
    set_sample_flags(&a, c->flags);
    psr_status st = psr_sample(ctx, &a, NULL);
    if (st != PSR_OK)
        fail_msg("%s: %s (%s)", what, psr_status_string(st), psr_last_error(ctx));
    download(ctx, a.tokens, c->tokens, rows * 4);
    download(ctx, a.row_flags, c->row_flags, rows * 4);
    release_buffers((cl_mem[]){a.logits, a.row_request, a.seeds, a.positions, a.temperatures, a.tokens,
                               a.row_flags, a.top_k, a.top_p, a.min_p},
                    10);
}

/* The oracle's token for row r: its filters' threshold, then Gumbel-max
 * over the tokens kept, or the race over the row as the launch split it. */
static int32_t oracle_token(const sample_call *c, size_t r, float *masked)
{
    size_t q = (size_t)c->row_request[r], vocab = c->vocab;
    const float *row = c->logits + r * vocab;
    float t = c->q.temps[q];
    float cut = psr_oracle_filter_threshold(row, vocab, t, c->q.top_k[q], c->q.top_p[q], c->q.min_p[q]);
    bool drafting = c->flags & PSR_SAMPLE_DRAFTING;
    if (c->flags & PSR_SAMPLE_RACE)
        return psr_oracle_race_logits_row(row, vocab, c->chunk, t, c->seeds[q], c->positions[r], drafting,
                                          noise_of(c->flags), cut, NULL);
    for (size_t i = 0; i < vocab; i++)
        masked[i] = (t == 0.0f ? row[i] : psr_oracle_scaled(row[i], t)) < cut ? -INFINITY : row[i];
    return psr_oracle_sample_row(masked, vocab, t, c->seeds[q], c->positions[r], drafting, noise_of(c->flags),
                                 NULL);
}

static void check_sample_tokens(const sample_call *c)
{
    float *masked = malloc(c->vocab * sizeof *masked);
    for (size_t r = 0; r < c->rows; r++) {
        int32_t q = c->row_request[r];
        int32_t want = q < 0 ? -1 : oracle_token(c, r, masked);
        if (c->tokens[r] != want)
            fail_msg("%s: row %zu (request %d, T %g, top-k %d, top-p %g, min-p %g): token %d, oracle %d "
                     "(row flags %#x)",
                     what, r, q, q < 0 ? 0.0 : (double)c->q.temps[q], q < 0 ? 0 : c->q.top_k[q],
                     q < 0 ? 0.0 : (double)c->q.top_p[q], q < 0 ? 0.0 : (double)c->q.min_p[q], c->tokens[r],
                     want, c->row_flags[r]);
    }
    free(masked);
}

static void sample_once(void)
{
    const psr_tuning suite = tuning_of(ctx);
    random_sample_tuning(&suite);
    sample_call c = random_sample_call();
    run_sample_call(&c);
    check_sample_tokens(&c);
    free(c.logits), free(c.row_request), free(c.seeds), free(c.positions), free(c.tokens), free(c.row_flags);
    free_requests(&c.q);
    set_tuning(ctx, &suite);
}

/* ---- psr_verify ---- */

/* Skipping rows past a rejection or not, one launch or two, resident
 * groups and the two-pass finish. */
static void random_verify_tuning(const psr_tuning *suite)
{
    static const size_t skip[] = {0, 0, 1000000}, fused[] = {0, 64, 100000}, resident[] = {1, 2, 8, 32};
    psr_tuning t = *suite;
    t.verify.skip_groups = skip[rnd() % 3];
    t.verify.fused_groups = fused[rnd() % 3];
    t.verify.resident_per_unit = resident[rnd() % 4];
    t.sample.two_pass = rnd() % 4 == 0;
    set_tuning(ctx, &t);
}

static void check_verify_outputs(const vcase *c, const vrun *run, const int32_t *tokens, const int32_t *num)
{
    size_t cols = c->max_drafts + 1;
    int32_t *want = malloc(c->requests * cols * 4), *want_num = malloc(c->requests * 4);
    psr_oracle_verify_in in = {.requests = c->requests, .rows = c->rows, .vocab = c->vocab,
                               .max_drafts = c->max_drafts, .cu = c->cu, .target = c->target,
                               .draft_cache = c->cache, .cache_k = c->cache_k, .draft_tokens = c->drafts,
                               .seeds = c->seeds, .temperatures = c->temps, .positions = c->positions,
                               .greedy_all = run->method == PSR_VERIFY_GREEDY, .noise = noise_of(run->flags)};
    psr_oracle_verify(&in, want, want_num);
    bool one_launch = last_paths(ctx).verify_one_launch;
    for (size_t r = 0; r < c->requests; r++) {
        if (num[r] != want_num[r])
            fail_msg("%s (one launch %d): request %zu num_sampled %d, oracle %d", what, one_launch, r, num[r],
                     want_num[r]);
        for (size_t j = 0; j < cols; j++)
            if (tokens[r * cols + j] != want[r * cols + j])
                fail_msg("%s (one launch %d): request %zu column %zu token %d, oracle %d", what, one_launch, r,
                         j, tokens[r * cols + j], want[r * cols + j]);
    }
    free(want), free(want_num);
}

static void verify_once(void)
{
    static const size_t vocabs[] = {50, 1000, 16384, 20000, 40000, 70001};
    const psr_tuning suite = tuning_of(ctx);
    random_verify_tuning(&suite);
    size_t vocab = vocabs[rnd() % 6], requests = 1 + rnd() % 9, max_drafts = rnd() % 6;
    bool cache = rnd() % 2;
    vcase c = make_case(requests, vocab, max_drafts, cache);
    vrun run = {.method = rnd() % 5 == 0 ? PSR_VERIFY_GREEDY : PSR_VERIFY_PROBABILISTIC,
                .flags = random_noise(),
                .tokens_dtype = PSR_TOKENS_I32,
                .dtype = PSR_DTYPE_F32};
    describe("psr_verify of %zu requests (%zu rows) of %zu tokens, %zu drafts at most, draft cache %d, method %d, "
             "flags %#x",
             requests, c.rows, vocab, max_drafts, cache, (int)run.method, run.flags);
    size_t cols = max_drafts + 1;
    int32_t *tokens = malloc(requests * cols * 4), *num = malloc(requests * 4);
    uint32_t status = 0;
    psr_status st = vcase_run(ctx, &c, &run, tokens, num, &status);
    if (st != PSR_OK)
        fail_msg("%s: %s (%s)", what, psr_status_string(st), psr_last_error(ctx));
    if (status != 0)
        fail_msg("%s: status %u", what, status);
    check_verify_outputs(&c, &run, tokens, num);
    free(tokens), free(num);
    free_case(&c);
    set_tuning(ctx, &suite);
}

/* ---- psr_logprobs, which shares the filters' scratch with psr_sample ---- */

typedef struct logprobs_call {
    size_t rows, vocab, requests;
    int top_n;
    bool mapped;   /* rows map to 3 requests through row_request */
    bool filtered; /* per-request filter arrays */
    float *logits;
    int32_t *tokens, *row_request;
    request_values q;
    float *logprob, *top_logprobs; /* the outputs */
    int32_t *rank, *top_ids;
} logprobs_call;

/* One launch or few blocks, resident groups. */
static void random_logprobs_tuning(const psr_tuning *suite)
{
    static const size_t resident[] = {1, 2, 4, 8, 16};
    psr_tuning t = *suite;
    t.logprobs.one_blocks = rnd() % 2 ? SIZE_MAX : 0;
    t.logprobs.few_blocks = rnd() % 2 ? SIZE_MAX : 0;
    t.sample.resident_per_unit = resident[rnd() % 5] * (suite->sample.vector_width ? 1 : 8);
    t.sample.min_steps = 1;
    set_tuning(ctx, &t);
}

static logprobs_call random_logprobs_call(void)
{
    static const size_t vocabs[] = {7, 100, 1000, 16384, 20000, 70001, 300000};
    logprobs_call c = {0}; /* one draw a statement: the order replays */
    c.vocab = vocabs[rnd() % 7];
    c.rows = 1 + rnd() % 12;
    c.mapped = rnd() % 3 == 0;
    c.requests = c.mapped ? 3 : c.rows;
    c.top_n = (int)(rnd() % (PSR_LOGPROBS_MAX_TOP_N + 1));
    c.logits = random_rows(c.rows, c.vocab);
    c.tokens = malloc(c.rows * 4);
    c.row_request = malloc(c.rows * 4);
    for (size_t r = 0; r < c.rows; r++) {
        c.tokens[r] = rnd() % 10 == 0 ? -1 : (int32_t)(rnd() % c.vocab);
        c.row_request[r] = c.mapped ? (int32_t)(rnd() % c.requests) : (int32_t)r;
    }
    c.q = random_requests(c.requests, c.vocab);
    c.filtered = rnd() % 2;
    size_t n = c.top_n ? (size_t)c.top_n : 1;
    c.logprob = malloc(c.rows * 4), c.top_logprobs = malloc(c.rows * n * 4);
    c.rank = malloc(c.rows * 4), c.top_ids = malloc(c.rows * n * 4);
    describe("psr_logprobs of %zu rows of %zu tokens, top %d, mapped %d, filtered %d", c.rows, c.vocab, c.top_n,
             c.mapped, c.filtered);
    return c;
}

static void run_logprobs_call(logprobs_call *c)
{
    size_t rows = c->rows, n = c->requests, top = c->top_n ? (size_t)c->top_n : 1;
    psr_logprobs_args a;
    psr_logprobs_args_init(&a, sizeof a);
    a.rows = rows, a.vocab = c->vocab, a.requests = n, a.top_n = c->top_n;
    a.logits = upload(ctx, c->logits, rows * c->vocab * 4);
    a.row_request = c->mapped ? upload(ctx, c->row_request, rows * 4) : NULL;
    a.temperatures = upload(ctx, c->q.temps, n * 4);
    a.tokens = upload(ctx, c->tokens, rows * 4);
    a.token_logprobs = device_buffer(ctx, rows * 4);
    a.token_ranks = device_buffer(ctx, rows * 4);
    a.top_ids = device_buffer(ctx, rows * top * 4);
    a.top_logprobs = device_buffer(ctx, rows * top * 4);
    a.top_k = c->filtered ? upload(ctx, c->q.top_k, n * 4) : NULL;
    a.top_p = c->filtered ? upload(ctx, c->q.top_p, n * 4) : NULL;
    a.min_p = c->filtered ? upload(ctx, c->q.min_p, n * 4) : NULL;
    psr_status st = psr_logprobs(ctx, &a, NULL);
    if (st != PSR_OK)
        fail_msg("%s: %s (%s)", what, psr_status_string(st), psr_last_error(ctx));
    download(ctx, a.token_logprobs, c->logprob, rows * 4);
    download(ctx, a.token_ranks, c->rank, rows * 4);
    download(ctx, a.top_ids, c->top_ids, rows * top * 4);
    download(ctx, a.top_logprobs, c->top_logprobs, rows * top * 4);
    release_buffers((cl_mem[]){a.logits, a.row_request, a.temperatures, a.tokens, a.token_logprobs, a.token_ranks,
                               a.top_ids, a.top_logprobs, a.top_k, a.top_p, a.min_p},
                    11);
}

static void check_logprobs_row(const logprobs_call *c, size_t r)
{
    size_t q = (size_t)c->row_request[r], n = c->top_n ? (size_t)c->top_n : 1;
    const float *row = c->logits + r * c->vocab;
    float t = c->q.temps[q];
    float cut = c->filtered ? psr_oracle_filter_threshold(row, c->vocab, t, c->q.top_k[q], c->q.top_p[q],
                                                          c->q.min_p[q])
                            : -INFINITY;
    float logprob, top_logprobs[PSR_LOGPROBS_MAX_TOP_N];
    int32_t rank, top_ids[PSR_LOGPROBS_MAX_TOP_N];
    assert_true(psr_oracle_logprobs_row(row, c->vocab, t, false, cut, c->tokens[r], c->top_n, &logprob, &rank,
                                        top_ids, top_logprobs));
    if (!same_float(c->logprob[r], logprob) || c->rank[r] != rank)
        fail_msg("%s: row %zu logprob %.9g rank %d, oracle %.9g rank %d", what, r, (double)c->logprob[r],
                 c->rank[r], (double)logprob, rank);
    for (size_t j = 0; j < (size_t)c->top_n; j++) {
        int32_t id = c->top_ids[r * n + j];
        float lp = c->top_logprobs[r * n + j];
        if (id != top_ids[j] || !same_float(lp, top_logprobs[j]))
            fail_msg("%s: row %zu top %zu: id %d (%.9g), oracle %d (%.9g)", what, r, j, id, (double)lp,
                     top_ids[j], (double)top_logprobs[j]);
    }
}

static void logprobs_once(void)
{
    const psr_tuning suite = tuning_of(ctx);
    random_logprobs_tuning(&suite);
    logprobs_call c = random_logprobs_call();
    run_logprobs_call(&c);
    for (size_t r = 0; r < c.rows; r++)
        check_logprobs_row(&c, r);
    free(c.logits), free(c.tokens), free(c.row_request), free(c.logprob), free(c.top_logprobs), free(c.rank);
    free(c.top_ids);
    free_requests(&c.q);
    set_tuning(ctx, &suite);
}

/* ---- the sequences ---- */

/* After every call: it ran on the device, and left zero what the next
 * call, of whatever shape, expects zero. */
static void check_after_call(void)
{
    if (last_paths(ctx).host_served)
        fail_msg("%s: served on the host", what);
    size_t word;
    uint32_t value;
    const char *region = nonzero_scratch_word(ctx, &word, &value);
    if (region)
        fail_msg("%s: left word %zu of %s nonzero (%#x)", what, word, region, value);
}

/* Random calls, half of them psr_sample (the scratch's main user), so
 * that every kind of call follows every other. */
static void run_sequence(const char *path)
{
    size_t calls = test_long() ? LONG_CALLS : SHORT_CALLS, count[3] = {0};
    path_name = path;
    test_seed(seed);
    for (call_index = 0; call_index < calls; call_index++) {
        uint32_t pick = rnd() % 4;
        if (pick < 2)
            sample_once();
        else if (pick == 2)
            verify_once();
        else
            logprobs_once();
        count[pick < 2 ? 0 : pick - 1]++;
        check_after_call();
    }
    print_message("%s path, PSR_TEST_SEED=%llu: %zu psr_sample, %zu psr_verify, %zu psr_logprobs calls\n", path,
                  (unsigned long long)seed, count[0], count[1], count[2]);
}

static void test_random_calls_on_suite_context(void **state)
{
    (void)state;
    run_sequence(tuning_of(ctx).sample.vector_width ? "vector" : "scalar");
}

/* The scalar path (GPUs') in a context of its own, where the suite's
 * takes the vector path. */
static void test_random_calls_on_scalar_context(void **state)
{
    (void)state;
    if (!tuning_of(ctx).sample.vector_width)
        skip(); /* the suite's context ran it */
    psr_context *saved = ctx;
    ctx = open_scalar_context();
    run_sequence("scalar");
    psr_context_free(ctx);
    ctx = saved;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_calls_on_suite_context),
        cmocka_unit_test(test_random_calls_on_scalar_context),
    };
    const char *replay = getenv("PSR_TEST_SEED");
    seed = replay && *replay ? strtoull(replay, NULL, 0) : 4242;
    print_message("PSR_TEST_SEED=%llu\n", (unsigned long long)seed);
    return run_device_tests(tests, .ctx = &ctx, .has_fp64 = &has_fp64, .seed = seed);
}
