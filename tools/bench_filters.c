/* psr bench filters: psr_sample with per-request filters (min-p, top-k,
 * top-p) against plain Gumbel-max on the same rows, in the same run. */
#include "bench.h"
#include "cli.h"
#include "json.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *default_shapes = "32x128256,256x151936";

/* The filters of one run (--top-k, --top-p, --min-p) and its logits. */
typedef struct filters_bench {
    int top_k;
    float top_p, min_p;
    bench_profile profile; /* --logits */
    uint64_t state;        /* the logits' generator, from shape to shape */
} filters_bench;

/* The cases: plain, each filter alone, then top-k + top-p (the chain CPU
 * samplers run). */
enum { PLAIN, MIN_P_ONLY, TOP_K_ONLY, TOP_P_ONLY, TOP_K_TOP_P, NCASES };

typedef struct {
    int top_k;
    float top_p, min_p;
} filter_case;

static filter_case case_of(const filters_bench *fb, int c)
{
    filter_case f = {0, 1.0f, 0.0f};
    if (c == MIN_P_ONLY)
        f.min_p = fb->min_p;
    if (c == TOP_K_ONLY || c == TOP_K_TOP_P)
        f.top_k = fb->top_k;
    if (c == TOP_P_ONLY || c == TOP_K_TOP_P)
        f.top_p = fb->top_p;
    return f;
}

/* "top-k 40 + top-p 0.95" and the like. */
static void case_name(const filter_case *f, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s", f->top_k || f->top_p < 1.0f || f->min_p > 0.0f ? "" : "plain");
    if (f->min_p > 0.0f)
        n += snprintf(buf + n, len - (size_t)n, "min-p %g", (double)f->min_p);
    if (f->top_k)
        n += snprintf(buf + n, len - (size_t)n, "top-k %d", f->top_k);
    if (f->top_p < 1.0f)
        snprintf(buf + n, len - (size_t)n, "%stop-p %g", f->top_k ? " + " : "", (double)f->top_p);
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: psr bench filters [--shapes BxV,...] [--top-k K] [--top-p P] [--min-p M]\n"
            "                         [--logits PROFILE] [--iters N] [--device SEL] [--json]\n"
            "\n"
            "Times psr_sample (T = 0.8) plain and with min-p M, top-k K, top-p P and top-k K +\n"
            "top-p P on every row (defaults: K 100, P 0.95, M 0.05); median of --iters runs\n"
            "(default 50) and the ratio to plain, each call timed from an idle queue (the\n"
            "host's enqueue included) and behind a buffer copy that outlasts the host's\n"
            "enqueue (device_us: the device's time alone), and the host's time of the\n"
            "call until it returns, no event asked for, the queue drained before it\n"
            "(host_us). Default shapes: %s.\n"
            "\n"
            "  --logits  " BENCH_PROFILE_HELP("            "),
            default_shapes);
}

/* --top-k, --top-p, --min-p and --logits (a bench_option_fn). */
static int filters_option(void *user, const char *arg, const char *val)
{
    filters_bench *fb = user;
    const char *cmd = "bench filters";
    if (strcmp(arg, "--logits") == 0)
        return bench_parse_profile(cmd, val, &fb->profile);
    if (strcmp(arg, "--top-k") == 0) {
        int64_t k = 0;
        int rc = cli_int(cmd, arg, val, 1, INT32_MAX, &k);
        fb->top_k = (int)k;
        return rc;
    }
    float *f = strcmp(arg, "--top-p") == 0 ? &fb->top_p : strcmp(arg, "--min-p") == 0 ? &fb->min_p : NULL;
    if (!f)
        return -1;
    int rc = cli_float(cmd, arg, val, f);
    if (rc == CLI_OK && f == &fb->top_p && !(*f > 0.0f && *f < 1.0f))
        return cli_usage_error(cmd, "--top-p %s is not in (0, 1)", val);
    if (rc == CLI_OK && f == &fb->min_p && !(*f > 0.0f && *f <= 1.0f))
        return cli_usage_error(cmd, "--min-p %s is not in (0, 1]", val);
    return rc;
}

/* The buffers of one shape: the rows' (BENCH_*), then the filters'. */
enum { TOP_K = BENCH_ROW_BUFFERS, TOP_P, MIN_P, SHAPE_BUFFERS };

/* The filters of case c on every row, in their buffers. */
static psr_status write_filters(psr_context *ctx, const filter_case *f, size_t rows, const cl_mem *m)
{
    int32_t *ks = malloc(rows * 4);
    float *ps = malloc(rows * 4), *mps = malloc(rows * 4);
    psr_status st = ks && ps && mps ? PSR_OK : PSR_ERR_OUT_OF_HOST_MEMORY;
    for (size_t r = 0; r < rows && st == PSR_OK; r++)
        ks[r] = f->top_k, ps[r] = f->top_p, mps[r] = f->min_p;
    const void *host[3] = {ks, ps, mps};
    for (int i = 0; i < 3 && st == PSR_OK; i++)
        if (clEnqueueWriteBuffer(cli_queue(ctx), m[TOP_K + i], CL_TRUE, 0, rows * 4, host[i], 0, NULL, NULL) !=
            CL_SUCCESS)
            st = cli_fail(PSR_ERR_OPENCL, "writing the filters failed");
    free(ks), free(ps), free(mps);
    return st;
}

static void print_row(bench_session *s, size_t rows, size_t vocab, const filter_case *f, const double *t,
                      const double *plain)
{
    double us = t[0], dev_us = t[1], host_us = t[2];
    char label[64];
    case_name(f, label, sizeof label);
    if (!s->o.json) {
        char name[32];
        snprintf(name, sizeof name, "%zux%zu", rows, vocab);
        printf("%-14s %-24s %10.1f %8.2f %10.1f %8.2f %8.1f\n", name, label, us, us / plain[0], dev_us,
               dev_us / plain[1], host_us);
        return;
    }
    const json_number shape[] = {{"rows", (double)rows}, {"vocab", (double)vocab}};
    const json_number times[] = {
        {"us", us}, {"x_plain", us / plain[0]}, {"device_us", dev_us}, {"device_x_plain", dev_us / plain[1]},
        {"host_us", host_us}};
    json_writer *w = &s->w;
    json_begin_object(w);
    json_key_numbers(w, shape, JSON_COUNT(shape));
    json_key_string(w, "filters", label);
    json_key_numbers(w, times, JSON_COUNT(times));
    json_end_object(w);
}

/* Every case on one shape; the first, plain, is what the others are over. */
static psr_status filters_shape(bench_session *s, const size_t *shape, void *user)
{
    size_t rows = shape[0], vocab = shape[1];
    cl_mem m[SHAPE_BUFFERS] = {NULL};
    filters_bench *fb = user;
    psr_status st = bench_make_rows(s->ctx, rows, vocab, 11, fb->profile, &fb->state, m);
    const cli_buffer filters[3] = {{rows * 4, NULL}, {rows * 4, NULL}, {rows * 4, NULL}};
    if (st == PSR_OK && cli_make_buffers(s->ctx, filters, 3, m + TOP_K) != CL_SUCCESS)
        st = cli_fail(PSR_ERR_OPENCL, "allocating %zu x %zu buffers failed", rows, vocab);
    double plain[2] = {0}; /* the idle queue's and the device's */
    for (int c = 0; c < NCASES && st == PSR_OK; c++) {
        filter_case f = case_of(fb, c);
        st = write_filters(s->ctx, &f, rows, m);
        psr_sample_args a;
        bench_sample_args(&a, rows, vocab, m);
        /* Each case passes the filter buffers it uses, no others. */
        a.top_k = f.top_k ? m[TOP_K] : NULL;
        a.top_p = f.top_p < 1.0f ? m[TOP_P] : NULL;
        a.min_p = f.min_p > 0.0f ? m[MIN_P] : NULL;
        double t[3] = {0};
        if (st == PSR_OK)
            st = bench_time_idle_and_device(s->ctx, bench_launch_sample, &a, s->o.iters, &t[0], &t[1]);
        if (st == PSR_OK)
            st = bench_time_host(s->ctx, bench_launch_sample, &a, s->o.iters, &t[2]);
        if (st == PSR_OK && c == PLAIN)
            plain[0] = t[0], plain[1] = t[1];
        if (st == PSR_OK)
            print_row(s, rows, vocab, &f, t, plain);
    }
    cli_release_buffers(m, SHAPE_BUFFERS);
    return st;
}

static void print_header(bench_session *s, void *user)
{
    const filters_bench *fb = user;
    if (s->o.json) {
        bench_json_begin(s);
        json_key_string(&s->w, "logits", bench_profile_name(fb->profile));
        bench_json_results(s);
        return;
    }
    printf("device: %s (%s); T 0.8; logits %s; median of %d", s->info.name, s->info.platform_name,
           bench_profile_name(fb->profile), s->o.iters);
    bench_end_device_line(s);
    printf("%-14s %-24s %10s %8s %10s %8s %8s\n", "shape", "filters", "us", "x plain", "device_us", "x plain",
           "host_us");
}

int bench_filters(int argc, char **argv)
{
    static const bench_command command = {.name = "bench filters", .usage = usage, .extra = filters_option,
                                          .values = BENCH_VALUES " --top-k --top-p --min-p --logits",
                                          .dims = 2, .max_shapes = 16,
                                          .shapes_expected = "a list of BxV", .header = print_header,
                                          .shape = filters_shape};
    bench_session s = {.o = {.shapes = default_shapes, .iters = 50}};
    filters_bench fb = {.top_k = 100, .top_p = 0.95f, .min_p = 0.05f, .state = 7};
    return bench_main(&command, &s, argc, argv, &fb);
}
