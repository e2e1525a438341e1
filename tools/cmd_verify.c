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
    unsigned flags;
} noises[] = {
    {"fp32", 0},
    {"fp64", PSR_SAMPLE_FP64_NOISE},
    {"wide", PSR_SAMPLE_WIDE_NOISE},
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

static int run_tail(psr_context *ctx, const char *noise, unsigned flags, unsigned long long trials,
                    size_t tail_tokens, double gap, tail_result *out)
{
    size_t vocab = tail_tokens + 1;
    psr_device_info info;
    psr_context_device_info(ctx, &info);
    /* Rows per launch: about 256 MiB of logits, at most the trials. */
    size_t batch = (size_t)((256u << 20) / (vocab * 4));
    if (batch < 1)
        batch = 1;
    if (batch > trials)
        batch = (size_t)trials;
    float *row = malloc(vocab * sizeof *row);
    cl_long *pos = malloc(batch * 8), *seeds = malloc(batch * 8);
    cl_float *temps = malloc(batch * 4);
    cl_int *tokens = malloc(batch * 4);
    if (!row || !pos || !seeds || !temps || !tokens) {
        free(row), free(pos), free(seeds), free(temps), free(tokens);
        return cli_report(PSR_ERR_OUT_OF_HOST_MEMORY, NULL);
    }
    row[0] = 0.0f;
    for (size_t i = 1; i < vocab; i++)
        row[i] = (float)-gap;
    for (size_t r = 0; r < batch; r++) {
        seeds[r] = 20240611;
        temps[r] = 1.0f;
    }
    cl_int err, e1 = CL_SUCCESS, e2 = CL_SUCCESS, e3 = CL_SUCCESS, e4 = CL_SUCCESS;
    cl_mem dl = clCreateBuffer(cli_cl_context(ctx), CL_MEM_READ_ONLY, batch * vocab * 4, NULL, &err);
    for (size_t r = 0; err == CL_SUCCESS && r < batch; r++)
        err = clEnqueueWriteBuffer(cli_queue(ctx), dl, CL_TRUE, r * vocab * 4, vocab * 4, row, 0, NULL, NULL);
    cl_mem ds = clCreateBuffer(cli_cl_context(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, batch * 8, seeds, &e1);
    cl_mem dt = clCreateBuffer(cli_cl_context(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, batch * 4, temps, &e2);
    cl_mem dp = clCreateBuffer(cli_cl_context(ctx), CL_MEM_READ_WRITE, batch * 8, NULL, &e3);
    cl_mem dk = clCreateBuffer(cli_cl_context(ctx), CL_MEM_READ_WRITE, batch * 4, NULL, &e4);
    err = err != CL_SUCCESS ? err : e1 != CL_SUCCESS ? e1 : e2 != CL_SUCCESS ? e2 : e3 != CL_SUCCESS ? e3 : e4;
    int rc = CLI_OK;
    if (err != CL_SUCCESS) {
        fprintf(stderr, "psr verify tail: cannot allocate %zu rows of %zu logits: %s\n", batch, vocab,
                psr_cl_error_string(err));
        rc = CLI_FAILED;
    }
    unsigned long long hits = 0, done = 0, next_report = trials / 10;
    while (rc == CLI_OK && done < trials) {
        size_t n = trials - done < batch ? (size_t)(trials - done) : batch;
        for (size_t r = 0; r < n; r++)
            pos[r] = (cl_long)(done + r) % PSR_MAX_POSITION;
        psr_sample_args a;
        psr_sample_args_init(&a);
        a.rows = n;
        a.vocab = vocab;
        a.logits = dl;
        a.requests = n;
        a.seeds = ds;
        a.temperatures = dt;
        a.positions = dp;
        a.tokens = dk;
        a.flags = flags;
        psr_status st = PSR_OK;
        err = clEnqueueWriteBuffer(cli_queue(ctx), dp, CL_TRUE, 0, n * 8, pos, 0, NULL, NULL);
        if (err == CL_SUCCESS)
            st = psr_sample(ctx, &a, NULL);
        if (err == CL_SUCCESS && st == PSR_OK)
            err = clEnqueueReadBuffer(cli_queue(ctx), dk, CL_TRUE, 0, n * 4, tokens, 0, NULL, NULL);
        if (st != PSR_OK) {
            rc = cli_report(st, ctx);
            break;
        }
        if (err != CL_SUCCESS) {
            fprintf(stderr, "psr verify tail: OpenCL error %s\n", psr_cl_error_string(err));
            rc = CLI_FAILED;
            break;
        }
        for (size_t r = 0; r < n; r++)
            hits += tokens[r] != 0;
        done += n;
        if (done >= next_report && done < trials) {
            fprintf(stderr, "psr verify tail (%s): %llu%% (%llu of %llu trials)\n", noise,
                    done * 100 / trials, done, trials);
            next_report += trials / 10;
        }
    }
    double tail_p = (double)tail_tokens * exp(-gap);
    out->noise = noise;
    out->trials = trials;
    out->tail_tokens = tail_tokens;
    out->gap = gap;
    out->expected = (double)trials * tail_p / (1.0 + tail_p);
    out->observed = hits;
    out->p_value = poisson_p_value(out->expected, hits);
    cl_mem all[] = {dl, ds, dt, dp, dk};
    for (int i = 0; i < 5; i++)
        if (all[i])
            clReleaseMemObject(all[i]);
    free(row), free(pos), free(seeds), free(temps), free(tokens);
    return rc;
}

typedef struct census {
    const char *noise;
    unsigned long long draws, below24, below32;
} census;

static bool parse_ull(const char *s, unsigned long long *out)
{
    char *end;
    double v = strtod(s, &end); /* accepts 1e5 and 2^-free plain integers */
    if (end == s || *end || v < 1 || v > 1e15)
        return false;
    *out = (unsigned long long)v;
    return true;
}

int cmd_verify(int argc, char **argv)
{
    if (argc >= 2 && cli_is_help(argv[1])) {
        verify_usage(stdout);
        return CLI_OK;
    }
    if (argc < 2 || argv[1][0] == '-') {
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
    const char *what = argv[1];
    if (strcmp(what, "unbiased") == 0)
        return verify_unbiased(argc, argv);
    bool tail = strcmp(what, "tail") == 0, lower = strcmp(what, "lower-tail") == 0;
    if (!tail && !lower)
        return cli_usage_error("verify", "unknown check \"%s\" (try: unbiased, tail, lower-tail)",
                               what);
    const char *noise = NULL, *device = NULL;
    unsigned long long trials = 100000, tail_tokens = 262144, draws = 1ull << 28;
    double gap = 20.5;
    bool as_json = false;
    for (int i = 2; i < argc; i++) {
        const char *arg = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (cli_is_help(arg)) {
            verify_usage(stdout);
            return CLI_OK;
        } else if (strcmp(arg, "--json") == 0) {
            as_json = true;
        } else if (!val) {
            return cli_usage_error("verify", "%s needs a value", arg);
        } else if (strcmp(arg, "--device") == 0) {
            device = val, i++;
        } else if (tail && strcmp(arg, "--noise") == 0) {
            noise = val, i++;
        } else if (tail && strcmp(arg, "--trials") == 0 && parse_ull(val, &trials)) {
            i++;
        } else if (tail && strcmp(arg, "--tail-tokens") == 0 && parse_ull(val, &tail_tokens) &&
                   tail_tokens < (1u << 30)) {
            i++;
        } else if (tail && strcmp(arg, "--gap") == 0) {
            char *end;
            gap = strtod(val, &end);
            if (end == val || *end || !(gap >= 0 && gap < 100))
                return cli_usage_error("verify", "--gap \"%s\" is not a number in [0, 100)", val);
            i++;
        } else if (lower && strcmp(arg, "--draws") == 0 && parse_ull(val, &draws)) {
            i++;
        } else {
            return cli_usage_error("verify", "bad argument \"%s\"%s%s", arg, val ? " " : "", val ? val : "");
        }
    }
    int chosen = -1;
    if (noise) {
        for (int n = 0; n < 3; n++)
            if (strcmp(noise, noises[n].name) == 0)
                chosen = n;
        if (chosen < 0)
            return cli_usage_error("verify", "--noise is fp32, fp64 or wide, not \"%s\"", noise);
    }
    psr_context *ctx = cli_open_context(device, false);
    if (!ctx)
        return CLI_FAILED;
    psr_device_info info;
    psr_context_device_info(ctx, &info);
    json_writer w;
    json_init(&w, stdout);
    bool list = as_json && chosen < 0;
    if (list)
        json_begin_array(&w);
    int rc = CLI_OK;
    if (!as_json)
        printf("device: %s (%s)\n", info.name, info.platform_name);
    for (int n = 0; n < 3 && rc == CLI_OK; n++) {
        if (chosen >= 0 && n != chosen)
            continue;
        if (chosen < 0 && (noises[n].flags & PSR_SAMPLE_FP64_NOISE) && !(info.capabilities & PSR_CAP_FP64)) {
            fprintf(stderr, "psr verify: %s has no fp64: skipping fp64 noise\n", info.name);
            continue;
        }
        if (tail) {
            tail_result r;
            memset(&r, 0, sizeof r);
            rc = run_tail(ctx, noises[n].name, noises[n].flags, trials, (size_t)tail_tokens, gap, &r);
            if (rc != CLI_OK)
                break;
            if (as_json) {
                json_begin_object(&w);
                json_key(&w, "noise");
                json_string(&w, r.noise);
                json_key(&w, "trials");
                json_uint(&w, r.trials);
                json_key(&w, "tail_tokens");
                json_uint(&w, r.tail_tokens);
                json_key(&w, "gap");
                json_double(&w, r.gap);
                json_key(&w, "expected");
                json_double(&w, r.expected);
                json_key(&w, "observed");
                json_uint(&w, r.observed);
                json_key(&w, "p_value");
                json_double(&w, r.p_value);
                json_end_object(&w);
            } else {
                printf("tail %-5s trials %llu, %llu tail tokens %.2f nats down: observed %llu, "
                       "expected %.2f, p = %.3g\n",
                       r.noise, r.trials, r.tail_tokens, r.gap, r.observed, r.expected, r.p_value);
            }
        } else {
            unsigned long long done = 0, slice = 0, c24, c32, s24, s32;
            psr_status st = psr_tail_census(ctx, noises[n].flags, draws, false, &done, &c24, &c32);
            if (st == PSR_OK) /* the top 2^-32 slice of the uniform: E < 2^-32 needs 64 bits */
                st = psr_tail_census(ctx, noises[n].flags, 1u << 20, true, &slice, &s24, &s32);
            if (st != PSR_OK) {
                rc = cli_report(st, ctx);
                break;
            }
            double e24 = (double)done * 0x1p-24, e32 = (double)done * 0x1p-32;
            if (as_json) {
                json_begin_object(&w);
                json_key(&w, "noise");
                json_string(&w, noises[n].name);
                json_key(&w, "draws");
                json_uint(&w, done);
                json_key(&w, "below_2^-24");
                json_uint(&w, c24);
                json_key(&w, "expected_below_2^-24");
                json_double(&w, e24);
                json_key(&w, "below_2^-32");
                json_uint(&w, c32);
                json_key(&w, "expected_below_2^-32");
                json_double(&w, e32);
                json_key(&w, "top_slice_draws");
                json_uint(&w, slice);
                json_key(&w, "top_slice_below_2^-32");
                json_uint(&w, s32);
                json_end_object(&w);
            } else {
                printf("lower-tail %-5s %llu draws: E < 2^-24: %llu (expected %.2f), E < 2^-32: %llu "
                       "(expected %.3g); of %u draws from the top 2^-32 of the uniform, %llu give "
                       "E < 2^-32\n",
                       noises[n].name, done, c24, e24, c32, e32, (unsigned)slice, s32);
            }
        }
    }
    if (list)
        json_end_array(&w);
    if (as_json && rc == CLI_OK)
        json_finish(&w);
    psr_context_free(ctx);
    return rc;
}
