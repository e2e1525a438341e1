/* psr verify unbiased --shards N and --mpi: the unbiasedness experiment of
 * speculative decoding (check.h, psr_unbiased_run) with every draft
 * sampled in N vocabulary shards (psr_sample_host per shard, then
 * psr_combine_host; under --mpi one shard per rank through
 * psr_mpi_sample_host) and verified in the same shards (the rounds of
 * psr_verify_shard_round; psr_mpi_verify under --mpi). The requests, seeds
 * and positions are psr_unbiased_run's, so the drafts are the unsharded
 * run's. The shards of 16 tokens cannot start on multiples of 16,384, so
 * a floating-point near-tie of the acceptance test may fall the other way
 * and the counts differ from the unsharded run's by a request or two; the
 * chi-square verdicts are what must agree. */
#include "shards.h"
#include "cli.h"
#include "check.h"
#include "oracle.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { V = PSR_UNBIASED_VOCAB, BATCH = 65536, FIRST_POS = 4096 };

/* The target logits, randn(16) from the stream as psr_unbiased_run draws
 * them (Box-Muller over words 0 and 1 of draw(seed, i)), and p and q. */
static void target_of(uint64_t seed, float *target, psr_unbiased_result *out)
{
    double top = -INFINITY, sum_p = 0, sum_q = 0;
    for (int i = 0; i < V; i++) {
        uint32_t w[4];
        psr_oracle_draw(seed, (uint64_t)i, w);
        double radius = sqrt(-2.0 * log(((double)w[0] + 1.0) / 4294967297.0));
        target[i] = (float)(radius * cos(6.283185307179586 * ((double)w[1] / 4294967296.0)));
        top = fmax(top, fabs((double)target[i]));
    }
    for (int i = 0; i < V; i++) { /* softmax(target) and softmax(-target), shifted by the largest |x| */
        sum_p += out->p[i] = exp((double)target[i] - top);
        sum_q += out->q[i] = exp(-(double)target[i] - top);
    }
    for (int i = 0; i < V; i++)
        out->p[i] /= sum_p, out->q[i] /= sum_q;
}

/* One batch's arrays: b requests of k drafts; draft row r * k + j is
 * draft j of request r (also the draft cache [b, k, V]), verify row
 * r * (k + 1) + j its row, the last one the bonus row. */
typedef struct batch {
    size_t b, k;
    float *draft, *target, *draft_temps, *temps;
    int64_t *draft_seeds, *draft_pos, *seeds, *pos;
    int32_t *drafts, *draft_tokens, *cu, *tokens, *num;
} batch;

static bool batch_alloc(batch *h, size_t b, size_t k)
{
    size_t d = b * k, rows = b * (k + 1);
    *h = (batch){b, k, malloc((d ? d : 1) * V * 4), malloc(rows * V * 4), malloc((d ? d : 1) * 4), malloc(b * 4),
                 malloc((d ? d : 1) * 8), malloc((d ? d : 1) * 8), malloc(b * 8), malloc(rows * 8),
                 malloc((d ? d : 1) * 4), malloc(rows * 4), malloc((b + 1) * 4), malloc(rows * 4), malloc(b * 4)};
    return h->draft && h->target && h->draft_temps && h->temps && h->draft_seeds && h->draft_pos && h->seeds &&
           h->pos && h->drafts && h->draft_tokens && h->cu && h->tokens && h->num;
}

static void batch_free(batch *h)
{
    free(h->draft), free(h->target), free(h->draft_temps), free(h->temps), free(h->draft_seeds);
    free(h->draft_pos), free(h->seeds), free(h->pos), free(h->drafts), free(h->draft_tokens);
    free(h->cu), free(h->tokens), free(h->num);
}

static void batch_fill(batch *h, uint64_t first_seed, const float *target)
{
    for (size_t r = 0; r < h->b; r++) {
        h->seeds[r] = (int64_t)(first_seed + r), h->temps[r] = 1.0f, h->cu[r] = (int32_t)(r * (h->k + 1));
        for (size_t j = 0; j <= h->k; j++) {
            size_t row = r * (h->k + 1) + j, d = r * h->k + j;
            memcpy(h->target + row * V, target, V * sizeof *target);
            h->pos[row] = FIRST_POS + (int64_t)j;
            if (j == h->k)
                continue;
            for (int i = 0; i < V; i++)
                h->draft[d * V + i] = -target[i];
            h->draft_seeds[d] = h->seeds[r], h->draft_pos[d] = h->pos[row], h->draft_temps[d] = 1.0f;
        }
    }
    h->cu[h->b] = (int32_t)(h->b * (h->k + 1));
}

/* The drafts' rows sampled as `plan` says: every shard here, or this
 * rank's columns with the other ranks sampling theirs. */
static psr_status sample_drafts(psr_context *ctx, const psr_sample_host_args *a, const shard_plan *plan)
{
#ifdef PSR_CLI_MPI
    if (plan->rank >= 0) {
        psr_sample_host_args mine = shards_columns(a, plan->count, (size_t)plan->rank, plan->bounds);
        return cli_mpi_sample(ctx, &mine);
    }
#endif
    return shards_sample_host(ctx, a, plan->count, plan->bounds);
}

/* The drafts, sampled in shards on the draft stream, in verify's rows. */
static psr_status batch_drafts(psr_context *ctx, batch *h, const shard_plan *plan)
{
    psr_sample_host_args a;
    psr_sample_host_args_init(&a, sizeof a);
    a.rows = h->b * h->k, a.vocab = V, a.logits = h->draft, a.logits_dtype = PSR_DTYPE_F32;
    a.seeds = h->draft_seeds, a.positions = h->draft_pos, a.temperatures = h->draft_temps;
    a.flags = PSR_SAMPLE_DRAFTING, a.tokens = h->drafts;
    psr_status st = a.rows ? sample_drafts(ctx, &a, plan) : PSR_OK;
    for (size_t r = 0; r < h->b; r++)
        for (size_t j = 0; j <= h->k; j++)
            h->draft_tokens[r * (h->k + 1) + j] = j < h->k ? h->drafts[r * h->k + j] : -1;
    return st;
}

/* The drafts verified in the same shards: psr_verify_shard_round's rounds
 * on every shard here, or psr_mpi_verify on this rank's columns. */
static psr_status batch_verify(psr_context *ctx, batch *h, const shard_plan *plan)
{
    psr_verify_host_args v;
    psr_verify_host_args_init(&v, sizeof v);
    v.requests = h->b, v.cu = h->cu, v.rows = h->b * (h->k + 1), v.max_drafts = h->k, v.vocab = V;
    v.target_logits = h->target, v.target_dtype = PSR_DTYPE_F32;
    v.draft_cache = h->k ? h->draft : NULL, v.draft_cache_k = h->k;
    v.draft_tokens = h->draft_tokens, v.seeds = h->seeds, v.temperatures = h->temps, v.positions = h->pos;
    v.tokens = h->tokens, v.num_sampled = h->num;
#ifdef PSR_CLI_MPI
    if (plan->rank >= 0)
        return cli_mpi_verify(ctx, &v, plan->bounds[plan->rank], plan->bounds[plan->rank + 1]);
#endif
    return shards_verify_host(ctx, &v, plan->count, plan->bounds);
}

/* Adds the batch's output tokens to out's counts, position by position. */
static psr_status batch_count(const batch *h, psr_unbiased_result *out)
{
    for (size_t r = 0; r < h->b; r++) {
        const int32_t *row = h->tokens + r * (h->k + 1);
        if (h->num[r] < 1 || (size_t)h->num[r] > h->k + 1)
            return cli_fail(PSR_ERR_OPENCL, "unbiasedness experiment: request %zu sampled %d tokens", r, h->num[r]);
        out->accepted += (uint64_t)h->num[r] - 1;
        for (size_t j = 0; j < (size_t)h->num[r]; j++) {
            if (row[j] < 0 || row[j] >= V)
                return cli_fail(PSR_ERR_OPENCL, "unbiasedness experiment: token %d out of range", row[j]);
            out->counts[j][row[j]]++, out->reached[j]++;
        }
    }
    return PSR_OK;
}

psr_status shards_unbiased_run(psr_context *ctx, size_t k, size_t trials, uint64_t seed, const shard_plan *plan,
                               psr_unbiased_result *out)
{
    float target[V];
    memset(out, 0, sizeof *out);
    out->k = k, out->trials = trials;
    target_of(seed, target, out);
    psr_status st = PSR_OK;
    for (size_t done = 0; done < trials && st == PSR_OK;) {
        batch h;
        size_t b = trials - done < BATCH ? trials - done : BATCH;
        if (!batch_alloc(&h, b, k))
            st = cli_fail(PSR_ERR_OUT_OF_HOST_MEMORY, "unbiasedness experiment: out of memory");
        if (st == PSR_OK) /* request seeds as psr_unbiased_run's */
            batch_fill(&h, seed * 0x9e3779b97f4a7c15ull + done, target);
        if (st == PSR_OK)
            st = batch_drafts(ctx, &h, plan);
        if (st == PSR_OK)
            st = batch_verify(ctx, &h, plan);
        if (st == PSR_OK)
            st = batch_count(&h, out);
        batch_free(&h);
        done += b;
    }
    return st;
}
