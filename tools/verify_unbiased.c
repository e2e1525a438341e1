/* psr verify unbiased: the narrow unbiasedness test of speculative
 * decoding on the user's device, with its unsalted control. */
#include "cli.h"
#include "check.h"
#include "oracle.h"
#include <psr/psr_experimental.h>
#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int verify_unbiased_run(psr_context *ctx, size_t k, size_t trials, bool control, bool *pass,
                        psr_unbiased_result *res, psr_chi2_result *chi)
{
    psr_status st = psr_unbiased_run(ctx, k, trials, 11, res);
    if (st != PSR_OK)
        return cli_report(st, ctx);
    *pass = true;
    for (size_t j = 0; j <= k; j++) {
        chi[j] = psr_chi2_test(res->counts[j], res->p, PSR_UNBIASED_VOCAB, res->reached[j]);
        /* The control must fail where the streams meet: position 0. */
        if (control ? j == 0 && chi[j].chi2 < chi[j].threshold : !(chi[j].chi2 < chi[j].threshold))
            *pass = false;
    }
    return CLI_OK;
}

/* A context like ctx's device, built without the draft salt. */
static psr_context *open_control(const char *device)
{
    psr_context *c = cli_open_context(device, false);
    if (!c)
        return NULL;
    psr_status st = psr_context_add_build_options(c, "-DPSR_TEST_DISABLE_DRAFT_SALT=1");
    if (st != PSR_OK) {
        cli_report(st, c);
        psr_context_free(c);
        return NULL;
    }
    return c;
}

static void print_positions(json_writer *w, bool as_json, const char *label, size_t k,
                            const psr_unbiased_result *res, const psr_chi2_result *chi)
{
    if (as_json) {
        json_key(w, "positions");
        json_begin_array(w);
    }
    for (size_t j = 0; j <= k; j++) {
        bool pass = chi[j].chi2 < chi[j].threshold;
        if (as_json) {
            json_begin_object(w);
            json_key_uint(w, "position", j);
            json_key_double(w, "chi2", chi[j].chi2);
            json_key_uint(w, "df", chi[j].df);
            json_key_double(w, "threshold", chi[j].threshold);
            json_key_uint(w, "samples", res->reached[j]);
            json_key_bool(w, "pass", pass);
            json_end_object(w);
        } else {
            printf("%-8s position %zu: chi2 %8.1f  threshold %5.1f (df %zu, %llu samples)  %s\n", label, j,
                   chi[j].chi2, chi[j].threshold, chi[j].df, (unsigned long long)res->reached[j],
                   pass ? "pass" : "FAIL");
        }
    }
    if (as_json)
        json_end_array(w);
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: psr verify unbiased [--k K] [--trials N] [--control] [--device SEL] [--json]\n"
            "\n"
            "Speculative decoding's narrow unbiasedness test: vocabulary 16, target logits\n"
            "randn(16), draft logits = -target (about 73%% of drafts rejected). N requests\n"
            "(default 200000) of K drafts (default 3, at most %d) are drawn by the salted\n"
            "draft sampler and verified; the tokens at every position must follow the\n"
            "target distribution: chi2 < df + 10 sqrt(2 df). --control repeats it with the\n"
            "draft salt compiled out, where position 0 must fail (why the salt exists).\n"
            "Exit status 1 when a salted position fails or the control passes.\n",
            PSR_UNBIASED_MAX_K);
}

/* psr verify unbiased's command line. */
typedef struct unbiased_options {
    unsigned long long k, trials;
    bool control, json;
    const char *device;
} unbiased_options;

static bool unbiased_flag(void *opts, const char *arg)
{
    unbiased_options *o = opts;
    if (strcmp(arg, "--control") != 0)
        return false;
    o->control = true;
    return true;
}

/* One option with its value: CLI_OK, or CLI_USAGE after the message. */
static int unbiased_value(void *opts, const char *arg, const char *val)
{
    unbiased_options *o = opts;
    char *end = NULL;
    if (strcmp(arg, "--device") == 0) {
        o->device = val;
    } else if (strcmp(arg, "--k") == 0) {
        o->k = strtoull(val, &end, 10);
        if (end == val || *end || o->k > PSR_UNBIASED_MAX_K)
            return cli_usage_error("verify", "--k \"%s\" is not 0..%d", val, PSR_UNBIASED_MAX_K);
    } else if (strcmp(arg, "--trials") == 0) {
        double v = strtod(val, &end);
        if (end == val || *end || !(v >= 1 && v <= 1e9))
            return cli_usage_error("verify", "--trials \"%s\" is not 1..1e9", val);
        o->trials = (unsigned long long)v;
    } else {
        return cli_usage_error("verify", "bad argument \"%s\"", arg);
    }
    return CLI_OK;
}

/* The salted run and, with --control, the unsalted one. */
typedef struct unbiased_runs {
    psr_unbiased_result *res, *cres;
    psr_chi2_result chi[PSR_UNBIASED_MAX_K + 1], cchi[PSR_UNBIASED_MAX_K + 1];
    bool pass, cpass;
} unbiased_runs;

static void print_report(psr_context *ctx, const unbiased_options *o, const unbiased_runs *u)
{
    json_writer w;
    json_init(&w, stdout);
    if (o->json) {
        json_begin_object(&w);
        json_key_uint(&w, "k", o->k);
        json_key_uint(&w, "trials", o->trials);
        json_key_uint(&w, "vocab", PSR_UNBIASED_VOCAB);
    } else {
        psr_device_info info;
        psr_context_device_info(ctx, &info);
        printf("device: %s (%s)\nk %llu, %llu trials, vocabulary %d\n", info.name, info.platform_name, o->k,
               o->trials, PSR_UNBIASED_VOCAB);
    }
    print_positions(&w, o->json, "salted", (size_t)o->k, u->res, u->chi);
    if (o->control) {
        if (o->json) {
            json_key(&w, "control");
            json_begin_object(&w);
        }
        print_positions(&w, o->json, "control", (size_t)o->k, u->cres, u->cchi);
        if (o->json)
            json_end_object(&w);
    }
    if (o->json) {
        json_end_object(&w);
        json_finish(&w);
    } else {
        printf("%s\n", u->pass && u->cpass ? "PASS" : "FAIL");
    }
}

static int run_unbiased(const unbiased_options *o)
{
    psr_context *ctx = cli_open_context(o->device, false);
    if (!ctx)
        return CLI_FAILED;
    unbiased_runs u = {.res = malloc(sizeof *u.res), .cres = malloc(sizeof *u.cres), .cpass = true};
    int rc = u.res && u.cres ? CLI_OK : cli_report(PSR_ERR_OUT_OF_HOST_MEMORY, NULL);
    if (rc == CLI_OK)
        rc = verify_unbiased_run(ctx, (size_t)o->k, (size_t)o->trials, false, &u.pass, u.res, u.chi);
    if (rc == CLI_OK && o->control) {
        psr_context *c = open_control(o->device);
        rc = c ? verify_unbiased_run(c, (size_t)o->k, (size_t)o->trials, true, &u.cpass, u.cres, u.cchi)
               : CLI_FAILED;
        psr_context_free(c);
    }
    if (rc == CLI_OK) {
        print_report(ctx, o, &u);
        if (!u.pass || !u.cpass)
            rc = CLI_FAILED;
    }
    free(u.res), free(u.cres);
    psr_context_free(ctx);
    return rc;
}

int verify_unbiased(int argc, char **argv)
{
    unbiased_options o = {.k = 3, .trials = 200000};
    static const cli_options options = {"verify", usage, unbiased_flag, unbiased_value};
    int parsed = cli_parse(&options, argc, argv, 2, &o, &o.json);
    return parsed >= 0 ? parsed : run_unbiased(&o);
}
