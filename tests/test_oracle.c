/* The host oracle against the known-answer vectors, and the accuracy of
 * the deterministic math against long double references (no device). */
#include "common.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t f32_bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

static uint64_t f64_bits(double d)
{
    uint64_t b;
    memcpy(&b, &d, 8);
    return b;
}

static void test_philox_vectors(void **state)
{
    (void)state;
    tsv_table *t = tsv_load("philox4x32_10.tsv");
    static const char *in[] = {"ctr0", "ctr1", "ctr2", "ctr3", "key0", "key1"};
    static const char *out[] = {"out0", "out1", "out2", "out3"};
    for (size_t r = 0; r < t->rows; r++) {
        uint32_t v[6], w[4];
        for (int c = 0; c < 6; c++)
            v[c] = (uint32_t)tsv_hex(t, r, in[c]);
        psr_philox4x32_10(v, v + 4, w);
        for (int c = 0; c < 4; c++)
            assert_int_equal(w[c], (uint32_t)tsv_hex(t, r, out[c]));
    }
    tsv_free(t);
}

static void test_stream_vectors(void **state)
{
    (void)state;
    tsv_table *t = tsv_load("stream.tsv");
    static const char *words[] = {"w0", "w1", "w2", "w3"};
    for (size_t r = 0; r < t->rows; r++) {
        uint32_t w[4];
        psr_oracle_draw((uint64_t)tsv_int(t, r, "seed"), (uint64_t)tsv_int(t, r, "pos"), w);
        for (int c = 0; c < 4; c++)
            assert_int_equal(w[c], (uint32_t)tsv_hex(t, r, words[c]));
        assert_int_equal(f32_bits(psr_oracle_u32(w[0])), (uint32_t)tsv_hex(t, r, "u32_bits"));
    }
    tsv_free(t);
}

static void test_token_uniform_vectors(void **state)
{
    (void)state;
    tsv_table *t = tsv_load("gumbel_uniform.tsv");
    for (size_t r = 0; r < t->rows; r++) {
        uint32_t key = psr_oracle_row_key((uint64_t)tsv_int(t, r, "seed"),
                                          (uint64_t)tsv_int(t, r, "pos"),
                                          tsv_int(t, r, "drafting") != 0);
        assert_int_equal(key, (uint32_t)tsv_hex(t, r, "gseed"));
        uint32_t w[4];
        psr_oracle_draw(key, (uint64_t)tsv_int(t, r, "token"), w);
        assert_int_equal(f32_bits(psr_oracle_u32(w[0])), (uint32_t)tsv_hex(t, r, "u32_bits"));
        assert_true(f64_bits(psr_oracle_u64(w[0], w[1])) == tsv_hex(t, r, "u64_bits"));
    }
    tsv_free(t);
}


static void test_token_vectors(void **state)
{
    (void)state;
    tsv_table *t = tsv_load("gumbel_tokens.tsv");
    float *logits = malloc(262144 * sizeof *logits);
    for (size_t r = 0; r < t->rows; r++) {
        size_t vocab = (size_t)tsv_int(t, r, "vocab");
        assert_true(vocab <= 262144);
        vector_logits((uint32_t)tsv_int(t, r, "case"), (uint32_t)tsv_int(t, r, "row"), vocab, logits);
        float temp = strtof(t->cells[r][tsv_col(t, "temp")], NULL);
        bool no_finite;
        int32_t tok = psr_oracle_sample_row(logits, vocab, temp, tsv_int(t, r, "seed"),
                                            tsv_int(t, r, "pos"), tsv_int(t, r, "drafting") != 0,
                                            tsv_int(t, r, "fp64") ? PSR_ORACLE_FP64 : PSR_ORACLE_FP32, &no_finite);
        if (tok != tsv_int(t, r, "token"))
            fail_msg("vector row %zu: oracle token %d, want %lld", r, tok,
                     (long long)tsv_int(t, r, "token"));
        assert_false(no_finite);
    }
    free(logits);
    tsv_free(t);
}

static double ulp_error_f(float got, long double want)
{
    float w = (float)want;
    float ulp = nextafterf(fabsf(w), INFINITY) - fabsf(w);
    return (double)(fabsl((long double)got - want) / ulp);
}

static uint32_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 32);
}

static void test_log_accuracy(void **state)
{
    (void)state;
    uint64_t s = 1;
    double worst_log = 0, worst_log1p = 0, worst_logd = 0;
    for (int i = 0; i < 2000000; i++) {
        /* Positive normal floats over the whole range, and uniforms in (0, 1). */
        uint32_t bits = 0x00800000u + lcg(&s) % (0x7f800000u - 0x00800000u);
        float x;
        memcpy(&x, &bits, 4);
        double e = ulp_error_f(psr_oracle_log(x), logl((long double)x));
        if (fabsf(x - 1.0f) > 1e-3f && e > worst_log)
            worst_log = e;
        float u = psr_oracle_u32(lcg(&s));
        e = ulp_error_f(psr_oracle_log1p_neg(u), log1pl(-(long double)u));
        if (e > worst_log1p)
            worst_log1p = e;
        double xd = psr_oracle_u64(lcg(&s), lcg(&s)) * ldexp(1.0, (int)(lcg(&s) % 2000) - 1000);
        long double want = logl((long double)xd);
        double wd = (double)want;
        double ulp = nextafter(fabs(wd), INFINITY) - fabs(wd);
        double ed = (double)(fabsl((long double)psr_oracle_log_d(xd) - want) / ulp);
        if (fabs(xd - 1.0) > 1e-3 && ed > worst_logd)
            worst_logd = ed;
    }
    print_message("max error: log %.3f ulp, log1p(-u) %.3f ulp, log (fp64) %.3f ulp\n", worst_log,
                  worst_log1p, worst_logd);
    assert_true(worst_log < 1.5);
    assert_true(worst_log1p < 2.0);
    assert_true(worst_logd < 2.0);
    /* Exact where it must be. */
    assert_true(psr_oracle_log(1.0f) == 0.0f);
    assert_true(psr_oracle_log_d(1.0) == 0.0);
}

/* The log-sum-exp's 2^z: within 3 ulp on (-125, 0], exactly 1 at 0, and
 * 0 where the result would leave the normal range or z is NaN. */
static void test_exp2_accuracy(void **state)
{
    (void)state;
    uint64_t s = 3;
    double worst = 0;
    for (int i = 0; i < 2000000; i++) {
        float z = -(float)(lcg(&s) >> 8) * 0x1p-24f * (i % 2 ? 1.0f : 125.0f);
        if (!(z > -125.0f))
            continue;
        double e = ulp_error_f(psr_oracle_exp2_neg(z), exp2l((long double)z));
        if (e > worst)
            worst = e;
    }
    print_message("max error: exp2 %.3f ulp\n", worst);
    assert_true(worst < 3.0);
    assert_true(psr_oracle_exp2_neg(0.0f) == 1.0f);
    assert_true(psr_oracle_exp2_neg(-1.0f) == 0.5f);
    assert_true(psr_oracle_exp2_neg(-125.0f) == 0.0f);
    assert_true(psr_oracle_exp2_neg(-INFINITY) == 0.0f);
    assert_true(psr_oracle_exp2_neg(NAN) == 0.0f);
    assert_true(psr_oracle_exp2_neg(-124.9f) >= FLT_MIN);
}

static void test_division(void **state)
{
    (void)state;
    uint64_t s = 7;
    long wrong = 0, far = 0;
    const long n = 2000000;
    for (long i = 0; i < n; i++) {
        float t = 0.05f + (float)(lcg(&s) >> 8) * 0x1p-24f * 4.0f; /* temperatures in (0.05, 4) */
        if (i % 4 == 0)
            t = (float[]){0.5f, 0.7f, 1.0f, 1.5f, 2.0f, 0.3f, 0.9f, 1.1f}[lcg(&s) % 8];
        float a = ((float)(lcg(&s) >> 8) * 0x1p-24f - 0.5f) * 64.0f;
        float r = psr_oracle_recip(t);
        assert_true(ulp_error_f(r, 1.0L / (long double)t) <= 1.0);
        float q = psr_oracle_div(a, t, r);
        float exact = (float)((double)a / (double)t); /* double then float: correctly rounded here */
        if (q != exact) {
            wrong++;
            if (ulp_error_f(q, (long double)a / (long double)t) > 1.0)
                far++;
        }
    }
    print_message("division: %ld of %ld quotients not correctly rounded, %ld beyond 1 ulp\n", wrong,
                  n, far);
    assert_int_equal(far, 0);
    assert_true(wrong * 10000 < n); /* under 0.01% */
    /* Overflow keeps the infinity instead of a NaN. */
    assert_true(isinf(psr_oracle_div(3e38f, 0.25f, psr_oracle_recip(0.25f))));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_philox_vectors),   cmocka_unit_test(test_stream_vectors),
        cmocka_unit_test(test_token_uniform_vectors), cmocka_unit_test(test_token_vectors),
        cmocka_unit_test(test_log_accuracy),     cmocka_unit_test(test_exp2_accuracy),
        cmocka_unit_test(test_division),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
