/* Cold calls on the host (docs/cache.md): psr_sample computed by the host
 * oracle (lib/oracle, the kernels' operations in their order, bit for
 * bit) while the call's programs build in the background. The inputs are
 * read back after the call's wait list, every row is decided as
 * cl/gumbel.cl decides it (status, filter threshold, token, flags, draft
 * cache row), and the outputs are written where the kernels write them.
 * Also the reads and writes psr_logprobs' host path shares (host_logprobs.c). */
#include "ops/ops.h"
#include "oracle/oracle.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The call's inputs on the host. */
typedef struct host_rows {
    float *logits; /* [rows, vocab] as fp32 */
    int32_t *row_request, *top_k, *cache_rows;
    int64_t *seeds, *positions;
    float *temperatures, *top_p, *min_p;
} host_rows;

/* A blocking read of `bytes` at `offset` of `mem` into a new array (NULL
 * when mem is NULL or an earlier read failed), after the call's wait list. */
void *psr_host_read(psr_host_reads *r, cl_mem mem, size_t offset, size_t bytes, const char *what)
{
    if (!mem || r->st != PSR_OK)
        return NULL;
    void *out = malloc(bytes ? bytes : 1);
    if (!out) {
        r->st = psr_fail(r->ctx, PSR_ERR_OUT_OF_HOST_MEMORY, "%s: out of host memory reading %s", r->call, what);
        return NULL;
    }
    cl_event *ev = r->first && !*r->first ? r->first : NULL;
    cl_int err = clEnqueueReadBuffer(r->ctx->queue, mem, CL_TRUE, offset, bytes, out, r->nwait, r->wait, ev);
    if (err != CL_SUCCESS) {
        r->st = psr_fail_cl(r->ctx, err, "%s: reading %s back to the host failed", r->call, what);
        free(out);
        return NULL;
    }
    return out;
}

float *psr_host_read_logits(psr_host_reads *r, cl_mem logits, psr_dtype dtype, size_t offset, size_t rows,
                            size_t stride, size_t vocab)
{
    size_t esize = psr_dtype_size(dtype);
    size_t span = (rows - 1) * stride + vocab;
    void *raw = psr_host_read(r, logits, offset * esize, span * esize, "args->logits");
    if (!raw || (dtype == PSR_DTYPE_F32 && stride == vocab))
        return raw;
    float *out = malloc(rows * vocab * sizeof *out);
    if (!out) {
        free(raw);
        r->st = psr_fail(r->ctx, PSR_ERR_OUT_OF_HOST_MEMORY, "%s: out of host memory reading args->logits", r->call);
        return NULL;
    }
    for (size_t row = 0; row < rows; row++)
        for (size_t i = 0; i < vocab; i++) {
            size_t at = row * stride + i;
            float *to = &out[row * vocab + i];
            if (dtype == PSR_DTYPE_F32)
                *to = ((const float *)raw)[at];
            else if (dtype == PSR_DTYPE_F16)
                *to = psr_oracle_f16(((const uint16_t *)raw)[at]);
            else
                *to = psr_oracle_bf16(((const uint16_t *)raw)[at]);
        }
    free(raw);
    return out;
}

bool psr_host_can_wait(cl_uint nwait, const cl_event *wait)
{
    for (cl_uint i = 0; i < nwait; i++) {
        cl_command_queue q = NULL;
        cl_int status = CL_COMPLETE;
        if (clGetEventInfo(wait[i], CL_EVENT_COMMAND_QUEUE, sizeof q, &q, NULL) != CL_SUCCESS ||
            clGetEventInfo(wait[i], CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL) != CL_SUCCESS)
            return false;
        if (!q && status > CL_COMPLETE)
            return false; /* a user event the caller may set only after the call returns */
        if (q && status > CL_COMPLETE && clFlush(q) != CL_SUCCESS)
            return false; /* another queue's command must be on its way before the host waits for it */
    }
    return true;
}

psr_status psr_host_event(psr_context *ctx, const char *call, cl_event *event)
{
    if (!event || *event)
        return PSR_OK;
    cl_int err = clEnqueueMarkerWithWaitList(ctx->queue, 0, NULL, event);
    return err == CL_SUCCESS ? PSR_OK : psr_fail_cl(ctx, err, "%s: clEnqueueMarkerWithWaitList failed", call);
}

psr_status psr_host_write(psr_context *ctx, const char *call, cl_mem mem, size_t offset, size_t bytes,
                          const void *src, const char *what, cl_event *event)
{
    cl_int err = clEnqueueWriteBuffer(ctx->queue, mem, CL_TRUE, offset, bytes, src, 0, NULL, event);
    return err == CL_SUCCESS ? PSR_OK : psr_fail_cl(ctx, err, "%s: writing %s from the host failed", call, what);
}

static void free_rows(host_rows *h)
{
    free(h->logits), free(h->row_request), free(h->top_k), free(h->cache_rows);
    free(h->seeds), free(h->positions), free(h->temperatures), free(h->top_p), free(h->min_p);
}

static psr_status read_rows(psr_context *ctx, const psr_sample_args *a, cl_event *first, host_rows *h)
{
    memset(h, 0, sizeof *h);
    psr_host_reads r = {ctx, "psr_sample", a->num_events_in_wait_list, a->event_wait_list, first, PSR_OK};
    size_t rows = a->rows, requests = a->requests;
    h->logits = psr_host_read_logits(&r, a->logits, a->logits_dtype, a->logits_offset, rows,
                                     a->row_stride ? a->row_stride : a->vocab, a->vocab);
    h->row_request = psr_host_read(&r, a->row_request, 0, rows * 4, "args->row_request");
    h->seeds = psr_host_read(&r, a->seeds, 0, requests * 8, "args->seeds");
    h->temperatures = psr_host_read(&r, a->temperatures, 0, requests * 4, "args->temperatures");
    h->positions = psr_host_read(&r, a->positions, 0, rows * 8, "args->positions");
    h->top_k = psr_host_read(&r, a->top_k, 0, requests * 4, "args->top_k");
    h->top_p = psr_host_read(&r, a->top_p, 0, requests * 4, "args->top_p");
    h->min_p = psr_host_read(&r, a->min_p, 0, requests * 4, "args->min_p");
    if (a->draft_cache)
        h->cache_rows = psr_host_read(&r, a->draft_cache_rows, 0, rows * 4, "args->draft_cache_rows");
    return r.st;
}

/* One row's outcome. */
typedef struct host_row_result {
    int32_t token;
    uint32_t flags;
    int64_t cache_row; /* -1: no draft cache row written */
} host_row_result;

/* psr_row_status of cl/tokens.cl: the row's request (-1 padding) and the
 * flags of its inputs. */
static uint32_t row_status(const psr_sample_args *a, const host_rows *h, size_t row, int32_t *req)
{
    *req = h->row_request ? h->row_request[row] : (int32_t)row;
    if (*req < 0)
        return 0;
    if ((size_t)*req >= a->requests)
        return PSR_ROW_BAD_INDEX;
    uint32_t flags = 0;
    int64_t pos = h->positions[row];
    float t = h->temperatures[*req];
    if (pos < 0 || pos >= PSR_MAX_POSITION)
        flags |= PSR_ROW_BAD_POSITION;
    if (!psr_temperature_ok(t))
        flags |= PSR_ROW_BAD_TEMPERATURE;
    size_t total = a->draft_cache_rows ? a->draft_cache_rows_total : a->rows;
    if (a->draft_cache && h->cache_rows && h->cache_rows[row] >= 0 && (size_t)h->cache_rows[row] >= total)
        flags |= PSR_ROW_BAD_INDEX;
    return flags;
}

static psr_noise_kind noise_kind(const psr_variant *v)
{
    return v->fp64 ? PSR_ORACLE_FP64 : v->wide ? PSR_ORACLE_WIDE : PSR_ORACLE_FP32;
}

/* The row's token with its filters applied (Gumbel-max) or its race
 * (probabilities); masked is scratch of vocab floats. */
static void decide_row(const psr_sample_args *a, const psr_variant *v, size_t chunk, const host_rows *h, size_t row,
                       float *masked, host_row_result *out)
{
    int32_t req;
    out->token = -1;
    out->cache_row = -1;
    out->flags = row_status(a, h, row, &req);
    if (req < 0) {
        out->flags = 0;
        return;
    }
    const float *x = h->logits + row * a->vocab;
    float cut = -INFINITY;
    if (v->filtered && !(out->flags & PSR_ROW_BAD_INDEX)) {
        cut = psr_oracle_filter_threshold(x, a->vocab, h->temperatures[req], h->top_k ? h->top_k[req] : a->all_top_k,
                                          h->top_p ? h->top_p[req] : a->all_top_p,
                                          h->min_p ? h->min_p[req] : a->all_min_p);
        if (isnan(cut))
            out->flags |= PSR_ROW_BAD_FILTER;
    }
    if (out->flags)
        return;
    float t = h->temperatures[req];
    if (a->draft_cache)
        out->cache_row = h->cache_rows ? h->cache_rows[row]
                         : a->draft_cache_k ? (int64_t)req * (int64_t)a->draft_cache_k + (int64_t)a->draft_step
                                            : (int64_t)row;
    bool none;
    if (v->method == 1) { /* the race over logits scales by group, so the launch's split decides */
        out->token = psr_oracle_race_logits_row(x, a->vocab, chunk, t, h->seeds[req], h->positions[row],
                                                v->drafting, noise_kind(v), cut, &none);
        if (none)
            out->flags |= PSR_ROW_NO_FINITE;
        return;
    }
    if (cut > -INFINITY) {
        for (size_t i = 0; i < a->vocab; i++)
            masked[i] = psr_oracle_scaled(x[i], t) < cut ? -INFINITY : x[i];
        x = masked;
    }
    if (v->method == 2)
        out->token = psr_oracle_race_row(x, a->vocab, t, h->seeds[req], h->positions[row], v->drafting,
                                         noise_kind(v), &none);
    else
        out->token = psr_oracle_sample_row(x, a->vocab, t, h->seeds[req], h->positions[row], v->drafting,
                                           noise_kind(v), &none);
    if (none)
        out->flags |= PSR_ROW_NO_FINITE;
}

/* The draft cache rows, the flags, then the tokens (whose write is *last). */
static psr_status write_results(psr_context *ctx, const psr_sample_args *a, const host_rows *h,
                                const host_row_result *res, cl_event *last)
{
    psr_status st = PSR_OK;
    for (size_t row = 0; row < a->rows && st == PSR_OK; row++)
        if (res[row].cache_row >= 0)
            st = psr_host_write(ctx, "psr_sample", a->draft_cache, (size_t)res[row].cache_row * a->vocab * 4, a->vocab * 4,
                             h->logits + row * a->vocab, "args->draft_cache", NULL);
    size_t token_size = a->tokens_dtype == PSR_TOKENS_I64 ? 8 : 4;
    void *tokens = malloc(a->rows * token_size);
    uint32_t *flags = a->row_flags ? malloc(a->rows * sizeof *flags) : NULL;
    if (st == PSR_OK && (!tokens || (a->row_flags && !flags)))
        st = psr_fail(ctx, PSR_ERR_OUT_OF_HOST_MEMORY, "psr_sample: out of host memory for the results");
    for (size_t row = 0; row < a->rows && st == PSR_OK; row++) {
        if (token_size == 8)
            ((int64_t *)tokens)[row] = res[row].token;
        else
            ((int32_t *)tokens)[row] = res[row].token;
        if (flags)
            flags[row] = res[row].flags;
    }
    if (st == PSR_OK && flags)
        st = psr_host_write(ctx, "psr_sample", a->row_flags, 0, a->rows * sizeof *flags, flags, "args->row_flags", NULL);
    if (st == PSR_OK)
        st = psr_host_write(ctx, "psr_sample", a->tokens, 0, a->rows * token_size, tokens, "args->tokens", last);
    free(tokens);
    free(flags);
    return st;
}

psr_status psr_host_sample(psr_context *ctx, const psr_sample_args *a, unsigned flags, cl_event *first,
                           cl_event *last)
{
    psr_variant v = psr_variant_of(PSR_KERNELS_SAMPLE, flags, a->logits_dtype);
    v.filtered = psr_filter_requested(a);
    host_rows h;
    psr_status st = read_rows(ctx, a, first, &h);
    host_row_result *res = st == PSR_OK ? malloc(a->rows * sizeof *res) : NULL;
    float *masked = st == PSR_OK && v.filtered ? malloc(a->vocab * sizeof *masked) : NULL;
    if (st == PSR_OK && (!res || (v.filtered && !masked)))
        st = psr_fail(ctx, PSR_ERR_OUT_OF_HOST_MEMORY, "psr_sample: out of host memory");
    cl_uint chunk = 0, groups = 0;
    if (v.method == 1)
        psr_split_rows(ctx, a->rows, a->vocab, &chunk, &groups);
    for (size_t row = 0; row < a->rows && st == PSR_OK; row++)
        decide_row(a, &v, chunk, &h, row, masked, &res[row]);
    if (st == PSR_OK)
        st = write_results(ctx, a, &h, res, last);
    if (st != PSR_OK && first && *first) {
        clReleaseEvent(*first);
        *first = NULL;
    }
    free(res);
    free(masked);
    free_rows(&h);
    return st;
}
