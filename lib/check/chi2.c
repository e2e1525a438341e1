/* Goodness of fit: Pearson chi-square with small bins merged, judged by
 * its p-value; used by the tests and by `psr verify`. */
#include "check/check.h"
#include "ops/ops.h"
#include "oracle/oracle.h"

#include <math.h>
#include <stdlib.h>

typedef struct bin {
    double expected;
    double observed;
} bin;

static int by_expected(const void *a, const void *b)
{
    double x = ((const bin *)a)->expected, y = ((const bin *)b)->expected;
    return (x > y) - (x < y);
}

psr_chi2_result psr_chi2_test(const uint64_t *observed, const double *p, size_t bins, uint64_t n)
{
    bin *b = malloc((bins ? bins : 1) * sizeof *b);
    if (!b)
        return (psr_chi2_result){INFINITY, 0, 0, 0, PSR_CHECK_THRESHOLD_P};
    size_t nb = 0;
    double impossible = 0; /* hits on zero-probability tokens */
    for (size_t i = 0; i < bins; i++) {
        if (p[i] > 0) {
            b[nb].expected = p[i] * (double)n;
            b[nb].observed = (double)observed[i];
            nb++;
        } else {
            impossible += (double)observed[i];
        }
    }
    qsort(b, nb, sizeof *b, by_expected);
    /* Merge from the smallest up: each merged bin expects at least 5. */
    size_t out = 0;
    double acc_e = 0, acc_o = 0;
    for (size_t i = 0; i < nb; i++) {
        acc_e += b[i].expected;
        acc_o += b[i].observed;
        if (acc_e >= 5.0) {
            b[out].expected = acc_e;
            b[out].observed = acc_o;
            out++;
            acc_e = acc_o = 0;
        }
    }
    if (acc_e > 0 && out > 0) {
        b[out - 1].expected += acc_e;
        b[out - 1].observed += acc_o;
    }
    psr_chi2_result r = {0, out > 0 ? out - 1 : 0, INFINITY, 1, PSR_CHECK_THRESHOLD_P};
    for (size_t i = 0; i < out; i++) {
        double d = b[i].observed - b[i].expected;
        r.chi2 += d * d / b[i].expected;
    }
    if (impossible > 0)
        r.chi2 = INFINITY; /* a token that cannot be sampled was */
    /* With one bin the statistic is 0 whatever was drawn: nothing to fail. */
    if (r.df > 0) {
        r.threshold = psr_chi2_isf(r.threshold_p, (double)r.df);
        r.p_value = psr_chi2_sf(r.chi2, (double)r.df);
    }
    if (impossible > 0)
        r.p_value = 0;
    free(b);
    return r;
}

void psr_softmax(const float *logits, size_t n, double t, double *p)
{
    double m = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (logits[i] / t > m && !isnan(logits[i]))
            m = logits[i] / t;
    double s = 0;
    for (size_t i = 0; i < n; i++) {
        p[i] = (isnan(logits[i]) || (isinf(logits[i]) && logits[i] < 0)) ? 0.0 : exp(logits[i] / t - m);
        s += p[i];
    }
    for (size_t i = 0; i < n; i++)
        p[i] /= s;
}
