/* Cold calls on the host (docs/cache.md): psr_logprobs computed by the
 * host oracle while its programs build. Each row is read as
 * cl/logprobs.cl reads it: the request's temperature where the row has a
 * request in range (else 1), the filter threshold of rows sampled at
 * T > 0 (bad filter values count as none), and int64 tokens clamped to
 * int32 before the range check. */
#include "ops/ops.h"
#include "oracle/oracle.h"

#include <math.h>
#include <stdlib.h>

/* The call's inputs on the host. */
typedef struct logprobs_inputs {
    float *logits;
    int32_t *row_request, *top_k;
    float *temperatures, *top_p, *min_p;
    void *tokens;
} logprobs_inputs;

static psr_status read_inputs(psr_context *ctx, const psr_logprobs_args *a, logprobs_inputs *in)
{
    psr_host_reads r = {ctx, "psr_logprobs", a->num_events_in_wait_list, a->event_wait_list, NULL, PSR_OK};
    bool raw = a->flags & PSR_LOGPROBS_RAW;
    size_t token_size = a->tokens_dtype == PSR_TOKENS_I64 ? 8 : 4;
    in->logits = psr_host_read_logits(&r, a->logits, a->logits_dtype, a->logits_offset, a->rows,
                                      a->row_stride ? a->row_stride : a->vocab, a->vocab);
    in->row_request = psr_host_read(&r, a->row_request, 0, a->rows * 4, "args->row_request");
    in->temperatures = raw ? NULL : psr_host_read(&r, a->temperatures, 0, a->requests * 4, "args->temperatures");
    in->tokens = psr_host_read(&r, a->tokens, 0, a->rows * token_size, "args->tokens");
    in->top_k = psr_host_read(&r, a->top_k, 0, a->requests * 4, "args->top_k");
    in->top_p = psr_host_read(&r, a->top_p, 0, a->requests * 4, "args->top_p");
    in->min_p = psr_host_read(&r, a->min_p, 0, a->requests * 4, "args->min_p");
    return r.st;
}

static void free_inputs(logprobs_inputs *in)
{
    free(in->logits), free(in->row_request), free(in->top_k);
    free(in->temperatures), free(in->top_p), free(in->min_p), free(in->tokens);
}

static int32_t token_of(const psr_logprobs_args *a, const logprobs_inputs *in, size_t row)
{
    if (a->tokens_dtype != PSR_TOKENS_I64)
        return ((const int32_t *)in->tokens)[row];
    int64_t t = ((const int64_t *)in->tokens)[row];
    return t < INT32_MIN ? INT32_MIN : t > INT32_MAX ? INT32_MAX : (int32_t)t;
}

/* One row into the output arrays; false when out of memory. */
static bool row_logprobs(const psr_logprobs_args *a, const logprobs_inputs *in, bool filtered, size_t row,
                         float *lp, int32_t *rank, int32_t *ids, float *top_lp)
{
    bool raw = a->flags & PSR_LOGPROBS_RAW;
    int32_t req = in->row_request ? in->row_request[row] : (int32_t)row;
    bool has_request = req >= 0 && (size_t)req < a->requests;
    float t = !raw && has_request ? in->temperatures[req] : 1.0f;
    const float *x = in->logits + row * a->vocab;
    float cut = -INFINITY;
    if (filtered && has_request && !raw)
        cut = psr_oracle_filter_threshold(x, a->vocab, t, in->top_k ? in->top_k[req] : a->all_top_k,
                                          in->top_p ? in->top_p[req] : a->all_top_p,
                                          in->min_p ? in->min_p[req] : a->all_min_p);
    size_t n = (size_t)a->top_n;
    return psr_oracle_logprobs_row(x, a->vocab, t, raw, cut, token_of(a, in, row), a->top_n, &lp[row], &rank[row],
                                   ids + row * n, top_lp + row * n);
}

static psr_status write_outputs(psr_context *ctx, const psr_logprobs_args *a, const float *lp, const int32_t *rank,
                                const int32_t *ids, const float *top_lp, cl_event *event)
{
    size_t n = (size_t)a->top_n;
    /* the last write gives the event: the top-N where there is one */
    cl_mem last = n ? a->top_logprobs : a->token_ranks ? a->token_ranks : a->token_logprobs;
    psr_status st = PSR_OK;
    if (a->token_logprobs)
        st = psr_host_write(ctx, "psr_logprobs", a->token_logprobs, 0, a->rows * 4, lp, "args->token_logprobs",
                            last == a->token_logprobs ? event : NULL);
    if (st == PSR_OK && a->token_ranks)
        st = psr_host_write(ctx, "psr_logprobs", a->token_ranks, 0, a->rows * 4, rank, "args->token_ranks",
                            last == a->token_ranks ? event : NULL);
    if (st == PSR_OK && n)
        st = psr_host_write(ctx, "psr_logprobs", a->top_ids, 0, a->rows * n * 4, ids, "args->top_ids", NULL);
    if (st == PSR_OK && n)
        st = psr_host_write(ctx, "psr_logprobs", a->top_logprobs, 0, a->rows * n * 4, top_lp, "args->top_logprobs",
                            event);
    return st;
}

psr_status psr_host_logprobs(psr_context *ctx, const psr_logprobs_args *a, bool filtered, cl_event *event)
{
    logprobs_inputs in = {0};
    psr_status st = read_inputs(ctx, a, &in);
    size_t n = a->top_n > 0 ? (size_t)a->top_n : 1;
    float *lp = malloc(a->rows * sizeof *lp), *top_lp = malloc(a->rows * n * sizeof *top_lp);
    int32_t *rank = malloc(a->rows * sizeof *rank), *ids = malloc(a->rows * n * sizeof *ids);
    if (st == PSR_OK && (!lp || !top_lp || !rank || !ids))
        st = psr_fail(ctx, PSR_ERR_OUT_OF_HOST_MEMORY, "psr_logprobs: out of host memory");
    for (size_t row = 0; row < a->rows && st == PSR_OK; row++)
        if (!row_logprobs(a, &in, filtered, row, lp, rank, ids, top_lp))
            st = psr_fail(ctx, PSR_ERR_OUT_OF_HOST_MEMORY, "psr_logprobs: out of host memory");
    if (st == PSR_OK)
        st = write_outputs(ctx, a, lp, rank, ids, top_lp, event);
    if (st == PSR_OK)
        st = psr_host_event(ctx, "psr_logprobs", event);
    free(lp), free(top_lp), free(rank), free(ids);
    free_inputs(&in);
    return st;
}
