/* Cold calls on the host (docs/cache.md): a first psr_sample whose
 * programs are not built runs on the host, and must write what the
 * kernels write, bit for bit: tokens, row flags and draft cache rows, on
 * rows with every kind of bad input. Then the hand-over to the device
 * once the background build is in, and the calls that stay on the device. */
#include "common.h"
#include "verify_case.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static psr_context *ctx; /* the suite's: every call on the device (PSR_TUNE_HOST_COLD=0) */
static bool has_fp64;

/* One call's shape and options. */
typedef struct cold_case {
    const char *name;
    unsigned flags; /* PSR_SAMPLE_* */
    psr_noise noise;
    psr_dtype dtype;
    size_t rows, vocab, stride, offset, requests;
    bool row_request, tokens64, filter_buffers, filter_all, cache_k, cache_rows;
} cold_case;

/* The call's inputs on the host. */
typedef struct cold_inputs {
    void *logits;
    size_t logits_bytes;
    int32_t *row_request, *top_k, *cache_rows;
    int64_t *seeds, *positions;
    float *temperatures, *top_p, *min_p;
    size_t cache_total;
} cold_inputs;

/* A row of logits with the special values the kernels must get right. */
static float logit_of(size_t row, size_t i, bool probs)
{
    if (probs) /* probabilities, unnormalised; row 2 has none positive */
        return row % 8 == 2 ? 0.0f : (rnd() % 4 == 0 ? 0.0f : (float)uniform());
    switch (row % 8) {
    case 1: return i % 97 == 5 ? 9.0f : normal(); /* ties at the top */
    case 2: return rnd() % 3 ? -INFINITY : NAN;  /* no finite logit */
    case 3: return i == 17 ? INFINITY : normal() * 3.0f;
    case 4: return rnd() % 5 == 0 ? NAN : normal() * 3.0f;
    default: return normal() * 3.0f;
    }
}

static void make_inputs(const cold_case *c, cold_inputs *in)
{
    size_t esize = c->dtype == PSR_DTYPE_F32 ? 4 : 2, elements = c->offset + c->rows * c->stride;
    bool probs = c->flags & PSR_SAMPLE_PROBS;
    in->logits_bytes = elements * esize;
    in->logits = malloc(in->logits_bytes);
    for (size_t e = 0; e < elements; e++) {
        size_t row = e < c->offset ? 0 : (e - c->offset) / c->stride;
        float x = logit_of(row, (e - c->offset) % c->stride, probs);
        uint32_t bits;
        memcpy(&bits, &x, 4);
        if (c->dtype == PSR_DTYPE_F32)
            ((float *)in->logits)[e] = x;
        else if (c->dtype == PSR_DTYPE_BF16)
            ((uint16_t *)in->logits)[e] = (uint16_t)(bits >> 16);
        else /* fp16: |x| in [2^-5, 8), the row's infinities and NaNs kept */
            ((uint16_t *)in->logits)[e] = isinf(x) ? (uint16_t)(x > 0 ? 0x7c00 : 0xfc00)
                                          : isnan(x) ? 0x7e00
                                                     : (uint16_t)((rnd() & 0x8000u) | ((10u + rnd() % 8u) << 10) |
                                                                  (rnd() & 0x3ffu));
    }
    static const float temps[] = {1.0f, 0.7f, 0.0f, 1.3f, 0.4f, 1.0f, 0.8f, 1.1f, 0.6f, NAN, -1.0f, 1e-40f};
    in->seeds = malloc(c->requests * 8);
    in->temperatures = malloc(c->requests * 4);
    in->top_k = malloc(c->requests * 4);
    in->top_p = malloc(c->requests * 4);
    in->min_p = malloc(c->requests * 4);
    for (size_t q = 0; q < c->requests; q++) {
        in->seeds[q] = (int64_t)rnd() << 20 ^ rnd();
        in->temperatures[q] = temps[rnd() % (q == 0 ? 9 : 12)];
        static const int32_t ks[] = {0, 1, 2, 5, 50, 100000};
        static const float ps[] = {1.0f, 0.9f, 0.5f, 0.95f, 1.0f, 0.7f, 0.0f, 1.5f};
        static const float mps[] = {0.0f, 0.05f, 0.2f, 0.0f, 0.0f, 0.1f, 0.0f, -0.1f};
        in->top_k[q] = ks[rnd() % 6];
        in->top_p[q] = ps[rnd() % (q < 2 ? 6 : 8)];
        in->min_p[q] = mps[rnd() % (q < 2 ? 6 : 8)];
    }
    in->positions = malloc(c->rows * 8);
    in->row_request = malloc(c->rows * 4);
    in->cache_rows = malloc(c->rows * 4);
    in->cache_total = c->cache_k ? c->requests * 3 : c->rows;
    for (size_t r = 0; r < c->rows; r++) {
        in->positions[r] = r == 7 ? PSR_MAX_POSITION : (int64_t)(rnd() % 5000);
        /* padding, a bad index, and every request at least once */
        in->row_request[r] = r == 5 ? -1 : r == 9 ? (int32_t)c->requests : (int32_t)(r % c->requests);
        in->cache_rows[r] = r == 3 ? -1 : r == 10 ? (int32_t)c->rows : (int32_t)((r * 7) % c->rows);
    }
}

static void free_inputs(cold_inputs *in)
{
    free(in->logits), free(in->row_request), free(in->top_k), free(in->cache_rows);
    free(in->seeds), free(in->positions), free(in->temperatures), free(in->top_p), free(in->min_p);
}

/* What a call wrote. */
typedef struct cold_outputs {
    unsigned char *tokens;
    uint32_t *flags;
    float *cache;
    bool host_served;
} cold_outputs;

/* An event the next run_case's call waits for (NULL: none); a user event
 * is set complete once psr_sample has returned, as an app would. */
static cl_event wait_on;

/* The case's call on context c, every output buffer filled with a pattern
 * first (so that what a path leaves alone is compared too). */
static void run_case(psr_context *c, const cold_case *k, const cold_inputs *in, cold_outputs *out)
{
    size_t token_bytes = k->rows * (k->tokens64 ? 8 : 4);
    size_t cache_bytes = in->cache_total * k->vocab * 4;
    unsigned char *fill = malloc(cache_bytes > token_bytes ? cache_bytes : token_bytes);
    memset(fill, 0x55, cache_bytes > token_bytes ? cache_bytes : token_bytes);
    cl_mem m[12] = {upload(c, in->logits, in->logits_bytes),
                    upload(c, in->seeds, k->requests * 8),
                    upload(c, in->temperatures, k->requests * 4),
                    upload(c, in->positions, k->rows * 8),
                    upload(c, fill, token_bytes),
                    upload(c, fill, k->rows * 4),
                    k->row_request ? upload(c, in->row_request, k->rows * 4) : NULL,
                    k->filter_buffers ? upload(c, in->top_k, k->requests * 4) : NULL,
                    k->filter_buffers ? upload(c, in->top_p, k->requests * 4) : NULL,
                    k->filter_buffers ? upload(c, in->min_p, k->requests * 4) : NULL,
                    (k->cache_k || k->cache_rows) ? upload(c, fill, cache_bytes) : NULL,
                    k->cache_rows ? upload(c, in->cache_rows, k->rows * 4) : NULL};
    psr_sample_args a;
    psr_sample_args_init(&a, sizeof a);
    a.rows = k->rows;
    a.vocab = k->vocab;
    a.logits = m[0];
    a.logits_dtype = k->dtype;
    a.logits_offset = k->offset;
    a.row_stride = k->stride;
    a.requests = k->requests;
    a.seeds = m[1];
    a.temperatures = m[2];
    a.positions = m[3];
    a.tokens = m[4];
    a.tokens_dtype = k->tokens64 ? PSR_TOKENS_I64 : PSR_TOKENS_I32;
    a.row_flags = m[5];
    a.row_request = m[6];
    a.top_k = m[7];
    a.top_p = m[8];
    a.min_p = m[9];
    if (k->filter_all) {
        a.all_top_k = 20;
        a.all_top_p = 0.9f;
        a.all_min_p = 0.01f;
    }
    a.draft_cache = m[10];
    a.draft_cache_rows = m[11];
    a.draft_cache_rows_total = k->cache_rows ? in->cache_total : 0;
    a.draft_cache_k = k->cache_k ? 3 : 0;
    a.draft_step = k->cache_k ? 1 : 0;
    a.flags = k->flags;
    a.noise = k->noise;
    a.num_events_in_wait_list = wait_on ? 1 : 0;
    a.event_wait_list = wait_on ? &wait_on : NULL;
    cl_event done = NULL;
    psr_status st = psr_sample(c, &a, &done);
    if (st != PSR_OK)
        fail_msg("%s: psr_sample failed: %s", k->name, psr_last_error(c));
    cl_command_queue of = NULL;
    if (wait_on && clGetEventInfo(wait_on, CL_EVENT_COMMAND_QUEUE, sizeof of, &of, NULL) == CL_SUCCESS && !of)
        assert_int_equal(clSetUserEventStatus(wait_on, CL_COMPLETE), CL_SUCCESS);
    assert_non_null(done);
    assert_int_equal(clWaitForEvents(1, &done), CL_SUCCESS);
    clReleaseEvent(done);
    out->host_served = last_paths(c).host_served;
    out->tokens = malloc(token_bytes);
    out->flags = malloc(k->rows * 4);
    out->cache = a.draft_cache ? malloc(cache_bytes) : NULL;
    download(c, m[4], out->tokens, token_bytes);
    download(c, m[5], out->flags, k->rows * 4);
    if (out->cache)
        download(c, m[10], out->cache, cache_bytes);
    release_buffers(m, 12);
    free(fill);
}

static void free_outputs(cold_outputs *o)
{
    free(o->tokens), free(o->flags), free(o->cache);
}

/* A context whose cold calls of up to `elements` run on the host, with no
 * disk tier (nothing built earlier is at hand). */
static psr_context *host_context(size_t elements)
{
    psr_context *c = open_context(NULL);
    psr_tuning t = tuning_of(c);
    t.host_cold_elements = elements;
    set_tuning(c, &t);
    return c;
}

static void expect_same(const cold_case *k, const cold_inputs *in, const cold_outputs *host,
                        const cold_outputs *dev)
{
    size_t token_size = k->tokens64 ? 8 : 4;
    for (size_t r = 0; r < k->rows; r++) {
        int64_t th, td;
        if (k->tokens64) {
            memcpy(&th, host->tokens + r * token_size, 8);
            memcpy(&td, dev->tokens + r * token_size, 8);
        } else {
            int32_t h32, d32;
            memcpy(&h32, host->tokens + r * token_size, 4);
            memcpy(&d32, dev->tokens + r * token_size, 4);
            th = h32, td = d32;
        }
        if (th != td || host->flags[r] != dev->flags[r])
            fail_msg("%s row %zu: host token %lld flags 0x%x, device token %lld flags 0x%x", k->name, r,
                     (long long)th, host->flags[r], (long long)td, dev->flags[r]);
    }
    if (host->cache && memcmp(host->cache, dev->cache, in->cache_total * k->vocab * 4) != 0)
        fail_msg("%s: the draft caches differ", k->name);
}

static const cold_case cases[] = {
    {"fp32, padding and bad rows", 0, PSR_NOISE_FP32, PSR_DTYPE_F32, 12, 3000, 3000, 0, 9, true, false, false,
     false, false, false},
    {"fp16, stride and offset, int64 tokens", 0, PSR_NOISE_FP32, PSR_DTYPE_F16, 12, 2999, 3011, 5, 12, false, true,
     false, false, false, false},
    {"draft stream, draft cache by request", PSR_SAMPLE_DRAFTING, PSR_NOISE_FP32, PSR_DTYPE_F32, 12, 3000, 3000, 0,
     12, false, false, false, false, true, false},
    {"wide noise", 0, PSR_NOISE_WIDE, PSR_DTYPE_F32, 12, 4099, 4099, 0, 12, false, false, false, false, false,
     false},
    {"fp64 noise", 0, PSR_NOISE_FP64, PSR_DTYPE_F32, 12, 3000, 3000, 0, 12, false, false, false, false, false,
     false},
    {"filters per request, draft cache rows", 0, PSR_NOISE_FP32, PSR_DTYPE_F32, 40, 3000, 3000, 0, 36, true, false,
     true, false, false, true},
    {"filters for every request", 0, PSR_NOISE_FP32, PSR_DTYPE_F32, 40, 5000, 5000, 0, 40, false, false, false,
     true, false, false},
    {"race over probabilities", PSR_SAMPLE_RACE | PSR_SAMPLE_PROBS, PSR_NOISE_FP32, PSR_DTYPE_F32, 12, 3000, 3000,
     0, 12, false, false, false, false, false, false},
    {"race over logits, split rows", PSR_SAMPLE_RACE, PSR_NOISE_FP32, PSR_DTYPE_F32, 1, 131072, 131072, 0, 1,
     false, false, false, false, false, false},
    {"race over logits, filters", PSR_SAMPLE_RACE, PSR_NOISE_FP32, PSR_DTYPE_F32, 40, 5000, 5000, 0, 36, true,
     false, true, false, false, false},
};

/* The long suite adds the other dtypes and noises with each option. */
static const cold_case long_cases[] = {
    {"bf16, draft stream, wide noise", PSR_SAMPLE_DRAFTING, PSR_NOISE_WIDE, PSR_DTYPE_BF16, 12, 3000, 3001, 3, 12,
     true, true, false, false, true, false},
    {"fp16 filters, fp64 noise", 0, PSR_NOISE_FP64, PSR_DTYPE_F16, 40, 3000, 3000, 0, 40, false, false, true,
     false, false, false},
    {"race over probabilities, fp64 noise, draft stream", PSR_SAMPLE_RACE | PSR_SAMPLE_PROBS | PSR_SAMPLE_DRAFTING,
     PSR_NOISE_FP64, PSR_DTYPE_F32, 12, 3000, 3000, 0, 12, false, false, false, false, false, true},
    {"race over logits, fp64 noise, f16", PSR_SAMPLE_RACE, PSR_NOISE_FP64, PSR_DTYPE_F16, 12, 131072, 131072, 0, 12,
     false, false, false, false, false, false},
    {"race over logits, wide noise, draft stream", PSR_SAMPLE_RACE | PSR_SAMPLE_DRAFTING, PSR_NOISE_WIDE,
     PSR_DTYPE_F32, 12, 40000, 40000, 0, 12, false, false, false, false, false, false},
};

static void check_case(const cold_case *k)
{
    if (k->noise == PSR_NOISE_FP64 && !has_fp64)
        return;
    if ((k->flags & (PSR_SAMPLE_RACE | PSR_SAMPLE_PROBS)) == PSR_SAMPLE_RACE && k->rows == 1) {
        /* the race over logits scales each group by its own maximum: the
         * case must split its rows to check that */
        cl_uint chunk, groups;
        psr_split_rows(ctx, k->rows, k->vocab, &chunk, &groups);
        print_message("%s: %u groups a row\n", k->name, groups);
        assert_true(groups > 1);
    }
    cold_inputs in;
    make_inputs(k, &in);
    psr_context *host = host_context(SIZE_MAX);
    cold_outputs h, d;
    run_case(host, k, &in, &h);
    run_case(ctx, k, &in, &d);
    psr_context_free(host);
    if (!h.host_served || d.host_served)
        fail_msg("%s: host_served %d on the cold context, %d on the suite's", k->name, h.host_served, d.host_served);
    expect_same(k, &in, &h, &d);
    if (k->filter_buffers || k->filter_all) {
        /* The case proves something only where its filters change tokens. */
        cold_case plain = *k;
        plain.filter_buffers = plain.filter_all = false;
        cold_outputs p;
        run_case(ctx, &plain, &in, &p);
        size_t changed = 0;
        for (size_t r = 0; r < k->rows; r++)
            changed += d.flags[r] == 0 && memcmp(d.tokens + 4 * r, p.tokens + 4 * r, 4) != 0;
        print_message("%s: the filters changed %zu of %zu tokens\n", k->name, changed, k->rows);
        assert_true(changed >= 3);
        free_outputs(&p);
    }
    free_outputs(&h), free_outputs(&d);
    free_inputs(&in);
}

static void test_cold_calls_match_device(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_case(&cases[i]);
    for (size_t i = 0; test_long() && i < sizeof long_cases / sizeof long_cases[0]; i++)
        check_case(&long_cases[i]);
}

/* One logprobs call of case k's inputs on context c, outputs filled with
 * a pattern first; tokens include padding, ids past the vocabulary and
 * (int64) values past int32. */
typedef struct lp_outputs {
    float *lp, *top_lp;
    int32_t *rank, *ids;
    bool host_served;
} lp_outputs;

static void run_logprobs(psr_context *c, const cold_case *k, const cold_inputs *in, unsigned flags, int top_n,
                         lp_outputs *out)
{
    size_t rows = k->rows, n = (size_t)top_n;
    int64_t *tok64 = malloc(rows * 8);
    int32_t *tok32 = malloc(rows * 4);
    for (size_t r = 0; r < rows; r++) {
        tok64[r] = r == 2 ? -1 : r == 4 ? (int64_t)k->vocab : r == 6 ? INT64_C(1) << 33 : (int64_t)((r * 131) % k->vocab);
        tok32[r] = (int32_t)(r == 6 ? 7 : tok64[r]);
    }
    unsigned char *fill = malloc(rows * (n + 1) * 4);
    memset(fill, 0x55, rows * (n + 1) * 4);
    cl_mem m[11] = {upload(c, in->logits, in->logits_bytes),
                    upload(c, in->temperatures, k->requests * 4),
                    k->tokens64 ? upload(c, tok64, rows * 8) : upload(c, tok32, rows * 4),
                    upload(c, fill, rows * 4),
                    upload(c, fill, rows * 4),
                    upload(c, fill, rows * (n + 1) * 4),
                    upload(c, fill, rows * (n + 1) * 4),
                    k->row_request ? upload(c, in->row_request, rows * 4) : NULL,
                    k->filter_buffers ? upload(c, in->top_k, k->requests * 4) : NULL,
                    k->filter_buffers ? upload(c, in->top_p, k->requests * 4) : NULL,
                    k->filter_buffers ? upload(c, in->min_p, k->requests * 4) : NULL};
    psr_logprobs_args a;
    psr_logprobs_args_init(&a, sizeof a);
    a.rows = rows;
    a.vocab = k->vocab;
    a.logits = m[0];
    a.logits_dtype = k->dtype;
    a.logits_offset = k->offset;
    a.row_stride = k->stride;
    a.requests = k->requests;
    a.temperatures = m[1];
    a.tokens = m[2];
    a.tokens_dtype = k->tokens64 ? PSR_TOKENS_I64 : PSR_TOKENS_I32;
    a.token_logprobs = m[3];
    a.token_ranks = m[4];
    a.top_ids = n ? m[5] : NULL;
    a.top_logprobs = n ? m[6] : NULL;
    a.top_n = top_n;
    a.flags = flags;
    a.row_request = m[7];
    a.top_k = m[8];
    a.top_p = m[9];
    a.min_p = m[10];
    if (k->filter_all) {
        a.all_top_k = 20;
        a.all_top_p = 0.9f;
    }
    cl_event done = NULL;
    if (psr_logprobs(c, &a, &done) != PSR_OK)
        fail_msg("%s: psr_logprobs failed: %s", k->name, psr_last_error(c));
    assert_int_equal(clWaitForEvents(1, &done), CL_SUCCESS);
    clReleaseEvent(done);
    out->host_served = last_paths(c).host_served;
    out->lp = malloc(rows * 4), out->rank = malloc(rows * 4);
    out->ids = malloc(rows * (n + 1) * 4), out->top_lp = malloc(rows * (n + 1) * 4);
    download(c, m[3], out->lp, rows * 4);
    download(c, m[4], out->rank, rows * 4);
    download(c, m[5], out->ids, rows * (n + 1) * 4);
    download(c, m[6], out->top_lp, rows * (n + 1) * 4);
    release_buffers(m, 11);
    free(fill), free(tok64), free(tok32);
}

static void free_lp(lp_outputs *o)
{
    free(o->lp), free(o->rank), free(o->ids), free(o->top_lp);
}

/* psr_logprobs on the host writes the device's bits, padding and bad
 * tokens, filters and raw logprobs included. */
static void test_cold_logprobs_match_device(void **state)
{
    (void)state;
    static const struct {
        size_t kase;
        unsigned flags;
        int top_n;
    } runs[] = {{0, 0, 5}, {5, 0, 20}, {6, 0, 3}, {1, PSR_LOGPROBS_RAW, 4}, {0, 0, 0}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        cold_case k = cases[runs[i].kase];
        cold_inputs in;
        make_inputs(&k, &in);
        psr_context *host = host_context(SIZE_MAX);
        lp_outputs h, d;
        if (runs[i].flags & PSR_LOGPROBS_RAW)
            k.filter_buffers = k.filter_all = false;
        run_logprobs(host, &k, &in, runs[i].flags, runs[i].top_n, &h);
        run_logprobs(ctx, &k, &in, runs[i].flags, runs[i].top_n, &d);
        psr_context_free(host);
        if (!h.host_served || d.host_served)
            fail_msg("%s: host_served %d on the cold context, %d on the suite's", k.name, h.host_served,
                     d.host_served);
        size_t cells = k.rows * (size_t)(runs[i].top_n + 1);
        for (size_t r = 0; r < k.rows; r++)
            if (!same_float(h.lp[r], d.lp[r]) || h.rank[r] != d.rank[r]) {
                uint32_t hb, db;
                memcpy(&hb, &h.lp[r], 4), memcpy(&db, &d.lp[r], 4);
                fail_msg("%s, top %d, row %zu: host logprob %.9g (0x%08x) rank %d, device %.9g (0x%08x) rank %d",
                         k.name, runs[i].top_n, r, (double)h.lp[r], hb, h.rank[r], (double)d.lp[r], db, d.rank[r]);
            }
        for (size_t j = 0; j < cells; j++)
            if (h.ids[j] != d.ids[j] || !same_float(h.top_lp[j], d.top_lp[j]))
                fail_msg("%s, top %d, cell %zu: host id %d (%.9g), device %d (%.9g)", k.name, runs[i].top_n, j,
                         h.ids[j], (double)h.top_lp[j], d.ids[j], (double)d.top_lp[j]);
        free_lp(&h), free_lp(&d);
        free_inputs(&in);
    }
}

/* psr_verify on the host writes the device's tokens, counts and status;
 * with a bad input, the status alone. */
static void test_cold_verify_matches_device(void **state)
{
    (void)state;
    static const struct {
        bool cache, bf16, tokens64, bad;
        psr_verify_method method;
        psr_noise noise;
    } runs[] = {{true, false, false, false, PSR_VERIFY_PROBABILISTIC, PSR_NOISE_FP32},
                {false, false, true, false, PSR_VERIFY_PROBABILISTIC, PSR_NOISE_FP32},
                {true, true, false, false, PSR_VERIFY_GREEDY, PSR_NOISE_FP32},
                {true, false, false, false, PSR_VERIFY_PROBABILISTIC, PSR_NOISE_FP64},
                {true, false, false, true, PSR_VERIFY_PROBABILISTIC, PSR_NOISE_FP32}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        if (runs[i].noise == PSR_NOISE_FP64 && !has_fp64)
            continue;
        vcase v = make_case(9, 3000, 4, runs[i].cache);
        if (runs[i].bad) {
            v.drafts[0] = (int32_t)v.vocab; /* a draft row: every request's first row is one or its bonus */
            v.positions[1] = -1;
            v.temps[2] = NAN;
        }
        const vrun run = {runs[i].method, runs[i].noise == PSR_NOISE_FP64 ? PSR_FLAG_FP64_NOISE : 0,
                          runs[i].tokens64 ? PSR_TOKENS_I64 : PSR_TOKENS_I32,
                          runs[i].bf16 ? PSR_DTYPE_BF16 : PSR_DTYPE_F32, NULL};
        size_t cells = v.requests * (v.max_drafts + 1);
        int32_t *ht = malloc(cells * 4), *dt = malloc(cells * 4), *hn = malloc(v.requests * 4),
                *dn = malloc(v.requests * 4);
        uint32_t hs, ds;
        psr_context *host = host_context(SIZE_MAX);
        assert_int_equal(vcase_run(host, &v, &run, ht, hn, &hs), PSR_OK);
        bool host_served = last_paths(host).host_served;
        psr_context_free(host);
        assert_int_equal(vcase_run(ctx, &v, &run, dt, dn, &ds), PSR_OK);
        if (!host_served || last_paths(ctx).host_served)
            fail_msg("verify run %zu: host_served %d on the cold context, %d on the suite's", i, host_served,
                     last_paths(ctx).host_served);
        if (hs != ds)
            fail_msg("verify run %zu: host status 0x%x, device 0x%x", i, hs, ds);
        assert_true(runs[i].bad == (ds != 0));
        if (memcmp(hn, dn, v.requests * 4) || memcmp(ht, dt, cells * 4))
            fail_msg("verify run %zu: the tokens or counts differ", i);
        free(ht), free(dt), free(hn), free(dn);
        free_case(&v);
    }
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A variant's calls stay on the host while its programs build in the
 * background (from its second call) and go to the device once they are
 * in; every call gives the device's tokens. */
static void test_cold_calls_hand_over(void **state)
{
    (void)state;
    const cold_case *k = &cases[0];
    cold_inputs in;
    make_inputs(k, &in);
    cold_outputs d;
    run_case(ctx, k, &in, &d);
    psr_context *host = host_context(SIZE_MAX);
    captured_log[0] = '\0';
    size_t on_host = 0;
    double start = psr_seconds();
    for (;;) {
        cold_outputs h;
        run_case(host, k, &in, &h);
        expect_same(k, &in, &h, &d);
        bool served = h.host_served;
        free_outputs(&h);
        if (!served)
            break;
        on_host++;
        if (psr_seconds() - start > 600)
            fail_msg("the background build did not come in within 600 s");
        sleep_ms(50);
    }
    print_message("%zu calls on the host, then the device after %.2f s\n", on_host, psr_seconds() - start);
    assert_true(on_host >= 2); /* the first call alone never starts the build */
    assert_non_null(strstr(captured_log, "in the background"));
    psr_context_free(host);
    free_outputs(&d);
    free_inputs(&in);
}

/* Calls that stay on the device: over the size limit, the limit 0, shards,
 * fast math, and a variant psr_context_warm built. */
static void test_cold_calls_on_device(void **state)
{
    (void)state;
    cold_case k = cases[0];
    cold_inputs in;
    make_inputs(&k, &in);
    cold_outputs o, d;
    run_case(ctx, &k, &in, &d);
    size_t elements = k.rows * k.stride;

    /* Behind a user event the app sets after the call returns: the host
     * cannot wait for it. Behind another queue's command not yet flushed:
     * the host flushes that queue and waits. */
    psr_context *c = host_context(SIZE_MAX);
    cl_int err;
    wait_on = clCreateUserEvent(cl_context_of(c), &err);
    assert_int_equal(err, CL_SUCCESS);
    run_case(c, &k, &in, &o);
    clReleaseEvent(wait_on);
    assert_false(o.host_served);
    expect_same(&k, &in, &o, &d);
    free_outputs(&o);
    psr_context_free(c); /* that call built the programs: a fresh context is cold again */
    c = host_context(SIZE_MAX);
    cl_device_id device;
    assert_int_equal(psr_context_cl(c, NULL, &device, NULL), PSR_OK);
    cl_command_queue other = clCreateCommandQueue(cl_context_of(c), device, 0, &err);
    assert_int_equal(err, CL_SUCCESS);
    cl_mem scratch = device_buffer(c, 1 << 20);
    static const cl_uchar zero = 0;
    assert_int_equal(clEnqueueFillBuffer(other, scratch, &zero, 1, 0, 1 << 20, 0, NULL, &wait_on), CL_SUCCESS);
    run_case(c, &k, &in, &o);
    clReleaseEvent(wait_on);
    wait_on = NULL;
    assert_true(o.host_served);
    expect_same(&k, &in, &o, &d);
    free_outputs(&o);
    clReleaseMemObject(scratch);
    clReleaseCommandQueue(other);
    psr_context_free(c);
    const size_t limits[] = {elements - 1, 0};
    for (int i = 0; i < 2; i++) {
        c = host_context(limits[i]);
        run_case(c, &k, &in, &o);
        assert_false(o.host_served);
        free_outputs(&o);
        psr_context_free(c);
    }
    c = host_context(elements);
    run_case(c, &k, &in, &o);
    assert_true(o.host_served); /* exactly at the limit */
    free_outputs(&o);
    psr_context_free(c);

    k.flags = PSR_SAMPLE_FAST_MATH; /* native logs: no oracle */
    k.name = "fast math";
    c = host_context(SIZE_MAX);
    run_case(c, &k, &in, &o);
    assert_false(o.host_served);
    free_outputs(&o);
    psr_context_free(c);

    c = host_context(SIZE_MAX);
    psr_warm_variant w = {PSR_WARM_SAMPLE, 0, PSR_NOISE_FP32, PSR_DTYPE_F32, 0};
    psr_warm_options wo;
    psr_warm_options_init(&wo, sizeof wo);
    wo.variants = &w;
    wo.variant_count = 1;
    assert_int_equal(psr_context_warm(c, &wo, NULL), PSR_OK);
    run_case(c, &cases[0], &in, &o);
    assert_false(o.host_served);
    free_outputs(&o);
    psr_context_free(c);
    free_inputs(&in);
    free_outputs(&d);

    /* A shard's record holds its score: the device writes it. */
    c = host_context(SIZE_MAX);
    enum { V = 1000 };
    float logits[V];
    for (int i = 0; i < V; i++)
        logits[i] = normal();
    int64_t seed = 5, pos = 3;
    float t = 1.0f;
    psr_shard_record rec;
    psr_sample_host_args h;
    psr_sample_host_args_init(&h, sizeof h);
    h.rows = 1;
    h.vocab = V;
    h.logits = logits;
    h.seeds = &seed;
    h.positions = &pos;
    h.temperatures = &t;
    h.shard_count = 2;
    h.shard_index = 1;
    h.vocab_offset = V;
    h.vocab_total = 2 * V;
    h.shard_records = &rec;
    assert_int_equal(psr_sample_host(c, &h), PSR_OK);
    assert_false(last_paths(c).host_served);
    psr_context_free(c);
}

/* The suite's context runs every call on the device, whatever the
 * environment says (meson sets PSR_TUNE_HOST_COLD=0 anyway). */
static void device_only(psr_context *c)
{
    psr_tuning t = tuning_of(c);
    t.host_cold_elements = 0;
    set_tuning(c, &t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cold_calls_match_device),
        cmocka_unit_test(test_cold_logprobs_match_device),
        cmocka_unit_test(test_cold_verify_matches_device),
        cmocka_unit_test(test_cold_calls_hand_over),
        cmocka_unit_test(test_cold_calls_on_device),
    };
    return run_device_tests(tests, &ctx, &has_fp64, 0xc01d, device_only);
}
