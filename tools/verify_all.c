/* psr verify (no subcommand): every quick self-test on the chosen device,
 * PASS or FAIL each, with the statistics behind each verdict. */
#include "cli.h"
#include "check.h"
#include "oracle.h"
#include <psr/psr_experimental.h>
#include "json.h"
#include "vectors.h"
#include "verify_report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIT_VOCAB 32
#define FIT_T 0.8

/* One quick check: exact (checked, mismatches) or statistical (fits, the
 * last `controls` of which must fail). */
typedef struct check {
    const char *name;
    bool pass;
    char detail[2][320]; /* a line each; the second may be empty */
    unsigned long long checked, mismatches;
    fit_report fits[PSR_UNBIASED_MAX_K + 2];
    size_t fit_count, controls;
} check;

/* What the statistical checks judge, kept until the report is written. */
typedef struct quick_data {
    uint64_t counts[FIT_VOCAB];
    double p[FIT_VOCAB], hotter[FIT_VOCAB]; /* softmax at T, and at the control's 1.5 T */
    psr_unbiased_result unbiased;
} quick_data;

/* The embedded known answers: row keys (target and draft streams), fp32
 * uniforms and, with fp64, fp64 uniforms, bit for bit. */
static psr_status check_stream(psr_context *ctx, check *c, quick_data *d)
{
    const unsigned n = psr_uniform_vector_count;
    psr_device_info info;
    psr_context_device_info(ctx, &info);
    bool fp64 = info.capabilities & PSR_CAP_FP64;
    int64_t *seeds = malloc(n * 8), *pos = malloc(n * 8);
    uint32_t *tok = malloc(n * 4), *keys = malloc(n * 4), *u32 = malloc(n * 4);
    uint64_t *u64 = malloc(n * 8);
    psr_status st = seeds && pos && tok && keys && u32 && u64 ? PSR_OK : PSR_ERR_OUT_OF_HOST_MEMORY;
    unsigned checked = 0, wrong = 0;
    for (int drafting = 0; drafting <= 1 && st == PSR_OK; drafting++) {
        unsigned rows = 0;
        for (unsigned i = 0; i < n; i++)
            if (psr_uniform_vectors[i].drafting == drafting) {
                seeds[rows] = psr_uniform_vectors[i].seed;
                pos[rows] = psr_uniform_vectors[i].pos;
                tok[rows++] = psr_uniform_vectors[i].token;
            }
        st = psr_probe_uniforms(ctx, drafting, rows, seeds, pos, tok, keys, u32, u64);
        for (unsigned i = 0, r = 0; i < n && st == PSR_OK; i++) {
            const psr_uniform_vector *x = &psr_uniform_vectors[i];
            if (x->drafting != drafting)
                continue;
            wrong += keys[r] != x->row_key || u32[r] != x->u32_bits || (fp64 && u64[r] != x->u64_bits);
            checked++, r++;
        }
    }
    (void)d;
    c->name = "stream";
    c->pass = st == PSR_OK && wrong == 0 && checked == n;
    c->checked = checked, c->mismatches = wrong;
    snprintf(c->detail[0], sizeof c->detail[0],
             "%u known answers (row keys of both streams, fp32%s uniforms): %u wrong", checked,
             fp64 ? " and fp64" : "", wrong);
    free(seeds), free(pos), free(tok), free(keys), free(u32), free(u64);
    return st;
}

/* psr_sample_host of fp32 rows, one request per row. */
static psr_status sample_f32(psr_context *ctx, const float *x, size_t rows, size_t vocab, const int64_t *seeds,
                             const int64_t *pos, const float *temps, int32_t *tokens)
{
    psr_sample_host_args a;
    psr_sample_host_args_init(&a, sizeof a);
    a.rows = rows, a.vocab = vocab, a.logits = x;
    a.seeds = seeds, a.positions = pos, a.temperatures = temps, a.tokens = tokens;
    return psr_sample_host(ctx, &a);
}

/* Tokens equal the host oracle's (deterministic mode) on random rows. */
static psr_status check_oracle(psr_context *ctx, check *c, quick_data *d)
{
    const size_t rows = 64, vocab = 4097;
    float *x = malloc(rows * vocab * 4), *temps = malloc(rows * 4);
    int64_t *seeds = malloc(rows * 8), *pos = malloc(rows * 8);
    int32_t *tokens = malloc(rows * 4);
    psr_status st = x && temps && seeds && pos && tokens ? PSR_OK : PSR_ERR_OUT_OF_HOST_MEMORY;
    size_t wrong = 0;
    if (st == PSR_OK) {
        for (size_t i = 0; i < rows * vocab; i++) {
            uint32_t w[4];
            psr_oracle_draw(77, i, w);
            x[i] = (float)((double)w[0] * 0x1p-32 * 12.0 - 6.0);
        }
        for (size_t r = 0; r < rows; r++) {
            seeds[r] = (int64_t)(r * 7919 + 1);
            pos[r] = (int64_t)(r * 31);
            temps[r] = r % 4 == 0 ? 0.0f : 0.5f + 0.25f * (float)(r % 3);
        }
        st = sample_f32(ctx, x, rows, vocab, seeds, pos, temps, tokens);
    }
    for (size_t r = 0; r < rows && st == PSR_OK; r++)
        wrong += tokens[r] != psr_oracle_sample_row(x + r * vocab, vocab, temps[r], seeds[r], pos[r],
                                                    false, PSR_ORACLE_FP32, NULL);
    (void)d;
    c->name = "oracle";
    c->pass = st == PSR_OK && wrong == 0;
    c->checked = rows, c->mismatches = wrong;
    snprintf(c->detail[0], sizeof c->detail[0], "%zu rows of %zu tokens against the host oracle: %zu differ",
             rows, vocab, wrong);
    free(x), free(temps), free(seeds), free(pos), free(tokens);
    return st;
}

/* Gumbel-max follows softmax(x / T): one row of 32 logits, many seeds. The
 * same draws judged at 1.5 T are the control that must fail. */
static psr_status check_fit(psr_context *ctx, check *c, quick_data *d)
{
    const size_t rows = 40000, vocab = FIT_VOCAB;
    float row[FIT_VOCAB], *x = malloc(rows * vocab * 4), *temps = malloc(rows * 4);
    int64_t *seeds = malloc(rows * 8), *pos = malloc(rows * 8);
    int32_t *tokens = malloc(rows * 4);
    psr_status st = x && temps && seeds && pos && tokens ? PSR_OK : PSR_ERR_OUT_OF_HOST_MEMORY;
    c->name = "fit";
    if (st == PSR_OK) {
        for (size_t i = 0; i < vocab; i++)
            row[i] = (float)i * 0.125f - (i % 3 == 0 ? 1.5f : 0.0f);
        for (size_t r = 0; r < rows; r++) {
            memcpy(x + r * vocab, row, sizeof row);
            seeds[r] = (int64_t)r + 1000;
            pos[r] = 5;
            temps[r] = (float)FIT_T;
        }
        st = sample_f32(ctx, x, rows, vocab, seeds, pos, temps, tokens);
    }
    if (st == PSR_OK) {
        for (size_t r = 0; r < rows; r++)
            d->counts[tokens[r]]++;
        psr_softmax(row, vocab, FIT_T, d->p);
        psr_softmax(row, vocab, 1.5 * FIT_T, d->hotter);
        c->fits[0] = fit_judge(d->counts, d->p, vocab, rows);
        c->fits[1] = fit_judge(d->counts, d->hotter, vocab, rows);
        c->fit_count = 2, c->controls = 1;
        c->pass = fit_pass(&c->fits[0]) && !fit_pass(&c->fits[1]);
        char fit[160];
        fit_describe(&c->fits[0], fit, sizeof fit);
        snprintf(c->detail[0], sizeof c->detail[0], "%zu draws of a %zu-token row at T %g: %s", rows, vocab,
                 FIT_T, fit);
        format_p(c->fits[1].chi.p_value, fit, sizeof fit);
        snprintf(c->detail[1], sizeof c->detail[1], "control, the same draws judged at T %g: chi2 %.1f, df %zu, %s: %s",
                 1.5 * FIT_T, c->fits[1].chi.chi2, c->fits[1].chi.df, fit,
                 fit_pass(&c->fits[1]) ? "passes, but it must fail" : "fails, as it must");
    }
    free(x), free(temps), free(seeds), free(pos), free(tokens);
    return st;
}

/* Speculative decoding: every position's tokens follow the target. */
static psr_status check_unbiased(psr_context *ctx, check *c, quick_data *d)
{
    const size_t k = 3, trials = 50000;
    psr_unbiased_result *res = &d->unbiased;
    psr_status st = psr_unbiased_run(ctx, k, trials, 11, res);
    c->name = "unbiased";
    if (st != PSR_OK)
        return st;
    size_t worst = 0;
    c->pass = true;
    for (size_t j = 0; j <= k; j++) {
        c->fits[j] = fit_judge(res->counts[j], res->p, PSR_UNBIASED_VOCAB, res->reached[j]);
        c->pass &= fit_pass(&c->fits[j]);
        if (c->fits[j].chi.p_value < c->fits[worst].chi.p_value)
            worst = j;
    }
    c->fit_count = k + 1;
    char fit[160];
    fit_describe(&c->fits[worst], fit, sizeof fit);
    snprintf(c->detail[0], sizeof c->detail[0],
             "speculative decoding, k %zu, %zu trials: lowest p of the %zu positions, at position %zu: %s", k,
             trials, k + 1, worst, fit);
    return st;
}

static void check_json(json_writer *w, const check *c)
{
    json_begin_object(w);
    json_key_string(w, "name", c->name);
    json_key_bool(w, "pass", c->pass);
    json_key_bool(w, "passed", c->pass);
    char detail[sizeof c->detail];
    snprintf(detail, sizeof detail, "%s%s%s", c->detail[0], c->detail[1][0] ? "; " : "", c->detail[1]);
    json_key_string(w, "detail", detail);
    if (c->fit_count == 0) {
        json_key_string(w, "test", "exact");
        json_key_uint(w, "checked", c->checked);
        json_key_uint(w, "mismatches", c->mismatches);
    } else {
        json_key(w, "tests");
        json_begin_array(w);
        for (size_t i = 0; i < c->fit_count; i++) {
            bool control = i + c->controls >= c->fit_count;
            json_begin_object(w);
            if (c->controls)
                json_key_double(w, "temperature", control ? 1.5 * FIT_T : FIT_T);
            else
                json_key_uint(w, "position", i);
            json_key_bool(w, "control", control);
            fit_json(w, &c->fits[i]);
            json_end_object(w);
        }
        json_end_array(w);
    }
    json_end_object(w);
}

static void report_json(const psr_device_info *info, const check *checks, size_t n, bool all)
{
    json_writer w;
    json_init(&w, stdout);
    json_begin_object(&w);
    json_key_string(&w, "device", info->name);
    json_key_double(&w, "threshold_p", PSR_CHECK_THRESHOLD_P);
    json_key(&w, "checks");
    json_begin_array(&w);
    for (size_t i = 0; i < n; i++)
        check_json(&w, &checks[i]);
    json_end_array(&w);
    json_key_bool(&w, "pass", all);
    json_key_bool(&w, "passed", all);
    json_end_object(&w);
    json_finish(&w);
}

/* A panel per statistical test: the fit, its control, each position. */
static int report_plot(const char *path, const psr_device_info *info, const check *checks, size_t n, bool all)
{
    plot pl = {.path = path};
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < checks[i].fit_count; j++) {
            bool control = j + checks[i].controls >= checks[i].fit_count;
            char what[96];
            if (checks[i].controls)
                snprintf(what, sizeof what, "%s, %s T %g", checks[i].name, control ? "control: judged at" : "at",
                         control ? 1.5 * FIT_T : FIT_T);
            else
                snprintf(what, sizeof what, "%s, position %zu", checks[i].name, j);
            plot_fit(&pl, what, &checks[i].fits[j], control);
        }
    char title[64], subtitle[640];
    snprintf(title, sizeof title, "psr verify: %s", all ? "PASS" : "FAIL");
    snprintf(subtitle, sizeof subtitle, "%s (%s)\neach test fails when p < %g", info->name, info->platform_name,
             PSR_CHECK_THRESHOLD_P);
    return plot_write(&pl, title, subtitle);
}

static void check_text(const check *c)
{
    printf("%-4s %-9s %s\n", c->pass ? "PASS" : "FAIL", c->name, c->detail[0]);
    if (c->detail[1][0])
        printf("%15s%s\n", "", c->detail[1]);
}

static int verify_all_run(const char *device, bool as_json, const char *plot_path)
{
    quick_data *d = calloc(1, sizeof *d);
    if (!d)
        return cli_report(PSR_ERR_OUT_OF_HOST_MEMORY, NULL);
    psr_context *ctx = cli_open_context(device, false);
    if (!ctx) {
        free(d);
        return CLI_FAILED;
    }
    cli_device_calls_only(ctx); /* the checks are of this device's noise */
    psr_device_info info;
    psr_context_device_info(ctx, &info);
    psr_status (*const run[])(psr_context *, check *, quick_data *) = {check_stream, check_oracle, check_fit,
                                                                        check_unbiased};
    enum { N = sizeof run / sizeof *run };
    check checks[N];
    bool all = true;
    if (!as_json)
        printf("device: %s (%s)\n", info.name, info.platform_name);
    for (size_t i = 0; i < N; i++) {
        memset(&checks[i], 0, sizeof checks[i]);
        psr_status st = run[i](ctx, &checks[i], d);
        if (st != PSR_OK) {
            checks[i].pass = false, checks[i].fit_count = 0;
            snprintf(checks[i].detail[0], sizeof checks[i].detail[0], "%s: %s", psr_status_string(st),
                     psr_last_error(ctx));
        }
        all &= checks[i].pass;
        if (!as_json)
            check_text(&checks[i]);
    }
    if (as_json)
        report_json(&info, checks, N, all);
    else
        printf("%s (each statistical test fails when p < %g)\n", all ? "PASS" : "FAIL", PSR_CHECK_THRESHOLD_P);
    int rc = report_plot(plot_path, &info, checks, N, all);
    free(d);
    psr_context_free(ctx);
    return rc != CLI_OK ? rc : all ? CLI_OK : CLI_FAILED;
}

/* psr verify [--device SEL] [--json] [--plot FILE]. */
typedef struct quick_options {
    const char *device, *plot;
} quick_options;

static int quick_value(void *opts, const char *arg, const char *val)
{
    quick_options *o = opts;
    if (strcmp(arg, "--device") == 0)
        o->device = val;
    else if (strcmp(arg, "--plot") == 0)
        o->plot = val;
    else
        return cli_usage_error("verify", "bad argument \"%s\"", arg);
    return CLI_OK;
}

int verify_quick(int argc, char **argv, void (*usage)(FILE *out))
{
    const cli_options options = {"verify", usage, NULL, quick_value};
    quick_options o = {NULL, NULL};
    bool as_json = false;
    int parsed = cli_parse_values(&options, "--device --plot", argc, argv, 1, &o, &as_json);
    return parsed >= 0 ? parsed : verify_all_run(o.device, as_json, o.plot);
}
