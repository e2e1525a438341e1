/* psr bench verify: speculative-draft verification, timed by profiling
 * events from the first kernel's start to the last one's end, against the
 * memory floor (target plus draft logits read once); with --shards also
 * the same verification across vocabulary shards, in the rounds of
 * psr_verify_shard_round. */
#include "bench.h"
#include "cli.h"
#include "json.h"
#include "shards.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *default_shapes = "32x8x128256,16x5x32000";

/* The verification modes, in the order of their rows. */
static const struct {
    const char *name;
    psr_verify_method method;
    bool cache;
} modes[] = {
    {"prob", PSR_VERIFY_PROBABILISTIC, true},  /* rejection sampling against the draft cache */
    {"onehot", PSR_VERIFY_PROBABILISTIC, false}, /* n-gram or greedy drafts */
    {"greedy", PSR_VERIFY_GREEDY, false},
};
#define NMODES (sizeof modes / sizeof modes[0])

/* The default shapes on the H200: the project's target for prob (at most
 * floor_ratio x the floor, or at most target_us; 0: none), and vLLM's
 * rejection_sample replayed from a CUDA graph on the same machine
 * (2026-12-02) per mode, in us (0: not measured). */
static const struct {
    size_t requests, k, vocab;
    double floor_ratio, target_us;
    double vllm_us[NMODES];
} h200[] = {
    {32, 8, 128256, 1.5, 0, {122.0, 80.7, 56.1}},
    {16, 5, 32000, 0, 30.0, {31.5, 0, 0}},
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: psr bench verify [--shapes RxKxV,...] [--logits PROFILE] [--iters N]\n"
            "                        [--device SEL] [--shards N[:S1,...]] [--json]\n"
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
            "time alone, as in an engine whose queue is never idle; host_us the host's\n"
            "time of one call until it returns, no event asked for, the queue drained\n"
            "before it. Small batches run in one launch where the device allows\n"
            "(one_launch in the JSON; stats_us is then the whole call). On NVIDIA,\n"
            "vllm_us is vLLM's rejection_sample on an H200 at the same shape and mode,\n"
            "replayed from a CUDA graph, and xvllm us over it.\n"
            "\n"
            "  --logits  normal|peaked|zipf|confident: the target rows as psr bench sample\n"
            "            makes them (N(0, 3); N(0, 1) with one logit 25 above; -1.1 ln(rank)\n"
            "            + N(0, 0.5), shuffled; N(0, 1) with the top token holding 90%% at\n"
            "            T = 1); without it N(0, 2), the rows vllm_us was measured with. The\n"
            "            draft logits are the target's plus N(0, 1) either way\n"
            "  --shards  N (1..255) vocabulary shards, the first V %% N one token longer (or\n"
            "            N:S1,...: where shards 1..N-1 start): also times each line split\n"
            "            into N shards on the same device, the rounds of\n"
            "            psr_verify_shard_round (0 to 2 on every shard, each with its\n"
            "            columns of the target logits and of the draft cache; 3 on shard 0).\n"
            "            shard_us: the median over the iterations of the sum over the rounds\n"
            "            of each round's span, its first kernel's start to its last kernel's\n"
            "            end: the sharded kernels' device time (a gap inside a round while\n"
            "            the host enqueues the next shard counts); it excludes the time\n"
            "            between rounds: the keys' reduction on the host after round 0\n"
            "            (the app's transport). xshard: shard_us over us. xch_bytes: the\n"
            "            bytes the shards exchange per call (keys (2 x rows + 1) x 4, every\n"
            "            shard's slots, and N x R x 16 of records; rows = R x (K + 1));\n"
            "            gather_bytes: those of an all-gather of the fp32 target logits\n"
            "            instead (rows x V x 4)\n",
            default_shapes);
}

/* The buffers of one shape, by index. */
enum { TARGET, DRAFT, CACHE, ROW_REQUEST, CACHE_ROWS, SEEDS, TEMPS, POSITIONS, DRAFTS, TOKENS, NUM, SHAPE_BUFFERS };

/* One shape, R requests of K drafts over a vocabulary of V. */
typedef struct shape {
    size_t R, K, V;
    int profile; /* a bench_profile for the target rows, or -1: N(0, 2) */
    cl_mem m[SHAPE_BUFFERS];
    int32_t *cu, *num; /* cumulative rows per request; drafts taken + 1 per request */
} shape;

/* The host side of a shape: target logits N(0, 2) per row (or of the
 * shape's profile), draft logits = target plus N(0, 1) noise (so drafts
 * are often accepted), and the rows' requests, cache rows and positions. */
typedef struct shape_host {
    float *target, *draft, *temps;
    int32_t *row_request, *cache_rows;
    int64_t *seeds, *positions;
} shape_host;

static void free_host(shape_host *h)
{
    free(h->target), free(h->draft), free(h->temps), free(h->row_request), free(h->cache_rows),
        free(h->seeds), free(h->positions);
}

static bool fill_host(const shape *sh, shape_host *h)
{
    size_t R = sh->R, K = sh->K, V = sh->V, rows = R * (K + 1);
    h->target = malloc(rows * V * 4), h->draft = malloc(rows * V * 4), h->temps = malloc(R * 4);
    h->row_request = malloc(rows * 4), h->cache_rows = malloc(rows * 4);
    h->seeds = malloc(R * 8), h->positions = malloc(rows * 8);
    if (!h->target || !h->draft || !h->temps || !h->row_request || !h->cache_rows || !h->seeds || !h->positions)
        return false;
    uint64_t state = 12345;
    if (sh->profile >= 0)
        bench_profile_fill(h->target, rows, V, (bench_profile)sh->profile, &state);
    for (size_t i = 0; i < rows * V; i++) {
        if (sh->profile < 0)
            h->target[i] = (float)(2.0 * bench_normal(&state));
        h->draft[i] = h->target[i] + (float)bench_normal(&state);
    }
    for (size_t r = 0; r < R; r++) {
        sh->cu[r] = (int32_t)(r * (K + 1));
        h->seeds[r] = (int64_t)(r * 7 + 1);
        h->temps[r] = 1.0f;
        for (size_t j = 0; j <= K; j++) {
            size_t row = r * (K + 1) + j;
            h->row_request[row] = j < K ? (int32_t)r : -1;
            h->cache_rows[row] = j < K ? (int32_t)(r * K + j) : -1;
            h->positions[row] = (int64_t)(1000 + r * 64 + j);
        }
    }
    sh->cu[R] = (int32_t)rows;
    return true;
}

static cl_int upload(psr_context *ctx, shape *sh, const shape_host *h)
{
    size_t R = sh->R, K = sh->K, V = sh->V, rows = R * (K + 1);
    const cli_buffer spec[SHAPE_BUFFERS] = {
        [TARGET] = {rows * V * 4, h->target},    [DRAFT] = {rows * V * 4, h->draft},
        [CACHE] = {(K ? R * K : 1) * V * 4, NULL}, [ROW_REQUEST] = {rows * 4, h->row_request},
        [CACHE_ROWS] = {rows * 4, h->cache_rows}, [SEEDS] = {R * 8, h->seeds},
        [TEMPS] = {R * 4, h->temps},              [POSITIONS] = {rows * 8, h->positions},
        [DRAFTS] = {rows * 4, NULL},              [TOKENS] = {R * (K + 1) * 4, NULL},
        [NUM] = {R * 4, NULL},
    };
    return cli_make_buffers(ctx, spec, SHAPE_BUFFERS, sh->m);
}

/* Draws the drafts from the draft logits by the salted sampler, filling
 * the draft cache. */
static psr_status draw_drafts(psr_context *ctx, const shape *sh)
{
    psr_sample_args s;
    psr_sample_args_init(&s, sizeof s);
    s.rows = sh->R * (sh->K + 1);
    s.vocab = sh->V;
    s.logits = sh->m[DRAFT];
    s.row_request = sh->m[ROW_REQUEST];
    s.requests = sh->R;
    s.seeds = sh->m[SEEDS];
    s.temperatures = sh->m[TEMPS];
    s.positions = sh->m[POSITIONS];
    s.tokens = sh->m[DRAFTS];
    s.draft_cache = sh->m[CACHE];
    s.draft_cache_rows = sh->m[CACHE_ROWS];
    s.draft_cache_rows_total = sh->K ? sh->R * sh->K : 1;
    s.flags = PSR_SAMPLE_DRAFTING;
    psr_status st = psr_sample(ctx, &s, NULL);
    if (st == PSR_OK && clFinish(cli_queue(ctx)) != CL_SUCCESS)
        st = cli_fail(PSR_ERR_OPENCL, "clFinish failed");
    return st;
}

static psr_status prepare(psr_context *ctx, shape *sh)
{
    shape_host h = {0};
    psr_status st = PSR_OK;
    sh->cu = malloc((sh->R + 1) * 4), sh->num = malloc(sh->R * 4);
    if (!sh->cu || !sh->num || !fill_host(sh, &h)) {
        st = PSR_ERR_OUT_OF_HOST_MEMORY;
    } else {
        cl_int err = upload(ctx, sh, &h);
        if (err != CL_SUCCESS)
            st = cli_fail(PSR_ERR_OPENCL, "allocating %zu x %zu x %zu buffers failed: %s (%d)", sh->R, sh->K,
                          sh->V, psr_cl_error_string(err), err);
    }
    free_host(&h);
    return st == PSR_OK ? draw_drafts(ctx, sh) : st;
}

static void release_shape(shape *sh)
{
    cli_release_buffers(sh->m, SHAPE_BUFFERS);
    free(sh->cu), free(sh->num);
}

static psr_status launch_verify(psr_context *ctx, const void *args, cl_event *first, cl_event *last)
{
    return psr_verify_enqueue(ctx, args, first, last);
}

static void verify_args(psr_verify_args *a, const shape *sh, size_t mode)
{
    psr_verify_args_init(a, sizeof *a);
    a->requests = sh->R;
    a->cu = sh->cu;
    a->rows = sh->R * (sh->K + 1);
    a->max_drafts = sh->K;
    a->vocab = sh->V;
    a->target_logits = sh->m[TARGET];
    a->draft_cache = modes[mode].cache && sh->K ? sh->m[CACHE] : NULL;
    a->draft_cache_k = sh->K;
    a->draft_tokens = sh->m[DRAFTS];
    a->seeds = sh->m[SEEDS];
    a->temperatures = sh->m[TEMPS];
    a->positions = sh->m[POSITIONS];
    a->method = modes[mode].method;
    a->tokens = sh->m[TOKENS];
    a->num_sampled = sh->m[NUM];
}

/* One mode's line. */
typedef struct row {
    double us, stats_us, piped_us, device_us, host_us, floor_us, accepted, vllm_us;
    bool one_launch;
    char target[24];
    double shard_us;    /* with --shards */
    size_t xch_bytes;   /* the bytes the shards exchange per call */
} row;

/* ---- the same verification across shards ---- */

/* The shards of one mode's call: each its columns of the target logits
 * (target_offset) and of the draft cache (a copy of its own), its own
 * keys, and one partials buffer and one records buffer they all write
 * into, as an all-gather would leave them. */
typedef struct v_shards {
    size_t count, words, slots, slot_bytes, requests;
    psr_verify_args *a;  /* [count] */
    cl_mem *keys;        /* [count]: uint32 [2 rows + 1] */
    cl_mem *caches;      /* [count]: float32 [R, K, the shard's vocab], or NULL without a cache */
    cl_mem partials;     /* [slots, slot_bytes] */
    cl_mem records;      /* psr_shard_record [count, R] */
    uint32_t *scratch;   /* 2 x words, for the keys' reduction */
} v_shards;

static void v_shards_free(v_shards *sh)
{
    if (sh->keys)
        cli_release_buffers(sh->keys, sh->count);
    if (sh->caches)
        cli_release_buffers(sh->caches, sh->count);
    if (sh->partials)
        clReleaseMemObject(sh->partials);
    if (sh->records)
        clReleaseMemObject(sh->records);
    free(sh->a), free(sh->keys), free(sh->caches), free(sh->scratch);
}

/* Columns lo .. hi of the draft cache [R K, V] copied into *out, [R K, hi - lo]. */
static cl_int cache_columns(psr_context *ctx, const shape *sh, size_t lo, size_t hi, cl_mem *out)
{
    cl_int err = CL_SUCCESS;
    size_t n = hi - lo, cache_rows = sh->R * sh->K;
    *out = clCreateBuffer(cli_cl_context(ctx), CL_MEM_READ_WRITE, cache_rows * n * 4, NULL, &err);
    const size_t src[3] = {lo * 4, 0, 0}, dst[3] = {0, 0, 0}, region[3] = {n * 4, cache_rows, 1};
    if (err == CL_SUCCESS)
        err = clEnqueueCopyBufferRect(cli_queue(ctx), sh->m[CACHE], *out, src, dst, region, sh->V * 4, 0, n * 4, 0,
                                      0, NULL, NULL);
    return err;
}

static psr_status v_shards_make(psr_context *ctx, const shape *sh, const psr_verify_args *whole, size_t count,
                                const size_t *bounds, v_shards *v)
{
    size_t rows = whole->rows;
    v->count = count, v->words = 2 * rows + 1, v->requests = whole->requests;
    v->slot_bytes = psr_verify_shard_slot_bytes(rows);
    for (size_t s = 0; s < count; s++)
        v->slots += psr_logprobs_shard_slots(bounds[s + 1] - bounds[s]);
    v->a = calloc(count, sizeof *v->a), v->keys = calloc(count, sizeof *v->keys);
    v->caches = calloc(count, sizeof *v->caches), v->scratch = malloc(2 * v->words * 4);
    if (!v->a || !v->keys || !v->caches || !v->scratch)
        return PSR_ERR_OUT_OF_HOST_MEMORY;
    cl_context cl = cli_cl_context(ctx);
    cl_int err = CL_SUCCESS;
    v->partials = clCreateBuffer(cl, CL_MEM_READ_WRITE, v->slots * v->slot_bytes, NULL, &err);
    if (err == CL_SUCCESS)
        v->records = clCreateBuffer(cl, CL_MEM_READ_WRITE, count * whole->requests * sizeof(psr_shard_record), NULL,
                                    &err);
    for (size_t s = 0, slot = 0; s < count && err == CL_SUCCESS; s++) {
        psr_verify_args *a = &v->a[s];
        size_t lo = bounds[s], hi = bounds[s + 1];
        v->keys[s] = clCreateBuffer(cl, CL_MEM_READ_WRITE, v->words * 4, NULL, &err);
        if (err == CL_SUCCESS && whole->draft_cache)
            err = cache_columns(ctx, sh, lo, hi, &v->caches[s]);
        *a = *whole;
        a->vocab = hi - lo, a->target_offset = whole->target_offset + lo;
        a->target_row_stride = whole->target_row_stride ? whole->target_row_stride : whole->vocab;
        a->draft_cache = v->caches[s];
        a->shard_count = count, a->shard_index = s, a->vocab_offset = lo, a->vocab_total = whole->vocab;
        a->shard_slot = slot, a->shard_slots = v->slots;
        a->shard_keys = v->keys[s], a->shard_partials = v->partials, a->shard_records = v->records;
        slot += psr_logprobs_shard_slots(hi - lo);
    }
    if (err == CL_SUCCESS)
        err = clFinish(cli_queue(ctx)); /* the caches' copies, before any timing */
    if (err != CL_SUCCESS)
        return cli_fail(PSR_ERR_OPENCL, "the shards' buffers: %s (%d)", psr_cl_error_string(err), err);
    return PSR_OK;
}

/* Rounds 0 to 2 on every shard, round 3 (the tokens, the same on every
 * shard) on shard 0 (a bench_round_fn). */
static psr_status v_round(psr_context *ctx, void *args, unsigned round, cl_event *first, cl_event *last)
{
    v_shards *v = args;
    size_t n = round < 3 ? v->count : 1;
    psr_status st = PSR_OK;
    for (size_t s = 0; s < n && st == PSR_OK; s++) {
        cl_event ev = NULL;
        st = psr_verify_shard_round(ctx, &v->a[s], round, &ev);
        bench_keep_ends(ev, first, last);
    }
    return st;
}

/* After round 0 the keys reduced by maximum (a bench_exchange_fn); the
 * slots and records need nothing: every shard wrote into the one buffer. */
static psr_status v_exchange(psr_context *ctx, void *args, unsigned round)
{
    v_shards *v = args;
    return round == 0 ? bench_reduce_keys(ctx, v->keys, v->count, v->words, v->scratch) : PSR_OK;
}

/* The median device time of the sharded rounds of `a`, and the bytes
 * exchanged per call: the keys, the slots and the records. */
static psr_status time_sharded(const bench_session *s, const shard_spec *spec, const shape *sh,
                               const psr_verify_args *a, row *r)
{
    size_t bounds[PSR_MAX_SHARDS + 1];
    shards_bounds("bench verify", "--shards", spec, a->vocab, bounds); /* checked before the run */
    v_shards v = {0};
    psr_status st = v_shards_make(s->ctx, sh, a, spec->count, bounds, &v);
    if (st == PSR_OK)
        st = bench_time_rounds(s->ctx, v_round, v_exchange, &v, PSR_VERIFY_SHARD_ROUNDS, 3, s->o.iters,
                               &r->shard_us);
    r->xch_bytes = v.words * 4 + v.slots * v.slot_bytes + v.count * v.requests * sizeof(psr_shard_record);
    clFinish(cli_queue(s->ctx)); /* nothing may still use the shards' buffers */
    v_shards_free(&v);
    return st;
}

/* The target and vLLM's time of a shape and mode on the H200, if listed. */
static void h200_figures(const shape *sh, size_t mode, row *r)
{
    for (size_t t = 0; t < sizeof h200 / sizeof *h200; t++) {
        if (h200[t].requests != sh->R || h200[t].k != sh->K || h200[t].vocab != sh->V)
            continue;
        r->vllm_us = h200[t].vllm_us[mode];
        if (mode == 0 && h200[t].floor_ratio > 0)
            snprintf(r->target, sizeof r->target, "<=%.2fx", h200[t].floor_ratio);
        else if (mode == 0)
            snprintf(r->target, sizeof r->target, "<=%.0fus", h200[t].target_us);
    }
}

/* Times one mode: each call waited for, piped and behind a copy; then the
 * mean drafts accepted and the floor (target rows plus, with the cache,
 * draft rows, read once at the copy bandwidth, as psr bench sample's);
 * then, with shards, the sharded rounds. */
static psr_status time_mode(const bench_session *s, const shard_spec *spec, const shape *sh, size_t mode,
                            double bw, row *r)
{
    psr_verify_args a;
    verify_args(&a, sh, mode);
    int iters = s->o.iters;
    psr_status st = bench_time_spans(s->ctx, launch_verify, &a, 3, iters, &r->us, &r->stats_us);
    psr_last_paths paths;
    psr_context_last_paths(s->ctx, &paths);
    r->one_launch = paths.verify_one_launch;
    if (st == PSR_OK)
        st = bench_time_piped(s->ctx, launch_verify, &a, iters, &r->piped_us);
    if (st == PSR_OK)
        st = bench_time_ahead(s->ctx, launch_verify, &a, iters, &r->device_us);
    if (st == PSR_OK)
        st = bench_time_host(s->ctx, launch_verify, &a, iters, &r->host_us);
    if (st == PSR_OK && clEnqueueReadBuffer(cli_queue(s->ctx), sh->m[NUM], CL_TRUE, 0, sh->R * 4, sh->num, 0,
                                            NULL, NULL) != CL_SUCCESS)
        st = cli_fail(PSR_ERR_OPENCL, "reading num_sampled failed");
    if (st != PSR_OK)
        return st;
    r->accepted = 0;
    for (size_t i = 0; i < sh->R; i++)
        r->accepted += sh->num[i] - 1;
    r->accepted /= (double)sh->R;
    double bytes = (double)(sh->R * (sh->K + 1) * sh->V * 4);
    if (a.draft_cache)
        bytes += (double)(sh->R * sh->K * sh->V * 4);
    r->floor_us = bytes / bw * 1e6;
    return spec->count ? time_sharded(s, spec, sh, &a, r) : PSR_OK;
}

static void print_row(bench_session *s, const shape *sh, size_t mode, size_t shards, const row *r)
{
    size_t gather = sh->R * (sh->K + 1) * sh->V * 4;
    if (s->o.json) {
        const json_number sharded[] = {
            {"shard_us", r->shard_us},
            {"x_shard", r->shard_us / r->us},
            {"exchange_bytes", (double)r->xch_bytes},
            {"allgather_bytes", (double)gather},
        };
        json_writer *w = &s->w;
        const json_number dims[] = {{"requests", (double)sh->R}, {"k", (double)sh->K}, {"vocab", (double)sh->V}};
        const json_number times[] = {
            {"us", r->us},           {"stats_us", r->stats_us}, {"piped_us", r->piped_us},
            {"device_us", r->device_us}, {"host_us", r->host_us}, {"floor_us", r->floor_us},
            {"x_floor", r->us / r->floor_us},
            {"mean_accepted", r->accepted},
        };
        json_begin_object(w);
        json_key_numbers(w, dims, JSON_COUNT(dims));
        json_key_string(w, "mode", modes[mode].name);
        json_key_bool(w, "one_launch", r->one_launch);
        json_key_numbers(w, times, JSON_COUNT(times));
        bench_json_reference(w, "vllm_us", "x_vllm", r->vllm_us, r->us);
        if (shards)
            json_key_numbers(w, sharded, JSON_COUNT(sharded));
        json_end_object(w);
        return;
    }
    char name[40], vllm[16], xv[16], shx[64] = "";
    snprintf(name, sizeof name, "%zux%zux%zu", sh->R, sh->K, sh->V);
    bench_format_reference(r->vllm_us, r->us, vllm, xv);
    if (shards)
        snprintf(shx, sizeof shx, " %10.1f %7.2f %10zu %12zu", r->shard_us, r->shard_us / r->us, r->xch_bytes,
                 gather);
    printf("%-18s %-7s %9.1f %9.1f %9.1f %9.1f %8.1f %9.1f %7.2f %9.2f %8s %9s %7s%s\n", name, modes[mode].name,
           r->us, r->stats_us, r->piped_us, r->device_us, r->host_us, r->floor_us, r->us / r->floor_us, r->accepted,
           r->target, vllm, xv, shx);
    fflush(stdout);
}

/* What the rows of one run share. */
typedef struct verify_bench {
    bench_costs costs;
    bool nvidia;
    shard_spec shards; /* --shards; count 0 without */
    int profile;       /* --logits: a bench_profile, or -1 */
} verify_bench;

/* --shards and --logits (a bench_option_fn). */
static int verify_option(void *user, const char *arg, const char *val)
{
    verify_bench *vb = user;
    if (strcmp(arg, "--logits") == 0) {
        bench_profile p;
        int rc = bench_parse_profile("bench verify", val, &p);
        vb->profile = (int)p;
        return rc;
    }
    if (strcmp(arg, "--shards") != 0)
        return -1;
    return shards_parse("bench verify", val, &vb->shards);
}

/* Every shape's shards inside its vocabulary (a bench_command's check). */
static int check_shards(bench_session *s, void *user)
{
    const verify_bench *vb = user;
    size_t bounds[PSR_MAX_SHARDS + 1];
    for (size_t i = 0; i < s->o.nshapes && vb->shards.count; i++)
        if (shards_bounds("bench verify", "--shards", &vb->shards, s->o.shape[i][2], bounds) != CLI_OK)
            return CLI_USAGE;
    return CLI_OK;
}

static void print_header(bench_session *s, void *user)
{
    verify_bench *vb = user;
    const bench_costs *c = &vb->costs;
    vb->nvidia = cli_contains_nocase(s->info.platform_vendor, "nvidia");
    bench_measure_costs(s->ctx, &s->info, &vb->costs);
    if (s->o.json) {
        bench_json_begin(s);
        bench_json_costs(&s->w, c, "copy_gbps");
        json_key_string(&s->w, "logits", vb->profile < 0 ? "default" : bench_profile_name(vb->profile));
        if (vb->shards.count)
            json_key_uint(&s->w, "shards", vb->shards.count);
        bench_json_results(s);
        return;
    }
    printf("device: %s (%s); copy %.0f GB/s; empty kernel %.1f us; host enqueue %.1f us (%.1f with "
           "an event); target logits %s; median of %d",
           s->info.name, s->info.platform_name, c->copy_bw / 1e9, c->empty_us, c->enqueue_us,
           c->enqueue_event_us, vb->profile < 0 ? "N(0, 2)" : bench_profile_name(vb->profile), s->o.iters);
    bench_end_device_line(s);
    if (vb->shards.count)
        printf("sharded: %zu shards of the vocabulary, the rounds of psr_verify_shard_round, their kernels' "
               "device time\n",
               vb->shards.count);
    printf("%-18s %-7s %9s %9s %9s %9s %8s %9s %7s %9s %8s %9s %7s%s\n", "shape RxKxV", "mode", "us", "stats_us",
           "piped_us", "device_us", "host_us", "floor_us", "xfloor", "accepted", "target", "vllm_us", "xvllm",
           vb->shards.count ? "   shard_us  xshard  xch_bytes gather_bytes" : "");
}

/* Every mode on one shape. */
static psr_status verify_shape(bench_session *s, const size_t *dims, void *user)
{
    const verify_bench *vb = user;
    shape sh = {.R = dims[0], .K = dims[1], .V = dims[2], .profile = vb->profile};
    psr_status st = prepare(s->ctx, &sh);
    for (size_t m = 0; m < NMODES && st == PSR_OK; m++) {
        row r = {.target = "-"};
        if (vb->nvidia && vb->profile < 0) /* measured on the default rows only */
            h200_figures(&sh, m, &r);
        st = time_mode(s, &vb->shards, &sh, m, vb->costs.copy_bw, &r);
        if (st == PSR_OK)
            print_row(s, &sh, m, vb->shards.count, &r);
    }
    release_shape(&sh);
    return st;
}

int bench_verify(int argc, char **argv)
{
    static const bench_command command = {.name = "bench verify", .usage = usage, .extra = verify_option,
                                          .values = BENCH_VALUES " --shards --logits", .dims = 3,
                                          .max_shapes = 16,
                                          .shapes_expected = "a list of RxKxV", .header = print_header,
                                          .shape = verify_shape, .check = check_shards};
    bench_session s = {.o = {.shapes = default_shapes, .iters = 50}};
    verify_bench vb = {.profile = -1};
    return bench_main(&command, &s, argc, argv, &vb);
}
