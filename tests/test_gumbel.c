/* Gumbel-max sampling on a real device: noise bit for bit against the host
 * oracle, the known-answer tokens, tokens equal to the oracle's on random
 * logits, and the edge cases of DESIGN section 6. The default suite takes
 * each noise, the draft stream and fp16 once; the long suite adds their
 * combinations, bf16 and the builds without mul_hi or the vector loop. */
#include "common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static psr_context *ctx;
static bool has_fp64;

/* ---- noise, bit for bit ---- */

static size_t noise_mismatches(bool drafting, psr_noise_kind kind, size_t n)
{
    bool fp64 = kind == PSR_ORACLE_FP64;
    psr_variant v = {.set = PSR_KERNELS_NOISE,
                     .drafting = drafting,
                     .fp64 = fp64,
                     .wide = kind == PSR_ORACLE_WIDE};
    cl_kernel k;
    assert_int_equal(psr_kernel_get(ctx, &v, "psr_gumbel_noise_kat", &k), PSR_OK);
    cl_long *seeds = malloc(n * 8), *pos = malloc(n * 8);
    cl_uint *tokens = malloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        seeds[i] = (cl_long)random_seed();
        pos[i] = rnd() % (1u << 30);
        tokens[i] = rnd() % 1048576;
    }
    size_t acc = fp64 ? 8 : 4;
    void *noise = malloc(n * acc);
    cl_mem ds = upload(ctx, seeds, n * 8), dp = upload(ctx, pos, n * 8), dt = upload(ctx, tokens, n * 4);
    cl_mem dn = device_buffer(ctx, n * acc);
    cl_uint count = (cl_uint)n;
    clSetKernelArg(k, 0, sizeof ds, &ds);
    clSetKernelArg(k, 1, sizeof dp, &dp);
    clSetKernelArg(k, 2, sizeof dt, &dt);
    clSetKernelArg(k, 3, sizeof count, &count);
    assert_int_equal(clSetKernelArg(k, 4, sizeof dn, &dn), CL_SUCCESS);
    assert_int_equal(clEnqueueNDRangeKernel(queue_of(ctx), k, 1, NULL, &n, NULL, 0, NULL, NULL), CL_SUCCESS);
    download(ctx, dn, noise, n * acc);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t key = psr_oracle_row_key((uint64_t)seeds[i], (uint64_t)pos[i], drafting);
        bool same;
        if (fp64) {
            double want = psr_oracle_gumbel64(key, tokens[i]);
            same = memcmp(&want, (double *)noise + i, 8) == 0;
        } else {
            float want = kind == PSR_ORACLE_WIDE ? psr_oracle_gumbel_wide(key, tokens[i])
                                                : psr_oracle_gumbel32(key, tokens[i]);
            same = memcmp(&want, (float *)noise + i, 4) == 0;
        }
        if (!same && bad++ < 3)
            print_message("noise differs: seed %lld pos %lld token %u\n", (long long)seeds[i],
                          (long long)pos[i], tokens[i]);
    }
    release_buffers((cl_mem[]){ds, dp, dt, dn}, 4);
    free(seeds), free(pos), free(tokens), free(noise);
    return bad;
}

static void test_noise_bit_exact(void **state)
{
    (void)state;
    assert_int_equal(noise_mismatches(false, PSR_ORACLE_FP32, 1000000), 0);
    assert_int_equal(noise_mismatches(true, PSR_ORACLE_FP32, 200000), 0);
    assert_int_equal(noise_mismatches(false, PSR_ORACLE_WIDE, 300000), 0);
    if (has_fp64)
        assert_int_equal(noise_mismatches(false, PSR_ORACLE_FP64, 300000), 0);
}

/* The sampler's vector path (cl/vecmath.cl) with one noise: `n` vectors
 * of 16 tokens from each of 4 row keys. Returns the tokens whose noise
 * differs from the oracle's bit for bit; *loose counts bounds below the
 * noise, and noises or finite bounds above the block skip's `noise_max`. */
static size_t vector_noise_mismatches(psr_context *vc, psr_noise_kind kind, cl_uint n, double noise_max,
                                      size_t *loose)
{
    bool fp64 = kind == PSR_ORACLE_FP64;
    psr_variant v = {.set = PSR_KERNELS_NOISE, .fp64 = fp64, .wide = kind == PSR_ORACLE_WIDE};
    cl_kernel k;
    assert_int_equal(psr_kernel_get(vc, &v, "psr_gumbel_vnoise_kat", &k), PSR_OK);
    size_t acc = fp64 ? 8 : 4, count = 16 * (size_t)n;
    unsigned char *noise = malloc(count * acc), *bound = malloc(count * acc);
    cl_mem dn = device_buffer(vc, count * acc), db = device_buffer(vc, count * acc);
    size_t bad = 0;
    *loose = 0;
    for (int round = 0; round < 4; round++) {
        cl_uint key = rnd(), first = rnd() % (1u << 20);
        clSetKernelArg(k, 0, sizeof key, &key);
        clSetKernelArg(k, 1, sizeof first, &first);
        clSetKernelArg(k, 2, sizeof n, &n);
        clSetKernelArg(k, 3, sizeof dn, &dn);
        assert_int_equal(clSetKernelArg(k, 4, sizeof db, &db), CL_SUCCESS);
        size_t global = n;
        assert_int_equal(clEnqueueNDRangeKernel(queue_of(vc), k, 1, NULL, &global, NULL, 0, NULL, NULL),
                         CL_SUCCESS);
        download(vc, dn, noise, count * acc);
        download(vc, db, bound, count * acc);
        for (size_t i = 0; i < count; i++) {
            cl_uint token = first + (cl_uint)i;
            double got, lim, want;
            bool same;
            if (fp64) {
                double w = psr_oracle_gumbel64(key, token);
                memcpy(&got, noise + 8 * i, 8);
                memcpy(&lim, bound + 8 * i, 8);
                same = memcmp(&w, noise + 8 * i, 8) == 0;
                want = w;
            } else {
                float w = kind == PSR_ORACLE_WIDE ? psr_oracle_gumbel_wide(key, token)
                                                 : psr_oracle_gumbel32(key, token);
                float g, b;
                memcpy(&g, noise + 4 * i, 4);
                memcpy(&b, bound + 4 * i, 4);
                same = memcmp(&w, &g, 4) == 0;
                got = g, lim = b, want = w;
            }
            if (!same && bad++ < 3)
                print_message("vector noise differs: key %08x token %u: %a, want %a\n", key, token, got, want);
            *loose += !(lim >= want && want <= noise_max && (lim <= noise_max || isinf(lim)));
        }
    }
    release_buffers((cl_mem[]){dn, db}, 2);
    free(noise), free(bound);
    return bad;
}

/* The suite's context where it takes the vector path, else a new one
 * with the path forced on, so GPUs, which sample through the scalar loop,
 * check it too (the caller frees it when it is not ctx). */
static psr_context *vector_context(void)
{
    psr_context *vc = ctx;
    if (!tuning_of(ctx).sample.vector_width) {
        vc = open_context(NULL);
        psr_tuning t = tuning_of(vc);
        t.sample.vector_width = 16; /* a build option: before the first build */
        set_tuning(vc, &t);
    }
    assert_int_equal(tuning_of(vc).sample.vector_width, 16);
    return vc;
}

/* The vector path's noises equal the oracle's bit for bit, and each bound
 * lies between its noise and the value that lets a whole block skip
 * Philox. */
static void test_vector_noise_bit_exact(void **state)
{
    (void)state;
    psr_context *vc = vector_context();
    size_t loose = 0;
    assert_int_equal(vector_noise_mismatches(vc, PSR_ORACLE_FP32, 16384, 23.0, &loose), 0);
    assert_int_equal(loose, 0);
    assert_int_equal(vector_noise_mismatches(vc, PSR_ORACLE_WIDE, 4096, 46.0, &loose), 0);
    assert_int_equal(loose, 0);
    if (has_fp64) {
        assert_int_equal(vector_noise_mismatches(vc, PSR_ORACLE_FP64, 4096, 710.0, &loose), 0);
        assert_int_equal(loose, 0);
    }
    if (vc != ctx)
        psr_context_free(vc);
}

/* The vector bounds' counts of leading zeros (psr_vclz1 and the 64-bit
 * ones built on it: on AVX2 from a float's exponent) equal the count's,
 * on the values where the two forms meet (0, below and above 256, 2^23,
 * 2^24, the top bit), on the fp64 bound's 2048 and 4096 from the top and
 * on random ones of every length. */
static void test_vector_clz(void **state)
{
    (void)state;
    psr_context *vc = vector_context();
    enum { N = 1024 };
    static cl_uint words[32 * N];
    static cl_int got[5 * 16 * N];
    const cl_uint edges[] = {0,          1,          2,          3,          255,        256,
                             257,        511,        512,        0x7fffff,   0x800000,   0x800001,
                             0xffffff,   0x1000000,  0x1000001,  0x10000ff,  0x1000100,  0x7fffff80,
                             0x7fffffff, 0x80000000, 0x80000001, 0xffffffff, 0xffffff00, 0xc0000000,
                             0x40000000, 0x3fffffff, 0x00ffff00, 0x01000000, 0x0fffffff};
    size_t ne = sizeof edges / sizeof edges[0];
    for (size_t i = 0; i < 32 * N; i++)
        words[i] = i % (16 * N) < ne ? edges[i % (16 * N)] : rnd() >> (rnd() % 33 == 32 ? 31 : rnd() % 32);
    for (size_t i = 0; i < ne; i++) { /* the edges as low halves under a zero high half */
        words[64 + i] = 0;
        words[16 * N + 64 + i] = edges[i];
    }
    /* (hi, lo) pairs: 2^64 - 1 - bits around 2048 and 4096 (the fp64
     * bound's cases), 0, and borrows and carries between the halves */
    const cl_uint pairs[][2] = {{~0u, ~0u},        {~0u, ~0u - 1},    {~0u, ~0u - 2047}, {~0u, ~0u - 2048},
                                {~0u, ~0u - 2049}, {~0u, ~0u - 4095}, {~0u, ~0u - 4096}, {~0u, ~0u - 4097},
                                {~0u - 1, ~0u},    {~0u - 1, 100},    {0, 0},            {1, 0},
                                {0, 1},            {0x80000000, 0},   {5, 0},            {~0u, 0}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        words[128 + i] = pairs[i][0];
        words[16 * N + 128 + i] = pairs[i][1];
    }
    psr_variant v = {.set = PSR_KERNELS_NOISE};
    cl_kernel k;
    assert_int_equal(psr_kernel_get(vc, &v, "psr_vclz_kat", &k), PSR_OK);
    cl_mem dw = upload(vc, words, sizeof words), dout = device_buffer(vc, sizeof got);
    cl_uint n = N;
    clSetKernelArg(k, 0, sizeof dw, &dw);
    clSetKernelArg(k, 1, sizeof n, &n);
    assert_int_equal(clSetKernelArg(k, 2, sizeof dout, &dout), CL_SUCCESS);
    size_t global = N;
    assert_int_equal(clEnqueueNDRangeKernel(queue_of(vc), k, 1, NULL, &global, NULL, 0, NULL, NULL), CL_SUCCESS);
    download(vc, dout, got, sizeof got);
    size_t bad = 0;
    for (size_t i = 0; i < 16 * N; i++) {
        uint64_t w64 = (uint64_t)words[i] << 32 | words[16 * N + i], rest = ~w64 - 2048, neg = -w64;
        int want[5] = {1 + (words[i] ? __builtin_clz(words[i]) : 32), 1 + (w64 ? __builtin_clzll(w64) : 64),
                       1 + (rest ? __builtin_clzll(rest) : 64), ~w64 < 4096 ? -1 : 0,
                       1 + (neg ? __builtin_clzll(neg) : 64)};
        for (int j = 0; j < 5; j++)
            if (got[j * 16 * N + i] != want[j] && bad++ < 3)
                print_message("count %d of %#llx: %d, want %d\n", j, (unsigned long long)w64, got[j * 16 * N + i],
                              want[j]);
    }
    assert_int_equal(bad, 0);
    release_buffers((cl_mem[]){dw, dout}, 2);
    if (vc != ctx)
        psr_context_free(vc);
}

/* ---- known answers ---- */


static void test_token_vectors(void **state)
{
    (void)state;
    tsv_table *t = tsv_load("gumbel_tokens.tsv");
    float *logits = malloc(262144 * sizeof *logits);
    size_t checked = 0;
    for (size_t r = 0; r < t->rows; r++) {
        bool fp64 = tsv_int(t, r, "fp64") != 0, drafting = tsv_int(t, r, "drafting") != 0;
        if (fp64 && !has_fp64)
            continue;
        if (fp64 && drafting && !test_long()) /* one more build, for the long suite */
            continue;
        size_t vocab = (size_t)tsv_int(t, r, "vocab");
        vector_logits((uint32_t)tsv_int(t, r, "case"), (uint32_t)tsv_int(t, r, "row"), vocab, logits);
        int64_t seed = tsv_int(t, r, "seed"), pos = tsv_int(t, r, "pos");
        float temp = strtof(t->cells[r][tsv_col(t, "temp")], NULL);
        unsigned flags = (drafting ? PSR_SAMPLE_DRAFTING : 0) |
                         (fp64 ? PSR_FLAG_FP64_NOISE : 0);
        int32_t token = -7;
        psr_status st = sample_host(ctx, logits, PSR_DTYPE_F32, 1, vocab, 0, &seed, &pos, &temp,
                                        flags, &token, NULL, NULL);
        if (st != PSR_OK)
            fail_msg("%s: %s", psr_status_string(st), psr_last_error(ctx));
        if (token != tsv_int(t, r, "token"))
            fail_msg("vector row %zu (vocab %zu, temp %g, flags %u): token %d, want %lld", r, vocab,
                     (double)temp, flags, token, (long long)tsv_int(t, r, "token"));
        checked++;
    }
    print_message("%zu of %zu known-answer rows reproduced\n", checked, t->rows);
    free(logits);
    tsv_free(t);
}

/* ---- tokens equal the oracle's on random logits ---- */

/* Samples `rows` rows of fp32 `logits` at temperature `temp` with the
 * rows' seeds and positions (random where NULL), and fails on the first
 * token that is not the oracle's; the oracle's tokens go to `want` when it
 * is not NULL. */
static void sample_like_oracle(const float *logits, size_t rows, size_t vocab, float temp, unsigned flags,
                               const int64_t *seeds_in, const int64_t *pos_in, int32_t *want)
{
    int64_t *seeds = malloc(rows * 8), *pos = malloc(rows * 8);
    float *temps = malloc(rows * 4);
    int32_t *tokens = malloc(rows * 4);
    for (size_t r = 0; r < rows; r++) {
        seeds[r] = seeds_in ? seeds_in[r] : random_seed();
        pos[r] = pos_in ? pos_in[r] : rnd() % (1u << 30);
        temps[r] = temp;
    }
    psr_status st = sample_host(ctx, logits, PSR_DTYPE_F32, rows, vocab, 0, seeds, pos, temps, flags, tokens,
                                NULL, NULL);
    if (st != PSR_OK)
        fail_msg("%s: %s", psr_status_string(st), psr_last_error(ctx));
    for (size_t r = 0; r < rows; r++) {
        int32_t oracle = psr_oracle_sample_row(logits + r * vocab, vocab, temp, seeds[r], pos[r],
                                               flags & PSR_SAMPLE_DRAFTING, noise_of(flags), NULL);
        if (tokens[r] != oracle)
            fail_msg("vocab %zu temp %g flags %u row %zu: token %d, oracle %d", vocab, (double)temp, flags, r,
                     tokens[r], oracle);
        if (want)
            want[r] = oracle;
    }
    free(seeds), free(pos), free(temps), free(tokens);
}

static void check_against_oracle(size_t rows, size_t vocab, float sigma, float temp, unsigned flags)
{
    float *logits = malloc(rows * vocab * sizeof *logits);
    for (size_t i = 0; i < rows * vocab; i++)
        logits[i] = sigma * normal();
    sample_like_oracle(logits, rows, vocab, temp, flags, NULL, NULL, NULL);
    free(logits);
}

static void check_ramp(size_t rows, size_t vocab)
{
    float *logits = malloc(rows * vocab * sizeof *logits);
    for (size_t r = 0; r < rows; r++)
        for (size_t i = 0; i < vocab; i++)
            logits[r * vocab + i] = (float)i * (r % 2 ? 1e-4f : 1e-5f) + 0.01f * normal();
    sample_like_oracle(logits, rows, vocab, 1.0f, 0, NULL, NULL, NULL);
    free(logits);
}

/* Adversarial for the bounds that skip Philox or the logs: every token i
 * gets the logit -g_i (its own noise, negated), so all of them score
 * about 0 and each group's floor soon reaches 0, except token j, the
 * row's largest noise, which gets 1e-3 - g_j and wins by 1e-3 from more
 * than 13 below the rest, and the other tokens of j's 64 (-40: they never
 * win), so that j's block of the vector path tops at j. A position is
 * searched per row until g_j > 13.2: then a bound 10 nats too tight (the
 * control, run on PoCL's vector path) skips j, and on the scalar path one
 * ln 2 too tight. `flags` picks the noise: 0 or PSR_FLAG_WIDE_NOISE. */
static void check_edge_winner(size_t rows, size_t vocab, unsigned flags)
{
    float *logits = malloc(rows * vocab * sizeof *logits), *g = malloc(vocab * sizeof *g);
    int64_t *seeds = malloc(rows * 8), *pos = malloc(rows * 8);
    int32_t *want = malloc(rows * 4);
    size_t *winner = malloc(rows * sizeof *winner);
    for (size_t r = 0; r < rows; r++) {
        seeds[r] = random_seed();
        for (pos[r] = rnd() % (1u << 29);; pos[r]++) {
            uint32_t key = psr_oracle_row_key((uint64_t)seeds[r], (uint64_t)pos[r], false);
            size_t j = 0;
            for (size_t i = 0; i < vocab; i++) {
                g[i] = flags & PSR_FLAG_WIDE_NOISE ? psr_oracle_gumbel_wide(key, (uint32_t)i)
                                                   : psr_oracle_gumbel32(key, (uint32_t)i);
                j = g[i] > g[j] ? i : j;
            }
            if (g[j] > 13.2f) {
                for (size_t i = 0; i < vocab; i++)
                    logits[r * vocab + i] = i == j ? 1e-3f - g[j] : i / 64 == j / 64 ? -40.0f : -g[i];
                winner[r] = j;
                break;
            }
        }
    }
    sample_like_oracle(logits, rows, vocab, 1.0f, flags, seeds, pos, want);
    for (size_t r = 0; r < rows; r++)
        assert_int_equal(want[r], (int32_t)winner[r]); /* the row is built as intended */
    free(logits), free(g), free(seeds), free(pos), free(want), free(winner);
}

static void check_edge_winners(void)
{
    check_edge_winner(4, 32768, 0);
    check_edge_winner(2, 32768, PSR_FLAG_WIDE_NOISE);
}

/* The two ways a split row finishes (one kernel with 64-bit atomics, or a
 * second kernel), the two Random123 multiplies, and the scalar and vector
 * token loops give the same tokens. The default suite finishes in two
 * kernels on the suite's build (two_pass and the group counts are launch
 * values); the long suite adds a build with the other multiply and without
 * the vector loop. */
static void check_two_kernel_finish(void)
{
    check_against_oracle(8, 40000, 3.0f, 1.0f, 0);
    check_against_oracle(4, 9000, 3.0f, 0.0f, 0);
    check_against_oracle(16, 32000, 0.5f, 0.7f, 0);
    check_ramp(4, 70000);
    if (has_fp64)
        check_against_oracle(4, 40000, 3.0f, 1.0f, PSR_FLAG_FP64_NOISE);
}

static void test_finish_paths_agree(void **state)
{
    (void)state;
    const psr_tuning suite = tuning_of(ctx);
    psr_tuning t = suite;
    t.sample.two_pass = 1;
    t.sample.resident_per_unit = 64;
    t.sample.min_steps = 1;
    set_tuning(ctx, &t);
    check_two_kernel_finish();
    set_tuning(ctx, &suite);
    if (test_long()) {
        psr_context *saved = ctx;
        setenv("PSR_TUNE_TWO_PASS", "1", 1);
        setenv("PSR_TUNE_MULHI", suite.sample.mulhi ? "0" : "1", 1); /* the other multiply */
        setenv("PSR_TUNE_RESIDENT", "64", 1);
        setenv("PSR_TUNE_VECTOR", "0", 1);
        setenv("PSR_TUNE_MIN_STEPS", "1", 1);
        ctx = open_context(NULL);
        unsetenv("PSR_TUNE_TWO_PASS");
        unsetenv("PSR_TUNE_MULHI");
        unsetenv("PSR_TUNE_RESIDENT");
        unsetenv("PSR_TUNE_VECTOR");
        unsetenv("PSR_TUNE_MIN_STEPS");
        t = tuning_of(ctx);
        assert_true(t.sample.two_pass);
        assert_int_equal(t.sample.mulhi, !suite.sample.mulhi);
        assert_int_equal(t.sample.vector_width, 0);
        assert_int_equal(t.sample.min_steps, 1);
        /* One step per group allows twice the groups a row of two steps had. */
        cl_uint chunk1, groups1;
        psr_split_rows(ctx, 1, 8 * 4 * t.sample.work_group_size, &chunk1, &groups1);
        assert_int_equal(groups1, 8);
        check_two_kernel_finish();
        psr_context_free(ctx);
        ctx = saved;
    }
    /* One pass, many resident groups (many groups fold each row), the vector
     * loop; one step per group, so that a GPU's wide steps (16 lanes of 256
     * work-items) still split these rows into more than 8 groups. */
    psr_context *saved = ctx;
    if (!suite.sample.vector_width) { /* a GPU: the vector loop is another build */
        setenv("PSR_TUNE_VECTOR", "16", 1);
        ctx = open_context(NULL);
        unsetenv("PSR_TUNE_VECTOR");
    }
    t = tuning_of(ctx);
    assert_int_equal(t.sample.vector_width, 16);
    t.sample.two_pass = 0;
    t.sample.resident_per_unit = 64;
    t.sample.min_steps = 1;
    set_tuning(ctx, &t);
    cl_uint chunk, groups;
    psr_split_rows(ctx, 8, 40000, &chunk, &groups);
    assert_true(groups >= 9); /* several buckets in the two-level fold */
    check_against_oracle(8, 40000, 3.0f, 1.0f, PSR_SAMPLE_DRAFTING);
    check_ramp(2, 40000);
    if (has_fp64) /* fp64 scores gather in two words a group */
        check_against_oracle(8, 40000, 3.0f, 1.0f, PSR_FLAG_FP64_NOISE);
    if (ctx != saved)
        psr_context_free(ctx);
    else
        set_tuning(ctx, &suite);
    ctx = saved;
}

static void test_tokens_equal_oracle(void **state)
{
    (void)state;
    const size_t vocabs[] = {1, 2, 999, 1024, 4097, 50000};
    const float temps[] = {0.0f, 0.5f, 1.0f, 2.0f};
    for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; v++)
        for (size_t t = 0; t < 4; t++)
            check_against_oracle(vocabs[v] > 4097 ? 8 : 48, vocabs[v], 3.0f, temps[t], 0);
    check_against_oracle(32, 4097, 3.0f, 1.0f, PSR_SAMPLE_DRAFTING);
    /* Large vocabularies take the two-stage path. */
    check_against_oracle(3, 262144, 3.0f, 1.0f, 0);
    check_against_oracle(1, 1048576, 2.0f, 0.8f, PSR_SAMPLE_DRAFTING);
    /* Peaked rows (one logit far above the rest). */
    check_against_oracle(16, 32000, 0.5f, 0.7f, 0);
    /* Adversarial for pruning: rising logits keep raising the best; a
     * winner by a hair from far below the rest. */
    check_ramp(4, 70000);
    check_edge_winners();
    check_against_oracle(32, 4097, 3.0f, 1.0f, PSR_FLAG_WIDE_NOISE);
    check_against_oracle(2, 262144, 3.0f, 0.7f, PSR_FLAG_WIDE_NOISE | PSR_SAMPLE_DRAFTING);
    if (has_fp64) {
        check_against_oracle(32, 4097, 3.0f, 1.0f, PSR_FLAG_FP64_NOISE);
        if (test_long())
            check_against_oracle(2, 262144, 3.0f, 1.0f, PSR_FLAG_FP64_NOISE | PSR_SAMPLE_DRAFTING);
    }
}

/* ---- peaked rows: floors seeded from the row's largest logit ---- */

/* `rows` rows of N(0, 1) with one logit `peak` above the rest at a random
 * place and, where `second` is not 0, another `second` above them: the
 * second peak wins on some rows although the first is the row's largest
 * logit (the floor's seed). */
static void check_peaked(size_t rows, size_t vocab, float peak, float second, float temp, unsigned flags)
{
    float *logits = malloc(rows * vocab * sizeof *logits);
    for (size_t r = 0; r < rows; r++) {
        float *row = logits + r * vocab;
        for (size_t i = 0; i < vocab; i++)
            row[i] = normal();
        row[rnd() % vocab] += peak;
        if (second != 0.0f)
            row[rnd() % vocab] += second;
    }
    sample_like_oracle(logits, rows, vocab, temp, flags, NULL, NULL, NULL);
    free(logits);
}

/* Two +inf logits far apart: the lower index wins, in whichever group. */
static void check_infinite_pair(size_t vocab)
{
    float *logits = malloc(vocab * sizeof *logits);
    for (int trial = 0; trial < 4; trial++) {
        for (size_t i = 0; i < vocab; i++)
            logits[i] = normal();
        size_t a = rnd() % (vocab / 2), b = vocab / 2 + rnd() % (vocab / 2);
        logits[a] = logits[b] = INFINITY;
        int32_t want[1];
        sample_like_oracle(logits, 1, vocab, 0.8f, 0, NULL, NULL, want);
        assert_int_equal(want[0], (int32_t)a);
    }
    free(logits);
}

/* Rows of logits N(0, 1) + `offset`, sampled and held to the oracle. */
static void check_offset(size_t rows, size_t vocab, float offset, unsigned flags)
{
    float *logits = malloc(rows * vocab * sizeof *logits);
    for (size_t i = 0; i < rows * vocab; i++)
        logits[i] = normal() + offset;
    sample_like_oracle(logits, rows, vocab, 1.0f, flags, NULL, NULL, NULL);
    free(logits);
}

/* On the CPU's vector path split rows with fp32 noise seed floors from
 * the group's largest logit (rows of at most two groups from the whole
 * row) and share them through a word per row; with them a peaked row
 * skips the blocks that cannot reach the floor. Each split below (one
 * group per row, two, four, eight or more), on the vector and the scalar
 * path (GPUs'), must give the oracle's tokens, and so must a launch after
 * a very peaked one (a word left uncleared would make it skip its rows'
 * winners), and an fp32 launch of low logits after an fp64 one of high
 * logits (whose slots, two words each, reach further: the words must not
 * lie where slots were). */
static void check_peaked_splits(void)
{
    const psr_tuning suite = tuning_of(ctx);
    const size_t resident[] = {1, 2, 4};
    for (size_t k = 0; k < 3; k++) {
        psr_tuning t = suite;
        t.sample.resident_per_unit = resident[k] * (suite.sample.vector_width ? 1 : 8);
        t.sample.min_steps = 1;
        set_tuning(ctx, &t);
        cl_uint chunk, groups;
        psr_split_rows(ctx, 1, 65536, &chunk, &groups);
        print_message("vector width %u, resident %zu: one row of 65,536 in %u groups\n",
                      (unsigned)t.sample.vector_width, (size_t)t.sample.resident_per_unit, groups);
        if (has_fp64) {
            check_offset(1, 65536, 100.0f, PSR_FLAG_FP64_NOISE);
            check_offset(1, 65536, -100.0f, 0);
        }
        check_peaked(1, 65536, 25.0f, 0.0f, 0.8f, 0);
        check_peaked(2, 65536, 40.0f, 0.0f, 1.0f, 0);
        check_peaked(6, 65536, 25.0f, 24.0f, 1.0f, 0);
        check_peaked(3, 65536, 20.0f, 12.0f, 0.5f, PSR_SAMPLE_DRAFTING);
        check_peaked(8, 20000, 25.0f, 0.0f, 0.8f, 0);
        check_peaked(2, 65536, 80.0f, 0.0f, 0.8f, 0);
        check_against_oracle(2, 65536, 3.0f, 1.0f, 0); /* right after the peaks of 80 */
        check_infinite_pair(65536);
        check_peaked(2, 65536, 25.0f, 0.0f, 0.8f, PSR_FLAG_WIDE_NOISE);
    }
    set_tuning(ctx, &suite);
}

/* `check` again on the scalar path (GPUs'), in a context of its own,
 * where the suite's context takes the vector path; else the suite's
 * context has run it already. */
static void again_on_scalar_path(void (*check)(void))
{
    if (!tuning_of(ctx).sample.vector_width)
        return;
    psr_context *saved = ctx;
    ctx = open_scalar_context();
    check();
    psr_context_free(ctx);
    ctx = saved;
}

static void test_peaked_rows(void **state)
{
    (void)state;
    check_peaked_splits();
    again_on_scalar_path(check_peaked_splits);
}

/* The edge winners on the scalar path too: its bound per token, not per
 * block, is what they test there. */
static void test_edge_winner_scalar_path(void **state)
{
    (void)state;
    again_on_scalar_path(check_edge_winners);
}

/* ---- edge cases ---- */

static int32_t sample_one(const float *logits, size_t vocab, float temp, uint32_t *flags)
{
    int64_t seed = 99, pos = 5;
    int32_t token = -7;
    uint32_t f = 0;
    assert_int_equal(sample_host(ctx, logits, PSR_DTYPE_F32, 1, vocab, 0, &seed, &pos, &temp, 0,
                                     &token, &f, NULL),
                     PSR_OK);
    if (flags)
        *flags = f;
    return token;
}

static void test_greedy_is_argmax_lowest_index(void **state)
{
    (void)state;
    float l[9000];
    for (size_t i = 0; i < 9000; i++)
        l[i] = normal();
    l[4321] = 50.0f;
    l[8000] = 50.0f;
    assert_int_equal(sample_one(l, 9000, 0.0f, NULL), 4321);
    l[17] = 50.0f;
    assert_int_equal(sample_one(l, 9000, 0.0f, NULL), 17);
    l[17] = NAN;
    l[3] = INFINITY;
    assert_int_equal(sample_one(l, 9000, 0.0f, NULL), 3);
}

static void test_nan_and_infinite_rows(void **state)
{
    (void)state;
    float l[5000];
    uint32_t flags;
    for (size_t i = 0; i < 5000; i++)
        l[i] = NAN;
    int32_t tok = sample_one(l, 5000, 1.0f, &flags);
    assert_true(tok >= 0 && tok < 5000);
    assert_true(flags & PSR_ROW_NO_FINITE);
    for (size_t i = 0; i < 5000; i++)
        l[i] = -INFINITY;
    tok = sample_one(l, 5000, 0.7f, &flags);
    assert_true(tok >= 0 && tok < 5000);
    assert_true(flags & PSR_ROW_NO_FINITE);
    /* A single finite logit always wins, whatever the noise. */
    for (int trial = 0; trial < 20; trial++) {
        size_t at = rnd() % 5000;
        l[at] = -1000.0f;
        assert_int_equal(sample_one(l, 5000, 2.0f, &flags), (int32_t)at);
        assert_int_equal(flags, 0);
        l[at] = NAN;
    }
    /* Zero-probability tokens (-inf) never win against finite ones. */
    for (size_t i = 0; i < 5000; i++)
        l[i] = i % 2 ? -INFINITY : 0.0f;
    for (int trial = 0; trial < 10; trial++) {
        int64_t seed = rnd(), pos = 3;
        float t = 1.0f;
        int32_t token;
        assert_int_equal(sample_host(ctx, l, PSR_DTYPE_F32, 1, 5000, 0, &seed, &pos, &t, 0,
                                         &token, NULL, NULL),
                         PSR_OK);
        assert_int_equal(token % 2, 0);
    }
}

static void test_half_and_bf16_with_stride(void **state)
{
    (void)state;
    const size_t rows = 6, vocab = 3000, stride = 3011;
    uint16_t *h = malloc(rows * stride * 2), *b = malloc(rows * stride * 2);
    float *as_f = malloc(rows * vocab * 4), *as_b = malloc(rows * vocab * 4);
    for (size_t r = 0; r < rows; r++)
        for (size_t i = 0; i < stride; i++) {
            /* fp16: sign, exponent 10..17 (|x| in [2^-5, 8)), random mantissa */
            uint16_t hb = (uint16_t)((rnd() & 0x8000u) | ((10u + rnd() % 8u) << 10) | (rnd() & 0x3ffu));
            float f = normal() * 3.0f;
            uint32_t fb;
            memcpy(&fb, &f, 4);
            h[r * stride + i] = hb;
            b[r * stride + i] = (uint16_t)(fb >> 16);
            if (i < vocab) {
                int e = (hb >> 10) & 0x1f;
                float m = 1.0f + (float)(hb & 0x3ff) / 1024.0f;
                as_f[r * vocab + i] = (hb & 0x8000 ? -1.0f : 1.0f) * ldexpf(m, e - 15);
                uint32_t tb = (uint32_t)b[r * stride + i] << 16;
                memcpy(&as_b[r * vocab + i], &tb, 4);
            }
        }
    int64_t seeds[6], pos[6];
    float temps[6];
    int32_t th[6], tb[6];
    for (size_t r = 0; r < rows; r++) {
        seeds[r] = rnd();
        pos[r] = r * 7;
        temps[r] = r == 0 ? 0.0f : 0.9f;
    }
    assert_int_equal(sample_host(ctx, h, PSR_DTYPE_F16, rows, vocab, stride, seeds, pos, temps, 0,
                                     th, NULL, NULL),
                     PSR_OK);
    /* bf16 is the verification tests' other dtype; sampling it is one more build. */
    bool bf16 = test_long();
    if (bf16)
        assert_int_equal(sample_host(ctx, b, PSR_DTYPE_BF16, rows, vocab, stride, seeds, pos, temps,
                                         0, tb, NULL, NULL),
                         PSR_OK);
    for (size_t r = 0; r < rows; r++) {
        assert_int_equal(th[r], psr_oracle_sample_row(as_f + r * vocab, vocab, temps[r], seeds[r],
                                                      pos[r], false, PSR_ORACLE_FP32, NULL));
        if (bf16)
            assert_int_equal(tb[r], psr_oracle_sample_row(as_b + r * vocab, vocab, temps[r], seeds[r],
                                                          pos[r], false, PSR_ORACLE_FP32, NULL));
    }
    free(h), free(b), free(as_f), free(as_b);
}

/* The device API: request mapping, padding rows, offsets, the draft-logits
 * cache, and bad values inside device buffers. */
static void test_device_api(void **state)
{
    (void)state;
    enum { ROWS = 5, V = 40000, OFF = 16 };
    float *logits = malloc((OFF + ROWS * V) * sizeof *logits);
    for (size_t i = 0; i < OFF + ROWS * V; i++)
        logits[i] = normal() * 2.0f;
    cl_int row_request[ROWS] = {1, -1, 0, 1, 0};
    cl_long seeds[2] = {111, -222};
    cl_float temps[2] = {1.0f, 0.6f};
    cl_long pos[ROWS] = {10, 11, 12, PSR_MAX_POSITION, 14};
    cl_int cache_rows[ROWS] = {2, -1, 0, -1, 1};
    cl_mem dl = upload(ctx, logits, (OFF + ROWS * V) * 4), dr = upload(ctx, row_request, sizeof row_request);
    cl_mem ds = upload(ctx, seeds, sizeof seeds), dt = upload(ctx, temps, sizeof temps);
    cl_mem dp = upload(ctx, pos, sizeof pos), dc = upload(ctx, cache_rows, sizeof cache_rows);
    cl_mem dtok = device_buffer(ctx, ROWS * 4), dflags = device_buffer(ctx, ROWS * 4);
    cl_mem dcache = device_buffer(ctx, 3 * V * 4);

    psr_sample_args a;
    psr_sample_args_init(&a, sizeof a);
    a.rows = ROWS;
    a.vocab = V;
    a.logits = dl;
    a.logits_offset = OFF;
    a.row_request = dr;
    a.requests = 2;
    a.seeds = ds;
    a.temperatures = dt;
    a.positions = dp;
    a.tokens = dtok;
    a.row_flags = dflags;
    a.draft_cache = dcache;
    a.draft_cache_rows = dc;
    a.draft_cache_rows_total = 3;
    a.flags = PSR_SAMPLE_DRAFTING;
    cl_event done;
    assert_int_equal(psr_sample(ctx, &a, &done), PSR_OK);
    assert_non_null(done);
    assert_int_equal(clWaitForEvents(1, &done), CL_SUCCESS);
    clReleaseEvent(done);
    cl_int tokens[ROWS];
    cl_uint flags[ROWS];
    float *cache = malloc(3 * V * 4);
    download(ctx, dtok, tokens, sizeof tokens);
    download(ctx, dflags, flags, sizeof flags);
    download(ctx, dcache, cache, 3 * V * 4);
    for (int r = 0; r < ROWS; r++) {
        const float *row = logits + OFF + r * V;
        if (row_request[r] < 0) {
            assert_int_equal(tokens[r], -1);
            assert_int_equal(flags[r], 0);
        } else if (pos[r] >= PSR_MAX_POSITION) {
            assert_int_equal(tokens[r], -1);
            assert_int_equal(flags[r], PSR_ROW_BAD_POSITION);
        } else {
            int q = row_request[r];
            assert_int_equal(tokens[r], psr_oracle_sample_row(row, V, temps[q], seeds[q], pos[r],
                                                              true, PSR_ORACLE_FP32, NULL));
            assert_int_equal(flags[r], 0);
        }
        if (cache_rows[r] >= 0 && row_request[r] >= 0 && pos[r] < PSR_MAX_POSITION)
            assert_memory_equal(cache + cache_rows[r] * V, row, V * 4);
    }

    /* Indices past the arrays they index are flagged, never followed. */
    cl_int bad_request[ROWS] = {1, -1, 2, 0, 0};
    cl_int bad_cache_rows[ROWS] = {2, -1, 0, 3, 1};
    clEnqueueWriteBuffer(queue_of(ctx), dr, CL_TRUE, 0, sizeof bad_request, bad_request, 0, NULL, NULL);
    clEnqueueWriteBuffer(queue_of(ctx), dc, CL_TRUE, 0, sizeof bad_cache_rows, bad_cache_rows, 0, NULL, NULL);
    const psr_tuning suite = tuning_of(ctx);
    for (int two_pass = 0; two_pass <= 1; two_pass++) {
        psr_tuning t = suite;
        t.sample.two_pass = two_pass;
        set_tuning(ctx, &t);
        assert_int_equal(psr_sample(ctx, &a, NULL), PSR_OK);
        download(ctx, dtok, tokens, sizeof tokens);
        download(ctx, dflags, flags, sizeof flags);
        assert_int_equal(tokens[2], -1);
        assert_int_equal(flags[2], PSR_ROW_BAD_INDEX);  /* request 2 of 2 */
        assert_int_equal(tokens[3], -1);
        assert_true(flags[3] & PSR_ROW_BAD_INDEX);      /* cache row 3 of 3 (and a bad position) */
        assert_true(tokens[0] >= 0 && tokens[4] >= 0);
        assert_int_equal(tokens[1], -1);
        assert_int_equal(flags[1], 0);
    }
    set_tuning(ctx, &suite);

    /* Argument checks: nothing is enqueued, the context stays usable. */
    a.vocab = V + 1;
    assert_int_equal(psr_sample(ctx, &a, NULL), PSR_ERR_BUFFER_TOO_SMALL);
    assert_non_null(strstr(psr_last_error(ctx), "args->logits"));
    a.vocab = V;
    a.row_stride = V - 1;
    assert_int_equal(psr_sample(ctx, &a, NULL), PSR_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(psr_last_error(ctx), "row_stride"));
    a.row_stride = 0;
    a.requests = 3;
    assert_int_equal(psr_sample(ctx, &a, NULL), PSR_ERR_BUFFER_TOO_SMALL);
    assert_non_null(strstr(psr_last_error(ctx), "args->seeds"));
    a.requests = 2;
    a.flags = 1u << 7;
    assert_int_equal(psr_sample(ctx, &a, NULL), PSR_ERR_INVALID_ARGUMENT);
    a.flags = 0;
    a.tokens = NULL;
    assert_int_equal(psr_sample(ctx, &a, NULL), PSR_ERR_NULL_ARGUMENT);
    assert_non_null(strstr(psr_last_error(ctx), "args->tokens"));
    a.tokens = dtok;
    a.struct_size = 3;
    assert_int_equal(psr_sample(ctx, &a, NULL), PSR_ERR_STRUCT_SIZE);
    assert_int_equal(psr_sample(NULL, &a, NULL), PSR_ERR_NULL_ARGUMENT);
    assert_int_equal(psr_sample(ctx, NULL, NULL), PSR_ERR_NULL_ARGUMENT);
    a.struct_size = sizeof a;
    assert_int_equal(psr_sample(ctx, &a, NULL), PSR_OK);
    clFinish(queue_of(ctx));

    size_t scratch = 0;
    assert_int_equal(psr_context_scratch_bytes(ctx, &scratch), PSR_OK);
    print_message("scratch held: %zu bytes\n", scratch);

    release_buffers((cl_mem[]){dl, dr, ds, dt, dp, dc, dtok, dflags, dcache}, 9);
    free(logits);
    free(cache);
}

/* A buffer over a host pointer that is 4- but not 16-byte aligned (a
 * numpy view, say): the kernel must not use vector loads on it. */
static void test_unaligned_host_buffer(void **state)
{
    (void)state;
    enum { ROWS = 4, V = 32000 };
    float *mem = malloc((ROWS * V + 8) * sizeof *mem);
    float *logits = mem + ((((uintptr_t)mem) & 15) == 0 ? 1 : 0); /* 4 mod 16 or other */
    while (((uintptr_t)logits & 15) == 0)
        logits++;
    for (size_t i = 0; i < ROWS * V; i++)
        logits[i] = 2.0f * normal();
    cl_long seeds[ROWS] = {1, 2, 3, 4}, pos[ROWS] = {5, 6, 7, 8};
    cl_float temps[ROWS] = {1.0f, 0.0f, 0.5f, 1.0f};
    cl_int err;
    cl_mem dl = clCreateBuffer(cl_context_of(ctx), CL_MEM_READ_ONLY | CL_MEM_USE_HOST_PTR, ROWS * V * 4,
                               logits, &err);
    assert_int_equal(err, CL_SUCCESS);
    cl_mem ds = upload(ctx, seeds, sizeof seeds), dt = upload(ctx, temps, sizeof temps);
    cl_mem dp = upload(ctx, pos, sizeof pos), dk = device_buffer(ctx, ROWS * 4);
    psr_sample_args a;
    psr_sample_args_init(&a, sizeof a);
    a.rows = ROWS;
    a.vocab = V;
    a.logits = dl;
    a.requests = ROWS;
    a.seeds = ds;
    a.temperatures = dt;
    a.positions = dp;
    a.tokens = dk;
    assert_int_equal(psr_sample(ctx, &a, NULL), PSR_OK);
    cl_int tokens[ROWS];
    download(ctx, dk, tokens, sizeof tokens);
    for (int r = 0; r < ROWS; r++)
        assert_int_equal(tokens[r], psr_oracle_sample_row(logits + (size_t)r * V, V, temps[r], seeds[r],
                                                          pos[r], false, PSR_ORACLE_FP32, NULL));
    /* An offset of 3 floats makes every row aligned in this misaligned
     * buffer, and row 1 is padding: the padding row must not read the
     * buffer's start as vectors (the scalar token loop once did, and
     * crashed on PoCL). Both token loops: the other one (the scalar loop
     * on a CPU, the vector loop on a GPU) is another build, for the long
     * suite. */
    cl_int req[ROWS - 1] = {0, -1, 2};
    cl_mem dr = upload(ctx, req, sizeof req);
    a.rows = ROWS - 1;
    a.logits_offset = 3;
    a.row_request = dr;
    psr_context *saved = ctx;
    for (int loop = 0; loop < (test_long() ? 2 : 1); loop++) {
        if (loop == 1) { /* the same OpenCL objects, so the buffers stay valid */
            cl_context c;
            cl_device_id d;
            cl_command_queue q;
            assert_int_equal(psr_context_cl(saved, &c, &d, &q), PSR_OK);
            setenv("PSR_TUNE_VECTOR", "0", 1);
            assert_int_equal(psr_context_create_from_cl(c, d, q, NULL, &ctx), PSR_OK);
            unsetenv("PSR_TUNE_VECTOR");
            assert_int_equal(tuning_of(ctx).sample.vector_width, 0);
        }
        assert_int_equal(psr_sample(ctx, &a, NULL), PSR_OK);
        download(ctx, dk, tokens, (ROWS - 1) * 4);
        for (int r = 0; r < ROWS - 1; r++)
            assert_int_equal(tokens[r], req[r] < 0 ? -1
                                        : psr_oracle_sample_row(logits + 3 + (size_t)r * V, V, temps[r],
                                                                seeds[r], pos[r], false, PSR_ORACLE_FP32,
                                                                NULL));
    }
    if (ctx != saved)
        psr_context_free(ctx);
    ctx = saved;
    a.rows = ROWS;
    a.logits_offset = 0;
    a.row_request = NULL;
    clReleaseMemObject(dr);
    /* A stride that wraps the size arithmetic is refused, not followed. */
    a.row_stride = (size_t)1 << 61;
    assert_int_equal(psr_sample(ctx, &a, NULL), PSR_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(psr_last_error(ctx), "overflows"));
    release_buffers((cl_mem[]){dl, ds, dt, dp, dk}, 5);
    free(mem);
}

/* -0 and +0 are equal logits: the lowest index wins, however the row is split. */
static void test_signed_zeros_tie(void **state)
{
    (void)state;
    const psr_tuning suite = tuning_of(ctx);
    float l[4096];
    for (size_t i = 0; i < 4096; i++)
        l[i] = -INFINITY;
    l[0] = -0.0f;
    l[3000] = 0.0f;
    for (int run = 0; run < (has_fp64 ? 4 : 2); run++) { /* each finish, fp32 and fp64 values */
        psr_tuning split = suite;
        split.sample.resident_per_unit = split.verify.resident_per_unit = 64;
        split.sample.two_pass = run % 2;
        set_tuning(ctx, &split);
        int64_t seed = 1, pos = 1;
        float t = 0.0f;
        int32_t token = -7;
        unsigned flags = run >= 2 ? PSR_FLAG_FP64_NOISE : 0;
        assert_int_equal(sample_host(ctx, l, PSR_DTYPE_F32, 1, 4096, 0, &seed, &pos, &t, flags, &token,
                                         NULL, NULL),
                         PSR_OK);
        assert_int_equal(token, 0);
    }
    set_tuning(ctx, &suite);
}

static void test_host_api_rejects_bad_values(void **state)
{
    (void)state;
    float l[4] = {1, 2, 3, 4};
    int64_t seeds[2] = {1, 2}, pos[2] = {0, 1};
    float temps[2] = {1.0f, 1.0f};
    int32_t tokens[2] = {-7, -7};
    pos[1] = PSR_MAX_POSITION;
    assert_int_equal(sample_host(ctx, l, PSR_DTYPE_F32, 2, 2, 0, seeds, pos, temps, 0, tokens,
                                     NULL, NULL),
                     PSR_ERR_POSITION_RANGE);
    assert_non_null(strstr(psr_last_error(ctx), "positions[1]"));
    pos[1] = -1;
    assert_int_equal(sample_host(ctx, l, PSR_DTYPE_F32, 2, 2, 0, seeds, pos, temps, 0, tokens,
                                     NULL, NULL),
                     PSR_ERR_POSITION_RANGE);
    pos[1] = 1;
    const float bad_temps[] = {-1.0f, NAN, INFINITY, 1e-40f};
    for (int i = 0; i < 4; i++) {
        temps[0] = bad_temps[i];
        assert_int_equal(sample_host(ctx, l, PSR_DTYPE_F32, 2, 2, 0, seeds, pos, temps, 0,
                                         tokens, NULL, NULL),
                         PSR_ERR_TEMPERATURE);
        assert_non_null(strstr(psr_last_error(ctx), "temperatures[0]"));
    }
    temps[0] = 1.0f;
    assert_int_equal(sample_host(ctx, l, PSR_DTYPE_F32, 2, 3, 2, seeds, pos, temps, 0, tokens,
                                     NULL, NULL),
                     PSR_ERR_INVALID_ARGUMENT);
    assert_int_equal(sample_host(ctx, NULL, PSR_DTYPE_F32, 2, 2, 0, seeds, pos, temps, 0, tokens,
                                     NULL, NULL),
                     PSR_ERR_NULL_ARGUMENT);
    assert_int_equal(sample_host(ctx, l, PSR_DTYPE_F32, 0, 2, 0, seeds, pos, temps, 0, tokens,
                                     NULL, NULL),
                     PSR_ERR_INVALID_ARGUMENT);
    /* Nothing was written by any failed call. */
    assert_int_equal(tokens[0], -7);
    assert_int_equal(tokens[1], -7);
}

/* Wide-tail and fp64 noise draw on the same 64-bit uniform: their tokens
 * agree except where rounding decides a near-tie. */
static void test_wide_agrees_with_fp64(void **state)
{
    (void)state;
    if (!has_fp64)
        skip();
    const size_t rows = 20000, vocab = 500;
    float *logits = malloc(rows * vocab * sizeof *logits);
    int64_t *seeds = malloc(rows * 8), *pos = malloc(rows * 8);
    float *temps = malloc(rows * 4);
    int32_t *wide = malloc(rows * 4), *fp64 = malloc(rows * 4);
    for (size_t i = 0; i < rows * vocab; i++)
        logits[i] = 2.0f * normal();
    for (size_t r = 0; r < rows; r++) {
        seeds[r] = (int64_t)rnd();
        pos[r] = (int64_t)r;
        temps[r] = 1.0f;
    }
    assert_int_equal(sample_rows_f32(ctx, logits, rows, vocab, seeds, pos, temps, PSR_FLAG_WIDE_NOISE, wide),
                     PSR_OK);
    assert_int_equal(sample_rows_f32(ctx, logits, rows, vocab, seeds, pos, temps, PSR_FLAG_FP64_NOISE, fp64),
                     PSR_OK);
    size_t differ = 0;
    for (size_t r = 0; r < rows; r++)
        differ += wide[r] != fp64[r];
    print_message("wide and fp64 noise pick different tokens on %zu of %zu rows\n", differ, rows);
    assert_true(differ * 1000 <= rows); /* at least 99.9% agree */
    /* Control: classic fp32 noise is another stream of uniforms, so it agrees
     * only by chance. */
    assert_int_equal(sample_rows_f32(ctx, logits, rows, vocab, seeds, pos, temps, 0, wide), PSR_OK);
    differ = 0;
    for (size_t r = 0; r < rows; r++)
        differ += wide[r] != fp64[r];
    assert_true(differ * 2 > rows);
    free(logits), free(seeds), free(pos), free(temps), free(wide), free(fp64);
}

/* With fp64_policy = PSR_FP64_WIDE, an fp64 request on a device without
 * fp64 samples with wide-tail noise, and says so. */
static void test_fp64_policy_wide(void **state)
{
    (void)state;
    psr_context_options o;
    psr_context_options_init(&o, sizeof o);
    o.disk_cache = PSR_DISK_CACHE_OFF;
    o.hide_capabilities = PSR_CAP_FP64;
    o.fp64_policy = PSR_FP64_WIDE;
    o.log = capture_log;
    captured_log[0] = '\0';
    psr_context *c;
    assert_int_equal(psr_context_create(&o, &c), PSR_OK);
    float l[3000];
    for (size_t i = 0; i < 3000; i++)
        l[i] = normal();
    int64_t seed = 5, pos = 6;
    float t = 1.0f;
    int32_t token = -7;
    assert_int_equal(sample_host(c, l, PSR_DTYPE_F32, 1, 3000, 0, &seed, &pos, &t,
                                     PSR_FLAG_FP64_NOISE, &token, NULL, NULL),
                     PSR_OK);
    psr_noise used = PSR_NOISE_FP32;
    assert_int_equal(psr_context_last_noise(c, &used), PSR_OK);
    assert_int_equal(used, PSR_NOISE_WIDE);
    assert_non_null(strstr(captured_log, "wide-tail"));
    assert_int_equal(token, psr_oracle_sample_row(l, 3000, 1.0f, 5, 6, false, PSR_ORACLE_WIDE, NULL));
    /* The 0.1 layout's noise bits are reserved in flags, and the noise is one of three. */
    psr_sample_host_args h;
    psr_sample_host_args_init(&h, sizeof h);
    h.rows = 1, h.vocab = 3000, h.logits = l, h.seeds = &seed, h.positions = &pos, h.temperatures = &t;
    h.tokens = &token, h.flags = PSR_FLAG_WIDE_NOISE;
    assert_int_equal(psr_sample_host(c, &h), PSR_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(psr_last_error(c), "reserved"));
    h.flags = 0, h.noise = (psr_noise)3;
    assert_int_equal(psr_sample_host(c, &h), PSR_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(psr_last_error(c), "args->noise"));
    psr_context_free(c);
    o.fp64_policy = (psr_fp64_policy)9;
    assert_int_equal(psr_context_create(&o, &c), PSR_ERR_INVALID_ARGUMENT);
}

static void test_fp64_refused_without_fp64(void **state)
{
    (void)state;
    psr_context_options o;
    psr_context_options_init(&o, sizeof o);
    o.disk_cache = PSR_DISK_CACHE_OFF;
    o.hide_capabilities = PSR_CAP_FP64;
    psr_context *c;
    assert_int_equal(psr_context_create(&o, &c), PSR_OK);
    float l[3] = {1, 2, 3};
    int64_t seed = 1, pos = 1;
    float t = 1.0f;
    int32_t token = -7;
    assert_int_equal(sample_host(c, l, PSR_DTYPE_F32, 1, 3, 0, &seed, &pos, &t,
                                     PSR_FLAG_FP64_NOISE, &token, NULL, NULL),
                     PSR_ERR_FP64_UNSUPPORTED);
    assert_int_equal(token, -7);
    assert_int_equal(sample_host(c, l, PSR_DTYPE_F32, 1, 3, 0, &seed, &pos, &t, 0, &token, NULL,
                                     NULL),
                     PSR_OK);
    psr_context_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_noise_bit_exact),
        cmocka_unit_test(test_vector_noise_bit_exact),
        cmocka_unit_test(test_vector_clz),
        cmocka_unit_test(test_token_vectors),
        cmocka_unit_test(test_tokens_equal_oracle),
        cmocka_unit_test(test_peaked_rows),
        cmocka_unit_test(test_edge_winner_scalar_path),
        cmocka_unit_test(test_finish_paths_agree),
        cmocka_unit_test(test_greedy_is_argmax_lowest_index),
        cmocka_unit_test(test_nan_and_infinite_rows),
        cmocka_unit_test(test_half_and_bf16_with_stride),
        cmocka_unit_test(test_device_api),
        cmocka_unit_test(test_host_api_rejects_bad_values),
        cmocka_unit_test(test_unaligned_host_buffer),
        cmocka_unit_test(test_signed_zeros_tie),
        cmocka_unit_test(test_fp64_refused_without_fp64),
        cmocka_unit_test(test_wide_agrees_with_fp64),
        cmocka_unit_test(test_fp64_policy_wide),
    };
    return run_device_tests(tests, .ctx = &ctx, .has_fp64 = &has_fp64, .seed = 12345);
}
