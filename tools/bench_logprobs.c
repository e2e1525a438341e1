/* psr bench logprobs: psr_logprobs (the sampled token's logprob and rank,
 * and the top-N) timed against plain Gumbel-max sampling of the same rows,
 * both by profiling events in the same run. */
#include "bench.h"
#include "cli.h"
#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *default_shapes = "1x128256,64x128256,256x151936";

static void usage(FILE *out)
{
    fprintf(out,
            "usage: psr bench logprobs [--shapes BxV,...] [--top-n N] [--iters N] [--device SEL]\n"
            "                          [--json]\n"
            "\n"
            "Times psr_logprobs (processed logprobs at T = 0.8: the sampled token's logprob\n"
            "and rank, and the top N, default 20) and psr_sample on the same N(0, 3) logits,\n"
            "median of --iters runs (default 50), and prints their ratio, each call timed\n"
            "from an idle queue (the host's enqueue included) and behind a buffer copy that\n"
            "outlasts the host's enqueue (dev: the device's time alone). Default shapes:\n"
            "%s.\n",
            default_shapes);
}

static psr_status launch_logprobs(psr_context *ctx, const void *args, cl_event *first, cl_event *last)
{
    *first = NULL;
    psr_status st = psr_logprobs(ctx, args, last);
    if (st == PSR_OK) {
        *first = *last;
        clRetainEvent(*first);
    }
    return st;
}

/* What the rows of one run share. */
typedef struct logprobs_bench {
    int top_n;
    uint64_t state; /* the logits' generator, from shape to shape */
} logprobs_bench;

/* --top-n N, 0 .. PSR_LOGPROBS_MAX_TOP_N (a bench_option_fn). */
static int top_n_option(void *user, const char *arg, const char *val)
{
    int64_t n = 0;
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
    psr_status st = bench_make_rows(ctx, rows, vocab, 7, &lb->state, m);
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

static void print_row(bench_session *s, size_t rows, size_t vocab, int top_n, const double *t)
{
    double sample_us = t[0], dev_sample_us = t[1], logprobs_us = t[2], dev_logprobs_us = t[3];
    if (!s->o.json) {
        char name[32];
        snprintf(name, sizeof name, "%zux%zu", rows, vocab);
        printf("%-14s %10.1f %10.1f %8.2f %10.1f %10.1f %8.2f\n", name, sample_us, logprobs_us,
               logprobs_us / sample_us, dev_sample_us, dev_logprobs_us, dev_logprobs_us / dev_sample_us);
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
    };
    json_begin_object(&s->w);
    json_key_numbers(&s->w, row, JSON_COUNT(row));
    json_end_object(&s->w);
}

/* psr_sample, then psr_logprobs of the tokens it drew, on one shape. */
static psr_status logprobs_shape(bench_session *s, const size_t *shape, void *user)
{
    logprobs_bench *lb = user;
    size_t rows = shape[0], vocab = shape[1];
    cl_mem m[SHAPE_BUFFERS] = {NULL};
    psr_status st = make_shape(s->ctx, rows, vocab, lb, m);
    double t[4] = {0}; /* sample: idle queue, device; logprobs: idle queue, device */
    psr_sample_args a;
    bench_sample_args(&a, rows, vocab, m);
    psr_logprobs_args l;
    logprobs_args(&l, &a, lb->top_n, m);
    if (st == PSR_OK)
        st = bench_time_idle_and_device(s->ctx, bench_launch_sample, &a, s->o.iters, &t[0], &t[1]);
    if (st == PSR_OK)
        st = bench_time_idle_and_device(s->ctx, launch_logprobs, &l, s->o.iters, &t[2], &t[3]);
    if (st == PSR_OK)
        print_row(s, rows, vocab, lb->top_n, t);
    cli_release_buffers(m, SHAPE_BUFFERS);
    return st;
}

static void print_header(bench_session *s, void *user)
{
    const logprobs_bench *lb = user;
    if (s->o.json) {
        bench_json_begin(s);
        bench_json_results(s);
        return;
    }
    printf("device: %s (%s); top %d processed logprobs at T 0.8; median of %d\n", s->info.name,
           s->info.platform_name, lb->top_n, s->o.iters);
    printf("%-14s %10s %10s %8s %10s %10s %8s\n", "shape", "sample_us", "logprobs_us", "ratio", "dev_sample",
           "dev_logp", "dev_ratio");
}

int bench_logprobs(int argc, char **argv)
{
    static const bench_command command = {.name = "bench logprobs", .usage = usage, .extra = top_n_option,
                                          .values = BENCH_VALUES " --top-n", .dims = 2, .max_shapes = 16,
                                          .shapes_expected = "a list of BxV", .header = print_header,
                                          .shape = logprobs_shape};
    bench_session s = {.o = {.shapes = default_shapes, .iters = 50}};
    logprobs_bench lb = {.top_n = 20, .state = 99};
    return bench_main(&command, &s, argc, argv, &lb);
}
