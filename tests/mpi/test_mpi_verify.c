/* psr_mpi_verify under mpirun (-np 2 and -np 4). Every rank builds the
 * same random requests, verifies them whole (psr_verify) as the reference,
 * then its slice of the vocabulary through psr_mpi_verify. Shards starting
 * on multiples of 16,384 tokens must give the reference's tokens,
 * num_sampled and status on every rank (probabilistic and greedy, draft
 * logits and one-hot drafts, -1 drafts); uneven shards may differ only on
 * a near-tie of the acceptance test. Ranks whose draft tokens or
 * max_drafts differ, and a rank that sets the call's own fields, give
 * their status on every rank. A control swaps two ranks' offsets while
 * each keeps its columns: the tokens must then differ. */
#include "mpi_test.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REQUESTS 10
#define K 3

/* Requests of 0 .. K drafts: drafts often the target's argmax, sometimes
 * random or -1; the draft logits near the target's. */
typedef struct vcase {
    size_t vocab, rows;
    int32_t cu[REQUESTS + 1];
    float *target, *cache;
    int32_t *drafts;
    int64_t seeds[REQUESTS], *positions;
    float temps[REQUESTS];
} vcase;

static vcase make_case(size_t vocab)
{
    vcase c = {.vocab = vocab};
    c.cu[0] = 0;
    for (int r = 0; r < REQUESTS; r++)
        c.cu[r + 1] = c.cu[r] + 1 + (int32_t)(rnd() % (K + 1));
    c.rows = (size_t)c.cu[REQUESTS];
    c.target = malloc(c.rows * vocab * 4), c.cache = malloc((size_t)REQUESTS * K * vocab * 4);
    c.drafts = malloc(c.rows * 4), c.positions = malloc(c.rows * 8);
    for (int r = 0; r < REQUESTS; r++) {
        c.seeds[r] = (int64_t)(rnd() >> 1);
        c.temps[r] = r % 3 == 0 ? 0.0f : r % 3 == 1 ? 0.7f : 1.0f;
        for (int32_t row = c.cu[r]; row < c.cu[r + 1]; row++) {
            size_t j = (size_t)(row - c.cu[r]), best = 0;
            float *x = c.target + (size_t)row * vocab;
            for (size_t i = 0; i < vocab; i++) {
                x[i] = 6.0f * uniform_pm();
                best = x[i] > x[best] ? i : best;
            }
            c.positions[row] = (int64_t)(rnd() % (1u << 29));
            uint64_t pick = rnd() % 10;
            c.drafts[row] = pick == 0 ? -1 : pick < 6 ? (int32_t)best : (int32_t)(rnd() % vocab);
            if (j < K)
                for (size_t i = 0; i < vocab; i++)
                    c.cache[((size_t)r * K + j) * vocab + i] = 0.8f * x[i] + uniform_pm();
        }
    }
    return c;
}

static void free_case(vcase *c)
{
    free(c->target), free(c->cache), free(c->drafts), free(c->positions);
}

typedef struct outputs {
    int32_t tokens[REQUESTS * (K + 1)], num[REQUESTS];
    uint32_t status;
} outputs;

/* psr_verify (bounds NULL) or psr_mpi_verify over this rank's slice;
 * `tweak` changes this rank's args before the call. */
static psr_status call(const vcase *c, const size_t *bounds, psr_verify_method method, bool cached, outputs *o,
                       void (*tweak)(psr_verify_args *))
{
    size_t lo = bounds ? bounds[rank] : 0, hi = bounds ? bounds[rank + 1] : c->vocab, n = hi - lo;
    float *slice = malloc((size_t)REQUESTS * K * n * 4);
    for (size_t row = 0; row < (size_t)REQUESTS * K; row++)
        memcpy(slice + row * n, c->cache + row * c->vocab + lo, n * 4);
    memset(o, 0x5a, sizeof *o);
    cl_mem target = upload(c->target, c->rows * c->vocab * 4), cache = upload(slice, (size_t)REQUESTS * K * n * 4);
    cl_mem drafts = upload(c->drafts, c->rows * 4), seeds = upload(c->seeds, sizeof c->seeds);
    cl_mem temps = upload(c->temps, sizeof c->temps), pos = upload(c->positions, c->rows * 8);
    cl_mem tokens = upload(o->tokens, sizeof o->tokens), num = upload(o->num, sizeof o->num);
    cl_mem status = upload(&o->status, 4);
    psr_verify_args a;
    psr_verify_args_init(&a, sizeof a);
    a.requests = REQUESTS, a.cu = c->cu, a.rows = c->rows, a.max_drafts = K, a.vocab = n;
    a.target_logits = target, a.target_offset = lo, a.target_row_stride = c->vocab;
    a.draft_cache = cached ? cache : NULL, a.draft_cache_k = cached ? K : 0, a.draft_tokens = drafts;
    a.seeds = seeds, a.temperatures = temps, a.positions = pos, a.method = method;
    a.tokens = tokens, a.num_sampled = num, a.status = status;
    if (bounds)
        a.vocab_offset = lo, a.vocab_total = c->vocab;
    if (tweak)
        tweak(&a);
    cl_event ev = NULL;
    psr_status st = bounds ? psr_mpi_verify(ctx, MPI_COMM_WORLD, &a, &ev) : psr_verify(ctx, &a, &ev);
    if (st == PSR_OK) {
        clEnqueueReadBuffer(queue, tokens, CL_TRUE, 0, sizeof o->tokens, o->tokens, 1, &ev, NULL);
        clEnqueueReadBuffer(queue, num, CL_TRUE, 0, sizeof o->num, o->num, 0, NULL, NULL);
        clEnqueueReadBuffer(queue, status, CL_TRUE, 0, 4, &o->status, 0, NULL, NULL);
        clReleaseEvent(ev);
    }
    cl_mem all[] = {target, cache, drafts, seeds, temps, pos, tokens, num, status};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        clReleaseMemObject(all[i]);
    free(slice);
    return st;
}

static size_t differences(const outputs *got, const outputs *want)
{
    size_t differ = got->status != want->status;
    for (int r = 0; r < REQUESTS; r++)
        differ += got->num[r] != want->num[r] ||
                  memcmp(got->tokens + r * (K + 1), want->tokens + r * (K + 1), (K + 1) * 4) != 0;
    return differ;
}

/* Both methods, with and without draft logits; `allowed` requests may differ. */
static void check_split(const vcase *c, const size_t *bounds, size_t allowed)
{
    for (int m = 0; m < 2; m++)
        for (int cached = 0; cached < 2; cached++) {
            psr_verify_method method = m ? PSR_VERIFY_GREEDY : PSR_VERIFY_PROBABILISTIC;
            outputs want, got;
            CHECK(call(c, NULL, method, cached, &want, NULL) == PSR_OK, "reference: %s", psr_last_error(ctx));
            psr_status st = call(c, bounds, method, cached, &got, NULL);
            CHECK(st == PSR_OK, "vocab %zu, method %d, cache %d: %s", c->vocab, m, cached, psr_last_error(ctx));
            size_t differ = st == PSR_OK ? differences(&got, &want) : 0;
            CHECK(differ <= allowed, "vocab %zu, method %d, cache %d: %zu requests differ", c->vocab, m, cached,
                  differ);
        }
}

static void block_bounds(size_t vocab, size_t *bounds)
{
    for (int r = 0; r <= size; r++)
        bounds[r] = r == size ? vocab : (size_t)r * 16384;
}

static void check_same_tokens(void)
{
    size_t bounds[PSR_MAX_SHARDS + 1];
    vcase c = make_case((size_t)size * 16384 + 500);
    block_bounds(c.vocab, bounds);
    check_split(&c, bounds, 0);
    free_case(&c);
    vcase u = make_case(5000); /* uneven, one-token shards */
    bounds[0] = 0, bounds[size] = u.vocab;
    for (int r = 1; r < size; r++)
        bounds[r] = rnd() % 3 == 0 ? bounds[r - 1] + 1 : bounds[r - 1] + 1 + rnd() % (u.vocab / (size_t)size);
    check_split(&u, bounds, 1);
    free_case(&u);
}

static void other_max_drafts(psr_verify_args *a)
{
    if (rank == size - 1)
        a->max_drafts = K + 1;
}

static cl_mem stray;
static void own_keys(psr_verify_args *a)
{
    if (rank == 0)
        a->shard_keys = stray;
}

static void swap_offsets(psr_verify_args *a)
{
    if (rank < 2)
        a->vocab_offset = rank == 0 ? 16384 : 0;
}

static void check_errors(void)
{
    size_t bounds[PSR_MAX_SHARDS + 1];
    vcase c = make_case((size_t)size * 16384); /* a block each: the control swaps two */
    block_bounds(c.vocab, bounds);
    outputs o, want;
    int32_t saved = c.drafts[0];
    if (rank == 1)
        c.drafts[0] = (c.drafts[0] + 1) % (int32_t)c.vocab;
    expect("draft tokens differ", call(&c, bounds, PSR_VERIFY_PROBABILISTIC, true, &o, NULL), PSR_ERR_SHARD_MISMATCH,
           "draft_tokens");
    c.drafts[0] = saved;
    expect("max_drafts differs", call(&c, bounds, PSR_VERIFY_PROBABILISTIC, true, &o, other_max_drafts),
           PSR_ERR_SHARD_MISMATCH, "args->max_drafts");
    stray = upload(c.drafts, 16);
    expect("keys set", call(&c, bounds, PSR_VERIFY_PROBABILISTIC, true, &o, own_keys),
           rank == 0 ? PSR_ERR_INVALID_ARGUMENT : PSR_ERR_COLLECTIVE, rank == 0 ? "args->shard_slot" : "rank 0");
    clReleaseMemObject(stray);
    CHECK(call(&c, NULL, PSR_VERIFY_PROBABILISTIC, true, &want, NULL) == PSR_OK, "reference: %s", psr_last_error(ctx));
    expect("good again", call(&c, bounds, PSR_VERIFY_PROBABILISTIC, true, &o, NULL), PSR_OK, NULL);
    CHECK(differences(&o, &want) == 0, "outputs after the errors differ");
    CHECK(call(&c, bounds, PSR_VERIFY_PROBABILISTIC, true, &o, swap_offsets) == PSR_OK, "control: %s",
          psr_last_error(ctx));
    size_t differ = differences(&o, &want);
    CHECK(differ >= REQUESTS / 3, "control: only %zu of %d requests differ with swapped offsets", differ, REQUESTS);
    free_case(&c);
}

static void run_checks(void)
{
    check_same_tokens();
    check_errors();
}

int main(int argc, char **argv)
{
    return mpi_test_main(argc, argv, 20261204, run_checks);
}
