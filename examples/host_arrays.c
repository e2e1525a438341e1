/* The host-array calls, for an app that keeps its logits in host memory:
 * sample (one top-p for every row, int64 tokens), then the sampled
 * tokens' logprobs, then verify two drafts of one request against target
 * logits. Each call copies in, runs on the device, waits and copies out;
 * every value is checked first, and nothing is written unless the whole
 * call succeeds. */
#include <psr/psr.h>

#include <stdio.h>

enum { ROWS = 4, VOCAB = 1000, TOP_N = 3 };

static int fail(const psr_context *ctx, psr_status st, const char *what)
{
    fprintf(stderr, "%s: %s\n  %s\n", what, psr_status_string(st), psr_last_error(ctx));
    return st == PSR_ERR_NO_DEVICE ? 77 : 1;
}

static float logits[ROWS * VOCAB];

static psr_status sample(psr_context *ctx, int64_t *tokens)
{
    static const int64_t seeds[ROWS] = {11, 12, 13, 14}, positions[ROWS] = {0, 0, 5, 9};
    static const float temperatures[ROWS] = {1.0f, 0.7f, 0.0f, 1.2f};
    psr_sample_host_args a;
    psr_sample_host_args_init(&a, sizeof a);
    a.rows = ROWS, a.vocab = VOCAB, a.logits = logits;
    a.seeds = seeds, a.positions = positions, a.temperatures = temperatures;
    a.all_top_p = 0.9f; /* every row; per-row arrays go in a.top_p */
    a.tokens = tokens, a.tokens_dtype = PSR_TOKENS_I64;
    return psr_sample_host(ctx, &a);
}

static psr_status logprobs(psr_context *ctx, const int64_t *tokens, float *lp, int32_t *ids, float *top)
{
    static const float temperatures[ROWS] = {1.0f, 0.7f, 0.0f, 1.2f};
    psr_logprobs_host_args a;
    psr_logprobs_host_args_init(&a, sizeof a);
    a.rows = ROWS, a.vocab = VOCAB, a.logits = logits, a.temperatures = temperatures;
    a.tokens = tokens, a.tokens_dtype = PSR_TOKENS_I64;
    a.all_top_p = 0.9f; /* the distribution that was sampled */
    a.top_n = TOP_N, a.token_logprobs = lp, a.top_ids = ids, a.top_logprobs = top;
    return psr_logprobs_host(ctx, &a);
}

/* One request: target rows 0 and 1 score its two drafts, row 2 is the bonus row. */
static psr_status verify(psr_context *ctx, int32_t *out, int32_t *num)
{
    static const int32_t cu[2] = {0, 3}, drafts[3] = {7, 42, 0};
    static const int64_t seeds[1] = {99}, positions[3] = {20, 21, 22};
    static const float temperatures[1] = {0.8f};
    psr_verify_host_args a;
    psr_verify_host_args_init(&a, sizeof a);
    a.requests = 1, a.cu = cu, a.rows = 3, a.max_drafts = 2, a.vocab = VOCAB;
    a.target_logits = logits, a.draft_tokens = drafts; /* no draft cache: one-hot drafts */
    a.seeds = seeds, a.temperatures = temperatures, a.positions = positions;
    a.tokens = out, a.num_sampled = num;
    return psr_verify_host(ctx, &a);
}

int main(void)
{
    for (int i = 0; i < ROWS * VOCAB; i++)
        logits[i] = (float)((i * 7919) % 1009) / 100.0f;
    psr_context *ctx = NULL;
    psr_status st = psr_context_create(NULL, &ctx);
    if (st != PSR_OK)
        return fail(NULL, st, "psr_context_create");
    int64_t tokens[ROWS];
    float lp[ROWS], top[ROWS * TOP_N];
    int32_t ids[ROWS * TOP_N], verified[3], num = 0;
    if ((st = sample(ctx, tokens)) != PSR_OK)
        return fail(ctx, st, "psr_sample_host");
    if ((st = logprobs(ctx, tokens, lp, ids, top)) != PSR_OK)
        return fail(ctx, st, "psr_logprobs_host");
    for (int r = 0; r < ROWS; r++)
        printf("row %d: token %lld, logprob %.3f; top %d %.3f\n", r, (long long)tokens[r], lp[r],
               ids[r * TOP_N], top[r * TOP_N]);
    if ((st = verify(ctx, verified, &num)) != PSR_OK)
        return fail(ctx, st, "psr_verify_host");
    printf("verification kept %d token(s):", num);
    for (int i = 0; i < num; i++)
        printf(" %d", verified[i]);
    printf("\n");
    psr_context_free(ctx);
    /* The greedy row samples the argmax, whose processed logprob is the row's best. */
    return ids[2 * TOP_N] == tokens[2] && num >= 1 && num <= 3 ? 0 : 1;
}
