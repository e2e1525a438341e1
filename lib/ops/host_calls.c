/* The host-array calls: psr_sample_host, psr_logprobs_host and
 * psr_verify_host. Each checks every value on the host (naming the entry),
 * stages the arrays (host_stage.c), runs the device call and waits. */
#include "ops/ops.h"

#include <stdint.h>
#include <string.h>

/* ---- sampling ---- */

/* The 0.2 layout ended at effective_noise. */
PSR_ARGS_STRUCT(psr_sample_host_args, PSR_LAYOUT_END(psr_sample_host_args, effective_noise),
                .logits_dtype = PSR_DTYPE_F32,
                .all_top_p = 1.0f, .noise = PSR_NOISE_FP32, .tokens_dtype = PSR_TOKENS_I32)

/* A host call's own copy of its args, after the NULL checks, checked by
 * `check`, which also gives the bytes of the call's logits. */
typedef psr_status (*host_check)(psr_context *ctx, const void *args, size_t *logits_bytes);
static psr_status enter(psr_context *ctx, const void *args, const psr_struct_layout *layout, const char *call,
                        void *out, host_check check, size_t *logits_bytes)
{
    psr_status st = psr_args_read(ctx, args, layout, call, out);
    return st == PSR_OK ? check(ctx, out, logits_bytes) : st;
}

/* A host array a call cannot do without. */
typedef struct host_array {
    const void *ptr;
    const char *name;
} host_array;

static psr_status require_arrays(psr_context *ctx, const host_array *list, size_t count)
{
    for (size_t i = 0; i < count; i++)
        REQUIRE(list[i].ptr, PSR_ERR_NULL_ARGUMENT, "args->%s is NULL", list[i].name);
    return PSR_OK;
}

/* Shape checks shared by the host calls that take rows of logits. */
static psr_status check_logits_shape(psr_context *ctx, const void *logits, psr_dtype dtype, size_t rows,
                                     size_t vocab, size_t stride, size_t *bytes)
{
    REQUIRE(logits, PSR_ERR_NULL_ARGUMENT, "args->logits is NULL");
    REQUIRE(rows > 0, PSR_ERR_INVALID_ARGUMENT, "args->rows is 0");
    REQUIRE(rows <= UINT32_MAX / 64, PSR_ERR_INVALID_ARGUMENT, "args->rows %zu is too large", rows);
    REQUIRE(vocab > 0, PSR_ERR_INVALID_ARGUMENT, "args->vocab is 0");
    REQUIRE(vocab <= INT32_MAX, PSR_ERR_INVALID_ARGUMENT, "args->vocab %zu does not fit an int32 token id",
            vocab);
    REQUIRE((unsigned)dtype <= PSR_DTYPE_BF16, PSR_ERR_INVALID_ARGUMENT, "args->logits_dtype %d is not a psr_dtype",
            (int)dtype);
    REQUIRE(stride >= vocab, PSR_ERR_INVALID_ARGUMENT, "args->row_stride %zu is smaller than args->vocab %zu",
            stride, vocab);
    *bytes = psr_logits_bytes(0, rows, stride, vocab, psr_dtype_size(dtype));
    REQUIRE(*bytes > 0, PSR_ERR_INVALID_ARGUMENT, "args->rows x row_stride %zu overflows the address space",
            stride);
    return PSR_OK;
}

static psr_status check_sample_host(psr_context *ctx, const void *args, size_t *logits_bytes)
{
    const psr_sample_host_args *h = args;
    const host_array required[] = {{h->seeds, "seeds"}, {h->positions, "positions"},
                                   {h->temperatures, "temperatures"},
                                   h->shard_count ? (host_array){h->shard_records, "shard_records"}
                                                  : (host_array){h->tokens, "tokens"}};
    psr_status st = require_arrays(ctx, required, sizeof required / sizeof required[0]);
    if (st != PSR_OK)
        return st;
    REQUIRE((unsigned)h->tokens_dtype <= PSR_TOKENS_I64, PSR_ERR_INVALID_ARGUMENT,
            "args->tokens_dtype %d is not a psr_token_dtype", (int)h->tokens_dtype);
    REQUIRE(!h->shard_count || !h->tokens, PSR_ERR_INVALID_ARGUMENT,
            "args->tokens is set with shards: a shard writes args->shard_records, psr_combine_host the tokens");
    st = check_logits_shape(ctx, h->logits, h->logits_dtype, h->rows, h->vocab,
                            h->row_stride ? h->row_stride : h->vocab, logits_bytes);
    if (st == PSR_OK)
        st = psr_check_host_rows(ctx, h->positions, h->rows, h->temperatures, h->rows);
    if (st == PSR_OK)
        st = psr_check_host_filters(ctx, h->rows, h->top_k, h->top_p, h->min_p);
    return st;
}

enum { S_LOGITS, S_SEEDS, S_POSITIONS, S_TEMPS, S_TOP_K, S_TOP_P, S_MIN_P, S_TOKENS, S_FLAGS, S_COUNT };
_Static_assert(S_COUNT <= PSR_STAGE_SLOTS, "a staging slot per array");

/* A host call's args and the noise its device call reports. */
typedef struct noise_job {
    const void *h;
    psr_noise noise;
} noise_job;

/* psr_sample on the staged buffers. */
static psr_status run_sample(psr_context *ctx, const psr_staged *s, void *job)
{
    const psr_sample_host_args *h = ((noise_job *)job)->h;
    psr_sample_args call, *a = &call;
    psr_sample_args_init(a, sizeof *a);
    a->rows = a->requests = h->rows, a->vocab = h->vocab, a->row_stride = h->row_stride;
    a->logits = s[S_LOGITS].mem, a->logits_dtype = h->logits_dtype, a->seeds = s[S_SEEDS].mem;
    a->positions = s[S_POSITIONS].mem, a->temperatures = s[S_TEMPS].mem, a->top_k = s[S_TOP_K].mem;
    a->top_p = s[S_TOP_P].mem, a->min_p = s[S_MIN_P].mem, a->all_top_k = h->all_top_k;
    a->all_top_p = h->all_top_p, a->all_min_p = h->all_min_p, a->tokens = s[S_TOKENS].mem;
    a->tokens_dtype = h->tokens_dtype, a->row_flags = s[S_FLAGS].mem, a->flags = h->flags;
    a->noise = h->noise, a->effective_noise = &((noise_job *)job)->noise;
    a->shard_count = h->shard_count, a->shard_index = h->shard_index, a->vocab_offset = h->vocab_offset;
    a->vocab_total = h->vocab_total;
    if (h->shard_count)
        a->tokens = NULL, a->shard_records = s[S_TOKENS].mem;
    return psr_sample(ctx, a, NULL);
}

static psr_status sample_staged(psr_context *ctx, const void *args, size_t logits_bytes)
{
    const psr_sample_host_args h = *(const psr_sample_host_args *)args;
    size_t rows = h.rows;
    psr_status st;
    psr_staged s[S_COUNT] = {
        [S_LOGITS] = {h.logits, NULL, logits_bytes, false, NULL, NULL},
        [S_SEEDS] = {h.seeds, NULL, rows * 8, false, NULL, NULL},
        [S_POSITIONS] = {h.positions, NULL, rows * 8, false, NULL, NULL},
        [S_TEMPS] = {h.temperatures, NULL, rows * 4, false, NULL, NULL},
        [S_TOP_K] = {h.top_k, NULL, rows * 4, false, NULL, NULL},
        [S_TOP_P] = {h.top_p, NULL, rows * 4, false, NULL, NULL},
        [S_MIN_P] = {h.min_p, NULL, rows * 4, false, NULL, NULL},
        [S_TOKENS] = h.shard_count ? (psr_staged){NULL, h.shard_records, rows * sizeof(psr_shard_record), true,
                                                  NULL, NULL}
                                   : (psr_staged){NULL, h.tokens, rows * psr_token_size(h.tokens_dtype), true,
                                                  NULL, NULL},
        [S_FLAGS] = {NULL, h.row_flags, rows * 4, true, NULL, NULL}};
    noise_job job = {&h, PSR_NOISE_FP32};
    st = psr_stage_run(ctx, "psr_sample_host", s, S_COUNT, run_sample, &job);
    if (st == PSR_OK) {
        psr_stage_commit(s, S_COUNT);
        size_t no_finite = 0;
        for (size_t r = 0; r < rows; r++)
            no_finite += (((const uint32_t *)s[S_FLAGS].copy)[r] & PSR_ROW_NO_FINITE) != 0;
        if (h.no_finite_rows)
            *h.no_finite_rows = no_finite;
        if (h.effective_noise)
            *h.effective_noise = job.noise;
    }
    psr_stage_release(s, S_COUNT);
    return st;
}

/* ---- logprobs ---- */

PSR_ARGS_STRUCT(psr_logprobs_host_args, sizeof(psr_logprobs_host_args), .logits_dtype = PSR_DTYPE_F32,
                .tokens_dtype = PSR_TOKENS_I32, .all_top_p = 1.0f)

static psr_status check_logprobs_host(psr_context *ctx, const void *args, size_t *logits_bytes)
{
    const psr_logprobs_host_args *h = args;
    REQUIRE(h->tokens, PSR_ERR_NULL_ARGUMENT, "args->tokens is NULL");
    REQUIRE((unsigned)h->tokens_dtype <= PSR_TOKENS_I64, PSR_ERR_INVALID_ARGUMENT,
            "args->tokens_dtype %d is not a psr_token_dtype", (int)h->tokens_dtype);
    REQUIRE(h->top_n >= 0 && h->top_n <= PSR_LOGPROBS_MAX_TOP_N, PSR_ERR_INVALID_ARGUMENT,
            "args->top_n %d is outside 0 .. %d", h->top_n, PSR_LOGPROBS_MAX_TOP_N);
    psr_status st = check_logits_shape(ctx, h->logits, h->logits_dtype, h->rows, h->vocab,
                                       h->row_stride ? h->row_stride : h->vocab, logits_bytes);
    for (size_t r = 0; st == PSR_OK && h->temperatures && !(h->flags & PSR_LOGPROBS_RAW) && r < h->rows; r++)
        REQUIRE(psr_temperature_ok(h->temperatures[r]), PSR_ERR_TEMPERATURE,
                "args->temperatures[%zu] = %g is not 0 or a positive normal number", r,
                (double)h->temperatures[r]);
    if (st == PSR_OK)
        st = psr_check_host_filters(ctx, h->rows, h->top_k, h->top_p, h->min_p);
    return st;
}

enum { L_LOGITS, L_TEMPS, L_TOKENS, L_TOP_K, L_TOP_P, L_MIN_P, L_LOGPROBS, L_RANKS, L_IDS, L_TOP_LP, L_COUNT };
_Static_assert(L_COUNT <= PSR_STAGE_SLOTS, "a staging slot per array");

/* psr_logprobs on the staged buffers. */
static psr_status run_logprobs(psr_context *ctx, const psr_staged *s, void *job)
{
    const psr_logprobs_host_args *h = job;
    psr_logprobs_args call, *a = &call;
    psr_logprobs_args_init(a, sizeof *a);
    a->rows = a->requests = h->rows, a->vocab = h->vocab, a->row_stride = h->row_stride;
    a->logits = s[L_LOGITS].mem, a->logits_dtype = h->logits_dtype, a->temperatures = s[L_TEMPS].mem;
    a->tokens = s[L_TOKENS].mem, a->tokens_dtype = h->tokens_dtype, a->top_k = s[L_TOP_K].mem;
    a->top_p = s[L_TOP_P].mem, a->min_p = s[L_MIN_P].mem, a->all_top_k = h->all_top_k;
    a->all_top_p = h->all_top_p, a->all_min_p = h->all_min_p, a->top_n = h->top_n;
    a->flags = h->flags, a->token_logprobs = s[L_LOGPROBS].mem, a->token_ranks = s[L_RANKS].mem;
    a->top_ids = s[L_IDS].mem, a->top_logprobs = s[L_TOP_LP].mem;
    return psr_logprobs(ctx, a, NULL);
}

static psr_status logprobs_staged(psr_context *ctx, const void *args, size_t logits_bytes)
{
    psr_logprobs_host_args h = *(const psr_logprobs_host_args *)args;
    psr_status st;
    size_t rows = h.rows, top = rows * (size_t)h.top_n * 4;
    psr_staged s[L_COUNT] = {
        [L_LOGITS] = {h.logits, NULL, logits_bytes, false, NULL, NULL},
        [L_TEMPS] = {h.temperatures, NULL, rows * 4, false, NULL, NULL},
        [L_TOKENS] = {h.tokens, NULL, rows * psr_token_size(h.tokens_dtype), false, NULL, NULL},
        [L_TOP_K] = {h.top_k, NULL, rows * 4, false, NULL, NULL},
        [L_TOP_P] = {h.top_p, NULL, rows * 4, false, NULL, NULL},
        [L_MIN_P] = {h.min_p, NULL, rows * 4, false, NULL, NULL},
        [L_LOGPROBS] = {NULL, h.token_logprobs, h.token_logprobs ? rows * 4 : 0, true, NULL, NULL},
        [L_RANKS] = {NULL, h.token_ranks, h.token_ranks ? rows * 4 : 0, true, NULL, NULL},
        [L_IDS] = {NULL, h.top_ids, h.top_ids ? top : 0, true, NULL, NULL},
        [L_TOP_LP] = {NULL, h.top_logprobs, h.top_logprobs ? top : 0, true, NULL, NULL}};
    st = psr_stage_run(ctx, "psr_logprobs_host", s, L_COUNT, run_logprobs, &h);
    if (st == PSR_OK)
        psr_stage_commit(s, L_COUNT);
    psr_stage_release(s, L_COUNT);
    return st;
}

/* ---- verification ---- */

PSR_ARGS_STRUCT(psr_verify_host_args, sizeof(psr_verify_host_args), .target_dtype = PSR_DTYPE_F32,
                .method = PSR_VERIFY_PROBABILISTIC, .noise = PSR_NOISE_FP32, .tokens_dtype = PSR_TOKENS_I32)

enum { V_TARGET, V_CACHE, V_DRAFTS, V_SEEDS, V_TEMPS, V_POSITIONS, V_TOKENS, V_NUM, V_STATUS, V_COUNT };
_Static_assert(V_COUNT <= PSR_STAGE_SLOTS, "a staging slot per array");

/* psr_verify on the staged buffers. */
static psr_status run_verify(psr_context *ctx, const psr_staged *s, void *job)
{
    const psr_verify_host_args *h = ((noise_job *)job)->h;
    psr_verify_args call, *a = &call;
    psr_verify_args_init(a, sizeof *a);
    a->requests = h->requests, a->cu = h->cu, a->rows = h->rows;
    a->max_drafts = h->max_drafts, a->vocab = h->vocab, a->target_logits = s[V_TARGET].mem;
    a->target_dtype = h->target_dtype, a->target_row_stride = h->target_row_stride, a->draft_cache = s[V_CACHE].mem;
    a->draft_cache_k = h->draft_cache_k, a->draft_tokens = s[V_DRAFTS].mem, a->seeds = s[V_SEEDS].mem;
    a->temperatures = s[V_TEMPS].mem, a->positions = s[V_POSITIONS].mem, a->method = h->method;
    a->noise = h->noise, a->tokens = s[V_TOKENS].mem, a->tokens_dtype = h->tokens_dtype;
    a->num_sampled = s[V_NUM].mem, a->status = s[V_STATUS].mem, a->effective_noise = &((noise_job *)job)->noise;
    return psr_verify(ctx, a, NULL);
}

/* The values the device would otherwise flag: every draft row's token,
 * every position, every temperature. cu is checked first. */
static psr_status check_verify_host(psr_context *ctx, const void *args, size_t *target_bytes)
{
    const psr_verify_host_args *h = args;
    const host_array required[] = {{h->cu, "cu"},           {h->draft_tokens, "draft_tokens"},
                                   {h->seeds, "seeds"},     {h->temperatures, "temperatures"},
                                   {h->positions, "positions"}, {h->tokens, "tokens"},
                                   {h->num_sampled, "num_sampled"}};
    psr_status st = require_arrays(ctx, required, sizeof required / sizeof required[0]);
    if (st != PSR_OK)
        return st;
    REQUIRE(h->requests > 0, PSR_ERR_INVALID_ARGUMENT, "args->requests is 0");
    REQUIRE(h->max_drafts < INT32_MAX / 2, PSR_ERR_INVALID_ARGUMENT, "args->max_drafts %zu is too large",
            h->max_drafts);
    REQUIRE(!h->draft_cache || (h->vocab && h->draft_cache_k <= SIZE_MAX / 4 / h->vocab / h->requests),
            PSR_ERR_INVALID_ARGUMENT, "args->requests x draft_cache_k x vocab overflows the address space");
    psr_verify_args shape;
    psr_verify_args_init(&shape, sizeof shape); /* what the cu check reads */
    shape.requests = h->requests, shape.cu = h->cu, shape.rows = h->rows, shape.max_drafts = h->max_drafts;
    st = check_logits_shape(ctx, h->target_logits, h->target_dtype, h->rows, h->vocab,
                            h->target_row_stride ? h->target_row_stride : h->vocab, target_bytes);
    if (st == PSR_OK)
        st = psr_verify_check_cu(ctx, &shape);
    if (st == PSR_OK)
        st = psr_check_host_rows(ctx, h->positions, h->rows, h->temperatures, h->requests);
    for (size_t r = 0; st == PSR_OK && r < h->requests; r++)
        for (int32_t row = h->cu[r]; row + 1 < h->cu[r + 1]; row++)
            REQUIRE(h->draft_tokens[row] >= -1 && h->draft_tokens[row] < (int64_t)h->vocab, PSR_ERR_TOKEN_RANGE,
                    "args->draft_tokens[%d] = %d is outside [-1, vocab %zu)", (int)row, (int)h->draft_tokens[row],
                    h->vocab);
    return st;
}

static psr_status verify_staged(psr_context *ctx, const void *args, size_t target_bytes)
{
    const psr_verify_host_args h = *(const psr_verify_host_args *)args;
    psr_status st;
    size_t R = h.requests, rows = h.rows, cache = h.draft_cache ? R * h.draft_cache_k * h.vocab * 4 : 0;
    psr_staged s[V_COUNT] = {
        [V_TARGET] = {h.target_logits, NULL, target_bytes, false, NULL, NULL},
        [V_CACHE] = {h.draft_cache, NULL, cache, false, NULL, NULL},
        [V_DRAFTS] = {h.draft_tokens, NULL, rows * 4, false, NULL, NULL},
        [V_SEEDS] = {h.seeds, NULL, R * 8, false, NULL, NULL},
        [V_TEMPS] = {h.temperatures, NULL, R * 4, false, NULL, NULL},
        [V_POSITIONS] = {h.positions, NULL, rows * 8, false, NULL, NULL},
        [V_TOKENS] = {NULL, h.tokens, R * (h.max_drafts + 1) * psr_token_size(h.tokens_dtype), true, NULL, NULL},
        [V_NUM] = {NULL, h.num_sampled, R * 4, true, NULL, NULL},
        [V_STATUS] = {NULL, NULL, 4, true, NULL, NULL}};
    noise_job job = {&h, PSR_NOISE_FP32};
    st = psr_stage_run(ctx, "psr_verify_host", s, V_COUNT, run_verify, &job);
    uint32_t device_status = st == PSR_OK ? *(const uint32_t *)s[V_STATUS].copy : 0;
    if (st == PSR_OK && device_status)
        st = psr_fail(ctx, PSR_ERR_INVALID_ARGUMENT, "psr_verify_host: the device flagged the input (0x%x)",
                      device_status);
    if (st == PSR_OK) {
        psr_stage_commit(s, V_COUNT);
        if (h.effective_noise)
            *h.effective_noise = job.noise;
    }
    psr_stage_release(s, V_COUNT);
    return st;
}

/* ---- the calls ---- */

typedef struct host_call_def {
    const psr_struct_layout *layout;
    const char *name;
    host_check check;
    psr_status (*staged)(psr_context *ctx, const void *args, size_t logits_bytes);
} host_call_def;

static psr_status host_call(psr_context *ctx, const void *args, const host_call_def *def)
{
    union {
        psr_sample_host_args sample;
        psr_logprobs_host_args logprobs;
        psr_verify_host_args verify;
    } h;
    size_t logits_bytes = 0;
    psr_status st = enter(ctx, args, def->layout, def->name, &h, def->check, &logits_bytes);
    return st == PSR_OK ? def->staged(ctx, &h, logits_bytes) : st;
}

psr_status psr_sample_host(psr_context *ctx, const psr_sample_host_args *args)
{
    static const host_call_def def = {&psr_sample_host_args_layout, "psr_sample_host", check_sample_host,
                                      sample_staged};
    return host_call(ctx, args, &def);
}

psr_status psr_logprobs_host(psr_context *ctx, const psr_logprobs_host_args *args)
{
    static const host_call_def def = {&psr_logprobs_host_args_layout, "psr_logprobs_host", check_logprobs_host,
                                      logprobs_staged};
    return host_call(ctx, args, &def);
}

psr_status psr_verify_host(psr_context *ctx, const psr_verify_host_args *args)
{
    static const host_call_def def = {&psr_verify_host_args_layout, "psr_verify_host", check_verify_host,
                                      verify_staged};
    return host_call(ctx, args, &def);
}
