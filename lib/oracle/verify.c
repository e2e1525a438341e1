/* Host oracle of psr_verify (cl/verify.cl): the same operations in the
 * same order, so the device must match it token for token. Built with
 * -ffp-contract=off like stream.c. */
#include "oracle/oracle.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

#define SB 16384u  /* tokens per super-block */
#define LANES 256u
#define SB_STEPS 16u

typedef struct lse {
    float m, s;
} lse;

static float scaled(float x, float t, float r)
{
    return isinf(x) || t == 1.0f ? x : psr_oracle_div(x, t, r);
}

/* exp(y) for y <= 0 as the log-sum-exp computes it: 2^(y * log2 e). */
static float lse_term(float y)
{
    return psr_oracle_exp2_neg(y * 0x1.715476p+0f);
}

/* log-sum-exp of x / T over a row, in the kernel's fixed order
 * (cl/verify.cl): per super-block, lane w's max M_w over its 64 tokens
 * base + 4w + c + 1024k, four sums over k of exp(x / T - M_w) (one per
 * c), the lane's (s_0 + s_1) + (s_2 + s_3); the 256 lanes' (M, S) merged
 * pairwise; then the super-blocks' (M, S) merged in order. */
float psr_oracle_row_lse(const float *x, size_t vocab, float t, float r)
{
    float lm[LANES], ls[LANES];
    size_t nsb = (vocab + SB - 1) / SB;
    lse *parts = malloc(nsb * sizeof *parts);
    if (!parts)
        return NAN;
    for (size_t sb = 0; sb < nsb; sb++) {
        size_t base = sb * SB, end = base + SB < vocab ? base + SB : vocab;
        for (size_t w = 0; w < LANES; w++) {
            float m = -INFINITY, s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (size_t k = 0; k < SB_STEPS; k++)
                for (size_t c = 0; c < 4; c++) {
                    size_t i = base + 4 * w + c + k * 4 * LANES;
                    if (i < end && !isnan(x[i]))
                        m = fmaxf(m, scaled(x[i], t, r));
                }
            for (size_t k = 0; k < SB_STEPS; k++)
                for (size_t c = 0; c < 4; c++) {
                    size_t i = base + 4 * w + c + k * 4 * LANES;
                    if (i < end)
                        s[c] = s[c] + lse_term(scaled(x[i], t, r) - m); /* NaN adds 0 */
                }
            lm[w] = m;
            ls[w] = (s[0] + s[1]) + (s[2] + s[3]);
        }
        for (size_t half = LANES / 2; half > 0; half >>= 1)
            for (size_t l = 0; l < half; l++) {
                float m = fmaxf(lm[l], lm[l + half]);
                ls[l] = ls[l] * lse_term(lm[l] - m) + ls[l + half] * lse_term(lm[l + half] - m);
                lm[l] = m;
            }
        parts[sb] = (lse){lm[0], ls[0]};
    }
    float big = -INFINITY;
    for (size_t sb = 0; sb < nsb; sb++)
        big = fmaxf(big, parts[sb].m);
    float sum = 0.0f;
    for (size_t sb = 0; sb < nsb && !isinf(big); sb++)
        sum = sum + parts[sb].s * lse_term(parts[sb].m - big);
    free(parts);
    return isinf(big) ? big : big + psr_oracle_log(sum);
}

/* Lowest index of the largest value, NaN ignored; 0 when nothing beats -inf. */
static uint32_t row_argmax(const float *x, size_t vocab)
{
    float best = -INFINITY;
    uint32_t best_i = 0;
    for (uint32_t i = 0; i < vocab; i++)
        if (x[i] > best) {
            best = x[i];
            best_i = i;
        }
    return best_i;
}

static int32_t residual_token(const psr_oracle_verify_in *in, const float *x, const float *y, int32_t d,
                              float t, float r, uint32_t key)
{
    float lse_p = psr_oracle_row_lse(x, in->vocab, t, r);
    float lse_q = y ? psr_oracle_row_lse(y, in->vocab, t, r) : 0.0f;
    double best = -INFINITY;
    uint32_t best_i = 0;
    for (uint32_t i = 0; i < in->vocab; i++) {
        if (isnan(x[i]))
            continue;
        float lp = scaled(x[i], t, r) - lse_p;
        if (!(lp > -87.0f))
            continue;
        float p = psr_oracle_exp_neg(lp);
        float q = y ? psr_oracle_exp_neg(scaled(y[i], t, r) - lse_q) : (d >= 0 && i == (uint32_t)d ? 1.0f : 0.0f);
        float diff = p - q;
        if (!(diff >= FLT_MIN))
            continue;
        double v;
        if (in->noise == PSR_ORACLE_FP64)
            v = (double)psr_oracle_log(diff) + psr_oracle_gumbel64(key, i);
        else if (in->noise == PSR_ORACLE_WIDE)
            v = (double)(psr_oracle_log(diff) + psr_oracle_gumbel_wide(key, i));
        else
            v = (double)(psr_oracle_log(diff) + psr_oracle_gumbel32(key, i));
        if (v > best) {
            best = v;
            best_i = i;
        }
    }
    return (int32_t)best_i;
}

void psr_oracle_verify(const psr_oracle_verify_in *in, int32_t *tokens, int32_t *num_sampled)
{
    size_t cols = in->max_drafts + 1;
    for (size_t req = 0; req < in->requests; req++) {
        size_t first = (size_t)in->cu[req], n = (size_t)in->cu[req + 1] - first;
        float t = in->temperatures[req];
        bool greedy = in->greedy_all || !(isnormal(t) && t > 0.0f);
        float r = greedy ? 1.0f : psr_oracle_temp_recip(t);
        size_t j = 0;
        for (; j + 1 < n; j++) {
            size_t row = first + j;
            const float *x = in->target + row * in->vocab;
            int32_t d = in->draft_tokens[row];
            bool ok = false;
            if (d >= 0 && (size_t)d < in->vocab) {
                if (greedy) {
                    ok = (uint32_t)d == row_argmax(x, in->vocab);
                } else {
                    float tl = scaled(x[d], t, r) - psr_oracle_row_lse(x, in->vocab, t, r);
                    float dl = 0.0f;
                    if (in->draft_cache) {
                        const float *y = in->draft_cache + (req * in->cache_k + j) * in->vocab;
                        dl = scaled(y[d], t, r) - psr_oracle_row_lse(y, in->vocab, t, r);
                    }
                    uint32_t key = psr_oracle_row_key((uint64_t)in->seeds[req],
                                                      (uint64_t)in->positions[row], false);
                    ok = tl > psr_oracle_log(psr_oracle_u32(key)) + dl;
                }
            }
            if (!ok)
                break;
        }
        size_t row = first + j;
        const float *x = in->target + row * in->vocab;
        int32_t token;
        if (greedy) {
            token = (int32_t)row_argmax(x, in->vocab);
        } else if (j + 1 < n) {
            int32_t d = in->draft_tokens[row];
            const float *y = in->draft_cache && d >= 0
                                 ? in->draft_cache + (req * in->cache_k + j) * in->vocab
                                 : NULL;
            uint32_t key = psr_oracle_row_key((uint64_t)in->seeds[req], (uint64_t)in->positions[row], false);
            token = residual_token(in, x, y, d, t, r, key);
        } else {
            token = psr_oracle_sample_row(x, in->vocab, t, in->seeds[req], in->positions[row], false,
                                          in->noise, NULL);
        }
        for (size_t c = 0; c < cols; c++)
            tokens[req * cols + c] = c < j ? in->draft_tokens[first + c] : c == j ? token : -1;
        num_sampled[req] = (int32_t)j + 1;
    }
}
