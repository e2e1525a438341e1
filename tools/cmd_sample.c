/* psr sample: sample tokens from logits in .npy files, or from hidden
 * states through the LM head; psr demo. */
#include "cli.h"
#include "check.h"
#include "oracle.h"
#include <psr/psr_experimental.h>
#include "json.h"
#include "npy.h"
#include "shards.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void sample_usage(FILE *out)
{
    fprintf(out,
            "usage: psr sample (--logits FILE.npy | --hidden FILE.npy --weights FILE.npy)\n"
            "                  [--temperature T] [--seed S | --seeds FILE.npy]\n"
            "                  [--pos P | --positions FILE.npy] [--drafting]\n"
            "                  [--top-k K] [--top-p P] [--min-p M] [--logprobs N] [--raw-logprobs]\n"
            "                  [--method gumbel|race] [--noise fp32|fp64|wide] [--fp64] [--fast]\n"
            "                  [--shards N[:S1,...] | --mpi] [--device SEL] [--json]\n"
            "\n"
            "Gumbel-max sampling with vLLM's random stream: one token per row of logits.\n"
            "\n"
            "  --logits       2-D .npy of float32 or float16, C order: [rows, vocab] (1-D:\n"
            "                 one row)\n"
            "  --hidden       instead of --logits: hidden states [rows, hidden] (.npy, float32\n"
            "                 or float16; 1-D: one row), with\n"
            "  --weights      the LM head [vocab, hidden] of the same dtype: the device computes\n"
            "                 logits = hidden x weights^T (CLBlast) and samples them there\n"
            "  --temperature  for every row (default 1; 0 is greedy argmax)\n"
            "  --seed S       int64 seed of every row (default 0), or\n"
            "  --seeds        int64 .npy with one seed per row (or one for all)\n"
            "  --pos P        position of every row (default 0), or\n"
            "  --positions    int64 .npy with one position per row (or one for all);\n"
            "                 positions are in [0, 2^30)\n"
            "  --drafting     the draft stream (positions salted by 2^30)\n"
            "  --top-k K      keep the K most likely tokens and their ties (default 0: off)\n"
            "  --top-p P      keep the fewest most likely tokens holding P, in (0, 1] (default 1: off)\n"
            "  --min-p M      drop tokens below M x the top probability, in [0, 1] (default 0: off);\n"
            "                 filters apply as min-p, top-k, top-p, after the temperature\n"
            "  --logprobs N   also the sampled token's logprob and rank, and the top N (0..20)\n"
            "                 tokens with their logprobs, of logits / T after the filters\n"
            "                 (--logits only)\n"
            "  --raw-logprobs logprobs of the logits as given instead of logits / T\n"
            "  --method       gumbel (default) or race: the exponential race over\n"
            "                 softmax(logits / T), computed inside psr; the same token up\n"
            "                 to rounding\n"
            "  --noise        fp32 (default), fp64 (needs a device with fp64) or wide\n"
            "                 (fp64-grade tail in fp32 arithmetic; docs/statistics.md)\n"
            "  --fp64         short for --noise fp64\n"
            "  --fast         native logs instead of the deterministic ones\n"
            "  --shards N     split the vocabulary into N (1..255) contiguous shards, the\n"
            "                 first V %% N one token longer (or N:S1,...,S(N-1): the token ids\n"
            "                 where shards 1..N-1 start); sample each shard on its columns\n"
            "                 and combine their 16-byte records: the same output as without\n"
            "                 it (the race over logits: up to rounding), the filters\n"
            "                 included (their thresholds found in rounds across the\n"
            "                 shards). With --logprobs the shards compute them in rounds\n"
            "                 too: the same output when shards 1..N-1 start on multiples\n"
            "                 of 16384 tokens; otherwise the same tokens, ranks and top ids,\n"
            "                 the logprobs possibly differing in their last bits (at most 64\n"
            "                 blocks of 16384 tokens, each shard starting its own). Not yet\n"
            "                 with --hidden\n"
            "  --mpi          under mpirun: each rank is one shard of an even split (as\n"
            "                 --shards N with N ranks) and reads only its columns of\n"
            "                 --logits; rank 0 prints what the unsharded command does\n"
            "                 (builds with MPI only; not with --hidden). The filters and\n"
            "                 --logprobs run in rounds across the ranks, the logprobs as\n"
            "                 with --shards: the same output when every rank's first token\n"
            "                 is a multiple of 16384, else the same tokens, ranks and top ids\n"
            "  --json         {\"tokens\": [...], \"device\": ..., ...} instead of one token a line\n"
            "                 (with --logprobs: \"logprobs\", \"ranks\" and \"top\": [[[id, logprob],\n"
            "                 ...], ...]; without --json each line is token, logprob, rank,\n"
            "                 then the top N as id:logprob, separated by tabs)\n");
}

/* psr sample's command line. */
typedef struct sample_options {
    const char *logits, *hidden, *weights; /* --logits, or --hidden with --weights */
    const char *seeds_path, *positions_path, *device;
    int64_t seed, pos, top_k;
    float temperature, top_p, min_p;
    bool json, raw_logprobs, mpi;
    int logprobs;  /* --logprobs N; -1: no logprobs */
    shard_spec shards; /* --shards; count 0 without */
    unsigned flags;
    psr_noise noise;
} sample_options;

/* The inputs read from the files, and one value per row of everything
 * else, the tokens drawn included. */
typedef struct sample_rows {
    npy_array logits, hidden, weights;
    size_t rows, vocab;   /* vocab: the whole vocabulary, whatever the shards */
    size_t bounds[PSR_MAX_SHARDS + 1]; /* --shards: shard s is [bounds[s], bounds[s + 1]) */
    size_t vocab_offset;  /* --mpi: the first column this rank holds */
    int rank;             /* --mpi: this process's rank; only rank 0 prints */
    int64_t *seeds, *positions;
    float *temps;
    int32_t *tokens;
    uint32_t *row_flags;
    size_t no_finite;     /* rows without a finite logit */
} sample_rows;

/* psr_logprobs' outputs (--logprobs N). */
typedef struct sample_logprobs {
    float *logprobs, *top_logprobs; /* top_*: rows x max(N, 1) */
    int32_t *ranks, *top_ids;
} sample_logprobs;

/* The options that take no value; false when `arg` is none of them. */
static bool sample_flag(void *opts, const char *arg)
{
    sample_options *o = opts;
    if (strcmp(arg, "--drafting") == 0)
        o->flags |= PSR_SAMPLE_DRAFTING;
    else if (strcmp(arg, "--fp64") == 0)
        o->noise = PSR_NOISE_FP64;
    else if (strcmp(arg, "--fast") == 0)
        o->flags |= PSR_SAMPLE_FAST_MATH;
    else if (strcmp(arg, "--raw-logprobs") == 0)
        o->raw_logprobs = true;
    else if (strcmp(arg, "--mpi") == 0)
        o->mpi = true;
    else
        return false;
    return true;
}

/* Where an option whose value is kept as given (a path, a selector) goes,
 * or NULL when `arg` is none of them. */
static const char **text_field(sample_options *o, const char *arg)
{
    static const char *const names[] = {"--logits", "--hidden", "--weights", "--seeds", "--positions", "--device"};
    const char **fields[] = {&o->logits, &o->hidden, &o->weights, &o->seeds_path, &o->positions_path, &o->device};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(arg, names[i]) == 0)
            return fields[i];
    return NULL;
}

/* --method and --noise: CLI_OK, CLI_USAGE after the message, or -1 when
 * `arg` is neither. */
static int mode_option(sample_options *o, const char *arg, const char *val)
{
    if (strcmp(arg, "--method") == 0) {
        if (strcmp(val, "race") != 0 && strcmp(val, "gumbel") != 0)
            return cli_usage_error("sample", "--method is gumbel or race, not \"%s\"", val);
        o->flags = strcmp(val, "race") == 0 ? o->flags | PSR_SAMPLE_RACE : o->flags & ~PSR_SAMPLE_RACE;
        return CLI_OK;
    }
    if (strcmp(arg, "--noise") != 0)
        return -1;
    if (strcmp(val, "fp64") == 0)
        o->noise = PSR_NOISE_FP64;
    else if (strcmp(val, "wide") == 0)
        o->noise = PSR_NOISE_WIDE;
    else if (strcmp(val, "fp32") == 0)
        o->noise = PSR_NOISE_FP32;
    else
        return cli_usage_error("sample", "--noise is fp32, fp64 or wide, not \"%s\"", val);
    return CLI_OK;
}

/* The options with a number: CLI_OK, CLI_USAGE after the message, or -1
 * when `arg` is none of them. */
static int number_option(sample_options *o, const char *arg, const char *val)
{
    int64_t n = 0;
    int rc;
    if (strcmp(arg, "--seed") == 0 || strcmp(arg, "--pos") == 0) /* positions: the calls check their range */
        return cli_int("sample", arg, val, INT64_MIN, INT64_MAX, arg[2] == 's' ? &o->seed : &o->pos);
    if (strcmp(arg, "--top-k") == 0)
        return cli_int("sample", arg, val, INT32_MIN, INT32_MAX, &o->top_k);
    if (strcmp(arg, "--top-p") == 0 || strcmp(arg, "--min-p") == 0)
        return cli_float("sample", arg, val, arg[2] == 't' ? &o->top_p : &o->min_p);
    if (strcmp(arg, "--temperature") == 0)
        return cli_float("sample", arg, val, &o->temperature);
    if (strcmp(arg, "--logprobs") != 0)
        return -1;
    rc = cli_int("sample", arg, val, 0, PSR_LOGPROBS_MAX_TOP_N, &n);
    o->logprobs = rc == CLI_OK ? (int)n : o->logprobs;
    return rc;
}

/* What sharding does not go with (yet). */
static int check_shards(const sample_options *o)
{
    const char *opt = o->mpi ? "--mpi" : "--shards";
    if (o->mpi && o->shards.count)
        return cli_usage_error("sample", "--shards and --mpi do not go together: under --mpi each rank is a shard");
#ifndef PSR_CLI_MPI
    if (o->mpi)
        return cli_usage_error("sample", "--mpi: psr was built without MPI");
#endif
    if (!o->mpi && !o->shards.count)
        return -1;
    int rc = shards_refuse("sample", opt, o->hidden || o->weights, "--hidden with --weights");
    return rc == CLI_OK ? -1 : rc;
}

/* The options that go together, or not. */
static int check_options(const sample_options *o)
{
    if (o->raw_logprobs && o->logprobs < 0)
        return cli_usage_error("sample", "--raw-logprobs goes with --logprobs N");
    if (o->logprobs >= 0 && !o->logits)
        return cli_usage_error("sample", "--logprobs works with --logits");
    if (o->logits && (o->hidden || o->weights))
        return cli_usage_error("sample", "give --logits, or --hidden with --weights, not both");
    if (!o->logits && !(o->hidden && o->weights))
        return cli_usage_error("sample", o->hidden || o->weights
                                             ? "--hidden and --weights go together"
                                             : "--logits FILE.npy (or --hidden and --weights) is required");
    return check_shards(o);
}

static int sample_value(void *opts, const char *arg, const char *val)
{
    sample_options *o = opts;
    const char **text = text_field(o, arg);
    if (text) {
        *text = val;
        return CLI_OK;
    }
    if (strcmp(arg, "--shards") == 0)
        return shards_parse("sample", val, &o->shards);
    int rc = mode_option(o, arg, val);
    if (rc < 0)
        rc = number_option(o, arg, val);
    return rc < 0 ? cli_usage_error("sample", "unknown argument \"%s\"", arg) : rc;
}

/* -1 when sampling should go ahead, else the exit code. */
static int parse_sample(int argc, char **argv, sample_options *o)
{
    static const cli_options options = {"sample", sample_usage, sample_flag, sample_value};
    static const char *values = "--logits --hidden --weights --seeds --positions --device --method --noise --seed "
                                "--pos --top-k --top-p --min-p --logprobs --temperature --shards";
    int parsed = cli_parse_values(&options, values, argc, argv, 1, o, &o->json);
    return parsed >= 0 ? parsed : check_options(o);
}

/* One int64 per row from a .npy (1 value for all rows, or rows values). */
static int per_row_int64(const char *path, size_t rows, int64_t *out, char *err, size_t len)
{
    npy_array a;
    if (npy_read(path, &a, err, len))
        return 1;
    int rc = 0;
    if (a.dtype != NPY_I8 || a.ndim > 1) {
        snprintf(err, len, "%s: expected a 1-D int64 array (or a scalar)", path);
        rc = 1;
    } else if (a.count != 1 && a.count != rows) {
        snprintf(err, len, "%s: has %zu values; the logits have %zu rows (give 1 or %zu)", path,
                 a.count, rows, rows);
        rc = 1;
    } else {
        for (size_t r = 0; r < rows; r++)
            out[r] = ((const int64_t *)a.data)[a.count == 1 ? 0 : r];
    }
    npy_free(&a);
    return rc;
}

/* A 2-D float .npy (float32 or float16), or a message in err; a 1-D one
 * is one row where `one_row` allows it. */
static int read_matrix(const char *path, const char *what, bool one_row, npy_array *a, char *err, size_t len)
{
    if (npy_read(path, a, err, len))
        return 1;
    if (one_row && a->ndim == 1)
        a->ndim = 2, a->shape[1] = a->shape[0], a->shape[0] = 1;
    if (a->ndim != 2 || a->dtype == NPY_I8 || a->shape[0] == 0 || a->shape[1] == 0) {
        snprintf(err, len, "%s: expected a non-empty %s float32 or float16 array %s", path,
                 one_row ? "1-D or 2-D" : "2-D", what);
        npy_free(a);
        return 1;
    }
    return 0;
}

static const char *dtype_name(const npy_array *a)
{
    return a->dtype == NPY_F2 ? "float16" : "float32";
}

static psr_dtype psr_dtype_of(const npy_array *a)
{
    return a->dtype == NPY_F2 ? PSR_DTYPE_F16 : PSR_DTYPE_F32;
}

/* The logits, or the hidden states and the LM head, with their shapes
 * checked; CLI_FAILED after saying what is wrong. */
static int read_matrices(const sample_options *o, sample_rows *in)
{
    char err[512];
    int bad;
    if (o->logits)
        bad = read_matrix(o->logits, "[rows, vocab]", true, &in->logits, err, sizeof err);
    else
        bad = read_matrix(o->hidden, "[rows, hidden]", true, &in->hidden, err, sizeof err) ||
              read_matrix(o->weights, "[vocab, hidden]", false, &in->weights, err, sizeof err);
    if (bad) {
        fprintf(stderr, "psr sample: %s\n", err);
        return CLI_FAILED;
    }
    const npy_array *h = &in->hidden, *w = &in->weights;
    if (o->hidden && (h->shape[1] != w->shape[1] || h->dtype != w->dtype)) {
        fprintf(stderr, "psr sample: --hidden %s is [%zu, %zu] %s but --weights %s is [%zu, %zu] %s: "
                "they need the same hidden size and dtype\n",
                o->hidden, h->shape[0], h->shape[1], dtype_name(h), o->weights, w->shape[0], w->shape[1],
                dtype_name(w));
        return CLI_FAILED;
    }
    in->rows = o->logits ? in->logits.shape[0] : h->shape[0];
    in->vocab = o->logits ? in->logits.shape[1] : w->shape[0];
    return CLI_OK;
}

/* Every row's seed, position and temperature, from the options and the
 * --seeds and --positions files (the filters are one value for every row). */
static int fill_rows(const sample_options *o, sample_rows *in)
{
    size_t rows = in->rows;
    in->seeds = malloc(rows * 8), in->positions = malloc(rows * 8), in->temps = malloc(rows * 4);
    in->tokens = malloc(rows * 4), in->row_flags = malloc(rows * 4);
    if (!in->seeds || !in->positions || !in->temps || !in->tokens || !in->row_flags)
        return cli_report(PSR_ERR_OUT_OF_HOST_MEMORY, NULL);
    for (size_t r = 0; r < rows; r++)
        in->seeds[r] = o->seed, in->positions[r] = o->pos, in->temps[r] = o->temperature;
    char err[512];
    if ((o->seeds_path && per_row_int64(o->seeds_path, rows, in->seeds, err, sizeof err)) ||
        (o->positions_path && per_row_int64(o->positions_path, rows, in->positions, err, sizeof err))) {
        fprintf(stderr, "psr sample: %s\n", err);
        return CLI_FAILED;
    }
    return CLI_OK;
}

static void free_rows(sample_rows *in)
{
    npy_free(&in->logits), npy_free(&in->hidden), npy_free(&in->weights);
    free(in->seeds), free(in->positions), free(in->temps), free(in->tokens), free(in->row_flags);
}

static bool temperature_ok(float t)
{
    return t == 0.0f || (isnormal(t) && t > 0.0f);
}

/* What psr_sample_host checks of every row, for the LM head path, which
 * reaches psr_sample with device buffers (which checks the filters). */
static psr_status check_rows(const sample_rows *in)
{
    for (size_t r = 0; r < in->rows; r++) {
        if (in->positions[r] < 0 || in->positions[r] >= PSR_MAX_POSITION)
            return cli_fail(PSR_ERR_POSITION_RANGE, "positions[%zu] = %lld is outside [0, 2^30)", r,
                            (long long)in->positions[r]);
        if (!temperature_ok(in->temps[r]))
            return cli_fail(PSR_ERR_TEMPERATURE, "temperatures[%zu] = %g is not 0 or a positive normal number",
                            r, (double)in->temps[r]);
    }
    return PSR_OK;
}

/* The LM head path's device buffers, by index. */
enum { H_HIDDEN, H_WEIGHTS, H_LOGITS, H_SEEDS, H_POSITIONS, H_TEMPS, H_TOKENS, H_ROW_FLAGS, H_BUFFERS };

static psr_status hidden_buffers(psr_context *ctx, const sample_rows *in, cl_mem *m)
{
    size_t rows = in->rows, hsize = in->hidden.shape[1], vocab = in->vocab;
    size_t es = psr_dtype_size(psr_dtype_of(&in->hidden));
    if (vocab > SIZE_MAX / es / rows)
        return cli_fail(PSR_ERR_INVALID_ARGUMENT, "%zu rows x %zu tokens of logits overflow a size_t", rows,
                        vocab);
    const cli_buffer spec[H_BUFFERS] = {
        [H_HIDDEN] = {rows * hsize * es, in->hidden.data}, [H_WEIGHTS] = {vocab * hsize * es, in->weights.data},
        [H_LOGITS] = {rows * vocab * es, NULL},            [H_SEEDS] = {rows * 8, in->seeds},
        [H_POSITIONS] = {rows * 8, in->positions},         [H_TEMPS] = {rows * 4, in->temps},
        [H_TOKENS] = {rows * 4, NULL},                     [H_ROW_FLAGS] = {rows * 4, NULL},
    };
    cl_int err = cli_make_buffers(ctx, spec, H_BUFFERS, m);
    if (err != CL_SUCCESS)
        return cli_fail(PSR_ERR_OPENCL, "allocating device buffers failed: %s (%d)", psr_cl_error_string(err),
                        err);
    return PSR_OK;
}

/* logits = hidden x weights^T, then psr_sample of them once the GEMM is done. */
static psr_status enqueue_hidden(psr_context *ctx, const sample_rows *in, const sample_options *o, const cl_mem *m)
{
    psr_dtype dtype = psr_dtype_of(&in->hidden);
    psr_lm_head_args la;
    psr_lm_head_args_init(&la, sizeof la);
    la.batch = in->rows, la.hidden_size = in->hidden.shape[1], la.vocab = in->vocab, la.dtype = dtype;
    la.hidden = m[H_HIDDEN], la.weights = m[H_WEIGHTS], la.logits = m[H_LOGITS];
    cl_event gemm = NULL;
    psr_status st = psr_lm_head(ctx, &la, &gemm);
    if (st != PSR_OK)
        return st;
    psr_sample_args a;
    psr_sample_args_init(&a, sizeof a);
    a.rows = a.requests = in->rows, a.vocab = in->vocab;
    a.logits = m[H_LOGITS], a.logits_dtype = dtype;
    a.seeds = m[H_SEEDS], a.positions = m[H_POSITIONS], a.temperatures = m[H_TEMPS];
    a.tokens = m[H_TOKENS], a.row_flags = m[H_ROW_FLAGS];
    a.all_top_k = (int)o->top_k, a.all_top_p = o->top_p, a.all_min_p = o->min_p;
    a.flags = o->flags;
    a.noise = o->noise;
    a.num_events_in_wait_list = 1;
    a.event_wait_list = &gemm;
    st = psr_sample(ctx, &a, NULL);
    clReleaseEvent(gemm);
    return st;
}

/* The LM head path: logits = hidden x weights^T on the device, sampled
 * there without a trip through the host. Fails like psr_sample_host on a
 * bad position or temperature. */
static psr_status sample_hidden(psr_context *ctx, sample_rows *in, const sample_options *o)
{
    psr_status st = check_rows(in);
    cl_mem m[H_BUFFERS] = {NULL};
    if (st == PSR_OK)
        st = hidden_buffers(ctx, in, m);
    if (st == PSR_OK)
        st = enqueue_hidden(ctx, in, o, m);
    void *out[2] = {in->tokens, in->row_flags};
    cl_int err = CL_SUCCESS;
    for (int i = 0; i < 2 && st == PSR_OK && err == CL_SUCCESS; i++)
        err = clEnqueueReadBuffer(cli_queue(ctx), m[H_TOKENS + i], CL_TRUE, 0, in->rows * 4, out[i], 0, NULL, NULL);
    if (st == PSR_OK && err != CL_SUCCESS)
        st = cli_fail(PSR_ERR_OPENCL, "reading the tokens failed: %s (%d)", psr_cl_error_string(err), err);
    clFinish(cli_queue(ctx)); /* nothing may still use the buffers below */
    cli_release_buffers(m, H_BUFFERS);
    for (size_t r = 0; st == PSR_OK && r < in->rows; r++)
        in->no_finite += (in->row_flags[r] & PSR_ROW_NO_FINITE) != 0;
    return st;
}

/* Logprobs of the sampled tokens for host logits (psr_logprobs_host). */
static psr_status host_logprobs(psr_context *ctx, const sample_options *o, const sample_rows *in,
                                sample_logprobs *out)
{
    psr_logprobs_host_args a;
    psr_logprobs_host_args_init(&a, sizeof a);
    a.rows = in->rows, a.vocab = in->vocab;
    a.logits = in->logits.data, a.logits_dtype = psr_dtype_of(&in->logits);
    a.temperatures = in->temps, a.tokens = in->tokens;
    int top_n = o->logprobs;
    bool raw = o->raw_logprobs;
    if (!raw) /* the filters shape processed logprobs only */
        a.all_top_k = (int)o->top_k, a.all_top_p = o->top_p, a.all_min_p = o->min_p;
    a.top_n = top_n;
    a.flags = raw ? PSR_LOGPROBS_RAW : 0;
    a.token_logprobs = out->logprobs, a.token_ranks = out->ranks;
    a.top_ids = top_n ? out->top_ids : NULL;
    a.top_logprobs = top_n ? out->top_logprobs : NULL;
    return psr_logprobs_host(ctx, &a);
}

#ifdef PSR_CLI_MPI
/* This rank's shard through psr_mpi_sample_host: the tokens of every
 * shard on every rank; with `lp` (--logprobs) then their logprobs across
 * the ranks, on every rank, from the same columns. */
static psr_status mpi_draw(psr_context *ctx, const sample_options *o, psr_sample_host_args *a, sample_rows *in,
                           sample_logprobs *lp)
{
    a->vocab = in->logits.shape[1];
    a->vocab_offset = in->vocab_offset, a->vocab_total = in->vocab;
    a->no_finite_rows = NULL;
    psr_status st = cli_mpi_sample(ctx, a);
    for (size_t r = 0; st == PSR_OK && r < in->rows; r++)
        in->no_finite += (in->row_flags[r] & PSR_ROW_NO_FINITE) != 0;
    /* the sampling fails on every rank or on none, so all ranks get here together */
    if (st != PSR_OK || !lp)
        return st;
    shards_logprobs out = {o->logprobs, o->raw_logprobs, lp->logprobs, lp->top_logprobs, lp->ranks, lp->top_ids};
    return cli_mpi_logprobs(ctx, a, &out);
}
#endif

/* The tokens, by the LM head path or from the host logits; with --shards
 * or --mpi and `lp` (--logprobs) their logprobs too, in the same shards
 * (--shards: whose rounds reuse the filter state the sampling's rounds
 * found; --mpi: psr_mpi_logprobs runs the filters' rounds again). */
static psr_status draw_tokens(psr_context *ctx, const sample_options *o, sample_rows *in, sample_logprobs *lp)
{
    if (o->hidden)
        return sample_hidden(ctx, in, o);
    psr_sample_host_args a;
    psr_sample_host_args_init(&a, sizeof a);
    a.rows = in->rows, a.vocab = in->vocab;
    a.logits = in->logits.data, a.logits_dtype = psr_dtype_of(&in->logits);
    a.seeds = in->seeds, a.positions = in->positions, a.temperatures = in->temps;
    a.all_top_k = (int)o->top_k, a.all_top_p = o->top_p, a.all_min_p = o->min_p;
    a.flags = o->flags, a.noise = o->noise;
    a.tokens = in->tokens, a.row_flags = in->row_flags, a.no_finite_rows = &in->no_finite;
    /* device buffers: check what psr_sample_host would */
    if (o->shards.count && lp) {
        psr_status st = check_rows(in);
        shards_logprobs out = {o->logprobs, o->raw_logprobs, lp->logprobs, lp->top_logprobs, lp->ranks, lp->top_ids};
        return st == PSR_OK ? shards_sample_logprobs(ctx, &a, o->shards.count, in->bounds, &out) : st;
    }
    if (o->shards.count && shards_filtered(&a)) {
        psr_status st = check_rows(in);
        return st == PSR_OK ? shards_sample_filtered(ctx, &a, o->shards.count, in->bounds) : st;
    }
    if (o->shards.count)
        return shards_sample_host(ctx, &a, o->shards.count, in->bounds);
#ifdef PSR_CLI_MPI
    if (o->mpi)
        return mpi_draw(ctx, o, &a, in, lp);
#endif
    return psr_sample_host(ctx, &a);
}

/* Room for psr_logprobs' outputs (--logprobs N). */
static psr_status alloc_logprobs(const sample_options *o, const sample_rows *in, sample_logprobs *lp)
{
    size_t rows = in->rows, tn = o->logprobs > 0 ? (size_t)o->logprobs : 1;
    lp->logprobs = malloc(rows * 4), lp->ranks = malloc(rows * 4);
    lp->top_logprobs = malloc(rows * tn * 4), lp->top_ids = malloc(rows * tn * 4);
    if (!lp->logprobs || !lp->ranks || !lp->top_logprobs || !lp->top_ids)
        return PSR_ERR_OUT_OF_HOST_MEMORY;
    return PSR_OK;
}

/* "logprobs", "ranks" and "top": [[[id, logprob], ...], ...]. */
static void json_logprobs(json_writer *w, const sample_options *o, const sample_rows *in, const sample_logprobs *lp)
{
    size_t tn = o->logprobs > 0 ? (size_t)o->logprobs : 1;
    json_key_bool(w, "logprobs_raw", o->raw_logprobs);
    json_key(w, "logprobs");
    json_begin_array(w);
    for (size_t r = 0; r < in->rows; r++)
        json_float(w, lp->logprobs[r]);
    json_end_array(w);
    json_key(w, "ranks");
    json_begin_array(w);
    for (size_t r = 0; r < in->rows; r++)
        json_int(w, lp->ranks[r]);
    json_end_array(w);
    json_key(w, "top");
    json_begin_array(w);
    for (size_t r = 0; r < in->rows; r++) {
        json_begin_array(w);
        for (size_t k = 0; k < (size_t)o->logprobs; k++) {
            json_begin_array(w);
            json_int(w, lp->top_ids[r * tn + k]);
            json_float(w, lp->top_logprobs[r * tn + k]);
            json_end_array(w);
        }
        json_end_array(w);
    }
    json_end_array(w);
}

static void print_json(psr_context *ctx, const sample_options *o, const sample_rows *in, const sample_logprobs *lp)
{
    psr_device_info info;
    psr_context_device_info(ctx, &info);
    psr_noise used = o->noise; /* what ran: the context may fall back */
    psr_context_last_noise(ctx, &used);
    json_writer w;
    json_init(&w, stdout);
    json_begin_object(&w);
    json_key(&w, "tokens");
    json_begin_array(&w);
    for (size_t r = 0; r < in->rows; r++)
        json_int(&w, in->tokens[r]);
    json_end_array(&w);
    json_key_string(&w, "device", info.name);
    json_key_string(&w, "platform", info.platform_name);
    json_key_uint(&w, "rows", in->rows);
    json_key_uint(&w, "vocab", in->vocab);
    if (o->hidden)
        json_key_uint(&w, "hidden_size", in->hidden.shape[1]);
    json_key_string(&w, "noise", used == PSR_NOISE_FP64 ? "fp64" : used == PSR_NOISE_WIDE ? "wide" : "fp32");
    json_key_string(&w, "method", o->flags & PSR_SAMPLE_RACE ? "race" : "gumbel");
    /* wide-tail noise and the race are always built deterministic */
    json_key_bool(&w, "deterministic",
                  !(o->flags & PSR_SAMPLE_FAST_MATH) || used == PSR_NOISE_WIDE || (o->flags & PSR_SAMPLE_RACE));
    json_key_bool(&w, "drafting", o->flags & PSR_SAMPLE_DRAFTING);
    json_key_uint(&w, "no_finite_rows", in->no_finite);
    if (o->logprobs >= 0)
        json_logprobs(&w, o, in, lp);
    json_end_object(&w);
    json_finish(&w);
}

/* A row's logprob line: token, logprob, rank, then the top N as id:logprob. */
static void print_logprobs_line(const sample_options *o, const sample_rows *in, const sample_logprobs *lp, size_t r)
{
    size_t tn = o->logprobs > 0 ? (size_t)o->logprobs : 1;
    char num[JSON_NUMBER_CHARS];
    json_format_float(num, sizeof num, lp->logprobs[r]);
    printf("%d\t%s\t%d", in->tokens[r], num, lp->ranks[r]);
    for (size_t k = 0; k < (size_t)o->logprobs; k++) {
        json_format_float(num, sizeof num, lp->top_logprobs[r * tn + k]);
        printf("\t%d:%s", lp->top_ids[r * tn + k], num);
    }
    printf("\n");
}

static void print_text(const sample_options *o, const sample_rows *in, const sample_logprobs *lp)
{
    for (size_t r = 0; r < in->rows; r++)
        if (o->logprobs >= 0)
            print_logprobs_line(o, in, lp, r);
        else
            printf("%d\n", in->tokens[r]);
    if (in->no_finite)
        fprintf(stderr, "psr sample: %zu rows had no finite logit (their token is still in range)\n",
                in->no_finite);
}

/* Samples on the device and prints the tokens (and their logprobs); under
 * --mpi only rank 0 prints. */
static int sample_with(psr_context *ctx, const sample_options *o, sample_rows *in)
{
    sample_logprobs lp = {0};
    bool logprobs = o->logprobs >= 0;
    psr_status st = logprobs ? alloc_logprobs(o, in, &lp) : PSR_OK;
    if (st == PSR_OK)
        st = draw_tokens(ctx, o, in, logprobs ? &lp : NULL);
    if (st == PSR_OK && logprobs && !o->shards.count && !o->mpi) /* else draw_tokens computed them */
        st = host_logprobs(ctx, o, in, &lp);
    int rc = CLI_OK;
    if (st != PSR_OK)
        rc = cli_report(st, ctx);
    else if (in->rank != 0)
        rc = CLI_OK;
    else if (o->json)
        print_json(ctx, o, in, &lp);
    else
        print_text(o, in, &lp);
    free(lp.logprobs), free(lp.ranks), free(lp.top_logprobs), free(lp.top_ids);
    return rc;
}

static int sample_and_print(const sample_options *o, sample_rows *in)
{
    psr_context *ctx = cli_open_context(o->device, false);
    if (!ctx)
        return CLI_FAILED;
    int rc = sample_with(ctx, o, in);
    psr_context_free(ctx);
    return rc;
}

#ifdef PSR_CLI_MPI
/* This rank's columns of --logits: its shard of an even split over the
 * ranks, read without the rest of the file. */
static int read_columns(const sample_options *o, sample_rows *in, int ranks)
{
    char err[512] = "";
    npy_array head;
    shard_spec spec = {.count = (size_t)ranks};
    if (npy_read_header(o->logits, &head, err, sizeof err) == 0 &&
        ((head.ndim != 1 && head.ndim != 2) || head.dtype == NPY_I8 || head.count == 0))
        snprintf(err, sizeof err, "%s: expected a non-empty 1-D or 2-D float32 or float16 array [rows, vocab]",
                 o->logits);
    if (!err[0]) {
        in->rows = head.ndim == 1 ? 1 : head.shape[0];
        in->vocab = head.shape[head.ndim - 1];
        if (shards_bounds("sample", "--mpi", &spec, in->vocab, in->bounds) != CLI_OK)
            return CLI_USAGE;
        /* every rank finds the same; rank 0 says so, and all stop at cli_mpi_agree */
        if (o->logprobs >= 0 && in->rank == 0 &&
            shards_logprobs_fit("sample", "--mpi", spec.count, in->bounds) != CLI_OK)
            return CLI_USAGE;
        in->vocab_offset = in->bounds[in->rank];
        npy_read_columns(o->logits, in->vocab_offset, in->bounds[in->rank + 1], &in->logits, err, sizeof err);
    }
    if (!err[0])
        return CLI_OK;
    fprintf(stderr, "psr sample: %s\n", err);
    return CLI_FAILED;
}

/* psr sample --mpi: every rank reads its columns and its context before
 * any rank starts the collective sampling. */
static int sample_mpi(const sample_options *o, sample_rows *in)
{
    int ranks = 0;
    if (cli_mpi_init(&in->rank, &ranks) != CLI_OK)
        return CLI_FAILED;
    int rc = read_columns(o, in, ranks);
    if (rc == CLI_OK)
        rc = fill_rows(o, in);
    psr_context *ctx = rc == CLI_OK ? cli_open_context(o->device, false) : NULL;
    rc = cli_mpi_agree(rc == CLI_OK && !ctx ? CLI_FAILED : rc);
    if (rc == CLI_OK)
        rc = sample_with(ctx, o, in);
    psr_context_free(ctx);
    cli_mpi_finalize();
    return rc;
}
#endif

/* The logits (or the hidden states and weights), the shards' bounds and
 * every row's inputs; then the tokens. */
static int sample_in_process(const sample_options *o, sample_rows *in)
{
    int rc = read_matrices(o, in);
    if (rc == CLI_OK && o->shards.count)
        rc = shards_bounds("sample", "--shards", &o->shards, in->vocab, in->bounds);
    if (rc == CLI_OK && o->shards.count && o->logprobs >= 0)
        rc = shards_logprobs_fit("sample", "--shards", o->shards.count, in->bounds);
    if (rc == CLI_OK)
        rc = fill_rows(o, in);
    if (rc == CLI_OK)
        rc = sample_and_print(o, in);
    return rc;
}

int cmd_sample(int argc, char **argv)
{
    sample_options o = {.temperature = 1.0f, .top_p = 1.0f, .logprobs = -1};
    int parsed = parse_sample(argc, argv, &o);
    if (parsed >= 0)
        return parsed;
    sample_rows in = {0};
#ifdef PSR_CLI_MPI
    int rc = o.mpi ? sample_mpi(&o, &in) : sample_in_process(&o, &in);
#else
    int rc = sample_in_process(&o, &in);
#endif
    free_rows(&in);
    return rc;
}

/* psr demo: the main job on the default device, checked against the host. */
enum { DEMO_ROWS = 8, DEMO_VOCAB = 32000 };

/* One of the demo's runs: sample (a second time, timed) and compare every
 * token with the oracle's. */
static int demo_run(psr_context *ctx, const float *logits, const int64_t *seeds, const int64_t *pos,
                    const char *name, unsigned flags, float temp)
{
    int32_t tokens[DEMO_ROWS];
    float temps[DEMO_ROWS];
    for (int r = 0; r < DEMO_ROWS; r++)
        temps[r] = temp;
    psr_sample_host_args a;
    psr_sample_host_args_init(&a, sizeof a);
    a.rows = DEMO_ROWS, a.vocab = DEMO_VOCAB, a.logits = logits;
    a.seeds = seeds, a.positions = pos, a.temperatures = temps;
    a.flags = flags, a.tokens = tokens;
    /* The first call builds (or loads) the kernels; time the second. */
    struct timespec t0, t1;
    psr_status st = psr_sample_host(ctx, &a);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (st == PSR_OK)
        st = psr_sample_host(ctx, &a);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (st != PSR_OK)
        return cli_report(st, ctx);
    int agree = 0;
    printf("%s:", name);
    for (int r = 0; r < DEMO_ROWS; r++) {
        printf(" %5d", tokens[r]);
        agree += tokens[r] == psr_oracle_sample_row(logits + (size_t)r * DEMO_VOCAB, DEMO_VOCAB, temp, seeds[r],
                                                    pos[r], flags & PSR_SAMPLE_DRAFTING, PSR_ORACLE_FP32, NULL);
    }
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    printf("   oracle agrees %d/%d (%.2f ms, copies included)\n", agree, DEMO_ROWS, ms);
    return agree == DEMO_ROWS ? CLI_OK : CLI_FAILED;
}

static void demo_usage(FILE *out)
{
    fprintf(out, "usage: psr demo [--device SEL]\n\n"
                 "Samples 8 rows of random logits over a 32,000-token vocabulary on the chosen\n"
                 "device (target stream, draft stream, greedy), and checks every token\n"
                 "against psr's host oracle, which computes the same bits on the CPU.\n");
}

/* --device, the demo's one option. */
static int demo_value(void *opts, const char *arg, const char *val)
{
    (void)arg;
    *(const char **)opts = val;
    return CLI_OK;
}

int cmd_demo(int argc, char **argv)
{
    static const cli_options options = {"demo", demo_usage, NULL, demo_value};
    const char *device = NULL;
    int parsed = cli_parse_values(&options, "--device", argc, argv, 1, &device, NULL);
    if (parsed >= 0)
        return parsed;
    psr_context *ctx = cli_open_context(device, false);
    if (!ctx)
        return CLI_FAILED;
    cli_device_calls_only(ctx); /* the demo checks the device against the host */
    psr_device_info info;
    psr_context_device_info(ctx, &info);
    printf("psr %s on %u:%u %s (%s)\n", psr_version(), info.platform_index, info.device_index,
           info.name, info.platform_name);
    float *logits = malloc((size_t)DEMO_ROWS * DEMO_VOCAB * sizeof *logits);
    uint64_t s = 2024;
    for (size_t i = 0; logits && i < (size_t)DEMO_ROWS * DEMO_VOCAB; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        logits[i] = (float)((double)(s >> 40) / 16777216.0 * 12.0 - 6.0);
    }
    int64_t seeds[DEMO_ROWS], pos[DEMO_ROWS];
    for (int r = 0; r < DEMO_ROWS; r++) {
        seeds[r] = 1000 + r;
        pos[r] = 17 + r;
    }
    int rc = logits ? CLI_OK : cli_report(PSR_ERR_OUT_OF_HOST_MEMORY, ctx);
    if (rc == CLI_OK)
        rc = demo_run(ctx, logits, seeds, pos, "target stream, T=0.8", 0, 0.8f);
    if (rc == CLI_OK)
        rc = demo_run(ctx, logits, seeds, pos, "draft stream,  T=0.8", PSR_SAMPLE_DRAFTING, 0.8f);
    if (rc == CLI_OK)
        rc = demo_run(ctx, logits, seeds, pos, "greedy,        T=0  ", 0, 0.0f);
    free(logits);
    psr_context_free(ctx);
    if (rc == CLI_OK)
        printf("every token matches the host oracle bit for bit\n");
    return rc;
}
