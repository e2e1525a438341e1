/* psr bench logprobs: psr_logprobs (the sampled token's logprob and rank,
 * and the top-N) timed against plain Gumbel-max sampling of the same rows,
 * both by profiling events in the same run; with --shards also the same
 * logprobs across vocabulary shards, in the rounds of
 * psr_logprobs_shard_round. */
#include "bench.h"
#include "cli.h"
#include "json.h"
#include "shards.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *default_shapes = "1x128256,64x128256,256x151936";

static void usage(FILE *out)
{
    fprintf(out,
            "usage: psr bench logprobs [--shapes BxV,...] [--top-n N] [--logits PROFILE] [--iters N]\n"
            "                          [--device SEL] [--shards N[:S1,...]] [--json]\n"
            "\n"
            "Times psr_logprobs (processed logprobs at T = 0.8: the sampled token's logprob\n"
            "and rank, and the top N, default 20) and psr_sample on the same logits,\n"
            "median of --iters runs (default 50), and prints their ratio, each call timed\n"
            "from an idle queue (the host's enqueue included) and behind a buffer copy that\n"
            "outlasts the host's enqueue (dev: the device's time alone), and the host's\n"
            "time of each call until it returns, no event asked for, the queue drained\n"
            "before it (host_samp, host_logp). Default shapes: %s.\n"
            "\n"
            "  --logits  " BENCH_PROFILE_HELP("            ")
            "  --shards  N (1..255) vocabulary shards, the first V %% N one token longer (or\n"
            "            N:S1,...: where shards 1..N-1 start): also times the same logprobs\n"
            "            split into N shards on the same device, the rounds of\n"
            "            psr_logprobs_shard_round (0 and 1 on every shard, 2 on shard 0).\n"
            "            shard_us: the median over the iterations of the sum over the rounds\n"
            "            of each round's span, its first kernel's start to its last kernel's\n"
            "            end: the sharded kernels' device time (a gap inside a round while\n"
            "            the host enqueues the next shard counts); it excludes the time\n"
            "            between rounds: the keys' reduction on the host after round 0\n"
            "            (the app's transport). xshard: shard_us over dev_logp. xch_bytes:\n"
            "            the bytes the shards exchange per call (keys 4 x rows, plus every\n"
            "            shard's partial slots); gather_bytes: those of an all-gather of the\n"
            "            fp32 logits instead (rows x V x 4)\n",
            default_shapes);
}

static psr_status launch_logprobs(psr_context *ctx, const void *args, cl_event *first, cl_event *last)
{
    if (!first)
        return psr_logprobs(ctx, args, last);
    *first = NULL;
    psr_status st = psr_logprobs(ctx, args, last);
    if (st == PSR_OK && last) {
        *first = *last;
        clRetainEvent(*first);
    }
    return st;
}

/* What the rows of one run share. */
typedef struct logprobs_bench {
    int top_n;
    uint64_t state;        /* the logits' generator, from shape to shape */
    bench_profile profile; /* --logits */
    shard_spec shards;     /* --shards; count 0 without */
} logprobs_bench;

/* --top-n N, 0 .. PSR_LOGPROBS_MAX_TOP_N, --logits and --shards (a
 * bench_option_fn). */
static int top_n_option(void *user, const char *arg, const char *val)
{
    int64_t n = 0;
    if (strcmp(arg, "--logits") == 0)
        return bench_parse_profile("bench logprobs", val, &((logprobs_bench *)user)->profile);
    if (strcmp(arg, "--shards") == 0)
        return shards_parse("bench logprobs", val, &((logprobs_bench *)user)->shards);
    if (strcmp(arg, "--top-n") != 0)
        return -1;
    int rc = cli_int("bench logprobs", arg, val, 0, PSR_LOGPROBS_MAX_TOP_N, &n);
    if (rc == CLI_OK)
        ((logprobs_bench *)user)->top_n = (int)n;
    return rc;
}

/* The buffers of one shape: the rows' (BENCH_*), then psr_logprobs' outputs. */
enum { TOKEN_LOGPROBS = BENCH_ROW_BUFFERS, TOP_IDS, TOP_LOGPROBS, TOKEN_RANKS, SHAPE_BUFFERS };

static psr_status make_shape(psr_context *ctx, size_t rows, size_t vocab, logprobs_bench *lb, cl_mem *m)
{
    psr_status st = bench_make_rows(ctx, rows, vocab, 7, lb->profile, &lb->state, m);
    size_t tn = lb->top_n ? (size_t)lb->top_n : 1;
    const cli_buffer out[] = {{rows * 4, NULL}, {rows * tn * 4, NULL}, {rows * tn * 4, NULL}, {rows * 4, NULL}};
    if (st == PSR_OK && cli_make_buffers(ctx, out, 4, m + TOKEN_LOGPROBS) != CL_SUCCESS)
        st = cli_fail(PSR_ERR_OPENCL, "allocating %zu x %zu buffers failed", rows, vocab);
    return st;
}

/* psr_logprobs of what the sampling `a` drew: its rows, logits,
 * temperatures and tokens. */
static void logprobs_args(psr_logprobs_args *l, const psr_sample_args *a, int top_n, const cl_mem *m)
{
    psr_logprobs_args_init(l, sizeof *l);
    l->rows = a->rows, l->vocab = a->vocab, l->logits = a->logits;
    l->requests = a->requests, l->temperatures = a->temperatures, l->tokens = a->tokens;
    l->top_n = top_n;
    l->token_logprobs = m[TOKEN_LOGPROBS];
    l->token_ranks = m[TOKEN_RANKS];
    l->top_ids = top_n ? m[TOP_IDS] : NULL;
    l->top_logprobs = top_n ? m[TOP_LOGPROBS] : NULL;
}

/* ---- the same logprobs across shards ---- */

/* The shards of one shape's call: each its columns of the same logits,
 * its own keys, and one partials buffer they all write into, as an
 * all-gather would leave it. */
typedef struct lp_shards {
    size_t count, rows, slots, slot_bytes;
    psr_logprobs_args *a; /* [count] */
    cl_mem *keys;         /* [count]: uint32 [rows] */
    cl_mem partials;      /* [slots, slot_bytes] */
    uint32_t *scratch;    /* 2 x rows, for the keys' reduction */
} lp_shards;

static void lp_shards_free(lp_shards *sh)
{
    if (sh->keys)
        cli_release_buffers(sh->keys, sh->count);
    if (sh->partials)
        clReleaseMemObject(sh->partials);
    free(sh->a), free(sh->keys), free(sh->scratch);
}

/* The slots of `count` shards over `bounds`. */
static size_t lp_slots(size_t count, const size_t *bounds)
{
    size_t slots = 0;
    for (size_t s = 0; s < count; s++)
        slots += psr_logprobs_shard_slots(bounds[s + 1] - bounds[s]);
    return slots;
}

static psr_status lp_shards_make(psr_context *ctx, const psr_logprobs_args *whole, size_t count,
                                 const size_t *bounds, lp_shards *sh)
{
    size_t rows = whole->rows;
    sh->count = count, sh->rows = rows, sh->slots = lp_slots(count, bounds);
    sh->slot_bytes = psr_logprobs_shard_slot_bytes(rows, whole->top_n);
    sh->a = calloc(count, sizeof *sh->a), sh->keys = calloc(count, sizeof *sh->keys);
    sh->scratch = malloc(2 * rows * 4);
    if (!sh->a || !sh->keys || !sh->scratch)
        return PSR_ERR_OUT_OF_HOST_MEMORY;
    cl_int err = CL_SUCCESS;
    sh->partials = clCreateBuffer(cli_cl_context(ctx), CL_MEM_READ_WRITE, sh->slots * sh->slot_bytes, NULL, &err);
    for (size_t s = 0, slot = 0; s < count && err == CL_SUCCESS; s++) {
        psr_logprobs_args *a = &sh->a[s];
        sh->keys[s] = clCreateBuffer(cli_cl_context(ctx), CL_MEM_READ_WRITE, rows * 4, NULL, &err);
        *a = *whole;
        a->vocab = bounds[s + 1] - bounds[s], a->logits_offset = whole->logits_offset + bounds[s];
        a->row_stride = whole->row_stride ? whole->row_stride : whole->vocab;
        a->shard_count = count, a->shard_index = s, a->vocab_offset = bounds[s], a->vocab_total = whole->vocab;
        a->shard_slot = slot, a->shard_slots = sh->slots;
        a->shard_token_keys = sh->keys[s], a->shard_partials = sh->partials;
        slot += psr_logprobs_shard_slots(a->vocab);
    }
    if (err != CL_SUCCESS)
        return cli_fail(PSR_ERR_OPENCL, "the shards' buffers: %s (%d)", psr_cl_error_string(err), err);
    return PSR_OK;
}

/* Rounds 0 and 1 on every shard, round 2 (the outputs, the same on every
 * shard) on shard 0 (a bench_round_fn). */
static psr_status lp_round(psr_context *ctx, void *args, unsigned round, cl_event *first, cl_event *last)
{
    lp_shards *sh = args;
    size_t n = round < 2 ? sh->count : 1;
    psr_status st = PSR_OK;
    for (size_t s = 0; s < n && st == PSR_OK; s++) {
        cl_event ev = NULL;
        st = psr_logprobs_shard_round(ctx, &sh->a[s], round, &ev);
        bench_keep_ends(ev, first, last);
    }
    return st;
}

/* After round 0 the keys reduced by maximum (a bench_exchange_fn); the
 * partials need nothing: every shard wrote its slots into the one buffer. */
static psr_status lp_exchange(psr_context *ctx, void *args, unsigned round)
{
    lp_shards *sh = args;
    return round == 0 ? bench_reduce_keys(ctx, sh->keys, sh->count, sh->rows, sh->scratch) : PSR_OK;
}

/* The bytes the shards exchange per call: the keys, then every slot. */
static size_t lp_exchange_bytes(const lp_shards *sh)
{
    return sh->rows * 4 + sh->slots * sh->slot_bytes;
}

static psr_status time_sharded(bench_session *s, const logprobs_bench *lb, const psr_logprobs_args *l, double *us,
                               size_t *bytes)
{
    size_t bounds[PSR_MAX_SHARDS + 1];
    shards_bounds("bench logprobs", "--shards", &lb->shards, l->vocab, bounds); /* checked before the run */
    lp_shards sh = {0};
    psr_status st = lp_shards_make(s->ctx, l, lb->shards.count, bounds, &sh);
    if (st == PSR_OK)
        st = bench_time_rounds(s->ctx, lp_round, lp_exchange, &sh, PSR_LOGPROBS_SHARD_ROUNDS, 3, s->o.iters, us);
    *bytes = lp_exchange_bytes(&sh);
    clFinish(cli_queue(s->ctx)); /* nothing may still use the shards' buffers */
    lp_shards_free(&sh);
    return st;
}

/* Every shape's shards: bounds inside its vocabulary, slots the exchange
 * holds (a bench_command's check). */
static int check_shards(bench_session *s, void *user)
{
    const logprobs_bench *lb = user;
    size_t bounds[PSR_MAX_SHARDS + 1];
    for (size_t i = 0; i < s->o.nshapes && lb->shards.count; i++) {
        if (shards_bounds("bench logprobs", "--shards", &lb->shards, s->o.shape[i][1], bounds) != CLI_OK)
            return CLI_USAGE;
        size_t slots = lp_slots(lb->shards.count, bounds);
        if (slots > PSR_LOGPROBS_MAX_SLOTS)
            return cli_usage_error("bench logprobs", "--shards: at V %zu the shards span %zu blocks of at most "
                                   "16,384 tokens, above the %d the exchange holds",
                                   s->o.shape[i][1], slots, PSR_LOGPROBS_MAX_SLOTS);
    }
    return CLI_OK;
}

/* t: sample (idle queue, device), logprobs (idle queue, device), then
 * with shards the sharded time, then the host's time of each call;
 * xch the bytes the shards exchange. */
static void print_row(bench_session *s, size_t rows, size_t vocab, size_t shards, int top_n, const double *t,
                      size_t xch)
{
    double sample_us = t[0], dev_sample_us = t[1], logprobs_us = t[2], dev_logprobs_us = t[3], shard_us = t[4];
    double host_sample_us = t[5], host_logprobs_us = t[6];
    if (!s->o.json) {
        char name[32], sh[64] = "";
        snprintf(name, sizeof name, "%zux%zu", rows, vocab);
        if (shards)
            snprintf(sh, sizeof sh, " %10.1f %7.2f %10zu %12zu", shard_us, shard_us / dev_logprobs_us, xch,
                     rows * vocab * 4);
        printf("%-14s %10.1f %10.1f %8.2f %10.1f %10.1f %8.2f %10.1f %10.1f%s\n", name, sample_us, logprobs_us,
               logprobs_us / sample_us, dev_sample_us, dev_logprobs_us, dev_logprobs_us / dev_sample_us,
               host_sample_us, host_logprobs_us, sh);
        fflush(stdout);
        return;
    }
    const json_number row[] = {
        {"rows", (double)rows},
        {"vocab", (double)vocab},
        {"top_n", top_n},
        {"sample_us", sample_us},
        {"logprobs_us", logprobs_us},
        {"ratio", logprobs_us / sample_us},
        {"device_sample_us", dev_sample_us},
        {"device_logprobs_us", dev_logprobs_us},
        {"device_ratio", dev_logprobs_us / dev_sample_us},
        {"host_sample_us", host_sample_us},
        {"host_logprobs_us", host_logprobs_us},
    };
    const json_number sharded[] = {
        {"shard_us", shard_us},
        {"x_shard", shard_us / dev_logprobs_us},
        {"exchange_bytes", (double)xch},
        {"allgather_bytes", (double)(rows * vocab * 4)},
    };
    json_begin_object(&s->w);
    json_key_numbers(&s->w, row, JSON_COUNT(row));
    if (shards)
        json_key_numbers(&s->w, sharded, JSON_COUNT(sharded));
    json_end_object(&s->w);
}

/* psr_sample, then psr_logprobs of the tokens it drew, on one shape. */
static psr_status logprobs_shape(bench_session *s, const size_t *shape, void *user)
{
    logprobs_bench *lb = user;
    size_t rows = shape[0], vocab = shape[1];
    cl_mem m[SHAPE_BUFFERS] = {NULL};
    psr_status st = make_shape(s->ctx, rows, vocab, lb, m);
    double t[7] = {0}; /* sample: idle queue, device; logprobs: idle queue, device; sharded; host: both */
    size_t xch = 0;
    psr_sample_args a;
    bench_sample_args(&a, rows, vocab, m);
    psr_logprobs_args l;
    logprobs_args(&l, &a, lb->top_n, m);
    if (st == PSR_OK)
        st = bench_time_idle_and_device(s->ctx, bench_launch_sample, &a, s->o.iters, &t[0], &t[1]);
    if (st == PSR_OK)
        st = bench_time_idle_and_device(s->ctx, launch_logprobs, &l, s->o.iters, &t[2], &t[3]);
    if (st == PSR_OK && lb->shards.count)
        st = time_sharded(s, lb, &l, &t[4], &xch);
    if (st == PSR_OK)
        st = bench_time_host(s->ctx, bench_launch_sample, &a, s->o.iters, &t[5]);
    if (st == PSR_OK)
        st = bench_time_host(s->ctx, launch_logprobs, &l, s->o.iters, &t[6]);
    if (st == PSR_OK)
        print_row(s, rows, vocab, lb->shards.count, lb->top_n, t, xch);
    cli_release_buffers(m, SHAPE_BUFFERS);
    return st;
}

static void print_header(bench_session *s, void *user)
{
    const logprobs_bench *lb = user;
    if (s->o.json) {
        bench_json_begin(s);
        if (lb->shards.count)
            json_key_uint(&s->w, "shards", lb->shards.count);
        json_key_string(&s->w, "logits", bench_profile_name(lb->profile));
        bench_json_results(s);
        return;
    }
    printf("device: %s (%s); top %d processed logprobs at T 0.8; logits %s; median of %d", s->info.name,
           s->info.platform_name, lb->top_n, bench_profile_name(lb->profile), s->o.iters);
    bench_end_device_line(s);
    if (lb->shards.count)
        printf("sharded: %zu shards of the vocabulary, the rounds of psr_logprobs_shard_round, their kernels' "
               "device time\n",
               lb->shards.count);
    printf("%-14s %10s %10s %8s %10s %10s %8s %10s %10s%s\n", "shape", "sample_us", "logprobs_us", "ratio",
           "dev_sample", "dev_logp", "dev_ratio", "host_samp", "host_logp", lb->shards.count ? "   shard_us  xshard  xch_bytes gather_bytes" : "");
}

int bench_logprobs(int argc, char **argv)
{
    static const bench_command command = {.name = "bench logprobs", .usage = usage, .extra = top_n_option,
                                          .values = BENCH_VALUES " --top-n --logits --shards", .dims = 2,
                                          .max_shapes = 16, .shapes_expected = "a list of BxV",
                                          .header = print_header, .shape = logprobs_shape,
                                          .check = check_shards};
    bench_session s = {.o = {.shapes = default_shapes, .iters = 50}};
    logprobs_bench lb = {.top_n = 20, .state = 99};
    return bench_main(&command, &s, argc, argv, &lb);
}
