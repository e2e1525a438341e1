/* Vocabulary shards inside one process: each shard is sampled on its
 * columns of the same rows (row_stride the whole vocabulary), and the
 * records of all the shards are combined into the unsharded call's
 * tokens; with --logprobs the shards compute the logprobs in rounds too,
 * and speculative drafts are verified in the rounds of
 * psr_verify_shard_round. */
#include "shards.h"
#include "cli.h"
#include <psr/psr_experimental.h>

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int wrong_count(const char *command, const char *text, size_t count)
{
    return cli_usage_error(command, "--shards \"%s\": %zu shards need %zu starts after ':' (the first shard "
                           "starts at 0)", text, count, count - 1);
}

/* The explicit starts after ':' ("100,2000"): count - 1 increasing
 * numbers above 0. */
static int parse_starts(const char *command, const char *text, const char *list, shard_spec *spec)
{
    const char *p = list;
    for (size_t n = 1; n < spec->count; n++) {
        if (n > 1 && *p++ != ',')
            return wrong_count(command, text, spec->count);
        char *end;
        errno = 0;
        unsigned long long v = strtoull(p, &end, 10);
        if (end == p || *p == '-' || *p == '+' || errno == ERANGE || v <= spec->starts[n - 1])
            return cli_usage_error(command, "--shards \"%s\": the starts after ':' are %zu increasing token "
                                   "ids above 0, separated by commas", text, spec->count - 1);
        spec->starts[n] = (size_t)v;
        p = end;
    }
    if (*p)
        return wrong_count(command, text, spec->count);
    spec->explicit_bounds = true;
    return CLI_OK;
}

int shards_parse(const char *command, const char *text, shard_spec *spec)
{
    char count[16];
    const char *colon = strchr(text, ':');
    size_t len = colon ? (size_t)(colon - text) : strlen(text);
    if (len >= sizeof count)
        len = sizeof count - 1; /* too long for 1..255: cli_int says so */
    memcpy(count, text, len);
    count[len] = '\0';
    int64_t n = 0;
    memset(spec, 0, sizeof *spec);
    if (cli_int(command, "--shards", count, 1, PSR_MAX_SHARDS, &n) != CLI_OK)
        return CLI_USAGE;
    spec->count = (size_t)n;
    if (!colon)
        return CLI_OK;
    if (n == 1)
        return cli_usage_error(command, "--shards \"%s\": one shard has no starts to give", text);
    return parse_starts(command, text, colon + 1, spec);
}

int shards_bounds(const char *command, const char *opt, const shard_spec *spec, size_t vocab, size_t *bounds)
{
    size_t n = spec->count;
    if (n > vocab)
        return cli_usage_error(command, "%s: %zu shards, more than the vocabulary's %zu tokens", opt, n, vocab);
    if (spec->explicit_bounds && spec->starts[n - 1] >= vocab)
        return cli_usage_error(command, "--shards: the last shard starts at %zu, past the vocabulary's last "
                               "token %zu", spec->starts[n - 1], vocab - 1);
    for (size_t s = 0; s < n; s++)
        bounds[s] = spec->explicit_bounds ? spec->starts[s] : s * (vocab / n) + (s < vocab % n ? s : vocab % n);
    bounds[n] = vocab;
    return CLI_OK;
}

int shards_refuse(const char *command, const char *opt, bool given, const char *what)
{
    if (!given)
        return CLI_OK;
    return cli_usage_error(command, "%s is not available with %s yet", what, opt);
}

psr_sample_host_args shards_columns(const psr_sample_host_args *whole, size_t count, size_t s,
                                    const size_t *bounds)
{
    psr_sample_host_args a = *whole;
    a.logits = (const char *)whole->logits + bounds[s] * psr_dtype_size(whole->logits_dtype);
    a.vocab = bounds[s + 1] - bounds[s];
    a.row_stride = whole->row_stride ? whole->row_stride : whole->vocab;
    a.shard_count = count, a.shard_index = s, a.vocab_offset = bounds[s], a.vocab_total = whole->vocab;
    return a;
}

/* One shard's call on its columns; its record of row r goes to records[r]. */
static psr_status sample_one(psr_context *ctx, const psr_sample_host_args *whole, size_t count, size_t s,
                             const size_t *bounds, psr_shard_record *records)
{
    psr_sample_host_args a = shards_columns(whole, count, s, bounds);
    a.tokens = NULL, a.row_flags = NULL, a.no_finite_rows = NULL;
    a.shard_records = records;
    return psr_sample_host(ctx, &a);
}

/* psr_combine_host of every shard's records ([count, rows]) into whole's
 * tokens, row flags and count of rows without a finite logit. */
static psr_status combine_into(psr_context *ctx, const psr_sample_host_args *whole, size_t count,
                               const psr_shard_record *records)
{
    size_t rows = whole->rows;
    uint32_t *flags = whole->row_flags ? whole->row_flags : malloc(rows * sizeof *flags);
    if (!flags)
        return cli_fail(PSR_ERR_OUT_OF_HOST_MEMORY, "cannot allocate the row flags of %zu rows", rows);
    psr_combine_host_args c;
    psr_combine_host_args_init(&c, sizeof c);
    c.rows = rows, c.shards = count, c.records = records;
    c.tokens = whole->tokens, c.tokens_dtype = whole->tokens_dtype, c.row_flags = flags;
    psr_status st = psr_combine_host(ctx, &c);
    size_t no_finite = 0;
    for (size_t r = 0; st == PSR_OK && r < rows; r++)
        no_finite += (flags[r] & PSR_ROW_NO_FINITE) != 0;
    if (st == PSR_OK && whole->no_finite_rows)
        *whole->no_finite_rows = no_finite;
    if (flags != whole->row_flags)
        free(flags);
    return st;
}

psr_status shards_sample_host(psr_context *ctx, const psr_sample_host_args *whole, size_t count,
                              const size_t *bounds)
{
    size_t rows = whole->rows;
    psr_shard_record *records = malloc(count * rows * sizeof *records);
    psr_status st = records ? PSR_OK
                            : cli_fail(PSR_ERR_OUT_OF_HOST_MEMORY, "cannot allocate %zu shards' records of %zu rows",
                                       count, rows);
    for (size_t s = 0; s < count && st == PSR_OK; s++)
        st = sample_one(ctx, whole, count, s, bounds, records + s * rows);
    if (st == PSR_OK)
        st = combine_into(ctx, whole, count, records);
    free(records);
    return st;
}

bool shards_filtered(const psr_sample_host_args *a)
{
    return a->top_k || a->top_p || a->min_p || a->all_top_k > 0 || a->all_top_p != 1.0f || a->all_min_p != 0.0f;
}

/* ---- on device buffers: the filters' rounds, the logprobs' rounds ---- */

/* The buffers every shard shares, by index. */
enum {
    D_LOGITS, D_SEEDS, D_POSITIONS, D_TEMPS, D_TOP_K, D_TOP_P, D_MIN_P, D_RECORDS, D_REDUCED,
    D_TOKENS, D_KEYS, D_PARTIALS, D_LOGPROBS, D_RANKS, D_TOP_IDS, D_TOP_LOGPROBS, D_SHARED
};
/* Each shard's own buffers, at own[OWN * s + ...]: its filter partial and
 * state, and its logprob keys before the reduction. */
enum { O_PARTIAL, O_STATE, O_KEYS, OWN };

/* A sharded call on one device: the shared buffers, each shard's own,
 * and each shard's args. */
typedef struct shard_run {
    psr_context *ctx;
    size_t count, rows, words; /* words: rows x PSR_SHARD_FILTER_WORDS */
    bool filtered;
    const shards_logprobs *lp; /* NULL: tokens only */
    size_t slots, slot_bytes;  /* with lp: the exchange of partials */
    cl_mem shared[D_SHARED];
    cl_mem own[OWN * PSR_MAX_SHARDS];
    psr_sample_args args[PSR_MAX_SHARDS];
    psr_logprobs_args lp_args[PSR_MAX_SHARDS];
} shard_run;

static psr_status opencl_failed(const char *what, cl_int err)
{
    return cli_fail(PSR_ERR_OPENCL, "%s failed: %s (%d)", what, psr_cl_error_string(err), err);
}

/* The logits and every row's inputs uploaded once; the records and the
 * reduced partials; with logprobs the tokens, keys, partials and outputs. */
static void shared_spec(const shard_run *run, const psr_sample_host_args *w, cli_buffer *spec)
{
    size_t rows = w->rows, stride = w->row_stride ? w->row_stride : w->vocab;
    size_t logit_bytes = ((rows - 1) * stride + w->vocab) * psr_dtype_size(w->logits_dtype);
    size_t lp = run->lp ? rows * 4 : 0, top = run->lp ? rows * (size_t)run->lp->top_n * 4 : 0;
    const cli_buffer all[D_SHARED] = {
        [D_LOGITS] = {logit_bytes, w->logits},
        [D_SEEDS] = {rows * 8, w->seeds},
        [D_POSITIONS] = {rows * 8, w->positions},
        [D_TEMPS] = {rows * 4, w->temperatures},
        [D_TOP_K] = {w->top_k ? rows * 4 : 0, w->top_k},
        [D_TOP_P] = {w->top_p ? rows * 4 : 0, w->top_p},
        [D_MIN_P] = {w->min_p ? rows * 4 : 0, w->min_p},
        [D_RECORDS] = {run->count * rows * sizeof(psr_shard_record), NULL},
        [D_REDUCED] = {run->filtered ? run->words * 8 : 0, NULL},
        [D_TOKENS] = {w->tokens_dtype == PSR_TOKENS_I64 ? 2 * lp : lp, NULL},
        [D_KEYS] = {lp, NULL},
        [D_PARTIALS] = {run->slots * run->slot_bytes, NULL},
        [D_LOGPROBS] = {lp, NULL},
        [D_RANKS] = {lp, NULL},
        [D_TOP_IDS] = {top, NULL},
        [D_TOP_LOGPROBS] = {top, NULL},
    };
    memcpy(spec, all, sizeof all);
}

static psr_status make_buffers(shard_run *run, const psr_sample_host_args *w)
{
    cli_buffer spec[D_SHARED], own[OWN * PSR_MAX_SHARDS];
    shared_spec(run, w, spec);
    size_t filter = run->filtered ? run->words * 8 : 0;
    for (size_t s = 0; s < run->count; s++) {
        own[OWN * s + O_PARTIAL] = (cli_buffer){filter, NULL};
        own[OWN * s + O_STATE] = (cli_buffer){run->filtered ? run->rows * PSR_SHARD_FILTER_STATE_BYTES : 0, NULL};
        own[OWN * s + O_KEYS] = (cli_buffer){run->lp ? run->rows * 4 : 0, NULL};
    }
    cl_int err = cli_make_buffers(run->ctx, spec, D_SHARED, run->shared);
    if (err == CL_SUCCESS)
        err = cli_make_buffers(run->ctx, own, OWN * run->count, run->own);
    return err == CL_SUCCESS ? PSR_OK : opencl_failed("allocating the shards' device buffers", err);
}

/* Shard s's psr_sample args over the shared buffers: its columns of the
 * logits, its records at s x rows, its filter state. */
static void shard_args(shard_run *run, const psr_sample_host_args *w, size_t s, const size_t *bounds)
{
    psr_sample_args *a = &run->args[s];
    const cl_mem *m = run->shared;
    psr_sample_args_init(a, sizeof *a);
    a->rows = run->rows, a->logits = m[D_LOGITS], a->logits_dtype = w->logits_dtype;
    a->logits_offset = bounds[s], a->row_stride = w->row_stride ? w->row_stride : w->vocab;
    a->vocab = bounds[s + 1] - bounds[s];
    a->seeds = m[D_SEEDS], a->positions = m[D_POSITIONS], a->temperatures = m[D_TEMPS];
    a->top_k = m[D_TOP_K], a->top_p = m[D_TOP_P], a->min_p = m[D_MIN_P];
    a->all_top_k = w->all_top_k, a->all_top_p = w->all_top_p, a->all_min_p = w->all_min_p;
    a->flags = w->flags, a->noise = w->noise, a->effective_noise = w->effective_noise;
    a->shard_count = run->count, a->shard_index = s, a->vocab_offset = bounds[s], a->vocab_total = w->vocab;
    a->shard_records = m[D_RECORDS], a->shard_records_offset = s * run->rows;
    a->shard_filter_state = run->own[OWN * s + O_STATE];
}

/* Shard s's logprobs args: its sampling's columns, temperatures, filters
 * and filter state (raw logprobs take neither), its own keys for round 0,
 * its first slot of the shared partials. */
static void logprobs_args(shard_run *run, const psr_sample_host_args *w, size_t s, size_t first_slot)
{
    const psr_sample_args *sa = &run->args[s];
    const shards_logprobs *lp = run->lp;
    const cl_mem *m = run->shared;
    psr_logprobs_args *a = &run->lp_args[s];
    psr_logprobs_args_init(a, sizeof *a);
    a->rows = run->rows, a->vocab = sa->vocab, a->logits = sa->logits, a->logits_dtype = sa->logits_dtype;
    a->logits_offset = sa->logits_offset, a->row_stride = sa->row_stride, a->temperatures = sa->temperatures;
    a->tokens = m[D_TOKENS], a->tokens_dtype = w->tokens_dtype;
    a->top_n = lp->top_n, a->flags = lp->raw ? PSR_LOGPROBS_RAW : 0;
    if (!lp->raw) {
        a->top_k = sa->top_k, a->top_p = sa->top_p, a->min_p = sa->min_p;
        a->all_top_k = sa->all_top_k, a->all_top_p = sa->all_top_p, a->all_min_p = sa->all_min_p;
        a->shard_filter_state = sa->shard_filter_state;
    }
    a->token_logprobs = m[D_LOGPROBS], a->token_ranks = m[D_RANKS];
    a->top_ids = lp->top_n ? m[D_TOP_IDS] : NULL, a->top_logprobs = lp->top_n ? m[D_TOP_LOGPROBS] : NULL;
    a->shard_count = run->count, a->shard_index = s, a->vocab_offset = sa->vocab_offset;
    a->vocab_total = sa->vocab_total, a->shard_slot = first_slot, a->shard_slots = run->slots;
    a->shard_token_keys = run->own[OWN * s + O_KEYS], a->shard_partials = m[D_PARTIALS];
}

/* The partials of round r reduced element-wise over the shards (round 0
 * by maximum, later rounds by sum) into the shared `reduced` buffer. */
static psr_status reduce_round(shard_run *run, size_t r, uint64_t *sum, uint64_t *part)
{
    cl_command_queue q = cli_queue(run->ctx);
    memset(sum, 0, run->words * 8);
    for (size_t s = 0; s < run->count; s++) {
        cl_int err = clEnqueueReadBuffer(q, run->own[OWN * s + O_PARTIAL], CL_TRUE, 0, run->words * 8, part, 0,
                                         NULL, NULL);
        if (err != CL_SUCCESS)
            return opencl_failed("reading a shard's filter partial", err);
        for (size_t i = 0; i < run->words; i++)
            sum[i] = r == 0 ? (part[i] > sum[i] ? part[i] : sum[i]) : sum[i] + part[i];
    }
    cl_int err = clEnqueueWriteBuffer(q, run->shared[D_REDUCED], CL_TRUE, 0, run->words * 8, sum, 0, NULL, NULL);
    return err == CL_SUCCESS ? PSR_OK : opencl_failed("writing the reduced filter partials", err);
}

/* Rounds 0 .. rounds of psr_shard_filter_round on every shard, reduced
 * on the host between rounds, as an all-reduce across devices would. */
static psr_status filter_rounds(shard_run *run)
{
    size_t rounds = 0;
    psr_status st = psr_shard_filter_rounds(run->ctx, &run->args[0], &rounds);
    uint64_t *sum = malloc(run->words * 8), *part = malloc(run->words * 8);
    if (st == PSR_OK && (!sum || !part))
        st = cli_fail(PSR_ERR_OUT_OF_HOST_MEMORY, "cannot allocate the filter partials of %zu rows", run->rows);
    for (size_t r = 0; rounds && st == PSR_OK && r <= rounds; r++) {
        for (size_t s = 0; st == PSR_OK && s < run->count; s++) {
            psr_shard_filter_args fa;
            psr_shard_filter_args_init(&fa, sizeof fa);
            fa.sample = &run->args[s], fa.round = r;
            fa.reduced = run->shared[D_REDUCED], fa.partial = run->own[OWN * s + O_PARTIAL];
            st = psr_shard_filter_round(run->ctx, &fa, NULL);
        }
        if (st == PSR_OK && r < rounds)
            st = reduce_round(run, r, sum, part);
    }
    free(sum), free(part);
    return st;
}

/* Every shard's psr_sample into the records, read back and combined. */
static psr_status sample_and_combine(shard_run *run, const psr_sample_host_args *whole)
{
    psr_status st = PSR_OK;
    for (size_t s = 0; st == PSR_OK && s < run->count; s++)
        st = psr_sample(run->ctx, &run->args[s], NULL);
    size_t bytes = run->count * run->rows * sizeof(psr_shard_record);
    psr_shard_record *records = st == PSR_OK ? malloc(bytes) : NULL;
    if (st == PSR_OK && !records)
        st = cli_fail(PSR_ERR_OUT_OF_HOST_MEMORY, "cannot allocate %zu shards' records of %zu rows", run->count,
                      run->rows);
    if (st == PSR_OK) {
        cl_int err = clEnqueueReadBuffer(cli_queue(run->ctx), run->shared[D_RECORDS], CL_TRUE, 0, bytes, records, 0,
                                         NULL, NULL);
        st = err == CL_SUCCESS ? combine_into(run->ctx, whole, run->count, records)
                               : opencl_failed("reading the shards' records", err);
    }
    free(records);
    return st;
}

/* Round 0 on every shard, then its keys reduced by maximum into the
 * shared keys, which rounds 1 and 2 read on every shard. */
static psr_status reduce_keys(shard_run *run)
{
    cl_command_queue q = cli_queue(run->ctx);
    uint32_t *max = calloc(run->rows, 4), *mine = malloc(run->rows * 4);
    psr_status st = max && mine ? PSR_OK
                                : cli_fail(PSR_ERR_OUT_OF_HOST_MEMORY, "cannot allocate the keys of %zu rows",
                                           run->rows);
    for (size_t s = 0; st == PSR_OK && s < run->count; s++) {
        st = psr_logprobs_shard_round(run->ctx, &run->lp_args[s], 0, NULL);
        cl_int err = st == PSR_OK ? clEnqueueReadBuffer(q, run->own[OWN * s + O_KEYS], CL_TRUE, 0, run->rows * 4,
                                                        mine, 0, NULL, NULL)
                                  : CL_SUCCESS;
        if (err != CL_SUCCESS)
            st = opencl_failed("reading a shard's logprob keys", err);
        for (size_t r = 0; st == PSR_OK && r < run->rows; r++)
            max[r] = mine[r] > max[r] ? mine[r] : max[r];
        run->lp_args[s].shard_token_keys = run->shared[D_KEYS];
    }
    if (st == PSR_OK) {
        cl_int err = clEnqueueWriteBuffer(q, run->shared[D_KEYS], CL_TRUE, 0, run->rows * 4, max, 0, NULL, NULL);
        st = err == CL_SUCCESS ? PSR_OK : opencl_failed("writing the reduced logprob keys", err);
    }
    free(max), free(mine);
    return st;
}

/* The tokens drawn uploaded; round 0 and its keys' reduction; round 1 on
 * every shard into the one partials buffer (as an all-gather would leave
 * it); round 2 on shard 0 alone, since every shard writes the same; the
 * outputs read back. */
static psr_status logprobs_rounds(shard_run *run, const psr_sample_host_args *whole)
{
    cl_command_queue q = cli_queue(run->ctx);
    const shards_logprobs *lp = run->lp;
    size_t rows = run->rows, top = rows * (size_t)lp->top_n * 4;
    size_t token_bytes = rows * (whole->tokens_dtype == PSR_TOKENS_I64 ? 8 : 4);
    cl_int err = clEnqueueWriteBuffer(q, run->shared[D_TOKENS], CL_TRUE, 0, token_bytes, whole->tokens, 0, NULL,
                                      NULL);
    psr_status st = err == CL_SUCCESS ? reduce_keys(run) : opencl_failed("writing the sampled tokens", err);
    for (size_t s = 0; st == PSR_OK && s < run->count; s++)
        st = psr_logprobs_shard_round(run->ctx, &run->lp_args[s], 1, NULL);
    if (st == PSR_OK)
        st = psr_logprobs_shard_round(run->ctx, &run->lp_args[0], 2, NULL);
    const struct { int buffer; size_t bytes; void *host; } out[] = {
        {D_LOGPROBS, rows * 4, lp->token_logprobs}, {D_RANKS, rows * 4, lp->token_ranks},
        {D_TOP_IDS, top, lp->top_ids}, {D_TOP_LOGPROBS, top, lp->top_logprobs}};
    for (size_t i = 0; st == PSR_OK && err == CL_SUCCESS && i < sizeof out / sizeof out[0]; i++)
        if (out[i].bytes)
            err = clEnqueueReadBuffer(q, run->shared[out[i].buffer], CL_TRUE, 0, out[i].bytes, out[i].host, 0,
                                      NULL, NULL);
    return st == PSR_OK && err != CL_SUCCESS ? opencl_failed("reading the logprobs", err) : st;
}

/* The sharded call on device buffers: the filters' rounds when filtered,
 * the tokens, then (lp) their logprobs. */
static psr_status run_shards(psr_context *ctx, const psr_sample_host_args *whole, size_t count,
                             const size_t *bounds, const shards_logprobs *lp)
{
    shard_run *run = calloc(1, sizeof *run);
    if (!run)
        return cli_fail(PSR_ERR_OUT_OF_HOST_MEMORY, "cannot allocate the state of %zu shards", count);
    run->ctx = ctx, run->count = count, run->rows = whole->rows, run->lp = lp;
    run->words = whole->rows * PSR_SHARD_FILTER_WORDS, run->filtered = shards_filtered(whole);
    size_t first_slot[PSR_MAX_SHARDS];
    for (size_t s = 0; lp && s < count; s++)
        first_slot[s] = run->slots, run->slots += psr_logprobs_shard_slots(bounds[s + 1] - bounds[s]);
    run->slot_bytes = lp ? psr_logprobs_shard_slot_bytes(whole->rows, lp->top_n) : 0;
    psr_status st = make_buffers(run, whole);
    for (size_t s = 0; st == PSR_OK && s < count; s++) {
        shard_args(run, whole, s, bounds);
        if (lp)
            logprobs_args(run, whole, s, first_slot[s]);
    }
    if (st == PSR_OK && run->filtered)
        st = filter_rounds(run);
    if (st == PSR_OK)
        st = sample_and_combine(run, whole);
    if (st == PSR_OK && lp)
        st = logprobs_rounds(run, whole);
    clFinish(cli_queue(ctx)); /* nothing may still use the buffers below */
    cli_release_buffers(run->shared, D_SHARED);
    cli_release_buffers(run->own, OWN * count);
    free(run);
    return st;
}

psr_status shards_sample_filtered(psr_context *ctx, const psr_sample_host_args *whole, size_t count,
                                  const size_t *bounds)
{
    return run_shards(ctx, whole, count, bounds, NULL);
}

psr_status shards_sample_logprobs(psr_context *ctx, const psr_sample_host_args *whole, size_t count,
                                  const size_t *bounds, const shards_logprobs *lp)
{
    return run_shards(ctx, whole, count, bounds, lp);
}

int shards_logprobs_fit(const char *command, const char *opt, size_t count, const size_t *bounds)
{
    size_t slots = 0;
    for (size_t s = 0; s < count; s++)
        slots += psr_logprobs_shard_slots(bounds[s + 1] - bounds[s]);
    if (slots <= PSR_LOGPROBS_MAX_SLOTS)
        return CLI_OK;
    return cli_usage_error(command, "--logprobs with %s: the shards span %zu blocks of at most 16,384 "
                           "tokens (each shard starts its own), above the %d the logprobs' exchange holds; give "
                           "fewer shards", opt, slots, PSR_LOGPROBS_MAX_SLOTS);
}

/* ---- verification across shards ---- */

cl_int shards_verify_stage(psr_context *ctx, const psr_verify_host_args *whole, size_t lo, size_t hi, cl_mem *b,
                           psr_verify_args *a)
{
    size_t rows = whole->rows, R = whole->requests, dsize = psr_dtype_size(whole->target_dtype);
    size_t stride = whole->target_row_stride ? whole->target_row_stride : whole->vocab;
    size_t token_bytes = R * (whole->max_drafts + 1) * (whole->tokens_dtype == PSR_TOKENS_I64 ? 8 : 4);
    const cli_buffer spec[VB_BUFFERS] = {
        [VB_TARGET] = {((rows - 1) * stride + (hi - lo)) * dsize, (const char *)whole->target_logits + lo * dsize},
        [VB_DRAFTS] = {rows * 4, whole->draft_tokens},
        [VB_SEEDS] = {R * 8, whole->seeds},
        [VB_TEMPS] = {R * 4, whole->temperatures},
        [VB_POSITIONS] = {rows * 8, whole->positions},
        [VB_TOKENS] = {token_bytes, NULL},
        [VB_NUM] = {R * 4, NULL},
        [VB_STATUS] = {4, NULL},
    };
    psr_verify_args_init(a, sizeof *a);
    a->requests = R, a->cu = whole->cu, a->rows = rows, a->max_drafts = whole->max_drafts;
    a->target_dtype = whole->target_dtype, a->target_row_stride = stride;
    a->draft_cache_k = whole->draft_cache ? whole->draft_cache_k : 0;
    a->method = whole->method, a->noise = whole->noise, a->tokens_dtype = whole->tokens_dtype;
    a->vocab_total = whole->vocab, a->effective_noise = whole->effective_noise;
    cl_int err = cli_make_buffers(ctx, spec, VB_BUFFERS, b);
    a->target_logits = b[VB_TARGET], a->draft_tokens = b[VB_DRAFTS], a->seeds = b[VB_SEEDS];
    a->temperatures = b[VB_TEMPS], a->positions = b[VB_POSITIONS];
    a->tokens = b[VB_TOKENS], a->num_sampled = b[VB_NUM], a->status = b[VB_STATUS];
    return err;
}

cl_int shards_verify_cache(psr_context *ctx, const psr_verify_host_args *whole, size_t lo, size_t hi, cl_mem *out)
{
    *out = NULL;
    size_t n = hi - lo, rows = whole->requests * whole->draft_cache_k;
    if (!whole->draft_cache || !rows)
        return CL_SUCCESS;
    float *cols = malloc(rows * n * sizeof *cols);
    if (!cols)
        return CL_OUT_OF_HOST_MEMORY;
    for (size_t r = 0; r < rows; r++)
        memcpy(cols + r * n, whole->draft_cache + r * whole->vocab + lo, n * sizeof *cols);
    cl_int err = cli_make_buffers(ctx, &(cli_buffer){rows * n * sizeof *cols, cols}, 1, out);
    free(cols);
    return err;
}

psr_status shards_verify_finish(psr_context *ctx, const psr_verify_host_args *whole, const cl_mem *b)
{
    cl_command_queue q = cli_queue(ctx);
    uint32_t status = 0;
    size_t R = whole->requests;
    size_t token_bytes = R * (whole->max_drafts + 1) * (whole->tokens_dtype == PSR_TOKENS_I64 ? 8 : 4);
    cl_int err = clEnqueueReadBuffer(q, b[VB_STATUS], CL_TRUE, 0, 4, &status, 0, NULL, NULL);
    if (err == CL_SUCCESS && status) /* as psr_verify_host: nothing written */
        return cli_fail(PSR_ERR_INVALID_ARGUMENT, "sharded verification: the device flagged the input (0x%x)",
                        status);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(q, b[VB_TOKENS], CL_TRUE, 0, token_bytes, whole->tokens, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(q, b[VB_NUM], CL_TRUE, 0, R * 4, whole->num_sampled, 0, NULL, NULL);
    return err == CL_SUCCESS ? PSR_OK : opencl_failed("reading the verified tokens", err);
}

/* A verification's shards on one device: each its keys and columns of
 * the draft cache; the slots and records of all in one buffer each. */
typedef struct verify_run {
    psr_context *ctx;
    size_t count, slots, first_slot[PSR_MAX_SHARDS];
    const size_t *bounds;
    psr_verify_args base; /* what every shard shares */
    cl_mem keys[PSR_MAX_SHARDS], caches[PSR_MAX_SHARDS], partials, records;
} verify_run;

/* Shard s's args: the same buffers as every shard's but its own keys,
 * columns and slots. */
static psr_verify_args verify_shard(const verify_run *v, size_t s)
{
    psr_verify_args a = v->base;
    a.vocab = v->bounds[s + 1] - v->bounds[s], a.target_offset = v->bounds[s], a.draft_cache = v->caches[s];
    a.shard_count = v->count, a.shard_index = s, a.vocab_offset = v->bounds[s];
    a.shard_slot = v->first_slot[s], a.shard_slots = v->slots;
    a.shard_keys = v->keys[s], a.shard_partials = v->partials, a.shard_records = v->records;
    return a;
}

/* Round 0 on every shard, then the keys' element-wise maximum written
 * back into every shard's keys, as an all-reduce would leave them. */
static psr_status verify_keys(verify_run *v)
{
    cl_command_queue q = cli_queue(v->ctx);
    size_t n = 2 * v->base.rows + 1;
    uint32_t *max = calloc(n, 4), *mine = malloc(n * 4);
    psr_status st = max && mine ? PSR_OK : cli_fail(PSR_ERR_OUT_OF_HOST_MEMORY, "cannot allocate the keys of %zu rows",
                                                    v->base.rows);
    cl_int err = CL_SUCCESS;
    for (size_t s = 0; st == PSR_OK && err == CL_SUCCESS && s < v->count; s++) {
        psr_verify_args a = verify_shard(v, s);
        st = psr_verify_shard_round(v->ctx, &a, 0, NULL);
        if (st == PSR_OK)
            err = clEnqueueReadBuffer(q, v->keys[s], CL_TRUE, 0, n * 4, mine, 0, NULL, NULL);
        for (size_t i = 0; st == PSR_OK && err == CL_SUCCESS && i < n; i++)
            max[i] = mine[i] > max[i] ? mine[i] : max[i];
    }
    for (size_t s = 0; st == PSR_OK && err == CL_SUCCESS && s < v->count; s++)
        err = clEnqueueWriteBuffer(q, v->keys[s], CL_TRUE, 0, n * 4, max, 0, NULL, NULL);
    free(max), free(mine);
    return st == PSR_OK && err != CL_SUCCESS ? opencl_failed("reducing the shards' keys", err) : st;
}

/* The shards' own buffers: keys, columns of the draft cache, the shared
 * slots and records. */
static cl_int verify_buffers(verify_run *v, const psr_verify_host_args *whole)
{
    size_t rows = whole->rows;
    const cli_buffer shared[2] = {{v->slots * psr_verify_shard_slot_bytes(rows), NULL},
                                  {v->count * whole->requests * sizeof(psr_shard_record), NULL}};
    cl_mem made[2];
    cl_int err = cli_make_buffers(v->ctx, shared, 2, made);
    v->partials = made[0], v->records = made[1];
    for (size_t s = 0; err == CL_SUCCESS && s < v->count; s++) {
        err = cli_make_buffers(v->ctx, &(cli_buffer){(2 * rows + 1) * 4, NULL}, 1, &v->keys[s]);
        if (err == CL_SUCCESS)
            err = shards_verify_cache(v->ctx, whole, v->bounds[s], v->bounds[s + 1], &v->caches[s]);
    }
    return err;
}

psr_status shards_verify_host(psr_context *ctx, const psr_verify_host_args *whole, size_t count,
                              const size_t *bounds)
{
    verify_run *v = calloc(1, sizeof *v);
    if (!v)
        return cli_fail(PSR_ERR_OUT_OF_HOST_MEMORY, "cannot allocate the state of %zu shards", count);
    v->ctx = ctx, v->count = count, v->bounds = bounds;
    for (size_t s = 0; s < count; s++)
        v->first_slot[s] = v->slots, v->slots += psr_logprobs_shard_slots(bounds[s + 1] - bounds[s]);
    cl_mem b[VB_BUFFERS];
    cl_int err = shards_verify_stage(ctx, whole, 0, whole->vocab, b, &v->base);
    if (err == CL_SUCCESS)
        err = verify_buffers(v, whole);
    psr_status st = err == CL_SUCCESS ? verify_keys(v) : opencl_failed("allocating the verification's buffers", err);
    for (unsigned r = 1; r <= 2; r++) /* every shard's slots, then records, into the shared buffers */
        for (size_t s = 0; st == PSR_OK && s < count; s++) {
            psr_verify_args a = verify_shard(v, s);
            st = psr_verify_shard_round(ctx, &a, r, NULL);
        }
    if (st == PSR_OK) { /* the same outputs from any shard */
        psr_verify_args a = verify_shard(v, 0);
        st = psr_verify_shard_round(ctx, &a, 3, NULL);
    }
    if (st == PSR_OK)
        st = shards_verify_finish(ctx, whole, b);
    clFinish(cli_queue(ctx)); /* nothing may still use the buffers below */
    cli_release_buffers(b, VB_BUFFERS);
    cli_release_buffers(v->keys, count);
    cli_release_buffers(v->caches, count);
    cli_release_buffers(&v->partials, 1);
    cli_release_buffers(&v->records, 1);
    free(v);
    return st;
}
