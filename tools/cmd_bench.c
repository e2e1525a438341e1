/* psr bench sample: kernel time from OpenCL profiling events, against the
 * memory floor measured in the same run and, on NVIDIA, vLLM's figures. */
#include "bench.h"
#include "cli.h"
#include "check.h"
#include "oracle.h"
#include <psr/psr_experimental.h>
#include "json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* vLLM's Triton Gumbel kernel on an H200 (DESIGN.md section 9), in us. */
static const struct {
    size_t rows, vocab;
    double fp32_us, fp64_us;
} vllm_h200[] = {
    {1, 128256, 14.9, 0},   {64, 128256, 65.8, 0},  {256, 151936, 250, 390},
    {1024, 151936, 947, 0}, {4096, 32000, 816, 0},
};

static const char *default_shapes = "1x128256,64x128256,256x151936,1024x151936,4096x32000";
/* On a CPU the GPU shapes take minutes; 8 x 128,256 is the CPU shape. */
static const char *default_cpu_shapes = "1x128256,8x128256,64x128256";

typedef struct variant_def {
    const char *name;
    unsigned flags;
    bool greedy;
} variant_def;

static const variant_def variants[] = {
    {"fp32", 0, false},
    {"fp32-fast", PSR_SAMPLE_FAST_MATH, false},
    {"fp64", PSR_SAMPLE_FP64_NOISE, false},
    {"wide", PSR_SAMPLE_WIDE_NOISE, false},
    {"race", PSR_SAMPLE_RACE, false},
    {"race-wide", PSR_SAMPLE_RACE | PSR_SAMPLE_WIDE_NOISE, false},
    {"race-fp64", PSR_SAMPLE_RACE | PSR_SAMPLE_FP64_NOISE, false},
    {"greedy", 0, true},
};

static void bench_usage(FILE *out)
{
    fprintf(out,
            "usage: psr bench sample [--shapes BxV,...] [--variants LIST] [--logits normal|peaked]\n"
            "                        [--iters N] [--device SEL] [--json]\n"
            "\n"
            "Times psr_sample with OpenCL profiling events: warm-up, then the median\n"
            "of N runs (default 50) from the first kernel's start to the last one's\n"
            "end, each run waited for alone (us) and all runs enqueued back to back\n"
            "(piped_us). Each line gives the memory floor (logits read once at the\n"
            "copy bandwidth measured on the same device in the same run) and the ratio\n"
            "of us to it, and on NVIDIA the ratio of us to vLLM's Triton kernel on an H200.\n"
            "On a CPU device it also times psr's host oracle, a plain single-threaded C\n"
            "loop of the same math, on up to 4 rows scaled to all of them (cloop_us;\n"
            "fp32, fp32-fast and greedy lines), and gives us over it (xcloop).\n"
            "\n"
            "  --shapes     default %s\n"
            "               (on a CPU: %s)\n"
            "  --variants   any of fp32, fp32-fast, fp64, wide, race, race-wide, race-fp64,\n"
            "               greedy (default: all the\n"
            "               device can run); fp32 is the default deterministic mode\n"
            "  --logits     normal: N(0, 3); peaked: N(0, 1) with one logit 25 above\n"
            "  --iters      timed runs per line (at least 50 recommended)\n"
            "\n"
            "psr bench verify|logprobs|filters|gemm --help describe the others.\n",
            default_shapes, default_cpu_shapes);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double uniform01(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return ((double)(rng >> 11) + 0.5) * 0x1p-53;
}

static float gaussian(void)
{
    return (float)(sqrt(-2.0 * log(uniform01())) * cos(6.283185307179586 * uniform01()));
}

/* Is `name` one of the comma-separated words of `list`? */
static bool in_list(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0)
            return true;
        if (!end)
            break;
        p = end + 1;
    }
    return false;
}

typedef struct result {
    size_t rows, vocab;
    const char *variant;
    double us, piped_us, floor_us, vllm_us, cloop_us;
} result;

/* Time of psr's host oracle (a plain single-threaded C loop of the same
 * math) over all `rows`, from the first few rows; 0 if not measured. */
static double c_loop_us(const float *logits, size_t rows, size_t vocab, float temperature)
{
    size_t n = rows < 4 ? rows : 4;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    volatile int32_t sink = 0;
    for (size_t r = 0; r < n; r++)
        sink += psr_oracle_sample_row(logits + r * vocab, vocab, temperature, 1 + (int64_t)r, 7, false,
                                      PSR_NOISE_FP32, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    (void)sink;
    double us = (double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e3;
    return us / (double)n * (double)rows;
}

/* Median span of `iters` launches enqueued back to back, as an engine that
 * never waits between steps would see them; launch gaps overlap work. */
static double piped_median(psr_context *ctx, const psr_sample_args *a, int iters)
{
    cl_event *first = calloc((size_t)iters, sizeof *first), *last = calloc((size_t)iters, sizeof *last);
    double *times = calloc((size_t)iters, sizeof *times);
    double median = -1;
    int n = 0;
    if (first && last && times) {
        for (; n < iters; n++)
            if (psr_sample_enqueue(ctx, a, &first[n], &last[n]) != PSR_OK)
                break;
        if (n > 0 && clWaitForEvents(1, &last[n - 1]) == CL_SUCCESS) {
            for (int i = 0; i < n; i++)
                times[i] = event_span_us(first[i], last[i]);
            qsort(times, (size_t)n, sizeof *times, cmp_double);
            median = times[n / 2];
        }
        for (int i = 0; i < n; i++) {
            clReleaseEvent(first[i]);
            clReleaseEvent(last[i]);
        }
    }
    free(first), free(last), free(times);
    return median;
}

/* A reference time and us over it, or two nulls where none was measured (ref <= 0). */
static void json_reference(json_writer *w, const char *key, const char *ratio_key, double ref, double us)
{
    json_key(w, key);
    if (ref > 0)
        json_double(w, ref);
    else
        json_null(w);
    json_key(w, ratio_key);
    if (ref > 0)
        json_double(w, us / ref);
    else
        json_null(w);
}

static int run_bench(psr_context *ctx, const size_t *rows, const size_t *vocab, size_t nshapes,
                     const char *variant_list, bool peaked, int iters, bool as_json)
{
    psr_device_info info;
    psr_context_device_info(ctx, &info);
    bool nvidia = cli_contains_nocase(info.platform_vendor, "nvidia");
    bool cpu = info.type == PSR_DEVICE_CPU;
    size_t max_bytes = 0;
    for (size_t s = 0; s < nshapes; s++)
        if (rows[s] * vocab[s] * 4 > max_bytes)
            max_bytes = rows[s] * vocab[s] * 4;
    size_t copy_bytes = info.type == PSR_DEVICE_GPU ? (size_t)1 << 30 : (size_t)256 << 20;
    if (copy_bytes > info.max_alloc_bytes)
        copy_bytes = (size_t)info.max_alloc_bytes;
    double bw = copy_bandwidth(ctx, copy_bytes);
    if (bw <= 0) {
        fprintf(stderr, "psr bench: cannot measure copy bandwidth\n");
        return CLI_FAILED;
    }

    double empty_us = empty_kernel_us(ctx);
    double enq = enqueue_host_us(ctx, false), enq_ev = enqueue_host_us(ctx, true);
    float *host = malloc(max_bytes);
    if (!host)
        return cli_report(PSR_ERR_OUT_OF_HOST_MEMORY, NULL);
    result *results = calloc(nshapes * (sizeof variants / sizeof variants[0]), sizeof *results);
    size_t nresults = 0;
    int rc = CLI_OK;
    if (!as_json) {
        printf("device: %s (%s), copy bandwidth %.0f GB/s, empty kernel %.1f us, host enqueue %.1f us "
               "(%.1f with an event), logits %s\n",
               info.name, info.platform_name, bw / 1e9, empty_us, enq, enq_ev, peaked ? "peaked" : "N(0,3)");
        printf("%-14s %-10s %10s %10s %10s %8s %10s %8s%s\n", "shape", "variant", "us", "piped_us",
               "floor_us", "xfloor", "vllm_us", "xvllm", cpu ? "  cloop_us   xcloop" : "");
    }
    for (size_t s = 0; s < nshapes && rc == CLI_OK; s++) {
        size_t B = rows[s], V = vocab[s];
        for (size_t i = 0; i < B * V; i++)
            host[i] = peaked ? gaussian() : 3.0f * gaussian();
        if (peaked)
            for (size_t b = 0; b < B; b++)
                host[b * V + (size_t)(uniform01() * (double)V)] += 25.0f;
        cl_int err;
        cl_mem logits = clCreateBuffer(cli_cl_context(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                       B * V * 4, host, &err);
        cl_long *seeds = malloc(B * 8), *pos = malloc(B * 8);
        cl_float *temps = malloc(B * 4), *zeros = calloc(B, 4);
        for (size_t b = 0; b < B; b++) {
            seeds[b] = (cl_long)(uniform01() * 1e15);
            pos[b] = (cl_long)(uniform01() * 1e6);
            temps[b] = 0.8f;
        }
        cl_mem dseeds = clCreateBuffer(cli_cl_context(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, B * 8, seeds, &err);
        cl_mem dpos = clCreateBuffer(cli_cl_context(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, B * 8, pos, &err);
        cl_mem dtemps = clCreateBuffer(cli_cl_context(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, B * 4, temps, &err);
        cl_mem dzeros = clCreateBuffer(cli_cl_context(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, B * 4, zeros, &err);
        cl_mem dtokens = clCreateBuffer(cli_cl_context(ctx), CL_MEM_READ_WRITE, B * 4, NULL, &err);
        free(seeds), free(pos), free(temps), free(zeros);
        if (err != CL_SUCCESS) {
            fprintf(stderr, "psr bench: cannot allocate %zu x %zu logits: %s\n", B, V,
                    psr_cl_error_string(err));
            rc = CLI_FAILED;
        }
        double floor_us = (double)(B * V * 4) / bw * 1e6;
        for (size_t vi = 0; vi < sizeof variants / sizeof variants[0] && rc == CLI_OK; vi++) {
            const variant_def *vd = &variants[vi];
            if (variant_list && !in_list(variant_list, vd->name))
                continue;
            if ((vd->flags & PSR_SAMPLE_FP64_NOISE) && !(info.capabilities & PSR_CAP_FP64))
                continue;
            psr_sample_args a;
            psr_sample_args_init(&a);
            a.rows = B;
            a.vocab = V;
            a.logits = logits;
            a.requests = B;
            a.seeds = dseeds;
            a.temperatures = vd->greedy ? dzeros : dtemps;
            a.positions = dpos;
            a.tokens = dtokens;
            a.flags = vd->flags;
            double *times = malloc((size_t)iters * sizeof *times);
            for (int it = -5; it < iters && rc == CLI_OK; it++) {
                cl_event first, last;
                psr_status st = psr_sample_enqueue(ctx, &a, &first, &last);
                if (st != PSR_OK) {
                    rc = cli_report(st, ctx);
                    break;
                }
                clWaitForEvents(1, &last);
                if (it >= 0)
                    times[it] = event_span_us(first, last);
                clReleaseEvent(first);
                clReleaseEvent(last);
            }
            if (rc == CLI_OK) {
                qsort(times, (size_t)iters, sizeof *times, cmp_double);
                result *r = &results[nresults++];
                r->rows = B;
                r->vocab = V;
                r->variant = vd->name;
                r->us = times[iters / 2];
                r->piped_us = piped_median(ctx, &a, iters);
                r->floor_us = floor_us;
                for (size_t k = 0; nvidia && k < sizeof vllm_h200 / sizeof vllm_h200[0]; k++)
                    if (vllm_h200[k].rows == B && vllm_h200[k].vocab == V)
                        r->vllm_us = (vd->flags & PSR_SAMPLE_FP64_NOISE) ? vllm_h200[k].fp64_us
                                     : vd->greedy                       ? 0
                                                                         : vllm_h200[k].fp32_us;
                if (cpu && (vd->flags & ~PSR_SAMPLE_FAST_MATH) == 0)
                    r->cloop_us = c_loop_us(host, B, V, vd->greedy ? 0.0f : 0.8f);
                if (!as_json) {
                    char shape[32], vllm[16] = "-", xv[16] = "-", cl[40] = "";
                    snprintf(shape, sizeof shape, "%zux%zu", B, V);
                    if (r->vllm_us > 0) {
                        snprintf(vllm, sizeof vllm, "%.1f", r->vllm_us);
                        snprintf(xv, sizeof xv, "%.2f", r->us / r->vllm_us);
                    }
                    if (cpu && r->cloop_us > 0)
                        snprintf(cl, sizeof cl, " %10.1f %8.3f", r->cloop_us, r->us / r->cloop_us);
                    else if (cpu)
                        snprintf(cl, sizeof cl, " %10s %8s", "-", "-");
                    printf("%-14s %-10s %10.1f %10.1f %10.1f %8.2f %10s %8s%s\n", shape, vd->name, r->us,
                           r->piped_us, floor_us, r->us / floor_us, vllm, xv, cl);
                    fflush(stdout);
                }
            }
            free(times);
        }
        cl_mem all[] = {logits, dseeds, dpos, dtemps, dzeros, dtokens};
        for (int i = 0; i < 6; i++)
            if (all[i])
                clReleaseMemObject(all[i]);
    }
    if (as_json && rc == CLI_OK) {
        json_writer w;
        json_init(&w, stdout);
        json_begin_object(&w);
        json_key(&w, "device");
        json_string(&w, info.name);
        json_key(&w, "platform");
        json_string(&w, info.platform_name);
        json_key(&w, "driver_version");
        json_string(&w, info.driver_version);
        json_key(&w, "copy_bandwidth_gbs");
        json_double(&w, bw / 1e9);
        json_key(&w, "empty_kernel_us");
        json_double(&w, empty_us);
        json_key(&w, "enqueue_host_us");
        json_double(&w, enq);
        json_key(&w, "enqueue_event_host_us");
        json_double(&w, enq_ev);
        json_key(&w, "logits");
        json_string(&w, peaked ? "peaked" : "normal");
        json_key(&w, "iterations");
        json_int(&w, iters);
        json_key(&w, "results");
        json_begin_array(&w);
        for (size_t i = 0; i < nresults; i++) {
            json_begin_object(&w);
            json_key(&w, "rows");
            json_uint(&w, results[i].rows);
            json_key(&w, "vocab");
            json_uint(&w, results[i].vocab);
            json_key(&w, "variant");
            json_string(&w, results[i].variant);
            json_key(&w, "us");
            json_double(&w, results[i].us);
            json_key(&w, "piped_us");
            json_double(&w, results[i].piped_us);
            json_key(&w, "floor_us");
            json_double(&w, results[i].floor_us);
            json_key(&w, "x_floor");
            json_double(&w, results[i].us / results[i].floor_us);
            json_reference(&w, "vllm_us", "x_vllm", results[i].vllm_us, results[i].us);
            json_reference(&w, "c_loop_us", "x_c_loop", results[i].cloop_us, results[i].us);
            json_end_object(&w);
        }
        json_end_array(&w);
        json_end_object(&w);
        json_finish(&w);
    }
    free(results);
    free(host);
    return rc;
}

/* psr bench sample's own options. */
typedef struct sample_options {
    const char *variants;
    bool peaked;
} sample_options;

/* --variants LIST and --logits normal|peaked (a bench_option_fn). */
static int sample_option(const char *arg, const char *val, void *user)
{
    sample_options *so = user;
    bool is_variants = strcmp(arg, "--variants") == 0;
    if (!is_variants && strcmp(arg, "--logits") != 0)
        return 0;
    if (!val) {
        cli_usage_error("bench sample", "%s needs a value", arg);
        return -1;
    }
    if (is_variants) {
        so->variants = val;
    } else if (strcmp(val, "peaked") == 0 || strcmp(val, "normal") == 0) {
        so->peaked = strcmp(val, "peaked") == 0;
    } else {
        cli_usage_error("bench sample", "--logits is normal or peaked, not \"%s\"", val);
        return -1;
    }
    return 2;
}

/* ---- psr bench gemm: the LM head's GEMM alone ---- */

static void gemm_usage(FILE *out)
{
    fprintf(out,
            "usage: psr bench gemm [--batch B] [--hidden H] [--vocab V] [--dtype f32|f16]\n"
            "                      [--iters N] [--device SEL] [--json]\n"
            "\n"
            "Times psr_logits_from_hidden (CLBlast's GEMM: logits [B, V] = hidden [B, H] x\n"
            "weights [V, H]^T) with OpenCL profiling events: warm-up (the first call builds\n"
            "CLBlast's kernels), then the median of N runs, each waited for alone (us),\n"
            "and all N enqueued back to back, timed on the host (piped_us). Prints the\n"
            "achieved TFLOP/s, 2 B H V / us, and the bandwidth of reading the inputs and\n"
            "writing the logits once (GB/s): at small B the weights dominate.\n"
            "\n"
            "  --batch   B (default 64)\n"
            "  --hidden  H (default 4096)\n"
            "  --vocab   V (default 32000)\n"
            "  --dtype   f32 (default) or f16 (needs cl_khr_fp16)\n"
            "  --iters   timed runs (default 10)\n");
}

static bool parse_size(const char *s, size_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    *out = (size_t)v;
    return end != s && *end == '\0' && v > 0 && s[0] != '-' && v <= INT32_MAX;
}

/* One timed GEMM: from a marker (the queue reaching the call) to the end
 * of CLBlast's last kernel, which may follow pre-processing kernels. */
static psr_status gemm_once(psr_context *ctx, const psr_lm_head_args *a, double *us)
{
    cl_event mark = NULL, done = NULL;
    cl_int err = clEnqueueMarkerWithWaitList(cli_queue(ctx), 0, NULL, &mark);
    if (err != CL_SUCCESS)
        return cli_fail(PSR_ERR_OPENCL, "clEnqueueMarkerWithWaitList failed: %s (%d)",
                        psr_cl_error_string(err), err);
    psr_status st = psr_logits_from_hidden(ctx, a, &done);
    if (st == PSR_OK) {
        clWaitForEvents(1, &done);
        *us = ends_apart_us(mark, done);
        clReleaseEvent(done);
    }
    clReleaseEvent(mark);
    return st;
}

static int run_gemm_bench(psr_context *ctx, size_t B, size_t H, size_t V, psr_dtype dtype, int iters,
                          bool as_json)
{
    psr_device_info info;
    psr_context_device_info(ctx, &info);
    size_t es = psr_dtype_size(dtype);
    if (H > SIZE_MAX / es / (B > V ? B : V) || V > SIZE_MAX / es / B) {
        fprintf(stderr, "psr bench gemm: %zu x %zu x %zu overflows a size_t\n", B, H, V);
        return CLI_FAILED;
    }
    size_t bytes[3] = {B * H * es, V * H * es, B * V * es};
    cl_mem bufs[3] = {NULL};
    /* Small values so nothing overflows or goes subnormal: 2^-6 in either dtype. */
    const cl_float f32 = 0x1p-6f;
    const cl_half f16 = 0x2400;
    cl_int err = CL_SUCCESS;
    for (int i = 0; i < 3 && err == CL_SUCCESS; i++) {
        bufs[i] = clCreateBuffer(cli_cl_context(ctx), CL_MEM_READ_WRITE, bytes[i], NULL, &err);
        if (err == CL_SUCCESS)
            err = clEnqueueFillBuffer(cli_queue(ctx), bufs[i], dtype == PSR_DTYPE_F16 ? (const void *)&f16
                                                                                  : (const void *)&f32,
                                      es, 0, bytes[i], 0, NULL, NULL);
    }
    int rc = CLI_OK;
    if (err != CL_SUCCESS) {
        fprintf(stderr, "psr bench gemm: cannot allocate the %zu x %zu x %zu buffers: %s\n", B, H, V,
                psr_cl_error_string(err));
        rc = CLI_FAILED;
    }
    psr_lm_head_args a;
    psr_lm_head_args_init(&a);
    a.batch = B, a.hidden_size = H, a.vocab = V, a.dtype = dtype;
    a.hidden = bufs[0], a.weights = bufs[1], a.logits = bufs[2];

    double *times = calloc((size_t)iters, sizeof *times);
    double piped_us = 0;
    if (!times && rc == CLI_OK)
        rc = cli_report(PSR_ERR_OUT_OF_HOST_MEMORY, NULL);
    for (int it = -2; it < iters && rc == CLI_OK; it++) {
        double us = 0;
        psr_status st = gemm_once(ctx, &a, &us);
        if (st != PSR_OK)
            rc = cli_report(st, ctx);
        else if (it >= 0)
            times[it] = us;
    }
    if (rc == CLI_OK) {
        double t0 = bench_now_us();
        for (int it = 0; it < iters && rc == CLI_OK; it++) {
            psr_status st = psr_logits_from_hidden(ctx, &a, NULL);
            if (st != PSR_OK)
                rc = cli_report(st, ctx);
        }
        clFinish(cli_queue(ctx));
        piped_us = (bench_now_us() - t0) / iters;
    }
    if (rc == CLI_OK) {
        qsort(times, (size_t)iters, sizeof *times, cmp_double);
        double us = times[iters / 2];
        double tflops = 2.0 * (double)B * (double)H * (double)V / (us * 1e-6) / 1e12;
        double gbs = (double)(bytes[0] + bytes[1] + bytes[2]) / (us * 1e-6) / 1e9;
        const char *dname = dtype == PSR_DTYPE_F16 ? "f16" : "f32";
        if (as_json) {
            json_writer w;
            json_init(&w, stdout);
            json_begin_object(&w);
            json_key(&w, "device");
            json_string(&w, info.name);
            json_key(&w, "platform");
            json_string(&w, info.platform_name);
            json_key(&w, "batch");
            json_uint(&w, B);
            json_key(&w, "hidden");
            json_uint(&w, H);
            json_key(&w, "vocab");
            json_uint(&w, V);
            json_key(&w, "dtype");
            json_string(&w, dname);
            json_key(&w, "iterations");
            json_int(&w, iters);
            json_key(&w, "us");
            json_double(&w, us);
            json_key(&w, "piped_us");
            json_double(&w, piped_us);
            json_key(&w, "tflops");
            json_double(&w, tflops);
            json_key(&w, "gbs");
            json_double(&w, gbs);
            json_end_object(&w);
            json_finish(&w);
        } else {
            printf("device: %s (%s), CLBlast GEMM, %d runs\n", info.name, info.platform_name, iters);
            printf("%-22s %-5s %12s %12s %9s %9s\n", "BxHxV", "dtype", "us", "piped_us", "TFLOP/s",
                   "GB/s");
            char shape[64];
            snprintf(shape, sizeof shape, "%zux%zux%zu", B, H, V);
            printf("%-22s %-5s %12.1f %12.1f %9.4f %9.1f\n", shape, dname, us, piped_us, tflops, gbs);
        }
    }
    free(times);
    for (int i = 0; i < 3; i++)
        if (bufs[i])
            clReleaseMemObject(bufs[i]);
    return rc;
}

static int bench_gemm(int argc, char **argv)
{
    size_t B = 64, H = 4096, V = 32000;
    psr_dtype dtype = PSR_DTYPE_F32;
    const char *device = NULL;
    bool as_json = false;
    int iters = 10;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (cli_is_help(arg)) {
            gemm_usage(stdout);
            return CLI_OK;
        } else if (strcmp(arg, "--json") == 0) {
            as_json = true;
        } else if (!val) {
            return cli_usage_error("bench gemm", "%s needs a value", arg);
        } else if (strcmp(arg, "--batch") == 0 || strcmp(arg, "--hidden") == 0 ||
                   strcmp(arg, "--vocab") == 0) {
            size_t *dim = arg[2] == 'b' ? &B : arg[2] == 'h' ? &H : &V;
            if (!parse_size(val, dim))
                return cli_usage_error("bench gemm", "%s \"%s\" is not a size in 1 .. 2^31 - 1", arg, val);
            i++;
        } else if (strcmp(arg, "--dtype") == 0) {
            if (strcmp(val, "f32") == 0)
                dtype = PSR_DTYPE_F32;
            else if (strcmp(val, "f16") == 0)
                dtype = PSR_DTYPE_F16;
            else
                return cli_usage_error("bench gemm", "--dtype is f32 or f16, not \"%s\"", val);
            i++;
        } else if (strcmp(arg, "--iters") == 0) {
            iters = atoi(val), i++;
            if (iters < 1)
                return cli_usage_error("bench gemm", "--iters must be at least 1");
        } else if (strcmp(arg, "--device") == 0) {
            device = val, i++;
        } else {
            return cli_usage_error("bench gemm", "unknown argument \"%s\"", arg);
        }
    }
    psr_context *ctx = cli_open_context(device, true);
    if (!ctx)
        return CLI_FAILED;
    int rc = run_gemm_bench(ctx, B, H, V, dtype, iters, as_json);
    psr_context_free(ctx);
    return rc;
}

int cmd_bench(int argc, char **argv)
{
    if (argc < 2 || cli_is_help(argv[1])) {
        bench_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    if (strcmp(argv[1], "gemm") == 0)
        return bench_gemm(argc - 1, argv + 1);
    if (strcmp(argv[1], "verify") == 0)
        return bench_verify(argc - 1, argv + 1);
    if (strcmp(argv[1], "logprobs") == 0)
        return bench_logprobs(argc - 1, argv + 1);
    if (strcmp(argv[1], "filters") == 0)
        return bench_filters(argc - 1, argv + 1);
    if (strcmp(argv[1], "sample") != 0)
        return cli_usage_error("bench", "unknown benchmark \"%s\" (try: sample, verify, logprobs, filters, gemm)", argv[1]);
    bench_options o = {.iters = 50};
    sample_options so = {NULL, false};
    int parsed = bench_parse_options(argc - 1, argv + 1, "bench sample", bench_usage, sample_option, &so, &o);
    if (parsed >= 0)
        return parsed;
    size_t rows[32], vocab[32], n;
    if (o.shapes && !bench_parse_bxv(o.shapes, rows, vocab, 32, &n))
        return cli_usage_error("bench sample", "--shapes \"%s\" is not a list like 1x128256,64x32000",
                               o.shapes);
    psr_context *ctx = cli_open_context(o.device, true);
    if (!ctx)
        return CLI_FAILED;
    if (!o.shapes) {
        psr_device_info info;
        psr_context_device_info(ctx, &info);
        bench_parse_bxv(info.type == PSR_DEVICE_CPU ? default_cpu_shapes : default_shapes, rows, vocab, 32,
                        &n);
    }
    int rc = run_bench(ctx, rows, vocab, n, so.variants, so.peaked, o.iters, o.json);
    psr_context_free(ctx);
    return rc;
}
