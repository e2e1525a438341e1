/* How psr verify reports its statistical tests: one line of text, JSON
 * fields and SVG panels per test, from lib/check's results. */
#ifndef PSR_CLI_VERIFY_REPORT_H
#define PSR_CLI_VERIFY_REPORT_H

#include "check.h"
#include "json.h"
#include "svg.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* A chi-square test of per-token counts against a distribution. */
typedef struct fit_report {
    psr_chi2_result chi;
    const uint64_t *observed; /* per token */
    const double *p;          /* the distribution judged against */
    size_t tokens;
    uint64_t n; /* draws */
} fit_report;
fit_report fit_judge(const uint64_t *observed, const double *p, size_t tokens, uint64_t n);
bool fit_pass(const fit_report *f);
/* "chi2 7.2, df 15, p = 0.953; fails when p < 1e-06 (chi2 >= 56.5)" */
void fit_describe(const fit_report *f, char *buf, size_t len);
/* The test's fields, into an object the caller opened: test, samples,
 * statistic, df, p_value, threshold_p, threshold, passed, and per token
 * observed, expected, allowed_low and allowed_high (the counts a token
 * alone may reach at the same false-alarm rate). */
void fit_json(json_writer *w, const fit_report *f);

/* A test of one count (tail hits, lower-tail draws). */
typedef struct count_report {
    const char *label; /* what was counted, or the noise */
    const char *model; /* "poisson" or "binomial" */
    uint64_t observed;
    psr_count_test t;
    bool judged;  /* counts toward the verdict (else only reported) */
    bool control; /* must fail, to show the test can */
} count_report;
/* "observed 35, expected 32.76, allowed 12..62, p = 0.741" */
void count_describe(const count_report *c, char *buf, size_t len);
void count_json(json_writer *w, const count_report *c);
/* Whether the count behaves as it must: a judged one passes, a control
 * fails, one only reported always does. */
bool count_ok(const count_report *c);

/* "p = 0.953", or "p < 1e-300" where the double underflows. */
void format_p(double p, char *buf, size_t len);

/* The panels of one SVG file, collected, then written at once. */
enum { PLOT_MAX_PANELS = 24 };
typedef struct plot {
    const char *path; /* NULL: no plot asked for */
    svg_panel panels[PLOT_MAX_PANELS];
    svg_bar *bars[PLOT_MAX_PANELS];
    char headings[PLOT_MAX_PANELS][200];
    char notes[PLOT_MAX_PANELS][4][48];
    size_t count;
    bool out_of_memory;
} plot;
/* A panel of per-token bars; `what` starts its heading ("position 0"). */
void plot_fit(plot *pl, const char *what, const fit_report *f, bool must_fail);
/* A panel of up to four counts side by side, each with its p-value. */
void plot_counts(plot *pl, const char *what, const char *x_label, const count_report *c, size_t n);
/* Writes the file (when asked for) and frees the panels: CLI_OK, or
 * CLI_FAILED after saying why. */
int plot_write(plot *pl, const char *title, const char *subtitle);

/* psr verify p-value: the p-value of a statistic the user gives. */
int verify_p_value(int argc, char **argv);
/* psr verify with no check named (argv[1] on are options): every quick
 * self-test. */
int verify_quick(int argc, char **argv, void (*usage)(FILE *out));

#endif
