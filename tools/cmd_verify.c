/* psr verify: statistical self-tests users run on their own device. */
#include "cli.h"
#include "check.h"
#include "oracle.h"
#include <psr/psr_experimental.h>
#include "json.h"
#include "verify_report.h"

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

/* Each check's synopsis (after "usage: " or its indent) and description. */
static const char tail_synopsis[] =
    "psr verify tail [--noise fp32|fp64|wide] [--trials N] [--tail-tokens M]\n"
    "                       [--gap G] [--device SEL] [--json] [--plot FILE.svg]\n";
static const char lower_tail_synopsis[] =
    "psr verify lower-tail [--noise fp32|fp64|wide] [--draws N] [--device SEL]\n"
    "                             [--json] [--plot FILE.svg]\n";
static const char tail_help[] =
    "tail        the many-tail experiment: one head token and M tail tokens G nats\n"
    "            below it, sampled N times (Gumbel-max, T = 1). The tail hits are\n"
    "            binomial(N, M e^-G / (1 + M e^-G)); prints them, their expectation,\n"
    "            the counts allowed and the exact two-sided p-value. Defaults are\n"
    "            vLLM's experiment: N = 100000, M = 262144, G = 20.5 (32.76 expected\n"
    "            hits; each tail token has probability 1.25e-9 < 2^-24).\n";
static const char lower_tail_help[] =
    "lower-tail  counts draws of the exponential variate E behind the noise below\n"
    "            2^-24 and 2^-32 (default N = 2^28 draws; Poisson tests), and draws\n"
    "            from the top 2^-32 of the 64-bit uniform, which must all give\n"
    "            E < 2^-32 (classic fp32 noise, which stops near 2^-31, is the\n"
    "            control that must fail there).\n";

/* What every test reports, and the options the checks share. */
static void tests_help(FILE *out)
{
    fprintf(out,
            "\n"
            "Every test reports its statistic, p-value and threshold, and fails when\n"
            "p < %g: when psr samples exactly, a test fails by chance once in a\n"
            "million runs. The exit status is 1 when a test fails or a control passes.\n"
            "--plot writes observed against expected counts, with the band each count\n"
            "alone may reach, as an SVG file. Without --noise every option the device\n"
            "can run is tried (fp64 needs cl_khr_fp64). With --json, one object per\n"
            "option (a list for several).\n",
            PSR_CHECK_THRESHOLD_P);
}

static void verify_usage(FILE *out)
{
    fprintf(out,
            "usage: psr verify [--device SEL] [--json] [--plot FILE.svg]\n"
            "       psr verify unbiased [--k K] [--trials N] [--control]\n"
            "                           [--shards N[:S1,...] | --mpi] [--device SEL] [--json]\n"
            "                           [--plot FILE.svg]\n"
            "       %s"
            "       %s"
            "       psr verify p-value ... (psr verify p-value --help)\n"
            "\n"
            "(none)      every quick self-test, PASS or FAIL each: the stream's known\n"
            "            answers, tokens against the host oracle, a goodness-of-fit test\n"
            "            (with a control that must fail) and a quick unbiasedness test\n"
            "            of speculative decoding.\n"
            "unbiased    speculative decoding's unbiasedness test (psr verify unbiased --help);\n"
            "            --shards N samples and verifies every draft in N vocabulary\n"
            "            shards; --mpi, under mpirun, one shard per rank (builds with\n"
            "            MPI only).\n"
            "%s%s"
            "p-value     the p-value of a chi2 statistic or a count you give.\n",
            tail_synopsis, lower_tail_synopsis, tail_help, lower_tail_help);
    tests_help(out);
}

static void tail_usage(FILE *out)
{
    fprintf(out, "usage: %s\n%s", tail_synopsis, tail_help);
    tests_help(out);
}

static void lower_tail_usage(FILE *out)
{
    fprintf(out, "usage: %s\n%s", lower_tail_synopsis, lower_tail_help);
    tests_help(out);
}

typedef struct tail_result {
    unsigned long long trials, tail_tokens;
    double gap, tail_p; /* the tail's probability, exactly, of the logits sampled */
    count_report hits;
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
    /* Each trial is independent, so the hits are binomial: exact even
     * where the tail is likely and a Poisson count would not be. */
    double mass = (double)tail_tokens * exp((double)(float)-gap);
    out->trials = trials;
    out->tail_tokens = tail_tokens;
    out->gap = gap;
    out->tail_p = mass / (1.0 + mass);
    out->hits = (count_report){noise, "binomial", hits,
                               psr_binomial_test(hits, trials, out->tail_p, PSR_CHECK_THRESHOLD_P), true, false};
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
    const char *noise, *device, *plot;
    unsigned long long trials, tail_tokens, draws;
    double gap;
    bool json;
    int chosen; /* the --noise in noises[], or -1 for every one */
} check_options;

/* One option with its value: CLI_OK, or CLI_USAGE after saying why. */
static int check_value(void *opts, const char *arg, const char *val)
{
    check_options *o = opts;
    const char *command = o->tail ? "verify tail" : "verify lower-tail";
    bool ok = true;
    if (strcmp(arg, "--device") == 0) {
        o->device = val;
    } else if (strcmp(arg, "--plot") == 0) {
        o->plot = val;
    } else if (strcmp(arg, "--noise") == 0) {
        o->noise = val;
    } else if (o->tail && strcmp(arg, "--gap") == 0) {
        char *end;
        o->gap = strtod(val, &end);
        if (end == val || *end || !(o->gap >= 0 && o->gap < 100))
            return cli_usage_error(command, "--gap \"%s\" is not a number in [0, 100)", val);
    } else if (o->tail && strcmp(arg, "--trials") == 0) {
        ok = parse_ull(val, &o->trials);
    } else if (o->tail && strcmp(arg, "--tail-tokens") == 0) {
        ok = parse_ull(val, &o->tail_tokens) && o->tail_tokens < (1u << 30);
    } else {
        ok = !o->tail && strcmp(arg, "--draws") == 0 && parse_ull(val, &o->draws);
    }
    return ok ? CLI_OK : cli_usage_error(command, "bad argument \"%s\" %s", arg, val);
}

/* -1 when the check should run, else the exit code. */
static int parse_check(int argc, char **argv, check_options *o)
{
    static const cli_options tail = {"verify tail", tail_usage, NULL, check_value};
    static const cli_options lower = {"verify lower-tail", lower_tail_usage, NULL, check_value};
    int parsed = o->tail ? cli_parse_values(&tail, "--device --plot --noise --gap --trials --tail-tokens", argc,
                                            argv, 2, o, &o->json)
                         : cli_parse_values(&lower, "--device --plot --noise --draws", argc, argv, 2, o, &o->json);
    if (parsed >= 0)
        return parsed;
    for (int n = 0; o->noise && n < 3; n++)
        if (strcmp(o->noise, noises[n].name) == 0)
            o->chosen = n;
    if (o->noise && o->chosen < 0)
        return cli_usage_error(o->tail ? "verify tail" : "verify lower-tail",
                               "--noise is fp32, fp64 or wide, not \"%s\"", o->noise);
    return -1;
}

/* What a check found for each noise option it ran: the verdict and plot
 * come after the last. */
enum { BELOW_24, BELOW_32, TOP_SLICE };
typedef struct check_outcome {
    count_report counts[3][3]; /* per option: the tail hits, or the census's three */
    size_t options;
} check_outcome;

static const char *verdict(bool ok)
{
    return ok ? "PASS" : "FAIL";
}

static int tail_once(psr_context *ctx, const check_options *o, int n, json_writer *w, count_report *out)
{
    tail_result r;
    memset(&r, 0, sizeof r);
    int rc = run_tail(ctx, noises[n].name, noises[n].noise, o->trials, (size_t)o->tail_tokens, o->gap, &r);
    if (rc != CLI_OK)
        return rc;
    *out = r.hits;
    if (!o->json) {
        char line[160];
        count_describe(&r.hits, line, sizeof line);
        printf("tail %-5s %llu trials, %llu tail tokens %.2f nats down: %s: %s\n", noises[n].name, r.trials,
               r.tail_tokens, r.gap, line, verdict(r.hits.t.pass));
        if (!r.hits.t.pass && noises[n].noise == PSR_NOISE_FP32)
            printf("     classic fp32 noise stops near E = 2^-31: use --noise wide or fp64 for tokens this rare\n");
        return CLI_OK;
    }
    json_begin_object(w);
    json_key_string(w, "noise", noises[n].name);
    json_key_uint(w, "trials", r.trials);
    json_key_uint(w, "tail_tokens", r.tail_tokens);
    json_key_double(w, "gap", r.gap);
    json_key_double(w, "tail_probability", r.tail_p);
    json_key_uint(w, "observed", r.hits.observed);
    count_json(w, &r.hits);
    json_end_object(w);
    return CLI_OK;
}

/* The census's three tests for one noise option. fp32 noise stops near
 * 2^-31: below 2^-32 it is only reported, and the top slice, where it
 * must fail, is its control. */
static void census_tests(int n, unsigned long long done, unsigned long long c24, unsigned long long c32,
                         unsigned long long slice, unsigned long long s32, count_report out[3])
{
    const double a = PSR_CHECK_THRESHOLD_P, t24 = 0x1p-24, t32 = 0x1p-32;
    bool fp32 = noises[n].noise == PSR_NOISE_FP32;
    /* P(E < t) = 1 - e^-t; a uniform in its top 2^-32 gives E < 2^-32
     * with probability (1 - e^-2^-32) / 2^-32. */
    out[BELOW_24] = (count_report){noises[n].name, "poisson", c24,
                                   psr_poisson_test(c24, (double)done * -expm1(-t24), a), true, false};
    out[BELOW_32] = (count_report){noises[n].name, "poisson", c32,
                                   psr_poisson_test(c32, (double)done * -expm1(-t32), a), !fp32, false};
    out[TOP_SLICE] = (count_report){noises[n].name, "binomial", s32,
                                    psr_binomial_test(s32, slice, -expm1(-t32) / t32, a), !fp32, fp32};
}

static void census_text(int n, unsigned long long done, unsigned long long slice, const count_report c[3])
{
    static const char *const names[3] = {"E < 2^-24", "E < 2^-32", "top slice"};
    bool ok = count_ok(&c[0]) && count_ok(&c[1]) && count_ok(&c[2]);
    printf("lower-tail %-5s %llu draws, and %llu from the top 2^-32 of the uniform: %s\n", noises[n].name, done,
           slice, verdict(ok));
    for (int i = 0; i < 3; i++) {
        char line[160];
        count_describe(&c[i], line, sizeof line);
        const char *v = c[i].control ? (c[i].t.pass ? "PASS, but the control must fail" : "FAIL, as the control must")
                        : !c[i].judged ? "not judged: below this noise's floor"
                        : c[i].t.pass  ? "pass"
                                       : "FAIL";
        printf("  %-10s %s: %s\n", names[i], line, v);
    }
}

static void census_json(json_writer *w, int n, unsigned long long done, unsigned long long slice,
                        const count_report c[3])
{
    static const char *const names[3] = {"below_2^-24", "below_2^-32", "top_slice_below_2^-32"};
    json_begin_object(w);
    json_key_string(w, "noise", noises[n].name);
    json_key_uint(w, "draws", done);
    json_key_uint(w, "below_2^-24", c[BELOW_24].observed);
    json_key_double(w, "expected_below_2^-24", c[BELOW_24].t.expected);
    json_key_uint(w, "below_2^-32", c[BELOW_32].observed);
    json_key_double(w, "expected_below_2^-32", c[BELOW_32].t.expected);
    json_key_uint(w, "top_slice_draws", slice);
    json_key_uint(w, "top_slice_below_2^-32", c[TOP_SLICE].observed);
    json_key_double(w, "threshold_p", PSR_CHECK_THRESHOLD_P);
    json_key(w, "tests");
    json_begin_array(w);
    for (int i = 0; i < 3; i++) {
        json_begin_object(w);
        json_key_string(w, "name", names[i]);
        json_key_uint(w, "draws", i == TOP_SLICE ? slice : done);
        count_json(w, &c[i]);
        json_end_object(w);
    }
    json_end_array(w);
    json_key_bool(w, "passed", count_ok(&c[0]) && count_ok(&c[1]) && count_ok(&c[2]));
    json_end_object(w);
}

static int census_once(psr_context *ctx, const check_options *o, int n, json_writer *w, count_report out[3])
{
    unsigned long long done = 0, slice = 0, c24, c32, s24, s32;
    psr_status st = psr_tail_census(ctx, noises[n].noise, o->draws, false, &done, &c24, &c32);
    if (st == PSR_OK) /* the top 2^-32 slice of the uniform: E < 2^-32 needs 64 bits */
        st = psr_tail_census(ctx, noises[n].noise, 1u << 20, true, &slice, &s24, &s32);
    if (st != PSR_OK)
        return cli_report(st, ctx);
    census_tests(n, done, c24, c32, slice, s32, out);
    if (o->json)
        census_json(w, n, done, slice, out);
    else
        census_text(n, done, slice, out);
    return CLI_OK;
}

/* The verdict over every option run, and the plot: for the tail one panel
 * of hits, for the census one per threshold. */
static int check_verdict(const check_options *o, const check_outcome *c, const psr_device_info *info)
{
    bool ok = true;
    count_report by_test[3][3];
    for (size_t i = 0; i < c->options; i++)
        for (int j = 0; j < (o->tail ? 1 : 3); j++)
            ok &= count_ok(&c->counts[i][j]), by_test[j][i] = c->counts[i][j];
    if (!o->json)
        printf("%s (each test fails when p < %g)\n", verdict(ok), PSR_CHECK_THRESHOLD_P);
    plot pl = {.path = o->plot};
    char what[160], title[64], subtitle[640];
    if (o->tail) {
        snprintf(what, sizeof what, "tail hits, %llu trials of %llu tail tokens %g nats below the head", o->trials,
                 o->tail_tokens, o->gap);
        plot_counts(&pl, what, "noise (binomial test, two-sided)", by_test[0], c->options);
    } else {
        plot_counts(&pl, "draws of E below 2\u207b\u00b2\u2074", "noise (Poisson test)", by_test[BELOW_24], c->options);
        plot_counts(&pl, "draws of E below 2\u207b\u00b3\u00b2", "noise (Poisson test)", by_test[BELOW_32], c->options);
        plot_counts(&pl, "draws from the top 2\u207b\u00b3\u00b2 of the uniform giving E below 2\u207b\u00b3\u00b2",
                    "noise (binomial test; fp32 is the control)", by_test[TOP_SLICE], c->options);
    }
    snprintf(title, sizeof title, "psr verify %s: %s", o->tail ? "tail" : "lower-tail", verdict(ok));
    snprintf(subtitle, sizeof subtitle, "%s (%s)\neach test fails when p < %g", info->name, info->platform_name,
             PSR_CHECK_THRESHOLD_P);
    int rc = plot_write(&pl, title, subtitle);
    return rc != CLI_OK ? rc : ok ? CLI_OK : CLI_FAILED;
}

/* The check for the chosen noise, or for every noise the device runs. */
static int run_check(const check_options *o)
{
    psr_context *ctx = cli_open_context(o->device, false);
    if (!ctx)
        return CLI_FAILED;
    cli_device_calls_only(ctx); /* the checks are of this device's noise */
    psr_device_info info;
    psr_context_device_info(ctx, &info);
    json_writer w;
    json_init(&w, stdout);
    bool list = o->json && o->chosen < 0;
    if (list)
        json_begin_array(&w);
    int rc = CLI_OK;
    check_outcome c = {.options = 0};
    if (!o->json)
        printf("device: %s (%s)\n", info.name, info.platform_name);
    for (int n = 0; n < 3 && rc == CLI_OK; n++) {
        if (o->chosen >= 0 && n != o->chosen)
            continue;
        if (o->chosen < 0 && noises[n].noise == PSR_NOISE_FP64 && !(info.capabilities & PSR_CAP_FP64)) {
            fprintf(stderr, "psr verify: %s has no fp64: skipping fp64 noise\n", info.name);
            continue;
        }
        count_report *out = c.counts[c.options];
        rc = o->tail ? tail_once(ctx, o, n, &w, out) : census_once(ctx, o, n, &w, out);
        c.options += rc == CLI_OK;
    }
    if (list)
        json_end_array(&w);
    if (o->json && rc == CLI_OK)
        json_finish(&w);
    if (rc == CLI_OK)
        rc = check_verdict(o, &c, &info);
    psr_context_free(ctx);
    return rc;
}

int cmd_verify(int argc, char **argv)
{
    if (argc >= 2 && cli_is_help(argv[1])) {
        verify_usage(stdout);
        return CLI_OK;
    }
    if (argc < 2 || argv[1][0] == '-')
        return verify_quick(argc, argv, verify_usage);
    const char *what = argv[1];
    if (strcmp(what, "unbiased") == 0)
        return verify_unbiased(argc, argv);
    if (strcmp(what, "p-value") == 0)
        return verify_p_value(argc, argv);
    bool tail = strcmp(what, "tail") == 0;
    if (!tail && strcmp(what, "lower-tail") != 0)
        return cli_usage_error("verify", "unknown check \"%s\" (try: unbiased, tail, lower-tail, p-value)", what);
    check_options o = {.tail = tail, .trials = 100000, .tail_tokens = 262144, .draws = 1ull << 28, .gap = 20.5,
                       .chosen = -1};
    int parsed = parse_check(argc, argv, &o);
    return parsed >= 0 ? parsed : run_check(&o);
}
