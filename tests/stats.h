/* Goodness-of-fit helpers for the statistical tests (DESIGN section 8). */
#ifndef PSR_TEST_STATS_H
#define PSR_TEST_STATS_H

#include <stddef.h>
#include <stdint.h>

typedef struct chi2_result {
    double chi2;
    size_t df;
    double threshold; /* df + 10 * sqrt(2 df) */
} chi2_result;

/* Pearson's chi-square of observed counts against expected probabilities
 * (n trials). Bins whose expected count is below 5 are merged, smallest
 * first, until each merged bin expects at least 5. */
chi2_result chi2_test(const uint64_t *observed, const double *p, size_t bins, uint64_t n);

/* softmax(logits / t) in double precision; -inf and NaN get 0. */
void softmax(const float *logits, size_t n, double t, double *p);

#endif
