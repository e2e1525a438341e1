/* Host side of the logit filters (cl/filter.cl): argument checks and the
 * per-row threshold pre-pass that psr_gumbel_sample reads. */
#include "internal.h"

#include <math.h>

bool psr_filter_requested(const psr_sample_args *a)
{
    return a->top_k || a->top_p || a->min_p;
}

psr_status psr_filter_check(psr_context *ctx, const psr_sample_args *a, unsigned flags)
{
    if (!psr_filter_requested(a))
        return PSR_OK;
    if (flags & PSR_SAMPLE_PROBS)
        return psr_fail(ctx, PSR_ERR_INVALID_ARGUMENT,
                        "args->top_k, top_p and min_p filter logits: not with PSR_SAMPLE_PROBS");
    psr_status st = PSR_OK;
    if (a->top_k)
        st = psr_check_buffer(ctx, a->top_k, a->requests * 4, "args->top_k");
    if (st == PSR_OK && a->top_p)
        st = psr_check_buffer(ctx, a->top_p, a->requests * 4, "args->top_p");
    if (st == PSR_OK && a->min_p)
        st = psr_check_buffer(ctx, a->min_p, a->requests * 4, "args->min_p");
    return st;
}

psr_status psr_filter_check_values(psr_context *ctx, const char *who, size_t i,
                                   const int32_t *top_k, const float *top_p, const float *min_p)
{
    (void)top_k; /* every k is valid: <= 0 and >= vocab turn top-k off */
    if (top_p && !(top_p[i] > 0.0f && top_p[i] <= 1.0f))
        return psr_fail(ctx, PSR_ERR_FILTER_RANGE, "%s: top_p[%zu] = %g is outside (0, 1]", who, i,
                        (double)top_p[i]);
    if (min_p && !(min_p[i] >= 0.0f && min_p[i] <= 1.0f))
        return psr_fail(ctx, PSR_ERR_FILTER_RANGE, "%s: min_p[%zu] = %g is outside [0, 1]", who, i,
                        (double)min_p[i]);
    return PSR_OK;
}

psr_status psr_filter_enqueue(psr_context *ctx, const psr_sample_args *a, const psr_variant *v,
                              cl_event *event, cl_mem *cut)
{
    cl_kernel k;
    psr_status st = psr_kernel_get(ctx, v, "psr_filter_threshold", &k);
    if (st == PSR_OK)
        st = psr_scratch_reserve(ctx, &ctx->filter_cut, a->rows * sizeof(cl_float));
    if (st != PSR_OK)
        return st;
    *cut = ctx->filter_cut.buffer;
    cl_ulong offset = a->logits_offset;
    cl_ulong stride = a->row_stride ? a->row_stride : a->vocab;
    cl_uint vocab = (cl_uint)a->vocab, requests = (cl_uint)a->requests;
    const size_t ms = sizeof(cl_mem);
    const size_t sizes[] = {ms, 8, 8, 4, ms, 4, ms, ms, ms, ms, ms};
    const void *values[] = {&a->logits, &offset,    &stride,   &vocab,    &a->row_request, &requests,
                            &a->temperatures, &a->top_k, &a->top_p, &a->min_p, cut};
    st = psr_set_kernel_args(ctx, k, "psr_filter_threshold", 11, sizes, values);
    if (st == PSR_OK)
        st = psr_enqueue_groups(ctx, k, "psr_filter_threshold", a->rows, ctx->tuning.work_group_size,
                                a->num_events_in_wait_list, a->event_wait_list, event);
    return st;
}
