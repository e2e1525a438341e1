/* The narrow unbiasedness experiment of speculative decoding
 * (docs/speculative.md): drafts from the salted sampler, then
 * psr_verify, counting the output token at every position. Shared by the
 * test suite and `psr verify unbiased`. */
#include "check/check.h"
#include "ops/ops.h"
#include "oracle/oracle.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BATCH 65536u    /* requests per launch pair */
#define FIRST_POS 4096  /* position of draft 0; draft j uses FIRST_POS + j */

/* A standard normal from two stream uniforms (Box-Muller), so the logits
 * depend only on the experiment's seed. */
static float logit_normal(uint64_t seed, uint64_t i)
{
    uint32_t w[4];
    psr_oracle_draw(seed, i, w);
    double u1 = ((double)w[0] + 1.0) / 4294967297.0, u2 = (double)w[1] / 4294967296.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static void softmax16(const float *x, double *p)
{
    double m = -INFINITY, s = 0;
    for (int i = 0; i < PSR_UNBIASED_VOCAB; i++)
        m = fmax(m, x[i]);
    for (int i = 0; i < PSR_UNBIASED_VOCAB; i++)
        s += p[i] = exp(x[i] - m);
    for (int i = 0; i < PSR_UNBIASED_VOCAB; i++)
        p[i] /= s;
}

typedef struct batch_buffers {
    cl_mem target, draft, cache, row_request, cache_rows, seeds, temps, positions, drafts, tokens,
        num_sampled;
} batch_buffers;

/* The host side of one batch of b requests of k drafts. */
typedef struct batch_host {
    size_t k, b, rows;
    float *target, *draft, *temps;
    int32_t *row_request, *cache_rows, *cu, *tokens, *num;
    int64_t *seeds, *positions;
} batch_host;

static void free_host(batch_host *h)
{
    free(h->target), free(h->draft), free(h->row_request), free(h->cache_rows), free(h->cu);
    free(h->seeds), free(h->positions), free(h->temps), free(h->tokens), free(h->num);
}

/* Row (r, j): drafts j < k, then the bonus row. The draft sampler skips
 * bonus rows (request -1), so its tokens land in verify's layout. */
static bool make_host(size_t k, size_t b, uint64_t first_seed, const float *target_row, batch_host *h)
{
    const size_t V = PSR_UNBIASED_VOCAB, rows = b * (k + 1);
    *h = (batch_host){k, b, rows, malloc(rows * V * 4), malloc(rows * V * 4), malloc(b * 4),
                      malloc(rows * 4), malloc(rows * 4), malloc((b + 1) * 4), malloc(b * (k + 1) * 4),
                      malloc(b * 4), malloc(b * 8), malloc(rows * 8)};
    if (!h->target || !h->draft || !h->temps || !h->row_request || !h->cache_rows || !h->cu || !h->tokens ||
        !h->num || !h->seeds || !h->positions)
        return false;
    for (size_t r = 0; r < b; r++) {
        h->cu[r] = (int32_t)(r * (k + 1));
        h->seeds[r] = (int64_t)(first_seed + r);
        h->temps[r] = 1.0f;
        for (size_t j = 0; j <= k; j++) {
            size_t row = r * (k + 1) + j;
            for (size_t i = 0; i < V; i++) {
                h->target[row * V + i] = target_row[i];
                h->draft[row * V + i] = -target_row[i];
            }
            h->row_request[row] = j < k ? (int32_t)r : -1;
            h->cache_rows[row] = j < k ? (int32_t)(r * k + j) : -1;
            h->positions[row] = FIRST_POS + (int64_t)j;
        }
    }
    h->cu[b] = (int32_t)rows;
    return true;
}

static cl_mem upload(psr_context *ctx, size_t bytes, const void *host, cl_int *err)
{
    if (*err != CL_SUCCESS)
        return NULL;
    return clCreateBuffer(ctx->cl_ctx, host ? CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR : CL_MEM_READ_WRITE,
                          bytes, (void *)host, err);
}

static psr_status upload_batch(psr_context *ctx, const batch_host *h, batch_buffers *buf)
{
    const size_t V = PSR_UNBIASED_VOCAB, rows = h->rows, b = h->b, k = h->k;
    cl_int err = CL_SUCCESS;
    buf->target = upload(ctx, rows * V * 4, h->target, &err);
    buf->draft = upload(ctx, rows * V * 4, h->draft, &err);
    buf->cache = upload(ctx, (k ? b * k : 1) * V * 4, NULL, &err);
    buf->row_request = upload(ctx, rows * 4, h->row_request, &err);
    buf->cache_rows = upload(ctx, rows * 4, h->cache_rows, &err);
    buf->seeds = upload(ctx, b * 8, h->seeds, &err);
    buf->temps = upload(ctx, b * 4, h->temps, &err);
    buf->positions = upload(ctx, rows * 8, h->positions, &err);
    buf->drafts = upload(ctx, rows * 4, NULL, &err);
    buf->tokens = upload(ctx, b * (k + 1) * 4, NULL, &err);
    buf->num_sampled = upload(ctx, b * 4, NULL, &err);
    if (err != CL_SUCCESS)
        return psr_fail_cl(ctx, err, "unbiasedness experiment: allocating buffers failed");
    return PSR_OK;
}

/* The drafts: the salted sampler over the draft logits, filling the draft
 * cache; with k = 0 every draft is -1. */
static psr_status draw_drafts(psr_context *ctx, const batch_host *h, const batch_buffers *buf)
{
    if (h->k == 0) {
        cl_int minus_one = -1;
        cl_int err = clEnqueueFillBuffer(ctx->queue, buf->drafts, &minus_one, 4, 0, h->rows * 4, 0, NULL, NULL);
        if (err != CL_SUCCESS)
            return psr_fail_cl(ctx, err, "unbiasedness experiment: fill failed");
        return PSR_OK;
    }
    psr_sample_args s;
    psr_sample_args_init(&s, sizeof s);
    s.rows = h->rows;
    s.vocab = PSR_UNBIASED_VOCAB;
    s.logits = buf->draft;
    s.row_request = buf->row_request;
    s.requests = h->b;
    s.seeds = buf->seeds;
    s.temperatures = buf->temps;
    s.positions = buf->positions;
    s.tokens = buf->drafts;
    s.draft_cache = buf->cache;
    s.draft_cache_rows = buf->cache_rows;
    s.draft_cache_rows_total = h->b * h->k;
    s.flags = PSR_SAMPLE_DRAFTING;
    return psr_sample(ctx, &s, NULL);
}

/* psr_verify over the batch, its outputs read into h. */
static psr_status verify_batch(psr_context *ctx, batch_host *h, const batch_buffers *buf)
{
    psr_verify_args v;
    psr_verify_args_init(&v, sizeof v);
    v.requests = h->b;
    v.cu = h->cu;
    v.rows = h->rows;
    v.max_drafts = h->k;
    v.vocab = PSR_UNBIASED_VOCAB;
    v.target_logits = buf->target;
    v.draft_cache = h->k ? buf->cache : NULL;
    v.draft_cache_k = h->k;
    v.draft_tokens = buf->drafts;
    v.seeds = buf->seeds;
    v.temperatures = buf->temps;
    v.positions = buf->positions;
    v.tokens = buf->tokens;
    v.num_sampled = buf->num_sampled;
    psr_status st = psr_verify(ctx, &v, NULL);
    if (st != PSR_OK)
        return st;
    cl_int err = clEnqueueReadBuffer(ctx->queue, buf->tokens, CL_TRUE, 0, h->b * (h->k + 1) * 4, h->tokens, 0,
                                     NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(ctx->queue, buf->num_sampled, CL_TRUE, 0, h->b * 4, h->num, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return psr_fail_cl(ctx, err, "unbiasedness experiment: reading results failed");
    return PSR_OK;
}

static psr_status count_batch(psr_context *ctx, const batch_host *h, psr_unbiased_result *out)
{
    const size_t k = h->k;
    for (size_t r = 0; r < h->b; r++) {
        int32_t num = h->num[r];
        if (num < 1 || (size_t)num > k + 1)
            return psr_fail(ctx, PSR_ERR_OPENCL, "unbiasedness experiment: request %zu sampled %d tokens", r,
                            num);
        out->accepted += (uint64_t)num - 1;
        for (size_t j = 0; j < (size_t)num; j++) {
            int32_t t = h->tokens[r * (k + 1) + j];
            if (t < 0 || (size_t)t >= PSR_UNBIASED_VOCAB)
                return psr_fail(ctx, PSR_ERR_OPENCL, "unbiasedness experiment: token %d out of range", t);
            out->reached[j]++;
            out->counts[j][t]++;
        }
    }
    return PSR_OK;
}

/* One batch of b requests: sample K drafts each, verify, count. */
static psr_status run_batch(psr_context *ctx, size_t k, size_t b, uint64_t first_seed,
                            const float *target_row, psr_unbiased_result *out)
{
    batch_host h;
    batch_buffers buf = {0};
    psr_status st = make_host(k, b, first_seed, target_row, &h)
                        ? upload_batch(ctx, &h, &buf)
                        : psr_fail(ctx, PSR_ERR_OUT_OF_HOST_MEMORY, "unbiasedness experiment: out of memory");
    if (st == PSR_OK)
        st = draw_drafts(ctx, &h, &buf);
    if (st == PSR_OK)
        st = verify_batch(ctx, &h, &buf);
    if (st == PSR_OK)
        st = count_batch(ctx, &h, out);
    for (cl_mem *m = &buf.target; m <= &buf.num_sampled; m++)
        if (*m)
            clReleaseMemObject(*m);
    free_host(&h);
    return st;
}

psr_status psr_unbiased_run(psr_context *ctx, size_t k, size_t trials, uint64_t seed,
                            psr_unbiased_result *out)
{
    if (k > PSR_UNBIASED_MAX_K || trials == 0)
        return psr_fail(ctx, PSR_ERR_INVALID_ARGUMENT,
                        "unbiasedness experiment: k %zu must be 0..%d and trials > 0", k,
                        PSR_UNBIASED_MAX_K);
    memset(out, 0, sizeof *out);
    out->k = k;
    out->trials = trials;
    float target[PSR_UNBIASED_VOCAB], draft[PSR_UNBIASED_VOCAB];
    for (int i = 0; i < PSR_UNBIASED_VOCAB; i++) {
        target[i] = logit_normal(seed, (uint64_t)i);
        draft[i] = -target[i];
    }
    softmax16(target, out->p);
    softmax16(draft, out->q);
    for (size_t done = 0; done < trials;) {
        size_t b = trials - done < BATCH ? trials - done : BATCH;
        /* Request seeds differ across batches and experiments' seeds. */
        psr_status st = run_batch(ctx, k, b, seed * 0x9e3779b97f4a7c15ull + done, target, out);
        if (st != PSR_OK)
            return st;
        done += b;
    }
    return PSR_OK;
}
