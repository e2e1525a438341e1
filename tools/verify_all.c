/* psr verify (no subcommand): every quick self-test on the chosen device,
 * PASS or FAIL each. */
#include "cli.h"
#include "check.h"
#include "oracle.h"
#include <psr/psr_experimental.h>
#include "json.h"
#include "vectors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct check {
    const char *name;
    bool pass;
    char detail[256];
} check;

/* The embedded known answers: row keys (target and draft streams), fp32
 * uniforms and, with fp64, fp64 uniforms, bit for bit. */
static psr_status check_stream(psr_context *ctx, check *c)
{
    const unsigned n = psr_uniform_vector_count;
    psr_device_info info;
    psr_context_device_info(ctx, &info);
    bool fp64 = info.capabilities & PSR_CAP_FP64;
    int64_t *seeds = malloc(n * 8), *pos = malloc(n * 8);
    uint32_t *tok = malloc(n * 4), *keys = malloc(n * 4), *u32 = malloc(n * 4);
    uint64_t *u64 = malloc(n * 8);
    psr_status st = seeds && pos && tok && keys && u32 && u64 ? PSR_OK : PSR_ERR_OUT_OF_HOST_MEMORY;
    unsigned checked = 0, wrong = 0;
    for (int drafting = 0; drafting <= 1 && st == PSR_OK; drafting++) {
        unsigned rows = 0;
        for (unsigned i = 0; i < n; i++)
            if (psr_uniform_vectors[i].drafting == drafting) {
                seeds[rows] = psr_uniform_vectors[i].seed;
                pos[rows] = psr_uniform_vectors[i].pos;
                tok[rows++] = psr_uniform_vectors[i].token;
            }
        st = psr_probe_uniforms(ctx, drafting, rows, seeds, pos, tok, keys, u32, u64);
        for (unsigned i = 0, r = 0; i < n && st == PSR_OK; i++) {
            const psr_uniform_vector *x = &psr_uniform_vectors[i];
            if (x->drafting != drafting)
                continue;
            wrong += keys[r] != x->row_key || u32[r] != x->u32_bits || (fp64 && u64[r] != x->u64_bits);
            checked++, r++;
        }
    }
    c->name = "stream";
    c->pass = st == PSR_OK && wrong == 0 && checked == n;
    snprintf(c->detail, sizeof c->detail,
             "%u known answers (row keys of both streams, fp32%s uniforms): %u wrong", checked,
             fp64 ? " and fp64" : "", wrong);
    free(seeds), free(pos), free(tok), free(keys), free(u32), free(u64);
    return st;
}

/* psr_sample_host of fp32 rows, one request per row. */
static psr_status sample_f32(psr_context *ctx, const float *x, size_t rows, size_t vocab, const int64_t *seeds,
                             const int64_t *pos, const float *temps, int32_t *tokens)
{
    psr_sample_host_args a;
    psr_sample_host_args_init(&a, sizeof a);
    a.rows = rows, a.vocab = vocab, a.logits = x;
    a.seeds = seeds, a.positions = pos, a.temperatures = temps, a.tokens = tokens;
    return psr_sample_host(ctx, &a);
}

/* Tokens equal the host oracle's (deterministic mode) on random rows. */
static psr_status check_oracle(psr_context *ctx, check *c)
{
    const size_t rows = 64, vocab = 4097;
    float *x = malloc(rows * vocab * 4), *temps = malloc(rows * 4);
    int64_t *seeds = malloc(rows * 8), *pos = malloc(rows * 8);
    int32_t *tokens = malloc(rows * 4);
    psr_status st = x && temps && seeds && pos && tokens ? PSR_OK : PSR_ERR_OUT_OF_HOST_MEMORY;
    size_t wrong = 0;
    if (st == PSR_OK) {
        for (size_t i = 0; i < rows * vocab; i++) {
            uint32_t w[4];
            psr_oracle_draw(77, i, w);
            x[i] = (float)((double)w[0] * 0x1p-32 * 12.0 - 6.0);
        }
        for (size_t r = 0; r < rows; r++) {
            seeds[r] = (int64_t)(r * 7919 + 1);
            pos[r] = (int64_t)(r * 31);
            temps[r] = r % 4 == 0 ? 0.0f : 0.5f + 0.25f * (float)(r % 3);
        }
        st = sample_f32(ctx, x, rows, vocab, seeds, pos, temps, tokens);
    }
    for (size_t r = 0; r < rows && st == PSR_OK; r++)
        wrong += tokens[r] != psr_oracle_sample_row(x + r * vocab, vocab, temps[r], seeds[r], pos[r],
                                                    false, PSR_ORACLE_FP32, NULL);
    c->name = "oracle";
    c->pass = st == PSR_OK && wrong == 0;
    snprintf(c->detail, sizeof c->detail, "%zu rows of %zu tokens against the host oracle: %zu differ",
             rows, vocab, wrong);
    free(x), free(temps), free(seeds), free(pos), free(tokens);
    return st;
}

/* Gumbel-max follows softmax(x / T): one row of 32 logits, many seeds. */
static psr_status check_fit(psr_context *ctx, check *c)
{
    const size_t rows = 40000, vocab = 32;
    float row[32], *x = malloc(rows * vocab * 4), *temps = malloc(rows * 4);
    int64_t *seeds = malloc(rows * 8), *pos = malloc(rows * 8);
    int32_t *tokens = malloc(rows * 4);
    psr_status st = x && temps && seeds && pos && tokens ? PSR_OK : PSR_ERR_OUT_OF_HOST_MEMORY;
    psr_chi2_result chi = {INFINITY, 0, 0};
    if (st == PSR_OK) {
        for (size_t i = 0; i < vocab; i++)
            row[i] = (float)i * 0.125f - (i % 3 == 0 ? 1.5f : 0.0f);
        for (size_t r = 0; r < rows; r++) {
            memcpy(x + r * vocab, row, sizeof row);
            seeds[r] = (int64_t)r + 1000;
            pos[r] = 5;
            temps[r] = 0.8f;
        }
        st = sample_f32(ctx, x, rows, vocab, seeds, pos, temps, tokens);
    }
    if (st == PSR_OK) {
        uint64_t counts[32] = {0};
        double p[32];
        for (size_t r = 0; r < rows; r++)
            counts[tokens[r]]++;
        psr_softmax(row, vocab, 0.8, p);
        chi = psr_chi2_test(counts, p, vocab, rows);
    }
    c->name = "fit";
    c->pass = st == PSR_OK && chi.chi2 < chi.threshold;
    snprintf(c->detail, sizeof c->detail,
             "%zu draws of a %zu-token row at T 0.8: chi2 %.1f, threshold %.1f", rows, vocab, chi.chi2,
             chi.threshold);
    free(x), free(temps), free(seeds), free(pos), free(tokens);
    return st;
}

static psr_status check_unbiased(psr_context *ctx, check *c)
{
    const size_t k = 3, trials = 50000;
    psr_unbiased_result *res = malloc(sizeof *res);
    if (!res)
        return PSR_ERR_OUT_OF_HOST_MEMORY;
    psr_status st = psr_unbiased_run(ctx, k, trials, 11, res);
    double worst = 0, worst_t = 0;
    c->pass = st == PSR_OK;
    for (size_t j = 0; j <= k && st == PSR_OK; j++) {
        psr_chi2_result chi = psr_chi2_test(res->counts[j], res->p, PSR_UNBIASED_VOCAB, res->reached[j]);
        if (!(chi.chi2 < chi.threshold))
            c->pass = false;
        if (chi.chi2 / chi.threshold >= worst / (worst_t ? worst_t : 1))
            worst = chi.chi2, worst_t = chi.threshold;
    }
    c->name = "unbiased";
    snprintf(c->detail, sizeof c->detail,
             "speculative decoding, k %zu, %zu trials: worst position chi2 %.1f, threshold %.1f", k,
             trials, worst, worst_t);
    free(res);
    return st;
}

int verify_all(const char *device, bool as_json)
{
    psr_context *ctx = cli_open_context(device, false);
    if (!ctx)
        return CLI_FAILED;
    psr_device_info info;
    psr_context_device_info(ctx, &info);
    psr_status (*const run[])(psr_context *, check *) = {check_stream, check_oracle, check_fit,
                                                          check_unbiased};
    const size_t n = sizeof run / sizeof *run;
    check checks[4];
    bool all = true;
    if (!as_json)
        printf("device: %s (%s)\n", info.name, info.platform_name);
    for (size_t i = 0; i < n; i++) {
        memset(&checks[i], 0, sizeof checks[i]);
        psr_status st = run[i](ctx, &checks[i]);
        if (st != PSR_OK) {
            checks[i].pass = false;
            snprintf(checks[i].detail, sizeof checks[i].detail, "%s: %s", psr_status_string(st),
                     psr_last_error(ctx));
        }
        all &= checks[i].pass;
        if (!as_json)
            printf("%-4s %-9s %s\n", checks[i].pass ? "PASS" : "FAIL", checks[i].name, checks[i].detail);
    }
    if (as_json) {
        json_writer w;
        json_init(&w, stdout);
        json_begin_object(&w);
        json_key_string(&w, "device", info.name);
        json_key(&w, "checks");
        json_begin_array(&w);
        for (size_t i = 0; i < n; i++) {
            json_begin_object(&w);
            json_key_string(&w, "name", checks[i].name);
            json_key_bool(&w, "pass", checks[i].pass);
            json_key_string(&w, "detail", checks[i].detail);
            json_end_object(&w);
        }
        json_end_array(&w);
        json_key_bool(&w, "pass", all);
        json_end_object(&w);
        json_finish(&w);
    } else {
        printf("%s\n", all ? "PASS" : "FAIL");
    }
    psr_context_free(ctx);
    return all ? CLI_OK : CLI_FAILED;
}
