/* psr bench filters: psr_sample with per-request filters (min-p, top-k,
 * top-p) against plain Gumbel-max on the same rows, in the same run. */
#include "bench.h"
#include "cli.h"
#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *default_shapes = "32x128256,256x151936";

static const struct {
    const char *name;
    int top_k;
    float top_p, min_p;
} cases[] = {
    {"plain", 0, 1.0f, 0.0f},
    {"min-p 0.05", 0, 1.0f, 0.05f},
    {"top-k 100", 100, 1.0f, 0.0f},
    {"top-p 0.95", 0, 0.95f, 0.0f},
    {"top-k 100 + top-p 0.95", 100, 0.95f, 0.0f},
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: psr bench filters [--shapes BxV,...] [--iters N] [--device SEL] [--json]\n"
            "\n"
            "Times psr_sample (T = 0.8, N(0, 3) logits) plain and with min-p 0.05, top-k 100,\n"
            "top-p 0.95 and top-k 100 + top-p 0.95 on every row; median of --iters runs\n"
            "(default 50) and the ratio to plain, each call timed from an idle queue (the\n"
            "host's enqueue included) and behind a buffer copy that outlasts the host's\n"
            "enqueue (device_us: the device's time alone). Default shapes: %s.\n",
            default_shapes);
}

/* The buffers of one shape: the rows' (BENCH_*), then the filters'. */
enum { TOP_K = BENCH_ROW_BUFFERS, TOP_P, MIN_P, SHAPE_BUFFERS };

/* The filters of case c on every row, in their buffers. */
static psr_status write_filters(psr_context *ctx, size_t c, size_t rows, const cl_mem *m)
{
    int32_t *ks = malloc(rows * 4);
    float *ps = malloc(rows * 4), *mps = malloc(rows * 4);
    psr_status st = ks && ps && mps ? PSR_OK : PSR_ERR_OUT_OF_HOST_MEMORY;
    for (size_t r = 0; r < rows && st == PSR_OK; r++)
        ks[r] = cases[c].top_k, ps[r] = cases[c].top_p, mps[r] = cases[c].min_p;
    const void *host[3] = {ks, ps, mps};
    for (int f = 0; f < 3 && st == PSR_OK; f++)
        if (clEnqueueWriteBuffer(cli_queue(ctx), m[TOP_K + f], CL_TRUE, 0, rows * 4, host[f], 0, NULL, NULL) !=
            CL_SUCCESS)
            st = cli_fail(PSR_ERR_OPENCL, "writing the filters failed");
    free(ks), free(ps), free(mps);
    return st;
}

static void print_row(bench_session *s, size_t rows, size_t vocab, size_t c, const double *t, const double *plain)
{
    double us = t[0], dev_us = t[1];
    if (!s->o.json) {
        char name[32];
        snprintf(name, sizeof name, "%zux%zu", rows, vocab);
        printf("%-14s %-24s %10.1f %8.2f %10.1f %8.2f\n", name, cases[c].name, us, us / plain[0], dev_us,
               dev_us / plain[1]);
        return;
    }
    const json_number shape[] = {{"rows", (double)rows}, {"vocab", (double)vocab}};
    const json_number times[] = {
        {"us", us}, {"x_plain", us / plain[0]}, {"device_us", dev_us}, {"device_x_plain", dev_us / plain[1]}};
    json_writer *w = &s->w;
    json_begin_object(w);
    json_key_numbers(w, shape, JSON_COUNT(shape));
    json_key_string(w, "filters", cases[c].name);
    json_key_numbers(w, times, JSON_COUNT(times));
    json_end_object(w);
}

/* Every case on one shape; the first, plain, is what the others are over. */
static psr_status filters_shape(bench_session *s, const size_t *shape, void *user)
{
    size_t rows = shape[0], vocab = shape[1];
    cl_mem m[SHAPE_BUFFERS] = {NULL};
    psr_status st = bench_make_rows(s->ctx, rows, vocab, 11, user, m);
    const cli_buffer filters[3] = {{rows * 4, NULL}, {rows * 4, NULL}, {rows * 4, NULL}};
    if (st == PSR_OK && cli_make_buffers(s->ctx, filters, 3, m + TOP_K) != CL_SUCCESS)
        st = cli_fail(PSR_ERR_OPENCL, "allocating %zu x %zu buffers failed", rows, vocab);
    double plain[2] = {0}; /* the idle queue's and the device's */
    for (size_t c = 0; c < sizeof cases / sizeof *cases && st == PSR_OK; c++) {
        st = write_filters(s->ctx, c, rows, m);
        psr_sample_args a;
        bench_sample_args(&a, rows, vocab, m);
        /* Each case passes the filter buffers it uses, no others. */
        a.top_k = cases[c].top_k ? m[TOP_K] : NULL;
        a.top_p = cases[c].top_p < 1.0f ? m[TOP_P] : NULL;
        a.min_p = cases[c].min_p > 0.0f ? m[MIN_P] : NULL;
        double t[2] = {0};
        if (st == PSR_OK)
            st = bench_time_idle_and_device(s->ctx, bench_launch_sample, &a, s->o.iters, &t[0], &t[1]);
        if (st == PSR_OK && c == 0)
            plain[0] = t[0], plain[1] = t[1];
        if (st == PSR_OK)
            print_row(s, rows, vocab, c, t, plain);
    }
    cli_release_buffers(m, SHAPE_BUFFERS);
    return st;
}

static void print_header(bench_session *s, void *user)
{
    (void)user;
    if (s->o.json) {
        bench_json_begin(s);
        bench_json_results(s);
        return;
    }
    printf("device: %s (%s); T 0.8; median of %d\n", s->info.name, s->info.platform_name, s->o.iters);
    printf("%-14s %-24s %10s %8s %10s %8s\n", "shape", "filters", "us", "x plain", "device_us", "x plain");
}

int bench_filters(int argc, char **argv)
{
    static const bench_command command = {.name = "bench filters", .usage = usage, .dims = 2, .max_shapes = 16,
                                          .shapes_expected = "a list of BxV", .header = print_header,
                                          .shape = filters_shape};
    bench_session s = {.o = {.shapes = default_shapes, .iters = 50}};
    uint64_t state = 7; /* the logits' generator, from shape to shape */
    return bench_main(&command, &s, argc, argv, &state);
}
