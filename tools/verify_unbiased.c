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
            json_key(w, "position");
            json_uint(w, j);
            json_key(w, "chi2");
            json_double(w, chi[j].chi2);
            json_key(w, "df");
            json_uint(w, chi[j].df);
            json_key(w, "threshold");
            json_double(w, chi[j].threshold);
            json_key(w, "samples");
            json_uint(w, res->reached[j]);
            json_key(w, "pass");
            json_bool(w, pass);
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

int verify_unbiased(int argc, char **argv)
{
    unsigned long long k = 3, trials = 200000;
    bool control = false, as_json = false;
    const char *device = NULL;
    for (int i = 2; i < argc; i++) {
        const char *arg = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (cli_is_help(arg)) {
            usage(stdout);
            return CLI_OK;
        } else if (strcmp(arg, "--json") == 0) {
            as_json = true;
        } else if (strcmp(arg, "--control") == 0) {
            control = true;
        } else if (!val) {
            return cli_usage_error("verify", "%s needs a value", arg);
        } else if (strcmp(arg, "--device") == 0) {
            device = val, i++;
        } else if (strcmp(arg, "--k") == 0) {
            k = strtoull(val, &end, 10);
            if (end == val || *end || k > PSR_UNBIASED_MAX_K)
                return cli_usage_error("verify", "--k \"%s\" is not 0..%d", val, PSR_UNBIASED_MAX_K);
            i++;
        } else if (strcmp(arg, "--trials") == 0) {
            double v = strtod(val, &end);
            if (end == val || *end || !(v >= 1 && v <= 1e9))
                return cli_usage_error("verify", "--trials \"%s\" is not 1..1e9", val);
            trials = (unsigned long long)v;
            i++;
        } else {
            return cli_usage_error("verify", "bad argument \"%s\"", arg);
        }
    }
    psr_context *ctx = cli_open_context(device, false);
    if (!ctx)
        return CLI_FAILED;
    psr_unbiased_result *res = malloc(sizeof *res), *cres = malloc(sizeof *cres);
    psr_chi2_result chi[PSR_UNBIASED_MAX_K + 1], cchi[PSR_UNBIASED_MAX_K + 1];
    bool pass = false, cpass = true;
    int rc = res && cres ? CLI_OK : cli_report(PSR_ERR_OUT_OF_HOST_MEMORY, NULL);
    if (rc == CLI_OK)
        rc = verify_unbiased_run(ctx, (size_t)k, (size_t)trials, false, &pass, res, chi);
    if (rc == CLI_OK && control) {
        psr_context *c = open_control(device);
        rc = c ? verify_unbiased_run(c, (size_t)k, (size_t)trials, true, &cpass, cres, cchi) : CLI_FAILED;
        psr_context_free(c);
    }
    if (rc == CLI_OK) {
        json_writer w;
        json_init(&w, stdout);
        if (as_json) {
            json_begin_object(&w);
            json_key(&w, "k");
            json_uint(&w, k);
            json_key(&w, "trials");
            json_uint(&w, trials);
            json_key(&w, "vocab");
            json_uint(&w, PSR_UNBIASED_VOCAB);
        } else {
            psr_device_info info;
            psr_context_device_info(ctx, &info);
            printf("device: %s (%s)\nk %llu, %llu trials, vocabulary %d\n", info.name, info.platform_name,
                   k, trials, PSR_UNBIASED_VOCAB);
        }
        print_positions(&w, as_json, "salted", (size_t)k, res, chi);
        if (control) {
            if (as_json) {
                json_key(&w, "control");
                json_begin_object(&w);
            }
            print_positions(&w, as_json, "control", (size_t)k, cres, cchi);
            if (as_json)
                json_end_object(&w);
        }
        if (as_json) {
            json_end_object(&w);
            json_finish(&w);
        } else {
            printf("%s\n", pass && cpass ? "PASS" : "FAIL");
        }
        if (!pass || !cpass)
            rc = CLI_FAILED;
    }
    free(res), free(cres);
    psr_context_free(ctx);
    return rc;
}
