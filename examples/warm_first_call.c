/* An engine warms, at start-up, exactly the calls it will make, and sees
 * each one get ready; its first request then compiles nothing. Here:
 * plain and filtered fp32 sampling, and logprobs. */
#include <psr/psr.h>

#include <stdio.h>

static int fail(const psr_context *ctx, psr_status st, const char *what)
{
    fprintf(stderr, "%s: %s\n  %s\n", what, psr_status_string(st), psr_last_error(ctx));
    return st == PSR_ERR_NO_DEVICE ? 77 : 1;
}

static void progress(size_t index, size_t total, const char *name, double seconds, void *user_data)
{
    (void)user_data;
    printf("[%zu/%zu] %s ready in %.2f s\n", index, total, name, seconds);
}

int main(void)
{
    psr_context *ctx = NULL;
    psr_status st = psr_context_create(NULL, &ctx);
    if (st != PSR_OK)
        return fail(NULL, st, "psr_context_create");

    const psr_warm_variant calls[] = {
        {PSR_WARM_SAMPLE, 0, PSR_NOISE_FP32, PSR_DTYPE_F32, 0}, /* psr_sample, no filters */
        {PSR_WARM_SAMPLE, 0, PSR_NOISE_FP32, PSR_DTYPE_F32, 1}, /* with top-k / top-p / min-p */
        {PSR_WARM_LOGPROBS, 0, PSR_NOISE_FP32, PSR_DTYPE_F32, 1},
    };
    psr_warm_options w;
    psr_warm_options_init(&w, sizeof w);
    w.variants = calls;
    w.variant_count = sizeof calls / sizeof calls[0];
    w.progress = progress;
    size_t ready = 0;
    if ((st = psr_context_warm(ctx, &w, &ready)) != PSR_OK)
        return fail(ctx, st, "psr_context_warm");

    psr_cache_stats before, after;
    psr_context_cache_stats(ctx, &before);
    static float logits[2 * 4096];
    for (int i = 0; i < 2 * 4096; i++)
        logits[i] = (float)(i % 97) / 10.0f;
    const int64_t seeds[2] = {1, 2}, positions[2] = {0, 0};
    const float temperatures[2] = {0.8f, 1.0f};
    int32_t tokens[2];
    psr_sample_host_args a;
    psr_sample_host_args_init(&a, sizeof a);
    a.rows = 2, a.vocab = 4096, a.logits = logits;
    a.seeds = seeds, a.positions = positions, a.temperatures = temperatures;
    a.all_top_k = 50, a.tokens = tokens;
    if ((st = psr_sample_host(ctx, &a)) != PSR_OK)
        return fail(ctx, st, "psr_sample_host");
    psr_context_cache_stats(ctx, &after);
    printf("%zu calls warm; the first request built %llu programs; tokens %d %d\n", ready,
           (unsigned long long)(after.builds - before.builds), tokens[0], tokens[1]);
    psr_context_free(ctx);
    return after.builds == before.builds ? 0 : 1;
}
