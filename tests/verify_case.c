/* Random verification cases (verify_case.h), shared by the tests of
 * psr_verify and of verification across shards. */
#include "verify_case.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void free_case(vcase *c)
{
    free(c->cu), free(c->target), free(c->cache), free(c->drafts);
    free(c->seeds), free(c->positions), free(c->temps);
}

int32_t host_argmax(const float *x, size_t n)
{
    int32_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (x[i] > x[best] || (isnan(x[best]) && !isnan(x[i])))
            best = (int32_t)i;
    return best;
}

vcase make_case(size_t requests, size_t vocab, size_t max_drafts, bool cache)
{
    vcase c = {.requests = requests, .vocab = vocab, .max_drafts = max_drafts, .cache_k = max_drafts};
    c.cu = malloc((requests + 1) * 4);
    c.cu[0] = 0;
    for (size_t r = 0; r < requests; r++)
        c.cu[r + 1] = c.cu[r] + 1 + (int32_t)(rnd() % (max_drafts + 1));
    c.rows = (size_t)c.cu[requests];
    c.target = malloc(c.rows * vocab * 4);
    c.drafts = malloc(c.rows * 4);
    c.positions = malloc(c.rows * 8);
    c.seeds = malloc(requests * 8);
    c.temps = malloc(requests * 4);
    c.cache = cache && max_drafts ? malloc(requests * max_drafts * vocab * 4) : NULL;
    for (size_t i = 0; i < c.rows * vocab; i++)
        c.target[i] = 3.0f * normal();
    for (size_t r = 0; r < requests; r++) {
        c.seeds[r] = random_seed();
        uint32_t k = rnd() % 4;
        c.temps[r] = k == 0 ? 0.0f : k == 1 ? 0.7f : 1.0f;
        int64_t pos = rnd() % (1u << 29);
        for (int32_t row = c.cu[r]; row < c.cu[r + 1]; row++) {
            size_t j = (size_t)(row - c.cu[r]);
            float *x = c.target + (size_t)row * vocab;
            c.positions[row] = pos + (int64_t)j;
            if (rnd() % 20 == 0)
                for (size_t i = 0; i < vocab; i++)
                    x[i] = NAN;
            uint32_t pick = rnd() % 10;
            c.drafts[row] = pick == 0 ? -1 : pick < 6 ? host_argmax(x, vocab) : (int32_t)(rnd() % vocab);
            if (c.cache && row + 1 < c.cu[r + 1]) {
                float *y = c.cache + (r * max_drafts + j) * vocab;
                for (size_t i = 0; i < vocab; i++)
                    y[i] = isnan(x[i]) ? normal() : 0.8f * x[i] + normal();
            }
        }
    }
    return c;
}

static uint16_t to_bf16(float x)
{
    uint32_t b;
    memcpy(&b, &x, 4);
    return (uint16_t)(b >> 16);
}

static float from_bf16(uint16_t h)
{
    uint32_t b = (uint32_t)h << 16;
    float x;
    memcpy(&x, &b, 4);
    return x;
}

psr_status vcase_run(psr_context *ctx, vcase *c, const vrun *run, int32_t *tokens, int32_t *num, uint32_t *status)
{
    size_t cols = c->max_drafts + 1, stride = c->stride ? c->stride : c->vocab;
    size_t esize = run->dtype == PSR_DTYPE_BF16 ? 2 : 4;
    unsigned char *logits = calloc(c->rows * stride, esize);
    for (size_t row = 0; row < c->rows; row++)
        for (size_t i = 0; i < c->vocab; i++) {
            float *x = c->target + row * c->vocab + i;
            if (run->dtype == PSR_DTYPE_BF16) {
                uint16_t h = to_bf16(*x);
                *x = from_bf16(h);
                memcpy(logits + (row * stride + i) * 2, &h, 2);
            } else {
                memcpy(logits + (row * stride + i) * 4, x, 4);
            }
        }
    size_t tsize = run->tokens_dtype == PSR_TOKENS_I64 ? 8 : 4;
    unsigned char *out = malloc(c->requests * cols * tsize);
    memset(out, 0x5a, c->requests * cols * tsize);
    int32_t *nfill = malloc(c->requests * 4);
    for (size_t r = 0; r < c->requests; r++)
        nfill[r] = SENTINEL;
    uint32_t sfill = SENTINEL;

    cl_mem bt = upload(ctx, logits, c->rows * stride * esize);
    cl_mem bc = c->cache ? upload(ctx, c->cache, c->requests * c->cache_k * c->vocab * 4) : NULL;
    cl_mem bd = upload(ctx, c->drafts, c->rows * 4), bs = upload(ctx, c->seeds, c->requests * 8);
    cl_mem btemp = upload(ctx, c->temps, c->requests * 4), bp = upload(ctx, c->positions, c->rows * 8);
    cl_mem bo = upload(ctx, out, c->requests * cols * tsize), bn = upload(ctx, nfill, c->requests * 4);
    cl_mem bst = upload(ctx, &sfill, 4);

    psr_verify_args a;
    psr_verify_args_init(&a, sizeof a);
    a.requests = c->requests;
    a.cu = c->cu;
    a.rows = c->rows;
    a.max_drafts = c->max_drafts;
    a.vocab = c->vocab;
    a.target_logits = bt;
    a.target_dtype = run->dtype;
    a.target_row_stride = c->stride;
    a.draft_cache = bc;
    a.draft_cache_k = c->cache_k;
    a.draft_tokens = bd;
    a.seeds = bs;
    a.temperatures = btemp;
    a.positions = bp;
    a.method = run->method;
    set_verify_flags(&a, run->flags);
    a.tokens = bo;
    a.tokens_dtype = run->tokens_dtype;
    a.num_sampled = bn;
    a.status = bst;
    if (run->tamper)
        run->tamper(&a);
    cl_event ev = NULL;
    psr_status st = psr_verify(ctx, &a, &ev);
    if (ev) {
        assert_int_equal(clWaitForEvents(1, &ev), CL_SUCCESS);
        clReleaseEvent(ev);
    }
    download(ctx, bo, out, c->requests * cols * tsize);
    download(ctx, bn, num, c->requests * 4);
    download(ctx, bst, status, 4);
    for (size_t i = 0; i < c->requests * cols; i++) {
        if (tsize == 8) {
            int64_t v;
            memcpy(&v, out + i * 8, 8);
            tokens[i] = v == (int64_t)0x5a5a5a5a5a5a5a5aLL ? SENTINEL : (int32_t)v;
            if (v != (int64_t)0x5a5a5a5a5a5a5a5aLL && v != (int64_t)tokens[i])
                fail_msg("int64 token %lld does not fit int32", (long long)v);
        } else {
            memcpy(&tokens[i], out + i * 4, 4);
        }
    }
    release_buffers((cl_mem[]){bt, bc, bd, bs, btemp, bp, bo, bn, bst}, 9);
    free(logits), free(out), free(nfill);
    return st;
}
