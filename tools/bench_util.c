/* Timing helpers shared by the psr bench subcommands. */
#include "bench.h"
#include "cli.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double bench_now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double event_span_us(cl_event first, cl_event last)
{
    cl_ulong start = 0, end = 0;
    clGetEventProfilingInfo(first, CL_PROFILING_COMMAND_START, sizeof start, &start, NULL);
    clGetEventProfilingInfo(last, CL_PROFILING_COMMAND_END, sizeof end, &end, NULL);
    return (double)(end - start) / 1000.0;
}

double ends_apart_us(cl_event earlier, cl_event later)
{
    cl_ulong start = 0, end = 0;
    clGetEventProfilingInfo(earlier, CL_PROFILING_COMMAND_END, sizeof start, &start, NULL);
    clGetEventProfilingInfo(later, CL_PROFILING_COMMAND_END, sizeof end, &end, NULL);
    return (double)(end - start) / 1000.0;
}

/* Device copy bandwidth in bytes/s, counting bytes read plus written. */
double copy_bandwidth(psr_context *ctx, size_t bytes)
{
    cl_int err;
    cl_mem a = clCreateBuffer(cli_cl_context(ctx), CL_MEM_READ_WRITE, bytes, NULL, &err);
    cl_mem b = clCreateBuffer(cli_cl_context(ctx), CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (err != CL_SUCCESS)
        return 0;
    cl_uint zero = 0;
    clEnqueueFillBuffer(cli_queue(ctx), a, &zero, sizeof zero, 0, bytes, 0, NULL, NULL);
    double times[20];
    for (int i = 0; i < 23; i++) {
        cl_event ev;
        clEnqueueCopyBuffer(cli_queue(ctx), a, b, 0, 0, bytes, 0, NULL, &ev);
        clWaitForEvents(1, &ev);
        if (i >= 3)
            times[i - 3] = event_span_us(ev, ev);
        clReleaseEvent(ev);
    }
    qsort(times, 20, sizeof times[0], cmp_double);
    clReleaseMemObject(a);
    clReleaseMemObject(b);
    return 2.0 * (double)bytes / (times[10] * 1e-6);
}

/* A kernel that does nothing, built by the tool itself on the context's
 * device: the fixed cost under every launch (NULL on failure). */
static cl_kernel empty_kernel(psr_context *ctx)
{
    static const char *source = "__kernel void psr_bench_empty(void) {}";
    cl_device_id device;
    cl_context cl_ctx;
    cl_int err;
    psr_context_cl(ctx, &cl_ctx, &device, NULL);
    cl_program p = clCreateProgramWithSource(cl_ctx, 1, &source, NULL, &err);
    if (err != CL_SUCCESS)
        return NULL;
    cl_kernel k = NULL;
    if (clBuildProgram(p, 1, &device, "", NULL, NULL) == CL_SUCCESS)
        k = clCreateKernel(p, "psr_bench_empty", &err);
    clReleaseProgram(p); /* the kernel keeps it */
    return k;
}

static double empty_spans_us(cl_command_queue q, cl_kernel k)
{
    double times[55];
    size_t one = 1;
    for (int i = 0; i < 55; i++) {
        cl_event ev;
        if (clEnqueueNDRangeKernel(q, k, 1, NULL, &one, NULL, 0, NULL, &ev) != CL_SUCCESS)
            return -1;
        clWaitForEvents(1, &ev);
        times[i] = event_span_us(ev, ev);
        clReleaseEvent(ev);
    }
    qsort(times + 5, 50, sizeof times[0], cmp_double);
    return times[5 + 25];
}

/* Median span of a kernel that does nothing: the device's fixed cost per
 * launch as its profiling events see it, under every figure below. */
double empty_kernel_us(psr_context *ctx)
{
    cl_kernel k = empty_kernel(ctx);
    if (!k)
        return -1;
    double us = empty_spans_us(cli_queue(ctx), k);
    clReleaseKernel(k);
    return us;
}

static double enqueue_batches_us(cl_command_queue q, cl_kernel k, size_t local, bool with_event)
{
    size_t global = 64 * local;
    double batches[5];
    for (int b = 0; b < 5; b++) {
        clFinish(q);
        double t0 = bench_now_us();
        for (int i = 0; i < 40; i++) {
            cl_event ev = NULL;
            if (clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, with_event ? &ev : NULL) !=
                CL_SUCCESS)
                return -1;
            if (ev)
                clReleaseEvent(ev);
        }
        batches[b] = (bench_now_us() - t0) / 40;
    }
    clFinish(q);
    qsort(batches, 5, sizeof batches[0], cmp_double);
    return batches[2];
}

/* Host time of one clEnqueueNDRangeKernel of the empty kernel (64 groups
 * of the sampler's size), median of 5 batches of 40 enqueued back to
 * back, with or without an event: the host's share of every launch,
 * which no kernel can hide when the device waits for it. */
double enqueue_host_us(psr_context *ctx, bool with_event)
{
    cl_kernel k = empty_kernel(ctx);
    if (!k)
        return -1;
    psr_tuning t;
    psr_context_tuning(ctx, &t);
    double us = enqueue_batches_us(cli_queue(ctx), k, t.sample.work_group_size, with_event);
    clReleaseKernel(k);
    return us;
}

/* Releases the events that were returned. */
static void release_events(cl_event *ev, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (ev[i])
            clReleaseEvent(ev[i]);
}

psr_status bench_launch_sample(psr_context *ctx, const void *args, cl_event *first, cl_event *last)
{
    return psr_sample_enqueue(ctx, args, first, last);
}

psr_status bench_time_host(psr_context *ctx, bench_launch_fn fn, const void *args, int iters, double *median)
{
    double *times = calloc((size_t)iters, sizeof *times);
    if (!times)
        return PSR_ERR_OUT_OF_HOST_MEMORY;
    psr_status st = PSR_OK;
    for (int i = -3; i < iters && st == PSR_OK; i++) {
        if (clFinish(cli_queue(ctx)) != CL_SUCCESS) {
            st = cli_fail(PSR_ERR_OPENCL, "clFinish failed");
            break;
        }
        double t0 = bench_now_us();
        st = fn(ctx, args, NULL, NULL);
        if (i >= 0)
            times[i] = bench_now_us() - t0;
    }
    clFinish(cli_queue(ctx));
    if (st == PSR_OK) {
        qsort(times, (size_t)iters, sizeof *times, cmp_double);
        *median = times[iters / 2];
    }
    free(times);
    return st;
}

/* From a marker rather than the first kernel's start: psr_logprobs
 * returns only its last event, and every call is timed the same way. */
psr_status bench_time_launch(psr_context *ctx, bench_launch_fn fn, const void *args, int iters, double *median)
{
    double *times = calloc((size_t)iters + 3, sizeof *times);
    if (!times)
        return PSR_ERR_OUT_OF_HOST_MEMORY;
    psr_status st = PSR_OK;
    for (int i = 0; i < iters + 3 && st == PSR_OK; i++) {
        cl_event mark = NULL, first = NULL, last = NULL;
        if (clEnqueueMarkerWithWaitList(cli_queue(ctx), 0, NULL, &mark) != CL_SUCCESS) {
            st = cli_fail(PSR_ERR_OPENCL, "marker failed");
            break;
        }
        st = fn(ctx, args, &first, &last);
        if (st == PSR_OK) {
            clWaitForEvents(1, &last);
            times[i] = ends_apart_us(mark, last);
        }
        cl_event all[] = {mark, first, last};
        release_events(all, 3);
    }
    if (st == PSR_OK) {
        qsort(times + 3, (size_t)iters, sizeof *times, cmp_double);
        *median = times[3 + iters / 2];
    }
    free(times);
    return st;
}

psr_status bench_time_spans(psr_context *ctx, bench_launch_fn fn, const void *args, int warmup, int iters,
                            double *median, double *first_median)
{
    double *times = calloc(2 * (size_t)iters, sizeof *times);
    if (!times)
        return PSR_ERR_OUT_OF_HOST_MEMORY;
    double *firsts = times + iters;
    psr_status st = PSR_OK;
    for (int i = -warmup; i < iters && st == PSR_OK; i++) {
        cl_event ends[2] = {NULL, NULL};
        st = fn(ctx, args, &ends[0], &ends[1]);
        if (st == PSR_OK && clWaitForEvents(1, &ends[1]) == CL_SUCCESS && i >= 0) {
            times[i] = event_span_us(ends[0], ends[1]);
            firsts[i] = event_span_us(ends[0], ends[0]);
        }
        release_events(ends, 2);
    }
    if (st == PSR_OK) {
        qsort(times, (size_t)iters, sizeof *times, cmp_double);
        qsort(firsts, (size_t)iters, sizeof *firsts, cmp_double);
        *median = times[iters / 2];
        if (first_median)
            *first_median = firsts[iters / 2];
    }
    free(times);
    return st;
}

/* Device time per call with `iters` + 1 calls enqueued back to back: from
 * the end of the first call's last kernel to the end of the last call's,
 * over iters. The host enqueues ahead, so its own work overlaps the
 * device's unless it is the slower of the two. */
psr_status bench_time_piped(psr_context *ctx, bench_launch_fn fn, const void *args, int iters, double *per_call)
{
    cl_event *last = calloc((size_t)iters + 1, sizeof *last);
    if (!last)
        return PSR_ERR_OUT_OF_HOST_MEMORY;
    psr_status st = PSR_OK;
    int n = 0;
    for (; n < iters + 1; n++) {
        cl_event first = NULL;
        st = fn(ctx, args, &first, &last[n]);
        if (first)
            clReleaseEvent(first);
        if (st != PSR_OK)
            break;
    }
    if (st == PSR_OK && clWaitForEvents(1, &last[n - 1]) != CL_SUCCESS)
        st = cli_fail(PSR_ERR_OPENCL, "waiting for the piped calls failed");
    if (st == PSR_OK)
        *per_call = ends_apart_us(last[0], last[n - 1]) / (double)iters;
    for (int i = 0; i < n; i++)
        clReleaseEvent(last[i]);
    free(last);
    return st;
}

/* The host's enqueue of one call, in us, and the span of the copy ahead of
 * it; false on an OpenCL failure. */
static bool ahead_once(psr_context *ctx, bench_launch_fn fn, const void *args, cl_mem from, cl_mem to,
                       size_t bytes, double *host_us, double *copy_us, double *call_us, psr_status *st)
{
    cl_event copy = NULL, mark = NULL, first = NULL, last = NULL;
    bool ok = clEnqueueCopyBuffer(cli_queue(ctx), from, to, 0, 0, bytes, 0, NULL, &copy) == CL_SUCCESS &&
              clEnqueueMarkerWithWaitList(cli_queue(ctx), 0, NULL, &mark) == CL_SUCCESS;
    if (ok) {
        double t0 = bench_now_us();
        *st = fn(ctx, args, &first, &last);
        *host_us = bench_now_us() - t0;
        ok = *st == PSR_OK && clWaitForEvents(1, &last) == CL_SUCCESS;
    }
    if (ok) {
        *call_us = ends_apart_us(mark, last);
        *copy_us = event_span_us(copy, copy);
    }
    cl_event all[] = {copy, mark, first, last};
    release_events(all, 4);
    if (!ok && *st == PSR_OK)
        *st = cli_fail(PSR_ERR_OPENCL, "timing a call behind a copy failed");
    return ok;
}

psr_status bench_time_ahead(psr_context *ctx, bench_launch_fn fn, const void *args, int iters,
                            double *median)
{
    psr_device_info info;
    psr_context_device_info(ctx, &info);
    size_t cap = (size_t)256 << 20, bytes = (size_t)1 << 20;
    if (info.max_alloc_bytes && cap > info.max_alloc_bytes)
        cap = (size_t)info.max_alloc_bytes;
    double *times = calloc((size_t)iters, sizeof *times);
    if (!times)
        return PSR_ERR_OUT_OF_HOST_MEMORY;
    psr_status st = PSR_OK;
    cl_mem from = NULL, to = NULL;
    int timed = 0, behind = 0;
    /* Warm-up calls grow the copy until it outlasts the host's enqueue of
     * the call three times over; the timed calls then each check it. */
    for (int tries = 0; timed < iters && st == PSR_OK; tries++) {
        if (!from) {
            cl_int err = CL_SUCCESS;
            from = clCreateBuffer(cli_cl_context(ctx), CL_MEM_READ_WRITE, bytes, NULL, &err);
            if (err == CL_SUCCESS)
                to = clCreateBuffer(cli_cl_context(ctx), CL_MEM_READ_WRITE, bytes, NULL, &err);
            cl_uint zero = 0;
            if (err == CL_SUCCESS)
                err = clEnqueueFillBuffer(cli_queue(ctx), from, &zero, sizeof zero, 0, bytes, 0, NULL, NULL);
            if (err != CL_SUCCESS) {
                st = cli_fail(PSR_ERR_OPENCL, "allocating the %zu-byte copy ahead of the calls failed",
                              bytes);
                break;
            }
        }
        double host_us = 0, copy_us = 0, call_us = 0;
        if (!ahead_once(ctx, fn, args, from, to, bytes, &host_us, &copy_us, &call_us, &st))
            break;
        bool warm = tries >= 3;
        if (copy_us < 3 * host_us && bytes < cap && timed == 0) {
            clReleaseMemObject(from), clReleaseMemObject(to);
            from = to = NULL;
            bytes = bytes * 4 > cap ? cap : bytes * 4;
            continue;
        }
        if (!warm)
            continue;
        behind += copy_us < host_us;
        times[timed++] = call_us;
    }
    if (from)
        clReleaseMemObject(from);
    if (to)
        clReleaseMemObject(to);
    if (st == PSR_OK && behind > iters / 2)
        st = cli_fail(PSR_ERR_OPENCL,
                      "the host's enqueue outlasted a %zu-byte copy in %d of %d calls: no device-only time",
                      bytes, behind, iters);
    if (st == PSR_OK) {
        qsort(times, (size_t)iters, sizeof *times, cmp_double);
        *median = times[iters / 2];
    }
    free(times);
    return st;
}

psr_status bench_time_idle_and_device(psr_context *ctx, bench_launch_fn fn, const void *args, int iters,
                                      double *idle_us, double *device_us)
{
    psr_status st = bench_time_launch(ctx, fn, args, iters, idle_us);
    return st == PSR_OK ? bench_time_ahead(ctx, fn, args, iters, device_us) : st;
}

void bench_measure_costs(psr_context *ctx, const psr_device_info *info, bench_costs *c)
{
    /* Large enough to reach the bandwidth, small enough for any device. */
    size_t copy_bytes = info->type == PSR_DEVICE_GPU ? (size_t)1 << 30 : (size_t)256 << 20;
    if (copy_bytes > info->max_alloc_bytes)
        copy_bytes = (size_t)info->max_alloc_bytes;
    c->copy_bw = copy_bandwidth(ctx, copy_bytes);
    c->empty_us = empty_kernel_us(ctx);
    c->enqueue_us = enqueue_host_us(ctx, false);
    c->enqueue_event_us = enqueue_host_us(ctx, true);
}

void bench_json_costs(json_writer *w, const bench_costs *c, const char *bandwidth_key)
{
    json_key_double(w, bandwidth_key, c->copy_bw / 1e9);
    json_key_double(w, "empty_kernel_us", c->empty_us);
    json_key_double(w, "enqueue_host_us", c->enqueue_us);
    json_key_double(w, "enqueue_event_host_us", c->enqueue_event_us);
}

/* What bench_value sets: the common options, then the bench's own. */
typedef struct bench_args {
    bench_options *o;
    const bench_command *cmd;
    void *user;
} bench_args;

/* --shapes, --device, --iters or one of the bench's own options, with its
 * value (a cli_options value). */
static int bench_value(void *opts, const char *arg, const char *val)
{
    bench_args *b = opts;
    int64_t n = 0;
    int rc = CLI_OK;
    if (strcmp(arg, "--shapes") == 0)
        b->o->shapes = val;
    else if (strcmp(arg, "--device") == 0)
        b->o->device = val;
    else if (strcmp(arg, "--iters") == 0 && (rc = cli_int(b->cmd->name, arg, val, 1, 10000, &n)) == CLI_OK)
        b->o->iters = (int)n;
    else if (strcmp(arg, "--iters") != 0)
        rc = b->cmd->extra ? b->cmd->extra(b->user, arg, val) : -1;
    return rc >= 0 ? rc : cli_usage_error(b->cmd->name, "unknown argument \"%s\"", arg);
}

int bench_open(bench_session *s, const bench_command *cmd, int argc, char **argv, void *user)
{
    const cli_options options = {cmd->name, cmd->usage, NULL, bench_value};
    bench_args args = {&s->o, cmd, user};
    int parsed = cli_parse_values(&options, cmd->values ? cmd->values : BENCH_VALUES, argc, argv, 1, &args,
                                  &s->o.json);
    if (parsed >= 0)
        return parsed;
    if (s->o.shapes && !bench_parse_shapes(s->o.shapes, cmd->dims, cmd->max_shapes, s->o.shape, &s->o.nshapes))
        return cli_usage_error(cmd->name, "--shapes \"%s\" is not %s", s->o.shapes, cmd->shapes_expected);
    s->ctx = cli_open_context(s->o.device, true);
    if (!s->ctx)
        return CLI_FAILED;
    psr_context_device_info(s->ctx, &s->info);
    json_init(&s->w, stdout);
    return -1;
}

int bench_main(const bench_command *cmd, bench_session *s, int argc, char **argv, void *user)
{
    int opened = bench_open(s, cmd, argc, argv, user);
    if (opened >= 0)
        return opened;
    int checked = cmd->check ? cmd->check(s, user) : CLI_OK;
    if (checked != CLI_OK)
        return bench_close(s, checked);
    cmd->header(s, user);
    int rc = CLI_OK;
    for (size_t i = 0; i < s->o.nshapes && rc == CLI_OK; i++) {
        psr_status st = cmd->shape(s, s->o.shape[i], user);
        if (st != PSR_OK)
            rc = cli_report(st, s->ctx);
    }
    return bench_close(s, rc);
}

void bench_end_device_line(const bench_session *s)
{
    const char *threads = cli_pocl_threads(&s->info);
    if (threads)
        printf("; PoCL's threads %s", threads);
    printf("\n");
}

void bench_json_begin(bench_session *s)
{
    json_begin_object(&s->w);
    json_key_string(&s->w, "device", s->info.name);
    const char *threads = cli_pocl_threads(&s->info);
    if (threads)
        json_key_string(&s->w, "pocl_threads", threads);
    s->json_open = true;
}

void bench_json_results(bench_session *s)
{
    json_key(&s->w, "results");
    json_begin_array(&s->w);
}

int bench_close(bench_session *s, int rc)
{
    if (s->json_open && rc == CLI_OK) {
        json_end_array(&s->w);
        json_end_object(&s->w);
        json_finish(&s->w);
    }
    psr_context_free(s->ctx);
    return rc;
}

bool bench_parse_shapes(const char *s, size_t dims, size_t cap, size_t (*shape)[3], size_t *n)
{
    static const unsigned long long lo2[] = {1, 1}, hi2[] = {1u << 20, 1u << 20};
    static const unsigned long long lo3[] = {1, 0, 1}, hi3[] = {1u << 20, 64, 1u << 24};
    const unsigned long long *lo = dims == 3 ? lo3 : lo2, *hi = dims == 3 ? hi3 : hi2;
    *n = 0;
    while (*s) {
        if (*n == cap)
            return false;
        for (size_t d = 0; d < dims; d++) {
            char *end;
            unsigned long long v = strtoull(s, &end, 10);
            /* digits only: strtoull would take a sign and leading space */
            if (!isdigit((unsigned char)*s) || v < lo[d] || v > hi[d] || (d + 1 < dims && *end != 'x'))
                return false;
            shape[*n][d] = (size_t)v;
            s = d + 1 < dims ? end + 1 : end;
        }
        (*n)++;
        if (*s == ',' && s[1]) /* a comma before another shape */
            s++;
        else if (*s)
            return false;
    }
    return *n > 0;
}

double bench_normal(uint64_t *state)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    double u1 = ((double)(*state >> 11) + 1.0) * 0x1p-53;
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    double u2 = (double)(*state >> 11) * 0x1p-53;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void bench_normal_fill(float *x, size_t n, double sigma, uint64_t *state)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(sigma * bench_normal(state));
}

static const char *const profile_names[BENCH_PROFILES] = {"normal", "peaked", "zipf", "confident"};

const char *bench_profile_name(bench_profile p)
{
    return p < BENCH_PROFILES ? profile_names[p] : "?";
}

int bench_parse_profile(const char *bench, const char *val, bench_profile *p)
{
    for (int i = 0; i < BENCH_PROFILES; i++)
        if (strcmp(val, profile_names[i]) == 0) {
            *p = (bench_profile)i;
            return CLI_OK;
        }
    return cli_usage_error(bench, "--logits is one of " BENCH_PROFILE_NAMES ", not \"%s\"", val);
}

/* A uniform index below n from the generator. */
static size_t bench_below(uint64_t *state, size_t n)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (size_t)((double)(*state >> 11) * 0x1p-53 * (double)n);
}

/* One row of a profile. */
static void profile_row(float *x, size_t vocab, bench_profile p, uint64_t *state)
{
    if (p == BENCH_ZIPF) {
        for (size_t r = 0; r < vocab; r++)
            x[r] = (float)(-1.1 * log((double)(r + 1)) + 0.5 * bench_normal(state));
        for (size_t i = vocab - 1; i > 0; i--) { /* Fisher-Yates: ranks to random places */
            size_t j = bench_below(state, i + 1);
            float t = x[i];
            x[i] = x[j], x[j] = t;
        }
        return;
    }
    bench_normal_fill(x, vocab, p == BENCH_NORMAL ? 3.0 : 1.0, state);
    if (p == BENCH_NORMAL)
        return;
    size_t top = bench_below(state, vocab);
    if (p == BENCH_PEAKED) {
        x[top] += 25.0f;
        return;
    }
    double rest = 0; /* confident: e^top = 9 x the others' sum, so top holds 90% */
    for (size_t i = 0; i < vocab; i++)
        rest += i == top ? 0.0 : exp((double)x[i]);
    x[top] = (float)log(9.0 * rest);
}

void bench_profile_fill(float *x, size_t rows, size_t vocab, bench_profile p, uint64_t *state)
{
    for (size_t r = 0; r < rows; r++)
        profile_row(x + r * vocab, vocab, p, state);
}

psr_status bench_make_rows(psr_context *ctx, size_t rows, size_t vocab, int64_t pos, bench_profile profile,
                           uint64_t *state, cl_mem *m)
{
    float *x = malloc(rows * vocab * 4), *temps = malloc(rows * 4);
    int64_t *seeds = malloc(rows * 8), *positions = malloc(rows * 8);
    psr_status st = x && temps && seeds && positions ? PSR_OK : PSR_ERR_OUT_OF_HOST_MEMORY;
    if (st == PSR_OK) {
        bench_profile_fill(x, rows, vocab, profile, state);
        for (size_t r = 0; r < rows; r++)
            temps[r] = 0.8f, seeds[r] = (int64_t)r, positions[r] = pos;
        const cli_buffer spec[BENCH_ROW_BUFFERS] = {
            [BENCH_LOGITS] = {rows * vocab * 4, x}, [BENCH_TEMPS] = {rows * 4, temps},
            [BENCH_SEEDS] = {rows * 8, seeds},      [BENCH_POSITIONS] = {rows * 8, positions},
            [BENCH_TOKENS] = {rows * 4, NULL},
        };
        if (cli_make_buffers(ctx, spec, BENCH_ROW_BUFFERS, m) != CL_SUCCESS)
            st = cli_fail(PSR_ERR_OPENCL, "allocating %zu x %zu buffers failed", rows, vocab);
    }
    free(x), free(temps), free(seeds), free(positions);
    return st;
}

void bench_sample_args(psr_sample_args *a, size_t rows, size_t vocab, const cl_mem *m)
{
    psr_sample_args_init(a, sizeof *a);
    a->rows = rows;
    a->vocab = vocab;
    a->logits = m[BENCH_LOGITS];
    a->requests = rows;
    a->temperatures = m[BENCH_TEMPS];
    a->seeds = m[BENCH_SEEDS];
    a->positions = m[BENCH_POSITIONS];
    a->tokens = m[BENCH_TOKENS];
}

void bench_json_reference(json_writer *w, const char *key, const char *ratio_key, double ref, double us)
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

void bench_format_reference(double ref, double us, char *ref_text, char *ratio_text)
{
    if (ref > 0) {
        snprintf(ref_text, 16, "%.1f", ref);
        snprintf(ratio_text, 16, "%.2f", us / ref);
    } else {
        snprintf(ref_text, 16, "-");
        snprintf(ratio_text, 16, "-");
    }
}
