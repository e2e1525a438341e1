/* What the operations share among themselves: the filter pre-pass and the
 * two-ended launches (sample.c, filter.c, verify.c). */
#ifndef PSR_OPS_H
#define PSR_OPS_H

#include "runtime/runtime.h"

/* ---- logit filters (filter.c) ---- */

/* Are any of args' top_k, top_p, min_p set? */
bool psr_filter_requested(const psr_sample_args *args);
/* Host checks of the filter buffers (sizes; not with PSR_SAMPLE_PROBS). */
psr_status psr_filter_check(psr_context *ctx, const psr_sample_args *args, unsigned flags);
/* The threshold pre-pass of variant v, in two steps so that a caller can
 * set its own kernels' arguments between them and then launch everything
 * back to back: psr_filter_prepare reserves the scratch and sets the
 * pass's arguments; plan->cut is the per-row output for psr_gumbel_sample
 * (two floats per row: the threshold, and 1 where the pass drew the row's
 * token into args->tokens, which `draw` allows). psr_filter_launch then
 * enqueues the pass after args' wait list. */
typedef struct psr_filter_plan {
    cl_kernel scan, collect, collect_mass; /* the last two NULL where not needed */
    size_t groups;
    cl_mem cut;
} psr_filter_plan;
psr_status psr_filter_prepare(psr_context *ctx, const psr_sample_args *args, const psr_variant *v,
                              bool draw, psr_filter_plan *plan);
psr_status psr_filter_launch(psr_context *ctx, const psr_sample_args *args, const psr_filter_plan *plan,
                             cl_event *event);
/* The host check of one request's filter values: PSR_OK or PSR_ERR_FILTER_RANGE. */
psr_status psr_filter_check_values(psr_context *ctx, const char *who, size_t index,
                                   const int32_t *top_k, const float *top_p, const float *min_p);

#endif
