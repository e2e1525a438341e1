/* psr verify unbiased: the narrow unbiasedness test of speculative
 * decoding on the user's device, with its unsalted control. */
#include "cli.h"
#include "check.h"
#include "oracle.h"
#include <psr/psr_experimental.h>
#include "json.h"
#include "verify_report.h"
#include "shards.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* psr verify unbiased's command line. */
typedef struct unbiased_options {
    unsigned long long k, trials;
    bool control, json;
    const char *device, *plot;
    shard_spec shards; /* --shards; count 0 without */
    bool mpi;          /* --mpi: one shard per rank */
    size_t bounds[PSR_MAX_SHARDS + 1];
    shard_plan plan; /* how the drafts are sampled and verified; count 0: unsharded */
} unbiased_options;

/* One run, its drafts sampled and verified in shards with --shards or
 * --mpi; *pass: every position passes or, for the control, position 0
 * fails. */
static int verify_unbiased_run(psr_context *ctx, const unbiased_options *o, bool control, bool *pass,
                               psr_unbiased_result *res, fit_report *fits)
{
    size_t k = (size_t)o->k;
    psr_status st = o->plan.count ? shards_unbiased_run(ctx, k, (size_t)o->trials, 11, &o->plan, res)
                                  : psr_unbiased_run(ctx, k, (size_t)o->trials, 11, res);
    if (st != PSR_OK)
        return cli_report(st, ctx);
    *pass = true;
    for (size_t j = 0; j <= k; j++) {
        fits[j] = fit_judge(res->counts[j], res->p, PSR_UNBIASED_VOCAB, res->reached[j]);
        /* The control must fail where the streams meet: position 0. */
        if (control ? j == 0 && fit_pass(&fits[j]) : !fit_pass(&fits[j]))
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
    cli_device_calls_only(c);
    psr_status st = psr_context_add_build_options(c, "-DPSR_TEST_DISABLE_DRAFT_SALT=1");
    if (st != PSR_OK) {
        cli_report(st, c);
        psr_context_free(c);
        return NULL;
    }
    return c;
}

static void print_positions(json_writer *w, bool as_json, const char *label, size_t k, const fit_report *fits)
{
    if (as_json) {
        json_key(w, "positions");
        json_begin_array(w);
    }
    for (size_t j = 0; j <= k; j++) {
        const fit_report *f = &fits[j];
        if (as_json) {
            json_begin_object(w);
            json_key_uint(w, "position", j);
            json_key_double(w, "chi2", f->chi.chi2);
            json_key_bool(w, "pass", fit_pass(f));
            fit_json(w, f);
            json_end_object(w);
        } else {
            char p[32];
            format_p(f->chi.p_value, p, sizeof p);
            printf("%-8s position %zu: chi2 %8.1f  df %zu  %-12s threshold chi2 %.1f  %llu samples  %s\n", label, j,
                   f->chi.chi2, f->chi.df, p, f->chi.threshold, (unsigned long long)f->n,
                   fit_pass(f) ? "pass" : "FAIL");
        }
    }
    if (as_json)
        json_end_array(w);
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: psr verify unbiased [--k K] [--trials N] [--control]\n"
            "                           [--shards N[:S1,...] | --mpi] [--device SEL] [--json]\n"
            "                           [--plot FILE.svg]\n"
            "\n"
            "Speculative decoding's narrow unbiasedness test: vocabulary 16, target logits\n"
            "randn(16), draft logits = -target (about 73%% of drafts rejected). N requests\n"
            "(default 200000) of K drafts (default 3, at most %d) are drawn by the salted\n"
            "draft sampler and verified; the tokens at every position must follow the\n"
            "target distribution: Pearson's chi2 (bins expecting under 5 merged) must\n"
            "have a p-value of at least %g, so a right sampler fails a position by\n"
            "chance once in a million runs. --control repeats it with the draft salt\n"
            "compiled out, where position 0 must fail (why the salt exists). --plot\n"
            "draws each position's counts against the target's, as an SVG file.\n"
            "--shards N (1..16, or N:S1,...: where shards 1..N-1 start) samples every\n"
            "draft in N vocabulary shards (records, then psr_combine_host) and verifies\n"
            "it in the same shards (the rounds of psr_verify_shard_round): the same\n"
            "drafts, and the unsharded counts but where a floating-point near-tie of\n"
            "the acceptance test falls the other way (shards of 16 tokens do not start\n"
            "on multiples of 16,384); the control still fails. --mpi, under mpirun\n"
            "-np N (N 1..16, builds with MPI only), samples and verifies every draft\n"
            "with each rank holding an even slice of the vocabulary\n"
            "(psr_mpi_sample_host, psr_mpi_verify); every rank counts the same tokens\n"
            "and rank 0 prints, the counts as with --shards. Not with --shards.\n"
            "Exit status 1 when a salted position fails or the control passes.\n",
            PSR_UNBIASED_MAX_K, PSR_CHECK_THRESHOLD_P);
}

static bool unbiased_flag(void *opts, const char *arg)
{
    unbiased_options *o = opts;
    if (strcmp(arg, "--control") == 0)
        o->control = true;
    else if (strcmp(arg, "--mpi") == 0)
        o->mpi = true;
    else
        return false;
    return true;
}

/* One option with its value: CLI_OK, or CLI_USAGE after the message. */
static int unbiased_value(void *opts, const char *arg, const char *val)
{
    unbiased_options *o = opts;
    char *end = NULL;
    if (strcmp(arg, "--device") == 0) {
        o->device = val;
    } else if (strcmp(arg, "--plot") == 0) {
        o->plot = val;
    } else if (strcmp(arg, "--shards") == 0) {
        return shards_parse("verify unbiased", val, &o->shards);
    } else if (strcmp(arg, "--k") == 0) {
        o->k = strtoull(val, &end, 10);
        if (end == val || *end || o->k > PSR_UNBIASED_MAX_K)
            return cli_usage_error("verify unbiased", "--k \"%s\" is not 0..%d", val, PSR_UNBIASED_MAX_K);
    } else if (strcmp(arg, "--trials") == 0) {
        double v = strtod(val, &end);
        if (end == val || *end || !(v >= 1 && v <= 1e9))
            return cli_usage_error("verify unbiased", "--trials \"%s\" is not 1..1e9", val);
        o->trials = (unsigned long long)v;
    } else {
        return cli_usage_error("verify unbiased", "bad argument \"%s\"", arg);
    }
    return CLI_OK;
}

/* The salted run and, with --control, the unsalted one. */
typedef struct unbiased_runs {
    psr_unbiased_result *res, *cres;
    fit_report fits[PSR_UNBIASED_MAX_K + 1], cfits[PSR_UNBIASED_MAX_K + 1];
    bool pass, cpass;
} unbiased_runs;

static void print_report(const psr_device_info *info, const unbiased_options *o, const unbiased_runs *u)
{
    json_writer w;
    json_init(&w, stdout);
    if (o->json) {
        json_begin_object(&w);
        json_key_uint(&w, "k", o->k);
        json_key_uint(&w, "trials", o->trials);
        json_key_uint(&w, "vocab", PSR_UNBIASED_VOCAB);
        json_key_double(&w, "threshold_p", PSR_CHECK_THRESHOLD_P);
        if (o->plan.count)
            json_key_uint(&w, "shards", o->plan.count);
        if (o->mpi)
            json_key_bool(&w, "mpi", true);
    } else {
        printf("device: %s (%s)\nk %llu, %llu trials, vocabulary %d; a position fails when p < %g\n", info->name,
               info->platform_name, o->k, o->trials, PSR_UNBIASED_VOCAB, PSR_CHECK_THRESHOLD_P);
        if (o->plan.count)
            printf("drafts sampled and verified in %zu vocabulary shards%s\n", o->plan.count, o->mpi ? ", one per MPI rank" : "");
    }
    print_positions(&w, o->json, "salted", (size_t)o->k, u->fits);
    if (o->control) {
        if (o->json) {
            json_key(&w, "control");
            json_begin_object(&w);
            /* The control behaved when its position 0 failed. */
            json_key_bool(&w, "failed", u->cpass);
        }
        print_positions(&w, o->json, "control", (size_t)o->k, u->cfits);
        if (o->json)
            json_end_object(&w);
    }
    if (o->json) {
        json_key_bool(&w, "passed", u->pass && u->cpass);
        json_end_object(&w);
        json_finish(&w);
    } else {
        printf("%s\n", u->pass && u->cpass ? "PASS" : "FAIL");
    }
}

/* A panel per position, the control's after the salted ones. */
static int plot_report(const psr_device_info *info, const unbiased_options *o, const unbiased_runs *u)
{
    plot pl = {.path = o->plot};
    for (int control = 0; control <= (int)o->control; control++)
        for (size_t j = 0; j <= o->k; j++) {
            char what[64];
            snprintf(what, sizeof what, "%s, position %zu", control ? "control (no draft salt)" : "salted", j);
            plot_fit(&pl, what, control ? &u->cfits[j] : &u->fits[j], control && j == 0);
        }
    char title[64], subtitle[640];
    snprintf(title, sizeof title, "psr verify unbiased: %s", u->pass && u->cpass ? "PASS" : "FAIL");
    snprintf(subtitle, sizeof subtitle, "%s (%s)\nk %llu, %llu trials, vocabulary %d; each test fails when p < %g",
             info->name, info->platform_name, o->k, o->trials, PSR_UNBIASED_VOCAB, PSR_CHECK_THRESHOLD_P);
    return plot_write(&pl, title, subtitle);
}

/* Under --mpi the worst exit code of every rank, so that a rank that
 * failed alone stops them all before the next collective; else rc. */
static int all_ranks(const unbiased_options *o, int rc)
{
#ifdef PSR_CLI_MPI
    if (o->mpi)
        return cli_mpi_agree(rc);
#endif
    (void)o;
    return rc;
}

static int run_control(const unbiased_options *o, unbiased_runs *u)
{
    psr_context *c = open_control(o->device);
    int rc = all_ranks(o, c ? CLI_OK : CLI_FAILED);
    if (rc == CLI_OK)
        rc = verify_unbiased_run(c, o, true, &u->cpass, u->cres, u->cfits);
    psr_context_free(c);
    return rc;
}

/* The runs; every rank (under --mpi) judges the same counts, and only
 * rank 0 prints. */
static int run_unbiased(const unbiased_options *o)
{
    psr_context *ctx = cli_open_context(o->device, false);
    if (ctx)
        cli_device_calls_only(ctx); /* the checks are of this device's noise */
    unbiased_runs u = {.res = malloc(sizeof *u.res), .cres = malloc(sizeof *u.cres), .cpass = true};
    int rc = !ctx ? CLI_FAILED : u.res && u.cres ? CLI_OK : cli_report(PSR_ERR_OUT_OF_HOST_MEMORY, NULL);
    rc = all_ranks(o, rc);
    if (rc == CLI_OK)
        rc = verify_unbiased_run(ctx, o, false, &u.pass, u.res, u.fits);
    if (rc == CLI_OK && o->control)
        rc = run_control(o, &u);
    if (rc == CLI_OK && o->plan.rank <= 0) {
        psr_device_info info;
        psr_context_device_info(ctx, &info);
        print_report(&info, o, &u);
        rc = plot_report(&info, o, &u);
    }
    if (rc == CLI_OK && (!u.pass || !u.cpass))
        rc = CLI_FAILED;
    free(u.res), free(u.cres);
    psr_context_free(ctx);
    return rc;
}

#ifdef PSR_CLI_MPI
/* --mpi: rank r samples shard r of an even split of the vocabulary over
 * the ranks (at most its 16 tokens; only rank 0 says so). */
static int run_mpi(unbiased_options *o)
{
    int rank = 0, ranks = 0;
    if (cli_mpi_init(&rank, &ranks) != CLI_OK)
        return CLI_FAILED;
    shard_spec spec = {.count = (size_t)ranks};
    int rc = rank == 0 || spec.count <= PSR_UNBIASED_VOCAB
                 ? shards_bounds("verify unbiased", "--mpi", &spec, PSR_UNBIASED_VOCAB, o->bounds)
                 : CLI_USAGE;
    o->plan = (shard_plan){spec.count, o->bounds, rank};
    if (rc == CLI_OK)
        rc = run_unbiased(o);
    cli_mpi_finalize();
    return rc;
}
#endif

/* --shards or --mpi, not both; --shards' bounds: -1 to run, else the
 * exit code. */
static int check_sharding(unbiased_options *o)
{
    if (o->mpi && o->shards.count)
        return cli_usage_error("verify unbiased",
                               "--shards and --mpi do not go together: under --mpi each rank is a shard");
#ifndef PSR_CLI_MPI
    if (o->mpi)
        return cli_usage_error("verify unbiased", "--mpi: psr was built without MPI");
#endif
    if (!o->shards.count)
        return -1;
    o->plan = (shard_plan){o->shards.count, o->bounds, -1};
    return shards_bounds("verify unbiased", "--shards", &o->shards, PSR_UNBIASED_VOCAB, o->bounds) == CLI_OK
               ? -1
               : CLI_USAGE;
}

int verify_unbiased(int argc, char **argv)
{
    unbiased_options o = {.k = 3, .trials = 200000, .plan = {.rank = -1}};
    static const cli_options options = {"verify unbiased", usage, unbiased_flag, unbiased_value};
    int parsed = cli_parse_values(&options, "--device --k --trials --plot --shards", argc, argv, 2, &o, &o.json);
    if (parsed < 0)
        parsed = check_sharding(&o);
    if (parsed >= 0)
        return parsed;
#ifdef PSR_CLI_MPI
    if (o.mpi)
        return run_mpi(&o);
#endif
    return run_unbiased(&o);
}
