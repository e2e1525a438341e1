/* The host oracle: every kernel's operations in the same order on the host,
 * bit for bit. Depends on nothing of psr's. */
#ifndef PSR_ORACLE_H
#define PSR_ORACLE_H

#include "psr_shared.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- logits of 16-bit types as the kernels load them (dtype.c) ---- */

float psr_oracle_f16(uint16_t h);
float psr_oracle_bf16(uint16_t b);

/* ---- the host oracle (stream.c): the stream and noise of the kernels ---- */

void psr_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
void psr_oracle_draw(uint64_t seed, uint64_t offset, uint32_t out[4]);
float psr_oracle_u32(uint32_t w);
double psr_oracle_u64(uint32_t w0, uint32_t w1);
uint32_t psr_oracle_row_key(uint64_t seed, uint64_t pos, bool drafting);
float psr_oracle_log(float x);
float psr_oracle_log1p_neg(float u);
float psr_oracle_recip(float b);
/* 1/T as the kernels take it (psr_temp_recip): T above 2^126 as 2^126. */
float psr_oracle_temp_recip(float t);
float psr_oracle_div(float a, float b, float r);
double psr_oracle_log_d(double x);
float psr_oracle_gumbel32(uint32_t row_key, uint32_t token);
double psr_oracle_gumbel64(uint32_t row_key, uint32_t token);
typedef enum psr_noise_kind { PSR_ORACLE_FP32, PSR_ORACLE_FP64, PSR_ORACLE_WIDE } psr_noise_kind;
/* E = -log(u) of the 64-bit uniform, in fp32 only (cl/gumbel.cl, USE_WIDE). */
float psr_oracle_wide_e(uint32_t w0, uint32_t w1);
float psr_oracle_gumbel_wide(uint32_t row_key, uint32_t token);
/* The token the deterministic Gumbel kernel picks for one fp32 row. */
int32_t psr_oracle_sample_row(const float *logits, size_t vocab, float temperature, int64_t seed,
                              int64_t pos, bool drafting, psr_noise_kind noise, bool *no_finite);

/* The token the exponential race over probabilities picks (PSR_SAMPLE_RACE |
 * PSR_SAMPLE_PROBS): argmax p * (1/E), fp32 or (fp64) double. */
int32_t psr_oracle_race_row(const float *probs, size_t vocab, float temperature, int64_t seed,
                            int64_t pos, bool drafting, psr_noise_kind noise, bool *no_positive);

/* The token the exponential race over logits (PSR_SAMPLE_RACE alone)
 * picks for one fp32 row split into groups of `chunk` tokens as the
 * launch splits it (psr_split_rows): each group scales its weights
 * exp(s - m) by its own largest scaled logit m, so the bits depend on the
 * split; cut is the filters' threshold (-inf: none). */
int32_t psr_oracle_race_logits_row(const float *logits, size_t vocab, size_t chunk, float temperature,
                                   int64_t seed, int64_t pos, bool drafting, psr_noise_kind noise, float cut,
                                   bool *no_finite);

float psr_oracle_exp_neg(float y);
/* 2^z for z <= 0 as cl/detmath.cl psr_det_exp2_neg (the log-sum-exp term). */
float psr_oracle_exp2_neg(float z);

/* The filter threshold of cl/filter.cl for one fp32 row (lib/oracle/filter.c):
 * keep token i iff its scaled logit psr_oracle_div(x, T) >= the result;
 * -inf when nothing is removed, NaN for a bad top_p or min_p. top_p = 1,
 * min_p = 0 and top_k <= 0 or >= vocab are off. */
float psr_oracle_filter_threshold(const float *logits, size_t vocab, float temperature,
                                  int32_t top_k, float top_p, float min_p);
/* The scaled logit the kernels compare with the threshold (NaN stays NaN). */
float psr_oracle_scaled(float x, float temperature);

/* The log-sum-exp of x / T over a row in psr's fixed order (cl/verify.cl);
 * r = psr_oracle_recip(t); t = 1 uses x itself. */
float psr_oracle_row_lse(const float *x, size_t vocab, float t, float r);
/* psr_logprobs on the host (lib/oracle/logprobs.c), one fp32 row: the
 * token's logprob and rank, and the top_n ids and logprobs; cut is the
 * row's filter threshold (-inf: none). False: out of memory, nothing written. */
bool psr_oracle_logprobs_row(const float *x, size_t vocab, float t, bool raw, float cut, int32_t token,
                             int top_n, float *logprob, int32_t *rank, int32_t *top_ids, float *top_logprobs);
/* psr_verify on the host (lib/oracle/verify.c), for fp32 target logits. */
typedef struct psr_oracle_verify_in {
    size_t requests, rows, vocab, max_drafts;
    const int32_t *cu;           /* [requests + 1] */
    const float *target;         /* [rows, vocab] */
    const float *draft_cache;    /* [requests, cache_k, vocab] or NULL (one-hot drafts) */
    size_t cache_k;
    const int32_t *draft_tokens; /* [rows] */
    const int64_t *seeds;        /* [requests] */
    const float *temperatures;   /* [requests] */
    const int64_t *positions;    /* [rows] */
    bool greedy_all;
    psr_noise_kind noise;
} psr_oracle_verify_in;
/* tokens: [requests, max_drafts + 1]; num_sampled: [requests]. */
void psr_oracle_verify(const psr_oracle_verify_in *in, int32_t *tokens, int32_t *num_sampled);

#endif
