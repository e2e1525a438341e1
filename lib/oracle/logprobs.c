/* Host oracle of psr_logprobs (cl/logprobs.cl): the same values, the same
 * log-sum-exp (psr_oracle_row_lse) and the same orders, so the device must
 * match it bit for bit. Built with -ffp-contract=off like stream.c. */
#include "oracle/oracle.h"

#include <math.h>
#include <stdlib.h>

/* Order: value descending, then index ascending. */
static bool better(float va, uint32_t ia, float vb, uint32_t ib)
{
    return va > vb || (va == vb && ia < ib);
}

bool psr_oracle_logprobs_row(const float *x, size_t vocab, float t, bool raw, float cut, int32_t token,
                             int top_n, float *logprob, int32_t *rank, int32_t *top_ids, float *top_logprobs)
{
    if (raw || !(isnormal(t) && t > 0.0f)) {
        t = 1.0f; /* raw, and T = 0 counts as 1 */
        cut = -INFINITY; /* filters apply to processed rows sampled at T > 0 */
    }
    if (isnan(cut))
        cut = -INFINITY;
    float r = t == 1.0f ? 1.0f : psr_oracle_temp_recip(t);
    float *v = malloc(vocab * sizeof *v), *kept = malloc(vocab * sizeof *kept);
    if (!v || !kept) {
        free(v), free(kept);
        return false;
    }
    for (size_t i = 0; i < vocab; i++) {
        v[i] = isnan(x[i]) ? -INFINITY : isinf(x[i]) || t == 1.0f ? x[i] : psr_oracle_div(x[i], t, r);
        kept[i] = v[i] < cut ? -INFINITY : x[i]; /* what the log-sum-exp sums */
        v[i] = v[i] < cut ? -INFINITY : v[i];
    }
    float lse = psr_oracle_row_lse(kept, vocab, t, r);
    free(kept);
    bool valid = token >= 0 && (size_t)token < vocab;
    int32_t beat = 0;
    for (size_t i = 0; valid && i < vocab; i++)
        beat += v[i] > v[token];
    *logprob = valid ? v[token] - lse : NAN;
    *rank = valid ? beat + 1 : 0;
    /* Top-N by repeated selection after the previous winner. */
    float pv = INFINITY;
    uint32_t pi = 0;
    for (int n = 0; n < top_n; n++) {
        int64_t best = -1;
        for (size_t i = 0; i < vocab; i++) {
            bool after = n == 0 || v[i] < pv || (v[i] == pv && i > pi);
            if (after && (best < 0 || better(v[i], (uint32_t)i, v[best], (uint32_t)best)))
                best = (int64_t)i;
        }
        top_ids[n] = (int32_t)best;
        top_logprobs[n] = best >= 0 ? v[best] - lse : -INFINITY;
        if (best >= 0) {
            pv = v[best];
            pi = (uint32_t)best;
        }
    }
    free(v);
    return true;
}
