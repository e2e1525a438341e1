/* The narrow unbiasedness experiment of speculative decoding (DESIGN
 * section 8, docs/speculative.md): drafts from the salted sampler, then
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

static cl_mem upload(psr_context *ctx, size_t bytes, const void *host, cl_int *err)
{
    if (*err != CL_SUCCESS)
        return NULL;
    return clCreateBuffer(ctx->cl_ctx, host ? CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR : CL_MEM_READ_WRITE,
                          bytes, (void *)host, err);
}

/* One batch of b requests: sample K drafts each, verify, count. */
static psr_status run_batch(psr_context *ctx, size_t k, size_t b, uint64_t first_seed,
                            const float *target_row, psr_unbiased_result *out)
{
    const size_t V = PSR_UNBIASED_VOCAB, rows = b * (k + 1);
    float *target = malloc(rows * V * sizeof *target), *draft = malloc(rows * V * sizeof *draft);
    int32_t *row_request = malloc(rows * 4), *cache_rows = malloc(rows * 4), *cu = malloc((b + 1) * 4);
    int64_t *seeds = malloc(b * 8), *positions = malloc(rows * 8);
    float *temps = malloc(b * 4);
    int32_t *tokens = malloc(b * (k + 1) * 4), *num = malloc(b * 4);
    psr_status st = PSR_OK;
    batch_buffers buf = {0};
    if (!target || !draft || !row_request || !cache_rows || !cu || !seeds || !positions || !temps ||
        !tokens || !num) {
        st = psr_fail(ctx, PSR_ERR_OUT_OF_HOST_MEMORY, "unbiasedness experiment: out of memory");
        goto done;
    }
    /* Row (r, j): drafts j < k, then the bonus row. The draft sampler skips
     * bonus rows (request -1), so its tokens land in verify's layout. */
    for (size_t r = 0; r < b; r++) {
        cu[r] = (int32_t)(r * (k + 1));
        seeds[r] = (int64_t)(first_seed + r);
        temps[r] = 1.0f;
        for (size_t j = 0; j <= k; j++) {
            size_t row = r * (k + 1) + j;
            for (size_t i = 0; i < V; i++) {
                target[row * V + i] = target_row[i];
                draft[row * V + i] = -target_row[i];
            }
            row_request[row] = j < k ? (int32_t)r : -1;
            cache_rows[row] = j < k ? (int32_t)(r * k + j) : -1;
            positions[row] = FIRST_POS + (int64_t)j;
        }
    }
    cu[b] = (int32_t)rows;

    cl_int err = CL_SUCCESS;
    buf.target = upload(ctx, rows * V * 4, target, &err);
    buf.draft = upload(ctx, rows * V * 4, draft, &err);
    buf.cache = upload(ctx, (k ? b * k : 1) * V * 4, NULL, &err);
    buf.row_request = upload(ctx, rows * 4, row_request, &err);
    buf.cache_rows = upload(ctx, rows * 4, cache_rows, &err);
    buf.seeds = upload(ctx, b * 8, seeds, &err);
    buf.temps = upload(ctx, b * 4, temps, &err);
    buf.positions = upload(ctx, rows * 8, positions, &err);
    buf.drafts = upload(ctx, rows * 4, NULL, &err);
    buf.tokens = upload(ctx, b * (k + 1) * 4, NULL, &err);
    buf.num_sampled = upload(ctx, b * 4, NULL, &err);
    if (err != CL_SUCCESS) {
        st = psr_fail(ctx, PSR_ERR_OPENCL, "unbiasedness experiment: allocating buffers failed: %s (%d)",
                      psr_cl_error_string(err), err);
        goto done;
    }

    if (k > 0) {
        psr_sample_args s;
        psr_sample_args_init(&s);
        s.rows = rows;
        s.vocab = V;
        s.logits = buf.draft;
        s.row_request = buf.row_request;
        s.requests = b;
        s.seeds = buf.seeds;
        s.temperatures = buf.temps;
        s.positions = buf.positions;
        s.tokens = buf.drafts;
        s.draft_cache = buf.cache;
        s.draft_cache_rows = buf.cache_rows;
        s.draft_cache_rows_total = b * k;
        s.flags = PSR_SAMPLE_DRAFTING;
        st = psr_sample(ctx, &s, NULL);
        if (st != PSR_OK)
            goto done;
    } else {
        cl_int minus_one = -1;
        err = clEnqueueFillBuffer(ctx->queue, buf.drafts, &minus_one, 4, 0, rows * 4, 0, NULL, NULL);
        if (err != CL_SUCCESS) {
            st = psr_fail(ctx, PSR_ERR_OPENCL, "unbiasedness experiment: fill failed: %s (%d)",
                          psr_cl_error_string(err), err);
            goto done;
        }
    }

    psr_verify_args v;
    psr_verify_args_init(&v);
    v.requests = b;
    v.cu = cu;
    v.rows = rows;
    v.max_drafts = k;
    v.vocab = V;
    v.target_logits = buf.target;
    v.draft_cache = k ? buf.cache : NULL;
    v.draft_cache_k = k;
    v.draft_tokens = buf.drafts;
    v.seeds = buf.seeds;
    v.temperatures = buf.temps;
    v.positions = buf.positions;
    v.tokens = buf.tokens;
    v.num_sampled = buf.num_sampled;
    st = psr_verify(ctx, &v, NULL);
    if (st != PSR_OK)
        goto done;
    err = clEnqueueReadBuffer(ctx->queue, buf.tokens, CL_TRUE, 0, b * (k + 1) * 4, tokens, 0, NULL, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(ctx->queue, buf.num_sampled, CL_TRUE, 0, b * 4, num, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
        st = psr_fail(ctx, PSR_ERR_OPENCL, "unbiasedness experiment: reading results failed: %s (%d)",
                      psr_cl_error_string(err), err);
        goto done;
    }
    for (size_t r = 0; r < b; r++) {
        if (num[r] < 1 || (size_t)num[r] > k + 1) {
            st = psr_fail(ctx, PSR_ERR_OPENCL, "unbiasedness experiment: request %zu sampled %d tokens", r,
                          num[r]);
            goto done;
        }
        out->accepted += (uint64_t)num[r] - 1;
        for (size_t j = 0; j < (size_t)num[r]; j++) {
            int32_t t = tokens[r * (k + 1) + j];
            if (t < 0 || (size_t)t >= V) {
                st = psr_fail(ctx, PSR_ERR_OPENCL, "unbiasedness experiment: token %d out of range", t);
                goto done;
            }
            out->reached[j]++;
            out->counts[j][t]++;
        }
    }
done:
    for (cl_mem *m = &buf.target; m <= &buf.num_sampled; m++)
        if (*m)
            clReleaseMemObject(*m);
    free(target), free(draft), free(row_request), free(cache_rows), free(cu);
    free(seeds), free(positions), free(temps), free(tokens), free(num);
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
