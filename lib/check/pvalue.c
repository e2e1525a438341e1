/* p-values in double precision: the regularized incomplete gamma and beta
 * functions behind the chi-square, Poisson and binomial tails, and the
 * count ranges a two-sided test accepts. */
#include "check/check.h"

#include <float.h>
#include <math.h>

/* Enough for any parameter below about 1e14 (both expansions take on the
 * order of sqrt(a) steps); a bound, not a budget. */
#define MAX_STEPS 100000000L
#define TINY 1e-300

/* log(x^a e^-x / Gamma(a)), the factor both expansions share. */
static double gamma_log_factor(double a, double x)
{
    return a * log(x) - x - lgamma(a);
}

/* P(a, x) by its power series; converges quickly for x < a + 1. */
static double gamma_series(double a, double x)
{
    double ap = a, term = 1.0 / a, sum = term;
    for (long i = 0; i < MAX_STEPS; i++) {
        ap += 1.0;
        term *= x / ap;
        sum += term;
        if (fabs(term) < fabs(sum) * DBL_EPSILON)
            break;
    }
    return sum * exp(gamma_log_factor(a, x));
}

/* Q(a, x) by its continued fraction (modified Lentz); for x >= a + 1. */
static double gamma_fraction(double a, double x)
{
    double b = x + 1.0 - a, c = 1.0 / TINY, d = 1.0 / b, h = d;
    for (long i = 1; i < MAX_STEPS; i++) {
        double an = -(double)i * ((double)i - a);
        b += 2.0;
        d = an * d + b;
        d = fabs(d) < TINY ? TINY : d;
        c = b + an / c;
        c = fabs(c) < TINY ? TINY : c;
        d = 1.0 / d;
        double step = d * c;
        h *= step;
        if (fabs(step - 1.0) < DBL_EPSILON)
            break;
    }
    return h * exp(gamma_log_factor(a, x));
}

/* P(a, x), or Q(a, x) when upper: whichever expansion converges, and the
 * other by its complement, which only loses digits where it is near 1. */
static double gamma_regularized(double a, double x, bool upper)
{
    if (!(a > 0) || !(x >= 0))
        return NAN;
    if (x == 0 || isinf(x))
        return (x == 0) == upper ? 1.0 : 0.0;
    if (x < a + 1.0)
        return upper ? 1.0 - gamma_series(a, x) : gamma_series(a, x);
    return upper ? gamma_fraction(a, x) : 1.0 - gamma_fraction(a, x);
}

double psr_gamma_p(double a, double x)
{
    return gamma_regularized(a, x, false);
}

double psr_gamma_q(double a, double x)
{
    return gamma_regularized(a, x, true);
}

double psr_chi2_sf(double x, double df)
{
    if (isnan(x) || !(df > 0))
        return NAN;
    return x <= 0 ? 1.0 : psr_gamma_q(df / 2.0, x / 2.0);
}

double psr_chi2_isf(double p, double df)
{
    if (!(p > 0 && p < 1) || !(df > 0))
        return NAN;
    double lo = 0, hi = df + 10.0;
    while (psr_chi2_sf(hi, df) > p)
        lo = hi, hi *= 2.0;
    /* Bisection: the survival function falls monotonically. */
    for (int i = 0; i < 200 && hi - lo > hi * 1e-14; i++) {
        double mid = 0.5 * (lo + hi);
        if (psr_chi2_sf(mid, df) > p)
            lo = mid;
        else
            hi = mid;
    }
    return hi;
}

/* The continued fraction of I_x(a, b) (modified Lentz); for
 * x < (a + 1) / (a + b + 2). */
static double beta_fraction(double a, double b, double x)
{
    double c = 1.0, d = 1.0 - (a + b) * x / (a + 1.0);
    d = 1.0 / (fabs(d) < TINY ? TINY : d);
    double h = d;
    for (long m = 1; m < MAX_STEPS; m++) {
        double m2 = 2.0 * (double)m, dm = (double)m;
        for (int half = 0; half < 2; half++) {
            double an = half == 0 ? dm * (b - dm) * x / ((a - 1.0 + m2) * (a + m2))
                                  : -(a + dm) * (a + b + dm) * x / ((a + m2) * (a + 1.0 + m2));
            d = 1.0 + an * d;
            d = 1.0 / (fabs(d) < TINY ? TINY : d);
            c = 1.0 + an / c;
            c = fabs(c) < TINY ? TINY : c;
            h *= d * c;
        }
        if (fabs(d * c - 1.0) < DBL_EPSILON)
            break;
    }
    return h;
}

double psr_beta_inc(double a, double b, double x)
{
    if (!(a > 0 && b > 0) || !(x >= 0 && x <= 1))
        return NAN;
    if (x == 0 || x == 1)
        return x;
    double log_factor = lgamma(a + b) - lgamma(a) - lgamma(b) + a * log(x) + b * log1p(-x);
    if (x < (a + 1.0) / (a + b + 2.0))
        return exp(log_factor) * beta_fraction(a, b, x) / a;
    return 1.0 - exp(log_factor) * beta_fraction(b, a, 1.0 - x) / b;
}

/* A count's distribution: Poisson(mean), or binomial(n, q) when n > 0. */
typedef struct count_model {
    double mean, q;
    uint64_t n;
} count_model;

/* P(X <= k). */
static double count_cdf(const count_model *m, uint64_t k)
{
    if (m->n)
        return k >= m->n ? 1.0 : psr_beta_inc((double)(m->n - k), (double)k + 1.0, 1.0 - m->q);
    return m->mean <= 0 ? 1.0 : psr_gamma_q((double)k + 1.0, m->mean);
}

/* P(X >= k). */
static double count_sf(const count_model *m, uint64_t k)
{
    if (k == 0)
        return 1.0;
    if (m->n)
        return k > m->n ? 0.0 : psr_beta_inc((double)k, (double)(m->n - k) + 1.0, m->q);
    return m->mean <= 0 ? 0.0 : psr_gamma_p((double)k, m->mean);
}

/* The smallest k in [lo, hi] where count_cdf reaches `level` (sf: the
 * first where count_sf falls below it); hi when none. Both are monotone. */
static uint64_t count_search(const count_model *m, bool sf, double level, uint64_t lo, uint64_t hi)
{
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        bool past = sf ? count_sf(m, mid) < level : count_cdf(m, mid) >= level;
        if (past)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

static psr_count_test count_test(const count_model *m, uint64_t observed, double alpha)
{
    psr_count_test t = {.expected = m->n ? (double)m->n * m->q : m->mean, .threshold_p = alpha};
    double lower = count_cdf(m, observed), upper = count_sf(m, observed);
    t.p_value = fmin(1.0, 2.0 * fmin(lower, upper));
    /* A count passes when both of its tails hold at least alpha / 2. */
    uint64_t top = m->n;
    if (!m->n) {
        double span = t.expected + 50.0 * sqrt(t.expected) + 100.0;
        top = span < 0x1p63 ? (uint64_t)span : UINT64_C(1) << 63;
        while (top < UINT64_C(1) << 62 && count_sf(m, top) >= alpha / 2)
            top *= 2;
    }
    t.low = count_search(m, false, alpha / 2, 0, top);
    uint64_t first_out = count_search(m, true, alpha / 2, 0, top + 1);
    t.high = first_out ? first_out - 1 : 0;
    t.pass = t.p_value >= alpha;
    return t;
}

psr_count_test psr_poisson_test(uint64_t observed, double mean, double alpha)
{
    count_model m = {.mean = mean > 0 ? mean : 0};
    return count_test(&m, observed, alpha);
}

psr_count_test psr_binomial_test(uint64_t observed, uint64_t n, double q, double alpha)
{
    if (n == 0)
        return psr_poisson_test(observed, 0, alpha);
    count_model m = {.q = q < 0 ? 0 : q > 1 ? 1 : q, .n = n};
    return count_test(&m, observed, alpha);
}
