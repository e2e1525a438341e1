/* psr verify's reports: text, JSON and plot panels of its tests. */
#include "verify_report.h"
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void format_p(double p, char *buf, size_t len)
{
    if (p < 1e-300)
        snprintf(buf, len, "p < 1e-300");
    else
        snprintf(buf, len, "p = %.3g", p);
}

fit_report fit_judge(const uint64_t *observed, const double *p, size_t tokens, uint64_t n)
{
    fit_report f = {psr_chi2_test(observed, p, tokens, n), observed, p, tokens, n};
    return f;
}

bool fit_pass(const fit_report *f)
{
    return f->chi.p_value >= f->chi.threshold_p;
}

void fit_describe(const fit_report *f, char *buf, size_t len)
{
    char p[32];
    format_p(f->chi.p_value, p, sizeof p);
    snprintf(buf, len, "chi2 %.1f, df %zu, %s; fails when p < %g (chi2 >= %.1f)", f->chi.chi2, f->chi.df, p,
             f->chi.threshold_p, f->chi.threshold);
}

/* Token i's count alone at the test's false-alarm rate: the band. */
static psr_count_test token_band(const fit_report *f, size_t i)
{
    return psr_binomial_test(f->observed[i], f->n, f->p[i], f->chi.threshold_p);
}

void fit_json(json_writer *w, const fit_report *f)
{
    json_key_string(w, "test", "chi2");
    json_key_uint(w, "samples", f->n);
    json_key_double(w, "statistic", f->chi.chi2);
    json_key_uint(w, "df", f->chi.df);
    json_key_double(w, "p_value", f->chi.p_value);
    json_key_double(w, "threshold_p", f->chi.threshold_p);
    json_key_double(w, "threshold", f->chi.threshold);
    json_key_bool(w, "passed", fit_pass(f));
    const char *arrays[4] = {"observed", "expected", "allowed_low", "allowed_high"};
    for (int a = 0; a < 4; a++) {
        json_key(w, arrays[a]);
        json_begin_array(w);
        for (size_t i = 0; i < f->tokens; i++) {
            if (a == 0) {
                json_uint(w, f->observed[i]);
            } else if (a == 1) {
                json_double(w, f->p[i] * (double)f->n);
            } else {
                psr_count_test t = token_band(f, i);
                json_uint(w, a == 2 ? t.low : t.high);
            }
        }
        json_end_array(w);
    }
}

void count_describe(const count_report *c, char *buf, size_t len)
{
    char p[32];
    format_p(c->t.p_value, p, sizeof p);
    snprintf(buf, len, c->t.expected < 1000 ? "observed %llu, expected %.4g, allowed %llu..%llu, %s"
                                            : "observed %llu, expected %.1f, allowed %llu..%llu, %s",
             (unsigned long long)c->observed, c->t.expected, (unsigned long long)c->t.low,
             (unsigned long long)c->t.high, p);
}

bool count_ok(const count_report *c)
{
    return c->control ? !c->t.pass : !c->judged || c->t.pass;
}

void count_json(json_writer *w, const count_report *c)
{
    json_key_string(w, "test", c->model);
    json_key_uint(w, "statistic", c->observed);
    json_key(w, "df"); /* a count has none */
    json_null(w);
    json_key_double(w, "expected", c->t.expected);
    json_key_double(w, "p_value", c->t.p_value);
    json_key_double(w, "threshold_p", c->t.threshold_p);
    json_key_uint(w, "allowed_low", c->t.low);
    json_key_uint(w, "allowed_high", c->t.high);
    json_key_bool(w, "passed", c->t.pass);
    json_key_bool(w, "judged", c->judged);
    json_key_bool(w, "control", c->control);
}

static bool plot_add(plot *pl, size_t bars)
{
    if (!pl->path || pl->out_of_memory)
        return false;
    if (pl->count == PLOT_MAX_PANELS || !(pl->bars[pl->count] = calloc(bars ? bars : 1, sizeof(svg_bar)))) {
        pl->out_of_memory = true;
        return false;
    }
    return true;
}

void plot_fit(plot *pl, const char *what, const fit_report *f, bool must_fail)
{
    if (!plot_add(pl, f->tokens))
        return;
    size_t k = pl->count++;
    svg_bar *b = pl->bars[k];
    for (size_t i = 0; i < f->tokens; i++) {
        psr_count_test t = token_band(f, i);
        b[i] = (svg_bar){NULL, NULL, (double)f->observed[i], t.expected, (double)t.low, (double)t.high};
    }
    char p[32];
    format_p(f->chi.p_value, p, sizeof p);
    bool pass = fit_pass(f);
    snprintf(pl->headings[k], sizeof pl->headings[k], "%s: \u03c7\u00b2 %.1f, df %zu, %s: %s%s", what, f->chi.chi2,
             f->chi.df, p, pass ? "PASS" : "FAIL",
             must_fail ? (pass ? ", but a control must fail" : ", as a control must") : "");
    pl->panels[k] = (svg_panel){pl->headings[k], pass != must_fail, "token", "count", b, f->tokens};
}

void plot_counts(plot *pl, const char *what, const char *x_label, const count_report *c, size_t n)
{
    n = n > 4 ? 4 : n;
    if (!plot_add(pl, n))
        return;
    size_t k = pl->count++;
    svg_bar *b = pl->bars[k];
    bool ok = true;
    for (size_t i = 0; i < n; i++) {
        format_p(c[i].t.p_value, pl->notes[k][i], sizeof pl->notes[k][i]);
        size_t used = strlen(pl->notes[k][i]);
        snprintf(pl->notes[k][i] + used, sizeof pl->notes[k][i] - used, ": %s%s", c[i].t.pass ? "PASS" : "FAIL",
                 c[i].control ? " (control)" : c[i].judged ? "" : " (not judged)");
        b[i] = (svg_bar){c[i].label, pl->notes[k][i], (double)c[i].observed, c[i].t.expected, (double)c[i].t.low,
                         (double)c[i].t.high};
        ok &= count_ok(&c[i]);
    }
    snprintf(pl->headings[k], sizeof pl->headings[k], "%s: %s", what, ok ? "PASS" : "FAIL");
    pl->panels[k] = (svg_panel){pl->headings[k], ok, x_label, "count", b, n};
}

int plot_write(plot *pl, const char *title, const char *subtitle)
{
    int rc = CLI_OK;
    if (pl->path && pl->out_of_memory) {
        fprintf(stderr, "psr verify: out of memory for the plot\n");
        rc = CLI_FAILED;
    } else if (pl->path) {
        char band[96];
        snprintf(band, sizeof band, "allowed: two-sided p \u2265 %g for each bar alone", PSR_CHECK_THRESHOLD_P);
        svg_chart chart = {title, subtitle, band, pl->panels, pl->count};
        if (svg_write(pl->path, &chart) != 0) {
            fprintf(stderr, "psr verify: cannot write the plot %s: %s\n", pl->path, strerror(errno));
            rc = CLI_FAILED;
        }
    }
    for (size_t i = 0; i < pl->count; i++)
        free(pl->bars[i]);
    pl->count = 0;
    return rc;
}

static void p_value_usage(FILE *out)
{
    fprintf(out,
            "usage: psr verify p-value --chi2 X --df N [--json]\n"
            "       psr verify p-value --poisson K --mean L [--json]\n"
            "       psr verify p-value --binomial K --trials N --prob P [--json]\n"
            "\n"
            "The p-value psr verify would give a statistic: the chi-square survival\n"
            "function Q(N/2, X/2), or the two-sided p-value of a count K (twice its\n"
            "smaller tail, at most 1) under Poisson(L) or binomial(N, P), with the\n"
            "counts that pass. Every test of psr verify fails when p < %g. Every\n"
            "number is at most 1e12.\n",
            PSR_CHECK_THRESHOLD_P);
}

typedef struct p_value_options {
    char kind; /* 'c'hi2, 'p'oisson, 'b'inomial */
    double x, df, mean, prob;
    unsigned long long count, trials;
} p_value_options;

/* A number in [lo, hi]; false when val is none. */
static bool number_in(const char *val, double lo, double hi, double *out)
{
    char *end;
    *out = strtod(val, &end);
    return end != val && !*end && *out >= lo && *out <= hi;
}

static int p_value_option(void *opts, const char *arg, const char *val)
{
    p_value_options *o = opts;
    double v = 0;
    /* Up to 1e12: past it the tails' log terms cancel too much for double. */
    bool ok = number_in(val, 0, 1e12, &v);
    if (strcmp(arg, "--chi2") == 0)
        o->kind = 'c', o->x = v;
    else if (strcmp(arg, "--df") == 0)
        o->df = v, ok &= v >= 1 && v == floor(v);
    else if (strcmp(arg, "--poisson") == 0 || strcmp(arg, "--binomial") == 0)
        o->kind = arg[2], o->count = (unsigned long long)v, ok &= v == floor(v);
    else if (strcmp(arg, "--mean") == 0)
        o->mean = v;
    else if (strcmp(arg, "--trials") == 0)
        o->trials = (unsigned long long)v, ok &= v >= 1 && v == floor(v);
    else if (strcmp(arg, "--prob") == 0)
        o->prob = v, ok &= v <= 1;
    else
        return cli_usage_error("verify p-value", "bad argument \"%s\"", arg);
    return ok ? CLI_OK : cli_usage_error("verify p-value", "bad value \"%s\" for %s", val, arg);
}

int verify_p_value(int argc, char **argv)
{
    static const cli_options options = {"verify p-value", p_value_usage, NULL, p_value_option};
    p_value_options o = {0};
    bool as_json = false;
    int parsed = cli_parse_values(&options, "--chi2 --df --poisson --mean --binomial --trials --prob", argc, argv, 2,
                                  &o, &as_json);
    if (parsed >= 0)
        return parsed;
    if (!o.kind || (o.kind == 'c' && !o.df) || (o.kind == 'b' && (!o.trials || o.count > o.trials)))
        return cli_usage_error("verify", "p-value needs --chi2 X --df N, --poisson K --mean L or "
                                         "--binomial K --trials N (K <= N) --prob P");
    json_writer w;
    json_init(&w, stdout);
    char line[160];
    if (o.kind == 'c') {
        double p = psr_chi2_sf(o.x, o.df), threshold = psr_chi2_isf(PSR_CHECK_THRESHOLD_P, o.df);
        if (as_json) {
            json_begin_object(&w);
            json_key_string(&w, "test", "chi2");
            json_key_double(&w, "statistic", o.x);
            json_key_double(&w, "df", o.df);
            json_key_double(&w, "p_value", p);
            json_key_double(&w, "threshold_p", PSR_CHECK_THRESHOLD_P);
            json_key_double(&w, "threshold", threshold);
            json_key_bool(&w, "passed", p >= PSR_CHECK_THRESHOLD_P);
        } else {
            format_p(p, line, sizeof line);
            printf("chi2 %g, df %g: %s; fails when p < %g (chi2 >= %.4f)\n", o.x, o.df, line,
                   PSR_CHECK_THRESHOLD_P, threshold);
        }
    } else {
        count_report c = {o.kind == 'p' ? "poisson" : "binomial", o.kind == 'p' ? "poisson" : "binomial", o.count,
                          o.kind == 'p' ? psr_poisson_test(o.count, o.mean, PSR_CHECK_THRESHOLD_P)
                                        : psr_binomial_test(o.count, o.trials, o.prob, PSR_CHECK_THRESHOLD_P),
                          true, false};
        if (as_json) {
            json_begin_object(&w);
            count_json(&w, &c);
        } else {
            count_describe(&c, line, sizeof line);
            printf("%s: %s; fails when p < %g\n", c.model, line, PSR_CHECK_THRESHOLD_P);
        }
    }
    if (as_json) {
        json_end_object(&w);
        json_finish(&w);
    }
    return CLI_OK;
}
