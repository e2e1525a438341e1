/* Statistics and experiments behind psr verify: p-values, chi-square, the
 * unbiasedness experiment and the lower-tail census. */
#ifndef PSR_CHECK_H
#define PSR_CHECK_H

#include <psr/psr.h>

#include <stdbool.h>
#include <stdint.h>

/* ---- p-values (pvalue.c) ---- */

/* Every test fails when its p-value falls below this: when psr samples
 * exactly, each test fails by chance once in a million runs. */
#define PSR_CHECK_THRESHOLD_P 1e-6

/* The regularized incomplete gamma functions P(a, x) and Q(a, x) = 1 -
 * P(a, x) (each computed directly, so a tiny Q keeps its digits) and the
 * regularized incomplete beta function I_x(a, b); NaN outside their domains. */
double psr_gamma_p(double a, double x);
double psr_gamma_q(double a, double x);
double psr_beta_inc(double a, double b, double x);
/* P(chi2 with df degrees of freedom >= x) = Q(df / 2, x / 2), and the x
 * where it equals p (0 < p < 1). */
double psr_chi2_sf(double x, double df);
double psr_chi2_isf(double p, double df);

/* A two-sided test of one count against its exact distribution. */
typedef struct psr_count_test {
    double expected;    /* the count's mean */
    double p_value;     /* 2 min(P(X <= observed), P(X >= observed)), at most 1 */
    double threshold_p; /* fails below it */
    uint64_t low, high; /* the counts that pass: both tails at least threshold_p / 2 */
    bool pass;
} psr_count_test;
psr_count_test psr_poisson_test(uint64_t observed, double mean, double threshold_p);
/* X ~ binomial(n, q). */
psr_count_test psr_binomial_test(uint64_t observed, uint64_t n, double q, double threshold_p);

/* ---- goodness of fit (chi2.c) ---- */

typedef struct psr_chi2_result {
    double chi2;
    size_t df;
    double threshold;   /* the chi2 whose p-value is threshold_p: pass below it */
    double p_value;     /* P(chi2_df >= chi2): 1 with df 0, 0 after an impossible token */
    double threshold_p; /* PSR_CHECK_THRESHOLD_P */
} psr_chi2_result;
/* Pearson's chi-square of observed counts against expected probabilities
 * (n trials). Bins whose expected count is below 5 are merged, smallest
 * first, until each merged bin expects at least 5. A hit on a
 * zero-probability bin makes chi2 infinite. */
psr_chi2_result psr_chi2_test(const uint64_t *observed, const double *p, size_t bins, uint64_t n);
/* softmax(logits / t) in double precision; -inf and NaN get 0. */
void psr_softmax(const float *logits, size_t n, double t, double *p);

/* ---- the unbiasedness experiment (unbiased.c) ---- */

#define PSR_UNBIASED_VOCAB 16
#define PSR_UNBIASED_MAX_K 8
typedef struct psr_unbiased_result {
    size_t k, trials;
    double p[PSR_UNBIASED_VOCAB]; /* the target distribution, softmax(randn(16)) */
    double q[PSR_UNBIASED_VOCAB]; /* the draft's, softmax(-target) */
    uint64_t counts[PSR_UNBIASED_MAX_K + 1][PSR_UNBIASED_VOCAB]; /* output tokens per position */
    uint64_t reached[PSR_UNBIASED_MAX_K + 1]; /* requests that output a token there */
    uint64_t accepted;                        /* drafts accepted, all positions */
} psr_unbiased_result;
/* `trials` requests of k drafts, drawn by the salted draft sampler from q
 * (with the draft cache), verified against p at T = 1. Every position's
 * output should be distributed as p. A context built with
 * -DPSR_TEST_DISABLE_DRAFT_SALT=1 runs the control. */
psr_status psr_unbiased_run(psr_context *ctx, size_t k, size_t trials, uint64_t seed,
                            psr_unbiased_result *out);

/* ---- the lower-tail census (tail.c) ---- */

/* Counts draws of the exponential variate E behind one noise option's
 * Gumbel noise that fall below 2^-24 (*c24) and 2^-32 (*c32), over `draws`
 * draws rounded down to whole work-groups (*done: how many were drawn).
 * top_slice: only words whose 64-bit uniform is in its top 2^-32, where
 * E < 2^-32 needs all 64 bits. */
psr_status psr_tail_census(psr_context *ctx, psr_noise noise, unsigned long long draws,
                           bool top_slice, unsigned long long *done, unsigned long long *c24,
                           unsigned long long *c32);

/* ---- the stream's probe kernel (probes.c) ---- */

/* Row keys and the fp32 and (with fp64; else 0) fp64 uniforms' bits of n
 * (seed, position, token) triples, from the device. */
psr_status psr_probe_uniforms(psr_context *ctx, bool drafting, size_t n, const int64_t *seeds,
                              const int64_t *positions, const uint32_t *tokens, uint32_t *row_keys,
                              uint32_t *u32_bits, uint64_t *u64_bits);

#endif
