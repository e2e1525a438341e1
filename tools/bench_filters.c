/* psr bench filters: psr_sample with per-request filters (min-p, top-k,
 * top-p) against plain Gumbel-max on the same rows, in the same run. */
#include "bench.h"
#include "cli.h"
#include "json.h"

#include <math.h>
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

int bench_filters(int argc, char **argv)
{
    bench_options o = {.shapes = default_shapes, .iters = 50};
    int parsed = bench_parse_options(argc, argv, "bench filters", usage, NULL, NULL, &o);
    if (parsed >= 0)
        return parsed;
    size_t B[16], V[16], n = 0;
    if (!bench_parse_bxv(o.shapes, B, V, 16, &n))
        return cli_usage_error("bench filters", "--shapes \"%s\" is not a list of BxV", o.shapes);
    psr_context *ctx = cli_open_context(o.device, true);
    if (!ctx)
        return CLI_FAILED;
    psr_device_info info;
    psr_context_device_info(ctx, &info);
    json_writer w;
    json_init(&w, stdout);
    if (o.json) {
        bench_json_begin(&w, &info);
    } else {
        printf("device: %s (%s); T 0.8; median of %d\n", info.name, info.platform_name, o.iters);
        printf("%-14s %-24s %10s %8s %10s %8s\n", "shape", "filters", "us", "x plain", "device_us",
               "x plain");
    }
    int rc = CLI_OK;
    uint64_t state = 7;
    for (size_t s = 0; s < n && rc == CLI_OK; s++) {
        size_t rows = B[s], vocab = V[s];
        float *x = malloc(rows * vocab * 4), *temps = malloc(rows * 4), *ps = malloc(rows * 4),
              *mps = malloc(rows * 4);
        int64_t *seeds = malloc(rows * 8), *pos = malloc(rows * 8);
        int32_t *ks = malloc(rows * 4);
        psr_status st = x && temps && ps && mps && seeds && pos && ks ? PSR_OK : PSR_ERR_OUT_OF_HOST_MEMORY;
        cl_mem m[8] = {NULL};
        if (st == PSR_OK) {
            bench_normal_fill(x, rows * vocab, 3.0, &state);
            for (size_t r = 0; r < rows; r++)
                temps[r] = 0.8f, seeds[r] = (int64_t)r, pos[r] = 11;
            cl_int err = CL_SUCCESS;
            const cl_mem_flags in = CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR;
            const size_t bytes[8] = {rows * vocab * 4, rows * 4, rows * 8, rows * 8, rows * 4,
                                     rows * 4, rows * 4, rows * 4};
            const void *host[5] = {x, temps, seeds, pos, NULL};
            for (int b = 0; b < 8 && err == CL_SUCCESS; b++)
                m[b] = clCreateBuffer(cli_cl_context(ctx), b < 4 ? in : CL_MEM_READ_WRITE, bytes[b],
                                      b < 4 ? (void *)host[b] : NULL, &err);
            if (err != CL_SUCCESS)
                st = cli_fail(PSR_ERR_OPENCL, "allocating %zu x %zu buffers failed", rows, vocab);
        }
        double plain = 0, dev_plain = 0;
        for (size_t c = 0; c < sizeof cases / sizeof *cases && st == PSR_OK; c++) {
            for (size_t r = 0; r < rows; r++)
                ks[r] = cases[c].top_k, ps[r] = cases[c].top_p, mps[r] = cases[c].min_p;
            cl_int err = clEnqueueWriteBuffer(cli_queue(ctx), m[5], CL_TRUE, 0, rows * 4, ks, 0, NULL, NULL);
            if (err == CL_SUCCESS)
                err = clEnqueueWriteBuffer(cli_queue(ctx), m[6], CL_TRUE, 0, rows * 4, ps, 0, NULL, NULL);
            if (err == CL_SUCCESS)
                err = clEnqueueWriteBuffer(cli_queue(ctx), m[7], CL_TRUE, 0, rows * 4, mps, 0, NULL, NULL);
            if (err != CL_SUCCESS) {
                st = cli_fail(PSR_ERR_OPENCL, "writing the filters failed");
                break;
            }
            psr_sample_args a;
            psr_sample_args_init(&a);
            a.rows = rows;
            a.vocab = vocab;
            a.logits = m[0];
            a.requests = rows;
            a.temperatures = m[1];
            a.seeds = m[2];
            a.positions = m[3];
            a.tokens = m[4];
            /* Each case passes the filter buffers it uses, no others. */
            a.top_k = cases[c].top_k ? m[5] : NULL;
            a.top_p = cases[c].top_p < 1.0f ? m[6] : NULL;
            a.min_p = cases[c].min_p > 0.0f ? m[7] : NULL;
            double us = 0, dev_us = 0;
            st = bench_time_launch(ctx, bench_launch_sample, &a, o.iters, &us);
            if (st == PSR_OK)
                st = bench_time_ahead(ctx, bench_launch_sample, &a, o.iters, &dev_us);
            if (st != PSR_OK)
                break;
            if (c == 0)
                plain = us, dev_plain = dev_us;
            if (o.json) {
                json_begin_object(&w);
                json_key(&w, "rows");
                json_uint(&w, rows);
                json_key(&w, "vocab");
                json_uint(&w, vocab);
                json_key(&w, "filters");
                json_string(&w, cases[c].name);
                json_key(&w, "us");
                json_double(&w, us);
                json_key(&w, "x_plain");
                json_double(&w, us / plain);
                json_key(&w, "device_us");
                json_double(&w, dev_us);
                json_key(&w, "device_x_plain");
                json_double(&w, dev_us / dev_plain);
                json_end_object(&w);
            } else {
                char name[32];
                snprintf(name, sizeof name, "%zux%zu", rows, vocab);
                printf("%-14s %-24s %10.1f %8.2f %10.1f %8.2f\n", name, cases[c].name, us, us / plain,
                       dev_us, dev_us / dev_plain);
            }
        }
        if (st != PSR_OK)
            rc = cli_report(st, ctx);
        for (int b = 0; b < 8; b++)
            if (m[b])
                clReleaseMemObject(m[b]);
        free(x), free(temps), free(ps), free(mps), free(seeds), free(pos), free(ks);
    }
    if (o.json && rc == CLI_OK) {
        json_end_array(&w);
        json_end_object(&w);
        json_finish(&w);
    }
    psr_context_free(ctx);
    return rc;
}
