/* psr bench sample: kernel time from OpenCL profiling events, against the
 * memory floor measured in the same run and, on NVIDIA, vLLM's figures;
 * psr bench gemm: the LM head's GEMM alone. */
#include "bench.h"
#include "cli.h"
#include "check.h"
#include "oracle.h"
#include <psr/psr_experimental.h>
#include "json.h"
#include "shards.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Which of vLLM's figures a variant is compared with. */
enum { VLLM_FP32, VLLM_FP64, VLLM_GREEDY, VLLM_NONE };

/* vLLM's Triton kernels on an H200, replayed from a CUDA graph on the
 * same machine (2026-12-02), in us: Gumbel-max with fp32 noise, with fp64
 * noise, and greedy argmax, by VLLM_*. */
static const struct {
    size_t rows, vocab;
    double us[3];
} vllm_h200[] = {
    {1, 128256, {7.1, 9.2, 6.0}},          {64, 128256, {57.2, 88.3, 15.8}},
    {256, 151936, {241.7, 383.5, 56.3}},   {1024, 151936, {940, 1498.5, 200.8}},
    {4096, 32000, {809, 1289, 174.0}},
};

static const char *default_shapes = "1x128256,64x128256,256x151936,1024x151936,4096x32000";
/* On a CPU the GPU shapes take minutes: one row and two small batches. */
static const char *default_cpu_shapes = "1x128256,8x128256,64x128256";

typedef struct variant_def {
    const char *name;
    unsigned flags;
    psr_noise noise;
    bool greedy;
    int vllm; /* VLLM_*: the fp32-noise variants share vLLM's fp32 figure */
} variant_def;

static const variant_def variants[] = {
    {"fp32", 0, PSR_NOISE_FP32, false, VLLM_FP32},
    {"fp32-fast", PSR_SAMPLE_FAST_MATH, PSR_NOISE_FP32, false, VLLM_FP32},
    {"fp64", 0, PSR_NOISE_FP64, false, VLLM_FP64},
    {"wide", 0, PSR_NOISE_WIDE, false, VLLM_FP32},
    {"race", PSR_SAMPLE_RACE, PSR_NOISE_FP32, false, VLLM_FP32},
    {"race-wide", PSR_SAMPLE_RACE, PSR_NOISE_WIDE, false, VLLM_FP32},
    {"race-fp64", PSR_SAMPLE_RACE, PSR_NOISE_FP64, false, VLLM_NONE},
    {"greedy", 0, PSR_NOISE_FP32, true, VLLM_GREEDY},
};
#define NVARIANTS (sizeof variants / sizeof variants[0])

static void sample_usage(FILE *out)
{
    fprintf(out,
            "usage: psr bench sample [--shapes BxV,...] [--variants LIST] [--logits PROFILE]\n"
            "                        [--iters N] [--shards N[:S1,...]] [--device SEL] [--json]\n"
            "\n"
            "Times psr_sample with OpenCL profiling events: warm-up, then the median\n"
            "of N runs (default 50) from the first kernel's start to the last one's\n"
            "end, each run waited for alone (us) and all runs enqueued back to back\n"
            "(piped_us), and the host's time of one call until it returns, no event\n"
            "asked for, the queue drained before it (host_us). Each line gives the\n"
            "memory floor (logits read once at the copy bandwidth measured on the same\n"
            "device in the same run) and the ratio of us to it; on NVIDIA also vLLM's\n"
            "Triton kernels on an H200 at the same shape, replayed from a CUDA graph\n"
            "(vllm_us), and us over them (xvllm): fp32, fp64 and greedy lines against\n"
            "vLLM's fp32, fp64-noise and greedy figures, fp32-fast, wide, race and\n"
            "race-wide against its fp32, race-fp64 against none.\n"
            "On a CPU device it also times psr's host oracle, a plain single-threaded C\n"
            "loop of the same math, on up to 4 rows scaled to all of them (cloop_us;\n"
            "fp32, fp32-fast and greedy lines), and gives us over it (xcloop).\n"
            "\n"
            "  --shapes     default %s\n"
            "               (on a CPU: %s)\n"
            "  --variants   any of fp32, fp32-fast, fp64, wide, race, race-wide, race-fp64,\n"
            "               greedy (default: all the\n"
            "               device can run); fp32 is the default deterministic mode\n"
            "  --logits     " BENCH_PROFILE_HELP("               ")
            "  --iters      timed runs per line (default 50, at most 10000; at least 50\n"
            "               recommended)\n"
            "  --shards     N (1..255) vocabulary shards, the first V %% N one token longer\n"
            "               (or N:S1,...: where shards 1..N-1 start): also times each line\n"
            "               sharded on the same device, N psr_sample calls on the same\n"
            "               logits (sub-buffers where a shard's first column is aligned)\n"
            "               and psr_combine of their records, the same way (shard_us), and\n"
            "               gives shard_us over us (xshard); again with each shard on a\n"
            "               queue of its own (queues_us, xqueues: the device may run them\n"
            "               at once, as shards on devices of their own run); and the\n"
            "               bytes shards exchange per step (rows x 16 x N, rec_bytes) and\n"
            "               those of an all-gather of the fp32 logits (rows x V x 4,\n"
            "               gather_bytes)\n"
            "\n"
            "psr bench --help lists the other benches.\n",
            default_shapes, default_cpu_shapes);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double uniform01(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return ((double)(rng >> 11) + 0.5) * 0x1p-53;
}

/* The logits' generator (bench_profile_fill), from shape to shape. */
static uint64_t logits_rng = 7;

/* Is `name` one of the comma-separated words of `list`? */
static bool in_list(const char *list, const char *name)
{
    return cli_word_in(list, ',', name, strlen(name));
}

/* The first word of the comma-separated `list` that names no variant (its
 * length in *len), or NULL when each word names one. */
static const char *unknown_variant(const char *list, int *len)
{
    for (const char *p = list;; p += *len + 1) {
        const char *end = strchr(p, ',');
        *len = end ? (int)(end - p) : (int)strlen(p);
        bool known = false;
        for (size_t v = 0; v < NVARIANTS && !known; v++)
            known = cli_word_in(variants[v].name, ',', p, (size_t)*len); /* a name has no comma */
        if (!known)
            return p;
        if (!end)
            return NULL;
    }
}

typedef struct result {
    size_t rows, vocab;
    const char *variant;
    double us, piped_us, host_us, floor_us, vllm_us, cloop_us;
    double shard_us;  /* --shards: the sharded call's span, the shards on one queue */
    double queues_us; /* and with each shard on a queue of its own */
} result;

/* psr bench sample's own options. */
typedef struct sample_options {
    const char *variants;
    bench_profile profile; /* --logits */
    shard_spec shards; /* --shards; count 0 without */
} sample_options;

/* One run of psr bench sample. */
typedef struct sample_bench {
    bench_session s;
    sample_options so;
    bench_costs costs;
    bool nvidia, cpu;
    result *results;
    size_t nresults;
} sample_bench;

/* Time of psr's host oracle (a plain single-threaded C loop of the same
 * math) over all `rows`, from the first few rows; 0 if not measured. */
static double c_loop_us(const float *logits, size_t rows, size_t vocab, float temperature)
{
    size_t n = rows < 4 ? rows : 4;
    double t0 = bench_now_us();
    volatile int32_t sink = 0;
    for (size_t r = 0; r < n; r++)
        sink += psr_oracle_sample_row(logits + r * vocab, vocab, temperature, 1 + (int64_t)r, 7, false,
                                      PSR_ORACLE_FP32, NULL);
    (void)sink;
    return (bench_now_us() - t0) / (double)n * (double)rows;
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

/* vLLM's time for a variant at a shape on the H200; 0 where there is none. */
static double vllm_us(const variant_def *vd, size_t rows, size_t vocab)
{
    for (size_t k = 0; vd->vllm != VLLM_NONE && k < sizeof vllm_h200 / sizeof vllm_h200[0]; k++)
        if (vllm_h200[k].rows == rows && vllm_h200[k].vocab == vocab)
            return vllm_h200[k].us[vd->vllm];
    return 0;
}

/* The buffers of one shape, by index. */
enum { LOGITS, SEEDS, POSITIONS, TEMPS, ZEROS, TOKENS, SHAPE_BUFFERS };

/* Uploads one shape: the logits, random seeds and positions, T 0.8 and T 0
 * (greedy) on every row, and room for the tokens. */
static cl_int make_shape(psr_context *ctx, const float *host, size_t rows, size_t vocab, cl_mem *m)
{
    cl_long *seeds = malloc(rows * 8), *pos = malloc(rows * 8);
    cl_float *temps = malloc(rows * 4), *zeros = calloc(rows, 4);
    cl_int err = seeds && pos && temps && zeros ? CL_SUCCESS : CL_OUT_OF_HOST_MEMORY;
    for (size_t b = 0; b < rows && err == CL_SUCCESS; b++) {
        seeds[b] = (cl_long)(uniform01() * 1e15);
        pos[b] = (cl_long)(uniform01() * 1e6);
        temps[b] = 0.8f;
    }
    const cli_buffer spec[SHAPE_BUFFERS] = {
        [LOGITS] = {rows * vocab * 4, host}, [SEEDS] = {rows * 8, seeds}, [POSITIONS] = {rows * 8, pos},
        [TEMPS] = {rows * 4, temps},         [ZEROS] = {rows * 4, zeros}, [TOKENS] = {rows * 4, NULL},
    };
    if (err == CL_SUCCESS)
        err = cli_make_buffers(ctx, spec, SHAPE_BUFFERS, m);
    free(seeds), free(pos), free(temps), free(zeros);
    return err;
}

static void print_row(const sample_bench *sb, const result *r)
{
    char shape[32], vllm[16], xv[16], cl[40] = "";
    snprintf(shape, sizeof shape, "%zux%zu", r->rows, r->vocab);
    bench_format_reference(r->vllm_us, r->us, vllm, xv);
    if (sb->cpu && r->cloop_us > 0)
        snprintf(cl, sizeof cl, " %10.1f %8.3f", r->cloop_us, r->us / r->cloop_us);
    else if (sb->cpu)
        snprintf(cl, sizeof cl, " %10s %8s", "-", "-");
    char sh[112] = "";
    if (sb->so.shards.count)
        snprintf(sh, sizeof sh, " %10.1f %7.2f %10.1f %7.2f %10zu %12zu", r->shard_us, r->shard_us / r->us,
                 r->queues_us, r->queues_us / r->us, r->rows * sizeof(psr_shard_record) * sb->so.shards.count,
                 r->rows * r->vocab * 4);
    printf("%-14s %-10s %10.1f %10.1f %8.1f %10.1f %8.2f %10s %8s%s%s\n", shape, r->variant, r->us, r->piped_us,
           r->host_us, r->floor_us, r->us / r->floor_us, vllm, xv, cl, sh);
    fflush(stdout);
}

/* The median span of the same call split into --shards shards, timed as
 * the unsharded one. */
static psr_status time_sharded(const sample_bench *sb, const psr_sample_args *a, bool own_queues, double *us)
{
    size_t bounds[PSR_MAX_SHARDS + 1];
    shards_bounds("bench sample", "--shards", &sb->so.shards, a->vocab, bounds); /* checked before the run */
    bench_shards *b = NULL;
    psr_status st = bench_shards_make(sb->s.ctx, a, sb->so.shards.count, bounds, own_queues, &b);
    if (st == PSR_OK)
        st = bench_time_spans(sb->s.ctx, bench_launch_shards, b, 5, sb->s.o.iters, us, NULL);
    clFinish(cli_queue(sb->s.ctx)); /* nothing may still use the shards' buffers */
    bench_shards_free(b);
    return st;
}

/* Times one variant on one uploaded shape into the next result. */
static int run_variant(sample_bench *sb, const variant_def *vd, const float *host, size_t rows, size_t vocab,
                       const cl_mem *m)
{
    psr_context *ctx = sb->s.ctx;
    psr_sample_args a;
    psr_sample_args_init(&a, sizeof a);
    a.rows = a.requests = rows;
    a.vocab = vocab;
    a.logits = m[LOGITS];
    a.seeds = m[SEEDS];
    a.temperatures = vd->greedy ? m[ZEROS] : m[TEMPS];
    a.positions = m[POSITIONS];
    a.tokens = m[TOKENS];
    a.flags = vd->flags;
    a.noise = vd->noise;
    result *r = &sb->results[sb->nresults];
    psr_status st = bench_time_spans(ctx, bench_launch_sample, &a, 5, sb->s.o.iters, &r->us, NULL);
    if (st != PSR_OK)
        return cli_report(st, ctx);
    sb->nresults++;
    r->rows = rows, r->vocab = vocab, r->variant = vd->name;
    r->piped_us = piped_median(ctx, &a, sb->s.o.iters);
    st = bench_time_host(ctx, bench_launch_sample, &a, sb->s.o.iters, &r->host_us);
    if (st != PSR_OK)
        return cli_report(st, ctx);
    r->floor_us = (double)(rows * vocab * 4) / sb->costs.copy_bw * 1e6;
    r->vllm_us = sb->nvidia ? vllm_us(vd, rows, vocab) : 0;
    if (sb->cpu && (vd->flags & ~PSR_SAMPLE_FAST_MATH) == 0 && vd->noise == PSR_NOISE_FP32)
        r->cloop_us = c_loop_us(host, rows, vocab, vd->greedy ? 0.0f : 0.8f);
    st = sb->so.shards.count ? time_sharded(sb, &a, false, &r->shard_us) : PSR_OK;
    if (st == PSR_OK && sb->so.shards.count)
        st = time_sharded(sb, &a, true, &r->queues_us);
    if (st != PSR_OK)
        return cli_report(st, ctx);
    if (!sb->s.o.json)
        print_row(sb, r);
    return CLI_OK;
}

static bool variant_wanted(const sample_bench *sb, const variant_def *vd)
{
    if (sb->so.variants && !in_list(sb->so.variants, vd->name))
        return false;
    return vd->noise != PSR_NOISE_FP64 || (sb->s.info.capabilities & PSR_CAP_FP64);
}

/* Every wanted variant on one shape; `host` has room for its logits. */
static int run_shape(sample_bench *sb, float *host, size_t rows, size_t vocab)
{
    bench_profile_fill(host, rows, vocab, sb->so.profile, &logits_rng);
    cl_mem m[SHAPE_BUFFERS];
    cl_int err = make_shape(sb->s.ctx, host, rows, vocab, m);
    int rc = CLI_OK;
    if (err != CL_SUCCESS) {
        fprintf(stderr, "psr bench: cannot allocate %zu x %zu logits: %s\n", rows, vocab, psr_cl_error_string(err));
        rc = CLI_FAILED;
    }
    for (size_t vi = 0; vi < NVARIANTS && rc == CLI_OK; vi++)
        if (variant_wanted(sb, &variants[vi]))
            rc = run_variant(sb, &variants[vi], host, rows, vocab, m);
    cli_release_buffers(m, SHAPE_BUFFERS);
    return rc;
}

static void print_header(const sample_bench *sb)
{
    const bench_costs *c = &sb->costs;
    printf("device: %s (%s), copy bandwidth %.0f GB/s, empty kernel %.1f us, host enqueue %.1f us "
           "(%.1f with an event), logits %s",
           sb->s.info.name, sb->s.info.platform_name, c->copy_bw / 1e9, c->empty_us, c->enqueue_us,
           c->enqueue_event_us, bench_profile_name(sb->so.profile));
    bench_end_device_line(&sb->s);
    if (sb->so.shards.count)
        printf("sharded: %zu shards of the vocabulary, each sampled on its columns, then psr_combine\n",
               sb->so.shards.count);
    printf("%-14s %-10s %10s %10s %8s %10s %8s %10s %8s%s%s\n", "shape", "variant", "us", "piped_us", "host_us",
           "floor_us", "xfloor", "vllm_us", "xvllm", sb->cpu ? "  cloop_us   xcloop" : "",
           sb->so.shards.count ? "   shard_us  xshard  queues_us xqueues  rec_bytes gather_bytes" : "");
}

/* A line's sharded time, its ratio to the unsharded one, and the bytes
 * exchanged per step: the records, or an all-gather of the fp32 logits. */
static void json_shards(json_writer *w, size_t shards, const result *r)
{
    const json_number keys[] = {
        {"shard_us", r->shard_us},
        {"x_shard", r->shard_us / r->us},
        {"queues_us", r->queues_us},
        {"x_queues", r->queues_us / r->us},
        {"record_bytes", (double)(r->rows * sizeof(psr_shard_record) * shards)},
        {"allgather_bytes", (double)(r->rows * r->vocab * 4)},
    };
    json_key_numbers(w, keys, JSON_COUNT(keys));
}

/* The whole run as one JSON document, once every line is timed. */
static void print_json(sample_bench *sb)
{
    json_writer *w = &sb->s.w;
    bench_json_begin(&sb->s);
    json_key_string(w, "platform", sb->s.info.platform_name);
    json_key_string(w, "driver_version", sb->s.info.driver_version);
    bench_json_costs(w, &sb->costs, "copy_bandwidth_gbs");
    json_key_string(w, "logits", bench_profile_name(sb->so.profile));
    json_key_int(w, "iterations", sb->s.o.iters);
    if (sb->so.shards.count)
        json_key_uint(w, "shards", sb->so.shards.count);
    bench_json_results(&sb->s);
    for (size_t i = 0; i < sb->nresults; i++) {
        const result *r = &sb->results[i];
        const json_number shape[] = {{"rows", (double)r->rows}, {"vocab", (double)r->vocab}};
        const json_number times[] = {
            {"us", r->us}, {"piped_us", r->piped_us}, {"host_us", r->host_us}, {"floor_us", r->floor_us}, {"x_floor", r->us / r->floor_us}};
        json_begin_object(w);
        json_key_numbers(w, shape, JSON_COUNT(shape));
        json_key_string(w, "variant", r->variant);
        json_key_numbers(w, times, JSON_COUNT(times));
        bench_json_reference(w, "vllm_us", "x_vllm", r->vllm_us, r->us);
        bench_json_reference(w, "c_loop_us", "x_c_loop", r->cloop_us, r->us);
        if (sb->so.shards.count)
            json_shards(w, sb->so.shards.count, r);
        json_end_object(w);
    }
}

static int run_sample_bench(sample_bench *sb)
{
    bench_measure_costs(sb->s.ctx, &sb->s.info, &sb->costs);
    if (sb->costs.copy_bw <= 0) {
        fprintf(stderr, "psr bench: cannot measure copy bandwidth\n");
        return CLI_FAILED;
    }
    const bench_options *o = &sb->s.o;
    size_t max_bytes = 0;
    for (size_t s = 0; s < o->nshapes; s++)
        if (o->shape[s][0] * o->shape[s][1] * 4 > max_bytes)
            max_bytes = o->shape[s][0] * o->shape[s][1] * 4;
    float *host = malloc(max_bytes);
    sb->results = calloc(o->nshapes * NVARIANTS, sizeof *sb->results);
    int rc = host && sb->results ? CLI_OK : cli_report(PSR_ERR_OUT_OF_HOST_MEMORY, NULL);
    if (rc == CLI_OK && !o->json)
        print_header(sb);
    for (size_t s = 0; s < o->nshapes && rc == CLI_OK; s++)
        rc = run_shape(sb, host, o->shape[s][0], o->shape[s][1]);
    if (rc == CLI_OK && o->json)
        print_json(sb);
    free(sb->results);
    free(host);
    return rc;
}

/* --variants LIST, --logits PROFILE and --shards (a bench_option_fn). */
static int sample_option(void *user, const char *arg, const char *val)
{
    sample_options *so = user;
    int len = 0;
    const char *unknown = NULL;
    if (strcmp(arg, "--variants") == 0 && (unknown = unknown_variant(val, &len)) != NULL)
        return len ? cli_usage_error("bench sample", "--variants \"%s\": \"%.*s\" is no variant", val, len, unknown)
                   : cli_usage_error("bench sample", "--variants \"%s\" has an empty name", val);
    if (strcmp(arg, "--shards") == 0)
        return shards_parse("bench sample", val, &so->shards);
    if (strcmp(arg, "--variants") == 0)
        so->variants = val;
    else if (strcmp(arg, "--logits") == 0)
        return bench_parse_profile("bench sample", val, &so->profile);
    else
        return -1;
    return CLI_OK;
}

/* How many variants the run times; names those of --variants the device
 * cannot run. */
static size_t count_wanted(const sample_bench *sb)
{
    size_t n = 0;
    for (size_t vi = 0; vi < NVARIANTS; vi++) {
        n += variant_wanted(sb, &variants[vi]);
        if (sb->so.variants && in_list(sb->so.variants, variants[vi].name) && !variant_wanted(sb, &variants[vi]))
            fprintf(stderr, "psr bench sample: %s has no fp64: skipping %s\n", sb->s.info.name, variants[vi].name);
    }
    return n;
}

static int bench_sample(int argc, char **argv)
{
    static const bench_command command = {.name = "bench sample", .usage = sample_usage, .extra = sample_option,
                                          .values = BENCH_VALUES " --variants --logits --shards", .dims = 2,
                                          .max_shapes = 32, .shapes_expected = "a list like 1x128256,64x32000"};
    sample_bench sb = {.s.o.iters = 50};
    int opened = bench_open(&sb.s, &command, argc, argv, &sb.so);
    if (opened >= 0)
        return opened;
    sb.nvidia = cli_contains_nocase(sb.s.info.platform_vendor, "nvidia");
    sb.cpu = sb.s.info.type == PSR_DEVICE_CPU;
    if (!sb.s.o.shapes)
        bench_parse_shapes(sb.cpu ? default_cpu_shapes : default_shapes, 2, BENCH_MAX_SHAPES, sb.s.o.shape,
                           &sb.s.o.nshapes);
    size_t bounds[PSR_MAX_SHARDS + 1];
    for (size_t i = 0; i < sb.s.o.nshapes && sb.so.shards.count; i++)
        if (shards_bounds("bench sample", "--shards", &sb.so.shards, sb.s.o.shape[i][1], bounds) != CLI_OK)
            return bench_close(&sb.s, CLI_USAGE);
    if (count_wanted(&sb) == 0) {
        fprintf(stderr, "psr bench sample: no variant of --variants \"%s\" runs on %s\n", sb.so.variants,
                sb.s.info.name);
        return bench_close(&sb.s, CLI_FAILED);
    }
    return bench_close(&sb.s, run_sample_bench(&sb));
}

/* ---- psr bench gemm: the LM head's GEMM alone ---- */

static void gemm_usage(FILE *out)
{
    fprintf(out,
            "usage: psr bench gemm [--batch B] [--hidden H] [--vocab V] [--dtype f32|f16]\n"
            "                      [--iters N] [--device SEL] [--json]\n"
            "\n"
            "Times psr_lm_head (CLBlast's GEMM: logits [B, V] = hidden [B, H] x\n"
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
            "  --iters   timed runs (default 10, at most 10000)\n");
}

typedef struct gemm_options {
    size_t batch, hidden, vocab;
    psr_dtype dtype;
    const char *device;
    bool json;
    int iters;
} gemm_options;

/* One option of psr bench gemm that takes a value: CLI_OK, or CLI_USAGE
 * after printing why. */
static int gemm_value(void *opts, const char *arg, const char *val)
{
    gemm_options *g = opts;
    int64_t n = 0;
    int rc = CLI_OK;
    if (strcmp(arg, "--batch") == 0 || strcmp(arg, "--hidden") == 0 || strcmp(arg, "--vocab") == 0) {
        size_t *dim = arg[2] == 'b' ? &g->batch : arg[2] == 'h' ? &g->hidden : &g->vocab;
        if ((rc = cli_int("bench gemm", arg, val, 1, INT32_MAX, &n)) == CLI_OK)
            *dim = (size_t)n;
    } else if (strcmp(arg, "--dtype") == 0) {
        if (strcmp(val, "f32") != 0 && strcmp(val, "f16") != 0)
            return cli_usage_error("bench gemm", "--dtype is f32 or f16, not \"%s\"", val);
        g->dtype = strcmp(val, "f16") == 0 ? PSR_DTYPE_F16 : PSR_DTYPE_F32;
    } else if (strcmp(arg, "--iters") == 0) {
        if ((rc = cli_int("bench gemm", arg, val, 1, 10000, &n)) == CLI_OK)
            g->iters = (int)n;
    } else {
        g->device = val; /* --device: cli_parse_values passes no other */
    }
    return rc;
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
    psr_status st = psr_lm_head(ctx, a, &done);
    if (st == PSR_OK) {
        clWaitForEvents(1, &done);
        *us = ends_apart_us(mark, done);
        clReleaseEvent(done);
    }
    clReleaseEvent(mark);
    return st;
}

/* The median of `iters` waited GEMMs after two warm-ups (the first builds
 * CLBlast's kernels), and the host's time per GEMM with all enqueued
 * back to back. */
static psr_status time_gemm(psr_context *ctx, const psr_lm_head_args *a, int iters, double *us, double *piped_us)
{
    double *times = calloc((size_t)iters, sizeof *times);
    psr_status st = times ? PSR_OK : PSR_ERR_OUT_OF_HOST_MEMORY;
    for (int it = -2; it < iters && st == PSR_OK; it++) {
        double one = 0;
        st = gemm_once(ctx, a, &one);
        if (it >= 0)
            times[it] = one;
    }
    double t0 = bench_now_us();
    for (int it = 0; it < iters && st == PSR_OK; it++)
        st = psr_lm_head(ctx, a, NULL);
    if (st == PSR_OK) {
        clFinish(cli_queue(ctx));
        *piped_us = (bench_now_us() - t0) / iters;
        qsort(times, (size_t)iters, sizeof *times, cmp_double);
        *us = times[iters / 2];
    }
    free(times);
    return st;
}

static void print_gemm(const gemm_options *g, const psr_device_info *info, double us, double piped_us,
                       double bytes)
{
    size_t B = g->batch, H = g->hidden, V = g->vocab;
    double tflops = 2.0 * (double)B * (double)H * (double)V / (us * 1e-6) / 1e12;
    double gbs = bytes / (us * 1e-6) / 1e9;
    const char *dname = g->dtype == PSR_DTYPE_F16 ? "f16" : "f32";
    if (g->json) {
        json_writer w;
        json_init(&w, stdout);
        const json_text names[] = {{"device", info->name}, {"platform", info->platform_name}};
        const json_number shape[] = {{"batch", (double)B}, {"hidden", (double)H}, {"vocab", (double)V}};
        const json_number times[] = {{"iterations", g->iters}, {"us", us},         {"piped_us", piped_us},
                                     {"tflops", tflops},       {"gbs", gbs}};
        json_begin_object(&w);
        json_key_texts(&w, names, JSON_COUNT(names));
        json_key_numbers(&w, shape, JSON_COUNT(shape));
        json_key_string(&w, "dtype", dname);
        json_key_numbers(&w, times, JSON_COUNT(times));
        json_end_object(&w);
        json_finish(&w);
        return;
    }
    printf("device: %s (%s), CLBlast GEMM, %d runs\n", info->name, info->platform_name, g->iters);
    printf("%-22s %-5s %12s %12s %9s %9s\n", "BxHxV", "dtype", "us", "piped_us", "TFLOP/s", "GB/s");
    char shape[64];
    snprintf(shape, sizeof shape, "%zux%zux%zu", B, H, V);
    printf("%-22s %-5s %12.1f %12.1f %9.4f %9.1f\n", shape, dname, us, piped_us, tflops, gbs);
}

/* hidden, weights and logits, each filled with 2^-6 in the dtype: small
 * enough that nothing overflows or goes subnormal. */
static cl_int gemm_buffers(psr_context *ctx, const gemm_options *g, const size_t *bytes, cl_mem *bufs)
{
    static const cl_float f32 = 0x1p-6f;
    static const cl_half f16 = 0x2400;
    const void *fill = g->dtype == PSR_DTYPE_F16 ? (const void *)&f16 : (const void *)&f32;
    const cli_buffer spec[3] = {{bytes[0], NULL}, {bytes[1], NULL}, {bytes[2], NULL}};
    cl_int err = cli_make_buffers(ctx, spec, 3, bufs);
    for (int i = 0; i < 3 && err == CL_SUCCESS; i++)
        err = clEnqueueFillBuffer(cli_queue(ctx), bufs[i], fill, psr_dtype_size(g->dtype), 0, bytes[i], 0, NULL,
                                  NULL);
    return err;
}

static int gemm_on(psr_context *ctx, const gemm_options *g)
{
    size_t B = g->batch, H = g->hidden, V = g->vocab, es = psr_dtype_size(g->dtype);
    if (H > SIZE_MAX / es / (B > V ? B : V) || V > SIZE_MAX / es / B) {
        fprintf(stderr, "psr bench gemm: %zu x %zu x %zu overflows a size_t\n", B, H, V);
        return CLI_FAILED;
    }
    size_t bytes[3] = {B * H * es, V * H * es, B * V * es};
    cl_mem bufs[3];
    cl_int err = gemm_buffers(ctx, g, bytes, bufs);
    int rc = CLI_OK;
    if (err != CL_SUCCESS) {
        fprintf(stderr, "psr bench gemm: cannot allocate the %zu x %zu x %zu buffers: %s\n", B, H, V,
                psr_cl_error_string(err));
        rc = CLI_FAILED;
    }
    psr_lm_head_args a;
    psr_lm_head_args_init(&a, sizeof a);
    a.batch = B, a.hidden_size = H, a.vocab = V, a.dtype = g->dtype;
    a.hidden = bufs[0], a.weights = bufs[1], a.logits = bufs[2];
    double us = 0, piped_us = 0;
    psr_status st = rc == CLI_OK ? time_gemm(ctx, &a, g->iters, &us, &piped_us) : PSR_OK;
    if (st != PSR_OK) {
        rc = cli_report(st, ctx);
    } else if (rc == CLI_OK) {
        psr_device_info info;
        psr_context_device_info(ctx, &info);
        print_gemm(g, &info, us, piped_us, (double)(bytes[0] + bytes[1] + bytes[2]));
    }
    cli_release_buffers(bufs, 3);
    return rc;
}

static int run_gemm_bench(const gemm_options *g)
{
    psr_context *ctx = cli_open_context(g->device, true);
    if (!ctx)
        return CLI_FAILED;
    int rc = gemm_on(ctx, g);
    psr_context_free(ctx);
    return rc;
}

static int bench_gemm(int argc, char **argv)
{
    gemm_options g = {.batch = 64, .hidden = 4096, .vocab = 32000, .dtype = PSR_DTYPE_F32, .iters = 10};
    static const cli_options options = {"bench gemm", gemm_usage, NULL, gemm_value};
    int parsed = cli_parse_values(&options, "--batch --hidden --vocab --dtype --iters --device", argc, argv, 1, &g,
                                  &g.json);
    return parsed >= 0 ? parsed : run_gemm_bench(&g);
}

static const cli_command benches[] = {
    {"sample", bench_sample, "psr_sample per shape and variant, against the memory floor (and vLLM)"},
    {"verify", bench_verify, "psr_verify in its three modes, against the memory floor (and vLLM)"},
    {"logprobs", bench_logprobs, "psr_logprobs against psr_sample on the same logits"},
    {"filters", bench_filters, "psr_sample with min-p, top-k and top-p against it plain"},
    {"gemm", bench_gemm, "psr_lm_head, CLBlast's GEMM, alone"},
};

static void benches_usage(FILE *out)
{
    fprintf(out, "usage: psr bench BENCH [OPTIONS]\n\n"
                 "Times psr's calls with OpenCL profiling events. Benches:\n");
    cli_list_commands(out, benches, sizeof benches / sizeof benches[0]);
    fprintf(out, "\n`psr bench BENCH --help` describes each.\n");
}

int cmd_bench(int argc, char **argv)
{
    if (argc < 2 || cli_is_help(argv[1])) {
        benches_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    int rc = cli_run_command(benches, sizeof benches / sizeof benches[0], argc - 1, argv + 1);
    return rc >= 0 ? rc
                   : cli_usage_error("bench", "unknown benchmark \"%s\" (try: sample, verify, logprobs, filters, gemm)",
                                     argv[1]);
}
