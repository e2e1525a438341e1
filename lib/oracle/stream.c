/* The host oracle: the random stream and the deterministic noise of
 * cl/stream.cl and cl/detmath.cl, written again in C with the same
 * operations in the same order. Built with -ffp-contract=off so the
 * compiler fuses nothing; fma() and fmaf() are correctly rounded. */
#include "oracle/oracle.h"

#include <float.h>
#include <math.h>
#include <string.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void psr_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        uint32_t n3 = (uint32_t)p0;
        c0 = n0, c1 = n1, c2 = n2, c3 = n3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

void psr_oracle_draw(uint64_t seed, uint64_t offset, uint32_t out[4])
{
    uint32_t ctr[4] = {(uint32_t)offset, (uint32_t)(offset >> 32), 0, 0};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    psr_philox4x32_10(ctr, key, out);
}

float psr_oracle_u32(uint32_t w)
{
    int32_t s;
    memcpy(&s, &w, sizeof s);
    if (s < 0)
        s = ~s;
    float u = (float)s * 0x1.fffffep-32f;
    return u > 0x1.fffffep-32f ? u : 0x1.fffffep-32f;
}

double psr_oracle_u64(uint32_t w0, uint32_t w1)
{
    uint64_t bits = ((uint64_t)w1 << 32) | w0;
    double u = (double)bits * 0x1p-64;
    return u > DBL_MIN ? u : DBL_MIN;
}

uint32_t psr_oracle_row_key(uint64_t seed, uint64_t pos, bool drafting)
{
    uint32_t w[4];
    psr_oracle_draw(seed, pos + (drafting ? ((uint64_t)1 << PSR_DRAFT_SALT_BITS) : 0), w);
    return w[0];
}

static float as_float(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static uint32_t as_uint(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

static float log1p_reduced(float f)
{
    float p = -0x1.321a4cp-4f;
    p = fmaf(p, f, 0x1.068b2ap-3f);
    p = fmaf(p, f, -0x1.0f9b0cp-3f);
    p = fmaf(p, f, 0x1.22bf86p-3f);
    p = fmaf(p, f, -0x1.5424e0p-3f);
    p = fmaf(p, f, 0x1.999fc2p-3f);
    p = fmaf(p, f, -0x1.000422p-2f);
    p = fmaf(p, f, 0x1.555558p-2f);
    p = fmaf(p, f, -0x1.fffff8p-2f);
    float f2 = f * f;
    return fmaf(f2, p, f);
}

float psr_oracle_log(float x)
{
    uint32_t bits = as_uint(x);
    int e = (int)((bits >> 23) & 0xffu) - 127;
    float m = as_float((bits & 0x007fffffu) | 0x3f800000u);
    if (m > 0x1.6a09e6p+0f) {
        m = m * 0.5f;
        e = e + 1;
    }
    float q = log1p_reduced(m - 1.0f);
    float fe = (float)e;
    return fmaf(fe, 0x1.62e000p-1f, fmaf(fe, 0x1.0bfbe8p-15f, q));
}

float psr_oracle_log1p_neg(float u)
{
    if (u <= 0x1.2bec34p-2f)
        return log1p_reduced(-u);
    if (u <= 0.5f)
        return fmaf(-1.0f, 0x1.62e000p-1f, fmaf(-1.0f, 0x1.0bfbe8p-15f, log1p_reduced(1.0f - 2.0f * u)));
    return psr_oracle_log(1.0f - u);
}

/* A polynomial by Horner's rule, c[0] the highest coefficient, one fma a
 * step as the kernels evaluate it (cl/detmath.cl). */
static float horner(const float *c, size_t n, float x)
{
    float p = c[0];
    for (size_t i = 1; i < n; i++)
        p = fmaf(p, x, c[i]);
    return p;
}

/* 2^k for a normal exponent k, from its bits. */
static float pow2i(int k)
{
    return as_float((uint32_t)(k + 127) << 23);
}

float psr_oracle_exp_neg(float y)
{
    if (!(y > -87.0f))
        return 0.0f;
    float k = rintf(y * 0x1.715476p+0f);
    float r = fmaf(-k, 0x1.62e000p-1f, y);
    r = fmaf(-k, 0x1.0bfbe8p-15f, r);
    static const float c[] = {0x1.a01a02p-13f, 0x1.6c16c2p-10f, 0x1.111112p-7f, 0x1.555556p-5f,
                              0x1.555556p-3f,  0.5f,            1.0f,           1.0f};
    return horner(c, sizeof c / sizeof c[0], r) * pow2i((int)k);
}

float psr_oracle_exp2_neg(float z)
{
    if (!(z > -125.0f))
        return 0.0f;
    float k = rintf(z);
    float f = z - k;
    static const float c[] = {0x1.5bba14p-10f, 0x1.3cea88p-7f, 0x1.c6b752p-5f, 0x1.ebf9bcp-3f, 0x1.62e42ap-1f,
                              1.0f};
    return horner(c, sizeof c / sizeof c[0], f) * pow2i((int)k);
}

float psr_oracle_recip(float b)
{
    float y = as_float(0x7ef311c3u - as_uint(b));
    for (int i = 0; i < 4; i++) {
        float r = fmaf(-b, y, 1.0f);
        y = fmaf(y, r, y);
    }
    return y;
}

float psr_oracle_temp_recip(float t)
{
    return psr_oracle_recip(fminf(t, 0x1p126f));
}

float psr_oracle_div(float a, float b, float r)
{
    float q = a * r;
    float rem = fmaf(-q, b, a);
    float d = fmaf(rem, r, q);
    return isinf(a * r) ? a * r : d;
}

double psr_oracle_log_d(double x)
{
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    int64_t e = (int64_t)((bits >> 52) & 0x7ffu) - 1023;
    uint64_t mbits = (bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull;
    double m;
    memcpy(&m, &mbits, sizeof m);
    if (m > 0x1.6a09e667f3bcdp+0) {
        m = m * 0.5;
        e = e + 1;
    }
    double f = m - 1.0;
    double s = f / (2.0 + f);
    double z = s * s;
    double q = 1.0 / 19.0;
    q = fma(q, z, 1.0 / 17.0);
    q = fma(q, z, 1.0 / 15.0);
    q = fma(q, z, 1.0 / 13.0);
    q = fma(q, z, 1.0 / 11.0);
    q = fma(q, z, 1.0 / 9.0);
    q = fma(q, z, 1.0 / 7.0);
    q = fma(q, z, 1.0 / 5.0);
    q = fma(q, z, 1.0 / 3.0);
    double two_s = 2.0 * s;
    double l = fma(two_s * z, q, two_s);
    double de = (double)e;
    return fma(de, 0x1.62e42fee00000p-1, fma(de, 0x1.a39ef35793c76p-33, l));
}

float psr_oracle_gumbel32(uint32_t row_key, uint32_t token)
{
    uint32_t w[4];
    psr_oracle_draw(row_key, token, w);
    float u = psr_oracle_u32(w[0]);
    return -psr_oracle_log(-psr_oracle_log1p_neg(u));
}

double psr_oracle_gumbel64(uint32_t row_key, uint32_t token)
{
    uint32_t w[4];
    psr_oracle_draw(row_key, token, w);
    double u = psr_oracle_u64(w[0], w[1]);
    return -psr_oracle_log_d(-psr_oracle_log_d(u));
}

float psr_oracle_wide_e(uint32_t w0, uint32_t w1)
{
    uint64_t bits = ((uint64_t)w1 << 32) | w0;
    if (bits >> 63) {
        float v = (float)(~bits + 1u) * 0x1p-64f;
        return -psr_oracle_log1p_neg(v);
    }
    float u = (float)bits * 0x1p-64f;
    if (!(u > 0x1p-64f))
        u = 0x1p-64f;
    return -psr_oracle_log(u);
}

float psr_oracle_gumbel_wide(uint32_t row_key, uint32_t token)
{
    uint32_t w[4];
    psr_oracle_draw(row_key, token, w);
    return -psr_oracle_log(psr_oracle_wide_e(w[0], w[1]));
}

int32_t psr_oracle_sample_row(const float *logits, size_t vocab, float temperature, int64_t seed,
                              int64_t pos, bool drafting, psr_noise_kind noise, bool *no_finite)
{
    bool greedy = temperature == 0.0f;
    uint32_t key = psr_oracle_row_key((uint64_t)seed, (uint64_t)pos, drafting);
    float r = greedy ? 1.0f : psr_oracle_temp_recip(temperature);
    double best = -INFINITY;
    uint32_t best_i = 0;
    for (uint32_t i = 0; i < vocab; i++) {
        float x = logits[i];
        double v;
        if (isnan(x))
            v = -INFINITY;
        else if (greedy || isinf(x))
            v = x;
        else if (noise == PSR_ORACLE_FP64)
            v = (double)psr_oracle_div(x, temperature, r) + psr_oracle_gumbel64(key, i);
        else if (noise == PSR_ORACLE_WIDE)
            v = (double)(psr_oracle_div(x, temperature, r) + psr_oracle_gumbel_wide(key, i));
        else
            v = (double)(psr_oracle_div(x, temperature, r) + psr_oracle_gumbel32(key, i));
        if (v > best) {
            best = v;
            best_i = i;
        }
    }
    if (no_finite)
        *no_finite = !(best > -INFINITY);
    return (int32_t)best_i;
}

/* E of the exponential race for one token's words, per noise option. */
static double race_e(uint32_t w0, uint32_t w1, psr_noise_kind noise)
{
    if (noise == PSR_ORACLE_FP64) /* 0 - log: u rounded to 1 gives E = +0, an infinite score */
        return 0.0 - psr_oracle_log_d(psr_oracle_u64(w0, w1));
    if (noise == PSR_ORACLE_WIDE)
        return psr_oracle_wide_e(w0, w1);
    return -psr_oracle_log1p_neg(psr_oracle_u32(w0));
}

int32_t psr_oracle_race_row(const float *probs, size_t vocab, float temperature, int64_t seed,
                            int64_t pos, bool drafting, psr_noise_kind noise, bool *no_positive)
{
    uint32_t key = psr_oracle_row_key((uint64_t)seed, (uint64_t)pos, drafting);
    double best = 0;
    uint32_t best_i = 0;
    for (uint32_t i = 0; i < vocab; i++) {
        float p = probs[i];
        if (!(p > 0.0f))
            continue;
        double v;
        if (temperature == 0.0f) {
            v = p;
        } else {
            uint32_t w[4];
            psr_oracle_draw(key, i, w);
            if (noise == PSR_ORACLE_FP64)
                v = (double)p * (1.0 / race_e(w[0], w[1], noise));
            else
                v = (double)(p * psr_oracle_recip((float)race_e(w[0], w[1], noise)));
        }
        if (v > best) {
            best = v;
            best_i = i;
        }
    }
    if (no_positive)
        *no_positive = !(best > 0);
    return (int32_t)best_i;
}

/* One group of the race over logits: the best score p * (1/E) of tokens
 * [start, end), p = exp(s - shift) with shift the group's largest scaled
 * logit, back on the shared scale as shift + log(score). */
static double race_logits_group(const float *x, size_t start, size_t end, float t, float r, uint32_t key,
                                psr_noise_kind noise, float cut, uint32_t *best_i)
{
    float shift = -INFINITY;
    for (size_t i = start; i < end; i++)
        if (!isnan(x[i]))
            shift = fmaxf(shift, isinf(x[i]) ? x[i] : psr_oracle_div(x[i], t, r));
    double best = -INFINITY;
    *best_i = (uint32_t)start;
    for (size_t i = start; i < end; i++) {
        if (isnan(x[i]))
            continue;
        float xs = isinf(x[i]) ? x[i] : psr_oracle_div(x[i], t, r);
        if (xs < cut)
            continue;
        float p = isinf(xs) ? (xs > 0.0f ? INFINITY : 0.0f) : psr_oracle_exp_neg(xs - shift);
        if (!(p > 0.0f))
            continue;
        uint32_t w[4];
        psr_oracle_draw(key, (uint64_t)i, w);
        double v = noise == PSR_ORACLE_FP64 ? (double)p * (1.0 / race_e(w[0], w[1], noise))
                                            : (double)(p * psr_oracle_recip((float)race_e(w[0], w[1], noise)));
        if (v > best) {
            best = v;
            *best_i = (uint32_t)i;
        }
    }
    if (!(best > 0.0) || isinf(best))
        return best > 0.0 ? best : -INFINITY;
    if (noise == PSR_ORACLE_FP64)
        return (double)shift + psr_oracle_log_d(best);
    return (double)(shift + psr_oracle_log(fmaxf((float)best, FLT_MIN)));
}

int32_t psr_oracle_race_logits_row(const float *logits, size_t vocab, size_t chunk, float temperature,
                                   int64_t seed, int64_t pos, bool drafting, psr_noise_kind noise, float cut,
                                   bool *no_finite)
{
    if (temperature == 0.0f) /* greedy: the argmax, as Gumbel-max's */
        return psr_oracle_sample_row(logits, vocab, 0.0f, seed, pos, drafting, noise, no_finite);
    uint32_t key = psr_oracle_row_key((uint64_t)seed, (uint64_t)pos, drafting);
    float r = psr_oracle_temp_recip(temperature);
    double best = -INFINITY;
    uint32_t best_i = 0;
    for (size_t start = 0; start < vocab; start += chunk) {
        uint32_t i;
        size_t end = vocab - start < chunk ? vocab : start + chunk;
        double v = race_logits_group(logits, start, end, temperature, r, key, noise, cut, &i);
        if (v > best) {
            best = v;
            best_i = i;
        }
    }
    if (no_finite)
        *no_finite = !(best > -INFINITY);
    return (int32_t)best_i;
}
