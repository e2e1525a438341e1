/* psr bench logprobs: psr_logprobs (the sampled token's logprob and rank,
 * and the top-N) timed against plain Gumbel-max sampling of the same rows,
 * both by profiling events in the same run. */
#include "bench.h"
#include "cli.h"
#include "json.h"

#include <math.h>
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

/* --top-n N, 0 .. PSR_LOGPROBS_MAX_TOP_N (a bench_option_fn). */
static int top_n_option(const char *arg, const char *val, void *user)
{
    if (strcmp(arg, "--top-n") != 0)
        return 0;
    if (!val) {
        cli_usage_error("bench logprobs", "--top-n needs a value");
        return -1;
    }
    char *end;
    long v = strtol(val, &end, 10);
    if (end == val || *end || v < 0 || v > PSR_LOGPROBS_MAX_TOP_N) {
        cli_usage_error("bench logprobs", "--top-n \"%s\" is not 0..%d", val, PSR_LOGPROBS_MAX_TOP_N);
        return -1;
    }
    *(int *)user = (int)v;
    return 2;
}

int bench_logprobs(int argc, char **argv)
{
    bench_options o = {.shapes = default_shapes, .iters = 50};
    int top_n = 20;
    int parsed = bench_parse_options(argc, argv, "bench logprobs", usage, top_n_option, &top_n, &o);
    if (parsed >= 0)
        return parsed;
    size_t B[16], V[16], n = 0;
    if (!bench_parse_bxv(o.shapes, B, V, 16, &n))
        return cli_usage_error("bench logprobs", "--shapes \"%s\" is not a list of BxV", o.shapes);
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
        printf("device: %s (%s); top %d processed logprobs at T 0.8; median of %d\n", info.name,
               info.platform_name, top_n, o.iters);
        printf("%-14s %10s %10s %8s %10s %10s %8s\n", "shape", "sample_us", "logprobs_us", "ratio",
               "dev_sample", "dev_logp", "dev_ratio");
    }
    int rc = CLI_OK;
    uint64_t state = 99;
    for (size_t s = 0; s < n && rc == CLI_OK; s++) {
        size_t rows = B[s], vocab = V[s];
        float *x = malloc(rows * vocab * 4), *temps = malloc(rows * 4);
        int64_t *seeds = malloc(rows * 8), *pos = malloc(rows * 8);
        psr_status st = x && temps && seeds && pos ? PSR_OK : PSR_ERR_OUT_OF_HOST_MEMORY;
        cl_mem m[9] = {NULL};
        if (st == PSR_OK) {
            bench_normal_fill(x, rows * vocab, 3.0, &state);
            for (size_t r = 0; r < rows; r++)
                temps[r] = 0.8f, seeds[r] = (int64_t)r, pos[r] = 7;
            cl_int err = CL_SUCCESS;
            const cl_mem_flags in = CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR;
            size_t tn = top_n ? (size_t)top_n : 1;
            const size_t bytes[9] = {rows * vocab * 4, rows * 4, rows * 8, rows * 8, rows * 4, rows * 4,
                                     rows * tn * 4, rows * tn * 4, rows * 4};
            const void *host[9] = {x, temps, seeds, pos, NULL, NULL, NULL, NULL, NULL};
            for (int b = 0; b < 9 && err == CL_SUCCESS; b++)
                m[b] = clCreateBuffer(cli_cl_context(ctx), host[b] ? in : CL_MEM_READ_WRITE, bytes[b], (void *)host[b], &err);
            if (err != CL_SUCCESS)
                st = cli_fail(PSR_ERR_OPENCL, "allocating %zu x %zu buffers failed", rows, vocab);
        }
        double sample_us = 0, logprobs_us = 0, dev_sample_us = 0, dev_logprobs_us = 0;
        if (st == PSR_OK) {
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
            st = bench_time_launch(ctx, bench_launch_sample, &a, o.iters, &sample_us);
            if (st == PSR_OK)
                st = bench_time_ahead(ctx, bench_launch_sample, &a, o.iters, &dev_sample_us);
            psr_logprobs_args l;
            psr_logprobs_args_init(&l);
            l.rows = rows;
            l.vocab = vocab;
            l.logits = m[0];
            l.requests = rows;
            l.temperatures = m[1];
            l.tokens = m[4];
            l.top_n = top_n;
            l.token_logprobs = m[5];
            l.token_ranks = m[8];
            l.top_ids = top_n ? m[6] : NULL;
            l.top_logprobs = top_n ? m[7] : NULL;
            if (st == PSR_OK)
                st = bench_time_launch(ctx, launch_logprobs, &l, o.iters, &logprobs_us);
            if (st == PSR_OK)
                st = bench_time_ahead(ctx, launch_logprobs, &l, o.iters, &dev_logprobs_us);
        }
        if (st != PSR_OK) {
            rc = cli_report(st, ctx);
        } else if (o.json) {
            json_begin_object(&w);
            json_key(&w, "rows");
            json_uint(&w, rows);
            json_key(&w, "vocab");
            json_uint(&w, vocab);
            json_key(&w, "top_n");
            json_uint(&w, (uint64_t)top_n);
            json_key(&w, "sample_us");
            json_double(&w, sample_us);
            json_key(&w, "logprobs_us");
            json_double(&w, logprobs_us);
            json_key(&w, "ratio");
            json_double(&w, logprobs_us / sample_us);
            json_key(&w, "device_sample_us");
            json_double(&w, dev_sample_us);
            json_key(&w, "device_logprobs_us");
            json_double(&w, dev_logprobs_us);
            json_key(&w, "device_ratio");
            json_double(&w, dev_logprobs_us / dev_sample_us);
            json_end_object(&w);
        } else {
            char name[32];
            snprintf(name, sizeof name, "%zux%zu", rows, vocab);
            printf("%-14s %10.1f %10.1f %8.2f %10.1f %10.1f %8.2f\n", name, sample_us, logprobs_us,
                   logprobs_us / sample_us, dev_sample_us, dev_logprobs_us, dev_logprobs_us / dev_sample_us);
        }
        for (int b = 0; b < 9; b++)
            if (m[b])
                clReleaseMemObject(m[b]);
        free(x), free(temps), free(seeds), free(pos);
    }
    if (o.json && rc == CLI_OK) {
        json_end_array(&w);
        json_end_object(&w);
        json_finish(&w);
    }
    psr_context_free(ctx);
    return rc;
}
