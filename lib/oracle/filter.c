/* The host oracle of cl/filter.cl: the same threshold, found by sorting
 * instead of a radix search. The values that decide it (scaled logits,
 * the fixed-point masses and their integer sums, the float goal) are
 * computed with the kernel's operations, so the result has the same bits. */
#include "oracle/oracle.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

float psr_oracle_scaled(float x, float temperature)
{
    if (isnan(x) || isinf(x))
        return x;
    return psr_oracle_div(x, temperature, psr_oracle_temp_recip(temperature));
}

static int descending(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

static uint64_t fixed_mass(float s, float m)
{
    float e = isinf(m) ? (s == m ? 1.0f : 0.0f) : psr_oracle_exp_neg(s - m);
    return (uint64_t)(e * 0x1p32f);
}

float psr_oracle_filter_threshold(const float *logits, size_t vocab, float t, int32_t top_k,
                                  float top_p, float min_p)
{
    if (!(top_p > 0.0f && top_p <= 1.0f) || !(min_p >= 0.0f && min_p <= 1.0f))
        return NAN;
    bool k_on = top_k > 0 && (size_t)top_k < vocab;
    bool p_on = top_p < 1.0f;
    bool m_on = min_p >= FLT_MIN;
    if (!(isnormal(t) && t > 0.0f) || !(k_on || p_on || m_on))
        return -INFINITY;
    float *s = malloc(vocab * sizeof *s);
    if (!s)
        return NAN;
    size_t n = 0;
    float m = -INFINITY;
    for (size_t i = 0; i < vocab; i++) {
        float v = psr_oracle_scaled(logits[i], t);
        if (isnan(v))
            continue;
        s[n++] = v == 0.0f ? 0.0f : v; /* -0 and +0 are one key */
        m = v > m ? v : m;
    }
    float cut = -INFINITY;
    if (!(m > -INFINITY)) {
        free(s);
        return cut;
    }
    if (m_on)
        cut = m + psr_oracle_log(min_p);
    qsort(s, n, sizeof *s, descending);
    size_t kept = 0; /* s[0 .. kept) >= cut */
    while (kept < n && s[kept] >= cut)
        kept++;
    float found = cut;
    if (k_on && kept >= (size_t)top_k) {
        found = s[top_k - 1];
        while (kept > 0 && s[kept - 1] < found)
            kept--;
    }
    if (p_on) {
        uint64_t total = 0;
        for (size_t i = 0; i < kept; i++)
            total += fixed_mass(s[i], m);
        float goal = fmaxf(top_p, FLT_MIN) * (float)total;
        /* The first group of equal values whose mass, with all above it, reaches the goal. */
        uint64_t cum = 0;
        for (size_t i = 0; i < kept;) {
            size_t j = i;
            while (j < kept && s[j] == s[i])
                cum += fixed_mass(s[j++], m);
            if ((float)cum >= goal) {
                found = s[i];
                break;
            }
            i = j;
        }
    }
    if (k_on || p_on)
        cut = found;
    free(s);
    return cut;
}
