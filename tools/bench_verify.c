/* psr bench verify: speculative-draft verification, timed by profiling
 * events from the first kernel's start to the last one's end, against the
 * memory floor (target plus draft logits read once). */
#include "bench.h"
#include "cli.h"
#include "json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *default_shapes = "32x8x128256,16x5x32000";

/* Targets of the speculative-decoding issue on the H200, in us (0: none). */
static const struct {
    size_t requests, k, vocab;
    double floor_ratio, us;
} h200_targets[] = {
    {32, 8, 128256, 1.5, 0},
    {16, 5, 32000, 0, 30.0},
};

static const struct {
    const char *name;
    psr_verify_method method;
    bool cache;
} modes[] = {
    {"prob", PSR_VERIFY_PROBABILISTIC, true},  /* rejection sampling against the draft cache */
    {"onehot", PSR_VERIFY_PROBABILISTIC, false}, /* n-gram or greedy drafts */
    {"greedy", PSR_VERIFY_GREEDY, false},
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: psr bench verify [--shapes RxKxV,...] [--iters N] [--device SEL] [--json]\n"
            "\n"
            "Times psr_verify over R requests of K drafts and vocabulary V (default %s):\n"
            "prob (rejection sampling with a draft-logits cache), onehot (no cache) and\n"
            "greedy. Drafts come from the salted draft sampler. Prints the median time,\n"
            "the memory floor (target rows plus, for prob, draft rows, read once at the\n"
            "measured copy bandwidth), the ratio, and the mean drafts accepted;\n"
            "stats_us is the first kernel (per-row statistics) alone, and piped_us the\n"
            "device time per verification with N + 1 enqueued back to back, as an engine\n"
            "that never waits between steps sees it: the host's enqueue work overlaps the\n"
            "device's, unless the host is the slower of the two (then it is the host's);\n"
            "device_us is one verification enqueued behind a buffer copy that outlasts the\n"
            "host's enqueue, from the copy's end to the last kernel's end: the device's\n"
            "time alone, as in an engine whose queue is never idle. Small batches run in\n"
            "one launch where the device allows (one_launch in the JSON; stats_us is then\n"
            "the whole call).\n",
            default_shapes);
}

static float normal_from(uint64_t *state)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    double u1 = ((double)(*state >> 11) + 1.0) * 0x1p-53;
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    double u2 = (double)(*state >> 11) * 0x1p-53;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

typedef struct shape_buffers {
    cl_mem target, draft, cache, row_request, cache_rows, seeds, temps, positions, drafts, tokens, num;
} shape_buffers;

static void release_all(shape_buffers *b)
{
    for (cl_mem *m = &b->target; m <= &b->num; m++)
        if (*m)
            clReleaseMemObject(*m);
}

/* Builds one shape: target logits N(0, 2) per row, draft logits = target
 * plus N(0, 1) noise (so drafts are often accepted), and drafts sampled
 * from them by the salted sampler into the cache. */
static psr_status prepare(psr_context *ctx, size_t R, size_t K, size_t V, shape_buffers *b, int32_t *cu)
{
    size_t rows = R * (K + 1);
    float *target = malloc(rows * V * 4), *draft = malloc(rows * V * 4), *temps = malloc(R * 4);
    int32_t *row_request = malloc(rows * 4), *cache_rows = malloc(rows * 4);
    int64_t *seeds = malloc(R * 8), *positions = malloc(rows * 8);
    psr_status st = PSR_OK;
    if (!target || !draft || !temps || !row_request || !cache_rows || !seeds || !positions) {
        st = PSR_ERR_OUT_OF_HOST_MEMORY;
        goto done;
    }
    uint64_t state = 12345;
    for (size_t i = 0; i < rows * V; i++) {
        target[i] = 2.0f * normal_from(&state);
        draft[i] = target[i] + normal_from(&state);
    }
    for (size_t r = 0; r < R; r++) {
        cu[r] = (int32_t)(r * (K + 1));
        seeds[r] = (int64_t)(r * 7 + 1);
        temps[r] = 1.0f;
        for (size_t j = 0; j <= K; j++) {
            size_t row = r * (K + 1) + j;
            row_request[row] = j < K ? (int32_t)r : -1;
            cache_rows[row] = j < K ? (int32_t)(r * K + j) : -1;
            positions[row] = (int64_t)(1000 + r * 64 + j);
        }
    }
    cu[R] = (int32_t)rows;
    cl_int err = CL_SUCCESS;
    const cl_mem_flags in = CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR;
#define MAKE(field, bytes, host)                                                \
    if (err == CL_SUCCESS)                                                      \
        b->field = clCreateBuffer(cli_cl_context(ctx), (host) ? in : CL_MEM_READ_WRITE, \
                                  bytes, (void *)(host), &err)
    MAKE(target, rows * V * 4, target);
    MAKE(draft, rows * V * 4, draft);
    MAKE(cache, (K ? R * K : 1) * V * 4, NULL);
    MAKE(row_request, rows * 4, row_request);
    MAKE(cache_rows, rows * 4, cache_rows);
    MAKE(seeds, R * 8, seeds);
    MAKE(temps, R * 4, temps);
    MAKE(positions, rows * 8, positions);
    MAKE(drafts, rows * 4, NULL);
    MAKE(tokens, R * (K + 1) * 4, NULL);
    MAKE(num, R * 4, NULL);
#undef MAKE
    if (err != CL_SUCCESS) {
        st = cli_fail(PSR_ERR_OPENCL, "allocating %zu x %zu x %zu buffers failed: %s (%d)", R, K, V,
                      psr_cl_error_string(err), err);
        goto done;
    }
    psr_sample_args s;
    psr_sample_args_init(&s);
    s.rows = rows;
    s.vocab = V;
    s.logits = b->draft;
    s.row_request = b->row_request;
    s.requests = R;
    s.seeds = b->seeds;
    s.temperatures = b->temps;
    s.positions = b->positions;
    s.tokens = b->drafts;
    s.draft_cache = b->cache;
    s.draft_cache_rows = b->cache_rows;
    s.draft_cache_rows_total = K ? R * K : 1;
    s.flags = PSR_SAMPLE_DRAFTING;
    st = psr_sample(ctx, &s, NULL);
    if (st == PSR_OK && clFinish(cli_queue(ctx)) != CL_SUCCESS)
        st = cli_fail(PSR_ERR_OPENCL, "clFinish failed");
done:
    free(target), free(draft), free(temps), free(row_request), free(cache_rows), free(seeds),
        free(positions);
    return st;
}

/* Median device time of `iters` verifications, each waited for, and of
 * their first kernel (the row statistics) alone. */
static psr_status time_verify(psr_context *ctx, const psr_verify_args *a, int iters, double *median,
                              double *stats_median)
{
    double *times = calloc((size_t)iters + 3, sizeof *times);
    double *stats = calloc((size_t)iters + 3, sizeof *stats);
    if (!times || !stats) {
        free(times), free(stats);
        return PSR_ERR_OUT_OF_HOST_MEMORY;
    }
    psr_status st = PSR_OK;
    for (int i = 0; i < iters + 3 && st == PSR_OK; i++) {
        cl_event first, last;
        st = psr_verify_enqueue(ctx, a, &first, &last);
        if (st != PSR_OK)
            break;
        clWaitForEvents(1, &last);
        times[i] = event_span_us(first, last);
        stats[i] = event_span_us(first, first);
        clReleaseEvent(first);
        clReleaseEvent(last);
    }
    if (st == PSR_OK) {
        qsort(times + 3, (size_t)iters, sizeof *times, cmp_double); /* 3 warm-up runs */
        *median = times[3 + iters / 2];
        qsort(stats + 3, (size_t)iters, sizeof *stats, cmp_double);
        *stats_median = stats[3 + iters / 2];
    }
    free(times), free(stats);
    return st;
}

static psr_status launch_verify(psr_context *ctx, const void *args, cl_event *first, cl_event *last)
{
    return psr_verify_enqueue(ctx, args, first, last);
}

static bool parse_shapes(const char *s, size_t *R, size_t *K, size_t *V, size_t cap, size_t *n)
{
    *n = 0;
    while (*s) {
        unsigned long long r, k, v;
        int used = 0;
        if (*n == cap || sscanf(s, "%llux%llux%llu%n", &r, &k, &v, &used) != 3 || r == 0 || v == 0 ||
            r > (1u << 20) || k > 64 || v > (1u << 24))
            return false;
        R[*n] = (size_t)r, K[*n] = (size_t)k, V[*n] = (size_t)v;
        (*n)++;
        s += used;
        if (*s == ',')
            s++;
        else if (*s)
            return false;
    }
    return *n > 0;
}

int bench_verify(int argc, char **argv)
{
    bench_options o = {.shapes = default_shapes, .iters = 50};
    int parsed = bench_parse_options(argc, argv, "bench verify", usage, NULL, NULL, &o);
    if (parsed >= 0)
        return parsed;
    size_t R[16], K[16], V[16], n;
    if (!parse_shapes(o.shapes, R, K, V, 16, &n))
        return cli_usage_error("bench verify", "--shapes \"%s\" is not a list of RxKxV", o.shapes);
    psr_context *ctx = cli_open_context(o.device, true);
    if (!ctx)
        return CLI_FAILED;
    psr_device_info info;
    psr_context_device_info(ctx, &info);
    bool nvidia = cli_contains_nocase(info.platform_vendor, "nvidia");
    size_t copy_bytes = info.type == PSR_DEVICE_GPU ? (size_t)1 << 30 : (size_t)256 << 20;
    if (copy_bytes > info.max_alloc_bytes)
        copy_bytes = (size_t)info.max_alloc_bytes;
    double bw = copy_bandwidth(ctx, copy_bytes);
    double empty_us = empty_kernel_us(ctx);
    double enq = enqueue_host_us(ctx, false), enq_ev = enqueue_host_us(ctx, true);
    json_writer w;
    json_init(&w, stdout);
    if (o.json) {
        json_begin_object(&w);
        json_key(&w, "device");
        json_string(&w, info.name);
        json_key(&w, "copy_gbps");
        json_double(&w, bw / 1e9);
        json_key(&w, "empty_kernel_us");
        json_double(&w, empty_us);
        json_key(&w, "enqueue_host_us");
        json_double(&w, enq);
        json_key(&w, "enqueue_event_host_us");
        json_double(&w, enq_ev);
        json_key(&w, "results");
        json_begin_array(&w);
    } else {
        printf("device: %s (%s); copy %.0f GB/s; empty kernel %.1f us; host enqueue %.1f us (%.1f with "
               "an event); median of %d\n",
               info.name, info.platform_name, bw / 1e9, empty_us, enq, enq_ev, o.iters);
        printf("%-18s %-7s %9s %9s %9s %9s %9s %7s %9s %8s\n", "shape RxKxV", "mode", "us", "stats_us",
               "piped_us", "device_us", "floor_us", "xfloor", "accepted", "target");
    }
    int rc = CLI_OK;
    for (size_t s = 0; s < n && rc == CLI_OK; s++) {
        shape_buffers b = {0};
        int32_t *cu = malloc((R[s] + 1) * 4), *num = malloc(R[s] * 4);
        psr_status st = cu && num ? prepare(ctx, R[s], K[s], V[s], &b, cu) : PSR_ERR_OUT_OF_HOST_MEMORY;
        for (size_t m = 0; m < sizeof modes / sizeof *modes && st == PSR_OK; m++) {
            psr_verify_args a;
            psr_verify_args_init(&a);
            a.requests = R[s];
            a.cu = cu;
            a.rows = R[s] * (K[s] + 1);
            a.max_drafts = K[s];
            a.vocab = V[s];
            a.target_logits = b.target;
            a.draft_cache = modes[m].cache && K[s] ? b.cache : NULL;
            a.draft_cache_k = K[s];
            a.draft_tokens = b.drafts;
            a.seeds = b.seeds;
            a.temperatures = b.temps;
            a.positions = b.positions;
            a.method = modes[m].method;
            a.tokens = b.tokens;
            a.num_sampled = b.num;
            double us = 0, stats_us = 0, piped_us = 0, device_us = 0;
            st = time_verify(ctx, &a, o.iters, &us, &stats_us);
            psr_last_paths paths;
            psr_context_last_paths(ctx, &paths);
            bool one_launch = paths.verify_one_launch;
            if (st == PSR_OK)
                st = bench_time_piped(ctx, launch_verify, &a, o.iters, &piped_us);
            if (st == PSR_OK)
                st = bench_time_ahead(ctx, launch_verify, &a, o.iters, &device_us);
            if (st == PSR_OK && clEnqueueReadBuffer(cli_queue(ctx), b.num, CL_TRUE, 0, R[s] * 4, num, 0, NULL,
                                                    NULL) != CL_SUCCESS)
                st = cli_fail(PSR_ERR_OPENCL, "reading num_sampled failed");
            if (st != PSR_OK)
                break;
            double accepted = 0;
            for (size_t r = 0; r < R[s]; r++)
                accepted += num[r] - 1;
            accepted /= (double)R[s];
            double bytes = (double)(R[s] * (K[s] + 1) * V[s] * 4);
            if (a.draft_cache)
                bytes += (double)(R[s] * K[s] * V[s] * 4);
            double floor_us = bytes / bw * 1e6; /* as psr bench sample's floor */
            char target[24] = "-";
            for (size_t t = 0; nvidia && m == 0 && t < sizeof h200_targets / sizeof *h200_targets; t++)
                if (h200_targets[t].requests == R[s] && h200_targets[t].k == K[s] &&
                    h200_targets[t].vocab == V[s]) {
                    if (h200_targets[t].floor_ratio > 0)
                        snprintf(target, sizeof target, "<=%.2fx", h200_targets[t].floor_ratio);
                    else
                        snprintf(target, sizeof target, "<=%.0fus", h200_targets[t].us);
                }
            if (o.json) {
                json_begin_object(&w);
                json_key(&w, "requests");
                json_uint(&w, R[s]);
                json_key(&w, "k");
                json_uint(&w, K[s]);
                json_key(&w, "vocab");
                json_uint(&w, V[s]);
                json_key(&w, "mode");
                json_string(&w, modes[m].name);
                json_key(&w, "one_launch");
                json_bool(&w, one_launch);
                json_key(&w, "us");
                json_double(&w, us);
                json_key(&w, "stats_us");
                json_double(&w, stats_us);
                json_key(&w, "piped_us");
                json_double(&w, piped_us);
                json_key(&w, "device_us");
                json_double(&w, device_us);
                json_key(&w, "floor_us");
                json_double(&w, floor_us);
                json_key(&w, "x_floor");
                json_double(&w, us / floor_us);
                json_key(&w, "mean_accepted");
                json_double(&w, accepted);
                json_end_object(&w);
            } else {
                char name[40];
                snprintf(name, sizeof name, "%zux%zux%zu", R[s], K[s], V[s]);
                printf("%-18s %-7s %9.1f %9.1f %9.1f %9.1f %9.1f %7.2f %9.2f %8s\n", name, modes[m].name,
                       us, stats_us, piped_us, device_us, floor_us, us / floor_us, accepted, target);
            }
        }
        if (st != PSR_OK)
            rc = cli_report(st, ctx);
        release_all(&b);
        free(cu), free(num);
    }
    if (o.json && rc == CLI_OK) {
        json_end_array(&w);
        json_end_object(&w);
        json_finish(&w);
    }
    psr_context_free(ctx);
    return rc;
}
