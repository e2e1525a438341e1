/* The host oracle (lib/oracle) for the Python package: a few plain C
 * functions over whole batches, the only symbols libpsr_oracle exports,
 * loaded by psr/oracle.py with ctypes. They check nothing: the Python side
 * checks every shape, dtype and value before it calls them. Built with
 * -ffp-contract=off, like the oracle. */
#include "oracle.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PSR_PY_API __attribute__((visibility("default")))
#define TOP_N_MAX 20 /* PSR_LOGPROBS_MAX_TOP_N of psr.h */

PSR_PY_API unsigned psr_py_oracle_abi(void);
PSR_PY_API float psr_py_oracle_filter_threshold(const float *logits, size_t vocab, float temperature,
                                                int32_t top_k, float top_p, float min_p);
PSR_PY_API int psr_py_oracle_sample(const float *logits, size_t rows, size_t vocab, const float *temps,
                                    const int64_t *seeds, const int64_t *positions, int drafting, int noise,
                                    int race, const int32_t *top_k, const float *top_p, const float *min_p,
                                    int32_t *tokens, uint8_t *no_finite);
PSR_PY_API int psr_py_oracle_logprobs(const float *logits, size_t rows, size_t vocab, const float *temps,
                                      int raw, const int32_t *tokens, const int32_t *top_k,
                                      const float *top_p, const float *min_p, int top_n, float *logprobs,
                                      int32_t *ranks, int32_t *top_ids, float *top_logprobs);
PSR_PY_API void psr_py_oracle_verify(size_t requests, const int32_t *cu, size_t rows, size_t max_drafts,
                                     size_t vocab, const float *target, const float *draft_cache,
                                     size_t cache_k, const int32_t *draft_tokens, const int64_t *seeds,
                                     const float *temps, const int64_t *positions, int greedy_all, int noise,
                                     int32_t *tokens, int32_t *num_sampled);

/* Bumped when a signature above changes; psr/oracle.py checks it. */
unsigned psr_py_oracle_abi(void)
{
    return 1;
}

float psr_py_oracle_filter_threshold(const float *logits, size_t vocab, float temperature, int32_t top_k,
                                     float top_p, float min_p)
{
    return psr_oracle_filter_threshold(logits, vocab, temperature, top_k, top_p, min_p);
}

static psr_noise_kind noise_kind(int noise)
{
    return noise == 1 ? PSR_ORACLE_FP64 : noise == 2 ? PSR_ORACLE_WIDE : PSR_ORACLE_FP32;
}

/* Row r's filter threshold (-inf: none), from the per-row arrays that are set. */
static float row_cut(const float *x, size_t vocab, float t, size_t r, const int32_t *top_k, const float *top_p,
                     const float *min_p)
{
    if (!top_k && !top_p && !min_p)
        return -INFINITY;
    return psr_oracle_filter_threshold(x, vocab, t, top_k ? top_k[r] : 0, top_p ? top_p[r] : 1.0f,
                                       min_p ? min_p[r] : 0.0f);
}

/* One token per row, as psr_sample_host: Gumbel-max over fp32 logits after
 * the row's filters (race = 0), or the exponential race over probabilities
 * (race = 1, no filters). 0, or -1 when out of memory. */
int psr_py_oracle_sample(const float *logits, size_t rows, size_t vocab, const float *temps, const int64_t *seeds,
                         const int64_t *positions, int drafting, int noise, int race, const int32_t *top_k,
                         const float *top_p, const float *min_p, int32_t *tokens, uint8_t *no_finite)
{
    float *masked = malloc(vocab * sizeof *masked);
    if (!masked)
        return -1;
    for (size_t r = 0; r < rows; r++) {
        const float *x = logits + r * vocab;
        bool none = false;
        if (race) {
            tokens[r] = psr_oracle_race_row(x, vocab, temps[r], seeds[r], positions[r], drafting != 0,
                                            noise_kind(noise), &none);
        } else {
            float cut = row_cut(x, vocab, temps[r], r, top_k, top_p, min_p);
            const float *row = x;
            if (cut > -INFINITY) { /* the kept set is s >= cut (NaN stays NaN) */
                for (size_t i = 0; i < vocab; i++)
                    masked[i] = psr_oracle_scaled(x[i], temps[r]) < cut ? -INFINITY : x[i];
                row = masked;
            }
            tokens[r] = psr_oracle_sample_row(row, vocab, temps[r], seeds[r], positions[r], drafting != 0,
                                              noise_kind(noise), &none);
        }
        if (no_finite)
            no_finite[r] = none;
    }
    free(masked);
    return 0;
}

/* psr_logprobs_host's outputs, one request per row. top_ids and
 * top_logprobs are [rows, top_n] (unused with top_n = 0). Always 0. */
int psr_py_oracle_logprobs(const float *logits, size_t rows, size_t vocab, const float *temps, int raw,
                           const int32_t *tokens, const int32_t *top_k, const float *top_p, const float *min_p,
                           int top_n, float *logprobs, int32_t *ranks, int32_t *top_ids, float *top_logprobs)
{
    float ids_lp[TOP_N_MAX];
    int32_t ids[TOP_N_MAX];
    for (size_t r = 0; r < rows; r++) {
        const float *x = logits + r * vocab;
        float t = raw ? 1.0f : temps[r];
        float cut = raw ? -INFINITY : row_cut(x, vocab, t, r, top_k, top_p, min_p);
        psr_oracle_logprobs_row(x, vocab, t, raw != 0, cut, tokens[r], top_n, &logprobs[r], &ranks[r], ids, ids_lp);
        for (int k = 0; k < top_n; k++) {
            top_ids[r * (size_t)top_n + (size_t)k] = ids[k];
            top_logprobs[r * (size_t)top_n + (size_t)k] = ids_lp[k];
        }
    }
    return 0;
}

/* psr_verify_host for fp32 targets: tokens [requests, max_drafts + 1],
 * num_sampled [requests]. */
void psr_py_oracle_verify(size_t requests, const int32_t *cu, size_t rows, size_t max_drafts, size_t vocab,
                          const float *target, const float *draft_cache, size_t cache_k,
                          const int32_t *draft_tokens, const int64_t *seeds, const float *temps,
                          const int64_t *positions, int greedy_all, int noise, int32_t *tokens,
                          int32_t *num_sampled)
{
    psr_oracle_verify_in in = {
        .requests = requests, .rows = rows, .vocab = vocab, .max_drafts = max_drafts, .cu = cu,
        .target = target, .draft_cache = draft_cache, .cache_k = cache_k, .draft_tokens = draft_tokens,
        .seeds = seeds, .temperatures = temps, .positions = positions, .greedy_all = greedy_all != 0,
        .noise = noise_kind(noise),
    };
    psr_oracle_verify(&in, tokens, num_sampled);
}
