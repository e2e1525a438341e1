/* psr verify: statistical self-tests users run on their own device. */
#include "cli.h"
#include "check.h"
#include "oracle.h"
#include <psr/psr_experimental.h>
#include "json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    psr_noise noise;
} noises[] = {
    {"fp32", PSR_NOISE_FP32},
    {"fp64", PSR_NOISE_FP64},
    {"wide", PSR_NOISE_WIDE},
};

static void verify_usage(FILE *out)
{
    fprintf(out,
            "usage: psr verify [--device SEL] [--json]\n"
            "       psr verify unbiased [--k K] [--trials N] [--control] [--device SEL] [--json]\n"
            "       psr verify tail [--noise fp32|fp64|wide] [--trials N] [--tail-tokens M]\n"
            "                       [--gap G] [--device SEL] [--json]\n"
            "       psr verify lower-tail [--draws N] [--device SEL] [--json]\n"
            "\n"
            "(none)      every quick self-test, PASS or FAIL each: the stream's known\n"
            "            answers, tokens against the host oracle, a goodness-of-fit test\n"
            "            and a quick unbiasedness test of speculative decoding.\n"
            "unbiased    speculative decoding's unbiasedness test (psr verify unbiased --help).\n"
            "tail        the many-tail experiment: one head token and M tail tokens G nats\n"
            "            below it, sampled N times (Gumbel-max, T = 1). Prints the observed\n"
            "            and expected tail hits and a two-sided Poisson p-value. Defaults\n"
            "            are vLLM's experiment: N = 100000, M = 262144, G = 20.5 (32.76\n"
            "            expected hits; each tail token has probability 1.25e-9 < 2^-24).\n"
            "lower-tail  counts draws of the exponential variate E behind the noise\n"
            "            below 2^-24 and 2^-32 (default N = 2^28 draws), against N * 2^-k.\n"
            "\n"
            "Without --noise every option the device can run is tried (fp64 needs\n"
            "cl_khr_fp64). With --json, one object per option (a list for several).\n");
}

/* log P(X = k) for X ~ Poisson(lambda). */
static double log_poisson(double lambda, double k)
{
    return k * log(lambda) - lambda - lgamma(k + 1.0);
}

/* Two-sided p-value of observing `o` under Poisson(lambda): twice the
 * smaller tail, capped at 1. */
static double poisson_p_value(double lambda, unsigned long long o)
{
    double lower = 0, upper = 0;
    for (unsigned long long k = 0; k <= o; k++)
        lower += exp(log_poisson(lambda, (double)k));
    upper = 1.0 - lower + exp(log_poisson(lambda, (double)o));
    double p = 2.0 * (lower < upper ? lower : upper);
    return p > 1.0 ? 1.0 : p;
}

typedef struct tail_result {
    const char *noise;
    unsigned long long trials, tail_tokens, observed;
    double gap, expected, p_value;
} tail_result;

/* The tail experiment's rows: each one head logit 0 and the tail `gap`
 * below it, uploaded once; seeds and temperatures fixed, positions
 * written per launch. */
typedef struct tail_rows {
    size_t batch, vocab;
    cl_long *pos;
    cl_int *tokens;
    cl_mem m[5]; /* logits, seeds, temperatures, positions, tokens */
} tail_rows;

enum { T_LOGITS, T_SEEDS, T_TEMPS, T_POSITIONS, T_TOKENS };

static void free_tail_rows(tail_rows *t)
{
    cli_release_buffers(t->m, 5);
    free(t->pos), free(t->tokens);
}

static int make_tail_rows(psr_context *ctx, unsigned long long trials, double gap, tail_rows *t)
{
    /* Rows per launch: about 256 MiB of logits, at most the trials. */
    size_t batch = (size_t)((256u << 20) / (t->vocab * 4)), vocab = t->vocab;
    batch = batch < 1 ? 1 : batch > trials ? (size_t)trials : batch;
    t->batch = batch;
    float *row = malloc(vocab * sizeof *row);
    cl_long *seeds = malloc(batch * 8);
    cl_float *temps = malloc(batch * 4);
    t->pos = malloc(batch * 8), t->tokens = malloc(batch * 4);
    if (!row || !seeds || !temps || !t->pos || !t->tokens) {
        free(row), free(seeds), free(temps);
        return cli_report(PSR_ERR_OUT_OF_HOST_MEMORY, NULL);
    }
    for (size_t i = 0; i < vocab; i++)
        row[i] = i ? (float)-gap : 0.0f;
    for (size_t r = 0; r < batch; r++)
        seeds[r] = 20240611, temps[r] = 1.0f;
    const cli_buffer spec[5] = {[T_LOGITS] = {batch * vocab * 4, NULL}, [T_SEEDS] = {batch * 8, seeds},
                                [T_TEMPS] = {batch * 4, temps},         [T_POSITIONS] = {batch * 8, NULL},
                                [T_TOKENS] = {batch * 4, NULL}};
    cl_int err = cli_make_buffers(ctx, spec, 5, t->m);
    for (size_t r = 0; err == CL_SUCCESS && r < batch; r++)
        err = clEnqueueWriteBuffer(cli_queue(ctx), t->m[T_LOGITS], CL_TRUE, r * vocab * 4, vocab * 4, row, 0,
                                   NULL, NULL);
    free(row), free(seeds), free(temps);
    if (err == CL_SUCCESS)
        return CLI_OK;
    fprintf(stderr, "psr verify tail: cannot allocate %zu rows of %zu logits: %s\n", batch, vocab,
            psr_cl_error_string(err));
    return CLI_FAILED;
}

/* Samples `n` rows at positions done .. done + n - 1; adds the tail hits. */
static int tail_launch(psr_context *ctx, psr_noise noise_kind, unsigned long long done, size_t n, tail_rows *t,
                       unsigned long long *hits)
{
    for (size_t r = 0; r < n; r++)
        t->pos[r] = (cl_long)(done + r) % PSR_MAX_POSITION;
    psr_sample_args a;
    psr_sample_args_init(&a, sizeof a);
    a.rows = a.requests = n, a.vocab = t->vocab, a.noise = noise_kind;
    a.logits = t->m[T_LOGITS], a.seeds = t->m[T_SEEDS], a.temperatures = t->m[T_TEMPS];
    a.positions = t->m[T_POSITIONS], a.tokens = t->m[T_TOKENS];
    psr_status st = PSR_OK;
    cl_int err = clEnqueueWriteBuffer(cli_queue(ctx), a.positions, CL_TRUE, 0, n * 8, t->pos, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        st = psr_sample(ctx, &a, NULL);
    if (err == CL_SUCCESS && st == PSR_OK)
        err = clEnqueueReadBuffer(cli_queue(ctx), a.tokens, CL_TRUE, 0, n * 4, t->tokens, 0, NULL, NULL);
    if (st != PSR_OK)
        return cli_report(st, ctx);
    if (err != CL_SUCCESS) {
        fprintf(stderr, "psr verify tail: OpenCL error %s\n", psr_cl_error_string(err));
        return CLI_FAILED;
    }
    for (size_t r = 0; r < n; r++)
        *hits += t->tokens[r] != 0;
    return CLI_OK;
}

/* `trials` draws of the tail row, with progress every tenth. */
static int tail_trials(psr_context *ctx, const char *noise, psr_noise noise_kind, unsigned long long trials,
                       tail_rows *t, unsigned long long *hits)
{
    unsigned long long done = 0, next_report = trials / 10;
    int rc = CLI_OK;
    while (rc == CLI_OK && done < trials) {
        size_t n = trials - done < t->batch ? (size_t)(trials - done) : t->batch;
        rc = tail_launch(ctx, noise_kind, done, n, t, hits);
        done += n;
        if (rc == CLI_OK && done >= next_report && done < trials) {
            fprintf(stderr, "psr verify tail (%s): %llu%% (%llu of %llu trials)\n", noise, done * 100 / trials,
                    done, trials);
            next_report += trials / 10;
        }
    }
    return rc;
}

static int run_tail(psr_context *ctx, const char *noise, psr_noise noise_kind, unsigned long long trials,
                    size_t tail_tokens, double gap, tail_result *out)
{
    tail_rows t = {.vocab = tail_tokens + 1};
    unsigned long long hits = 0;
    int rc = make_tail_rows(ctx, trials, gap, &t);
    if (rc == CLI_OK)
        rc = tail_trials(ctx, noise, noise_kind, trials, &t, &hits);
    double tail_p = (double)tail_tokens * exp(-gap);
    out->noise = noise;
    out->trials = trials;
    out->tail_tokens = tail_tokens;
    out->gap = gap;
    out->expected = (double)trials * tail_p / (1.0 + tail_p);
    out->observed = hits;
    out->p_value = poisson_p_value(out->expected, hits);
    free_tail_rows(&t);
    return rc;
}

static bool parse_ull(const char *s, unsigned long long *out)
{
    char *end;
    double v = strtod(s, &end); /* accepts 1e5 and 2^-free plain integers */
    if (end == s || *end || v < 1 || v > 1e15)
        return false;
    *out = (unsigned long long)v;
    return true;
}

/* psr verify tail and psr verify lower-tail's command line. */
typedef struct check_options {
    bool tail; /* tail, else lower-tail */
    const char *noise, *device;
    unsigned long long trials, tail_tokens, draws;
    double gap;
    bool json;
    int chosen; /* the --noise in noises[], or -1 for every one */
} check_options;

/* One option with its value: CLI_OK, or CLI_USAGE after saying why. */
static int check_value(void *opts, const char *arg, const char *val)
{
    check_options *o = opts;
    bool ok = true;
    if (strcmp(arg, "--device") == 0) {
        o->device = val;
    } else if (o->tail && strcmp(arg, "--noise") == 0) {
        o->noise = val;
    } else if (o->tail && strcmp(arg, "--gap") == 0) {
        char *end;
        o->gap = strtod(val, &end);
        if (end == val || *end || !(o->gap >= 0 && o->gap < 100))
            return cli_usage_error("verify", "--gap \"%s\" is not a number in [0, 100)", val);
    } else if (o->tail && strcmp(arg, "--trials") == 0) {
        ok = parse_ull(val, &o->trials);
    } else if (o->tail && strcmp(arg, "--tail-tokens") == 0) {
        ok = parse_ull(val, &o->tail_tokens) && o->tail_tokens < (1u << 30);
    } else {
        ok = !o->tail && strcmp(arg, "--draws") == 0 && parse_ull(val, &o->draws);
    }
    return ok ? CLI_OK : cli_usage_error("verify", "bad argument \"%s\" %s", arg, val);
}

/* -1 when the check should run, else the exit code. */
static int parse_check(int argc, char **argv, check_options *o)
{
    static const cli_options options = {"verify", verify_usage, NULL, check_value};
    int parsed = cli_parse(&options, argc, argv, 2, o, &o->json);
    if (parsed >= 0)
        return parsed;
    for (int n = 0; o->noise && n < 3; n++)
        if (strcmp(o->noise, noises[n].name) == 0)
            o->chosen = n;
    if (o->noise && o->chosen < 0)
        return cli_usage_error("verify", "--noise is fp32, fp64 or wide, not \"%s\"", o->noise);
    return -1;
}

static int tail_once(psr_context *ctx, const check_options *o, int n, json_writer *w)
{
    tail_result r;
    memset(&r, 0, sizeof r);
    int rc = run_tail(ctx, noises[n].name, noises[n].noise, o->trials, (size_t)o->tail_tokens, o->gap, &r);
    if (rc != CLI_OK)
        return rc;
    if (!o->json) {
        printf("tail %-5s trials %llu, %llu tail tokens %.2f nats down: observed %llu, expected %.2f, p = %.3g\n",
               r.noise, r.trials, r.tail_tokens, r.gap, r.observed, r.expected, r.p_value);
        return CLI_OK;
    }
    json_begin_object(w);
    json_key_string(w, "noise", r.noise);
    json_key_uint(w, "trials", r.trials);
    json_key_uint(w, "tail_tokens", r.tail_tokens);
    json_key_double(w, "gap", r.gap);
    json_key_double(w, "expected", r.expected);
    json_key_uint(w, "observed", r.observed);
    json_key_double(w, "p_value", r.p_value);
    json_end_object(w);
    return CLI_OK;
}

static int census_once(psr_context *ctx, const check_options *o, int n, json_writer *w)
{
    unsigned long long done = 0, slice = 0, c24, c32, s24, s32;
    psr_status st = psr_tail_census(ctx, noises[n].noise, o->draws, false, &done, &c24, &c32);
    if (st == PSR_OK) /* the top 2^-32 slice of the uniform: E < 2^-32 needs 64 bits */
        st = psr_tail_census(ctx, noises[n].noise, 1u << 20, true, &slice, &s24, &s32);
    if (st != PSR_OK)
        return cli_report(st, ctx);
    double e24 = (double)done * 0x1p-24, e32 = (double)done * 0x1p-32;
    if (!o->json) {
        printf("lower-tail %-5s %llu draws: E < 2^-24: %llu (expected %.2f), E < 2^-32: %llu (expected %.3g); "
               "of %u draws from the top 2^-32 of the uniform, %llu give E < 2^-32\n",
               noises[n].name, done, c24, e24, c32, e32, (unsigned)slice, s32);
        return CLI_OK;
    }
    json_begin_object(w);
    json_key_string(w, "noise", noises[n].name);
    json_key_uint(w, "draws", done);
    json_key_uint(w, "below_2^-24", c24);
    json_key_double(w, "expected_below_2^-24", e24);
    json_key_uint(w, "below_2^-32", c32);
    json_key_double(w, "expected_below_2^-32", e32);
    json_key_uint(w, "top_slice_draws", slice);
    json_key_uint(w, "top_slice_below_2^-32", s32);
    json_end_object(w);
    return CLI_OK;
}

/* The check for the chosen noise, or for every noise the device runs. */
static int run_check(const check_options *o)
{
    psr_context *ctx = cli_open_context(o->device, false);
    if (!ctx)
        return CLI_FAILED;
    psr_device_info info;
    psr_context_device_info(ctx, &info);
    json_writer w;
    json_init(&w, stdout);
    bool list = o->json && o->chosen < 0;
    if (list)
        json_begin_array(&w);
    int rc = CLI_OK;
    if (!o->json)
        printf("device: %s (%s)\n", info.name, info.platform_name);
    for (int n = 0; n < 3 && rc == CLI_OK; n++) {
        if (o->chosen >= 0 && n != o->chosen)
            continue;
        if (o->chosen < 0 && noises[n].noise == PSR_NOISE_FP64 && !(info.capabilities & PSR_CAP_FP64)) {
            fprintf(stderr, "psr verify: %s has no fp64: skipping fp64 noise\n", info.name);
            continue;
        }
        rc = o->tail ? tail_once(ctx, o, n, &w) : census_once(ctx, o, n, &w);
    }
    if (list)
        json_end_array(&w);
    if (o->json && rc == CLI_OK)
        json_finish(&w);
    psr_context_free(ctx);
    return rc;
}

/* psr verify with no check named: every quick self-test. */
static int verify_quick(int argc, char **argv)
{
    const char *device = NULL;
    bool as_json = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            as_json = true;
        else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc)
            device = argv[++i];
        else
            return cli_usage_error("verify", "bad argument \"%s\"", argv[i]);
    }
    return verify_all(device, as_json);
}

int cmd_verify(int argc, char **argv)
{
    if (argc >= 2 && cli_is_help(argv[1])) {
        verify_usage(stdout);
        return CLI_OK;
    }
    if (argc < 2 || argv[1][0] == '-')
        return verify_quick(argc, argv);
    const char *what = argv[1];
    if (strcmp(what, "unbiased") == 0)
        return verify_unbiased(argc, argv);
    bool tail = strcmp(what, "tail") == 0;
    if (!tail && strcmp(what, "lower-tail") != 0)
        return cli_usage_error("verify", "unknown check \"%s\" (try: unbiased, tail, lower-tail)", what);
    check_options o = {.tail = tail, .trials = 100000, .tail_tokens = 262144, .draws = 1ull << 28, .gap = 20.5,
                       .chosen = -1};
    int parsed = parse_check(argc, argv, &o);
    return parsed >= 0 ? parsed : run_check(&o);
}
