/* Random verification cases (verify_case.h), shared by the tests of
 * psr_verify and of verification across shards. */
#include "verify_case.h"

#include <math.h>
#include <stdlib.h>

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
        c.seeds[r] = (int64_t)((uint64_t)rnd() << 32 | rnd());
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

