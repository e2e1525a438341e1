/* Host side of the logit filters (cl/filter.cl): argument checks and the
 * per-row threshold pre-pass that psr_gumbel_sample reads. */
#include "ops/ops.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

bool psr_filter_requested(const psr_sample_args *a)
{
    return a->top_k || a->top_p || a->min_p || a->all_top_k > 0 || a->all_top_p != 1.0f ||
           a->all_min_p != 0.0f;
}

psr_status psr_filter_check(psr_context *ctx, const psr_sample_args *a, unsigned flags)
{
    if (!psr_filter_requested(a))
        return PSR_OK;
    REQUIRE(!(flags & PSR_SAMPLE_PROBS), PSR_ERR_INVALID_ARGUMENT,
            "args->top_k, top_p and min_p filter logits: not with PSR_SAMPLE_PROBS");
    REQUIRE(!a->top_k || a->all_top_k <= 0, PSR_ERR_INVALID_ARGUMENT,
            "args->top_k and args->all_top_k are both set: choose one");
    REQUIRE(!a->top_p || a->all_top_p == 1.0f, PSR_ERR_INVALID_ARGUMENT,
            "args->top_p and args->all_top_p are both set: choose one");
    REQUIRE(!a->min_p || a->all_min_p == 0.0f, PSR_ERR_INVALID_ARGUMENT,
            "args->min_p and args->all_min_p are both set: choose one");
    return psr_filter_check_values(ctx, "args", SIZE_MAX, NULL, &a->all_top_p, &a->all_min_p);
}

/* "top_p[3]" for an array entry, "all_top_p" for the value of every row. */
static void entry_name(char *buf, size_t len, const char *field, size_t i)
{
    if (i == SIZE_MAX)
        snprintf(buf, len, "all_%s", field);
    else
        snprintf(buf, len, "%s[%zu]", field, i);
}

psr_status psr_filter_check_values(psr_context *ctx, const char *who, size_t i,
                                   const int32_t *top_k, const float *top_p, const float *min_p)
{
    (void)top_k; /* every k is valid: <= 0 and >= vocab turn top-k off */
    size_t at = i == SIZE_MAX ? 0 : i;
    char name[48];
    if (top_p && !(top_p[at] > 0.0f && top_p[at] <= 1.0f)) {
        entry_name(name, sizeof name, "top_p", i);
        return psr_fail(ctx, PSR_ERR_FILTER_RANGE, "%s->%s = %g is outside (0, 1]", who, name,
                        (double)top_p[at]);
    }
    if (min_p && !(min_p[at] >= 0.0f && min_p[at] <= 1.0f)) {
        entry_name(name, sizeof name, "min_p", i);
        return psr_fail(ctx, PSR_ERR_FILTER_RANGE, "%s->%s = %g is outside [0, 1]", who, name,
                        (double)min_p[at]);
    }
    return PSR_OK;
}

/* Binds a filter kernel's arguments: the rows' every filter kernel
 * starts with, then its scratch (with candidates where `draws`: top-k or
 * top-p) and the sampler's outputs for rows it draws itself (NULL where
 * it draws none: a kernel holds no buffer it never touches). */
static psr_status bind_filter(psr_context *ctx, cl_kernel k, const char *name, const psr_sample_args *a,
                              const psr_filter_params *params, bool draws, cl_mem direct_tokens)
{
    psr_filter_params own = *params;
    if (!draws)
        own.cand_at = PSR_FILTER_NONE;
    psr_kernel_args b = psr_kernel_args_begin(ctx, k, name);
    psr_arg_rows(&b, &own, sizeof own, a);
    psr_arg_mem(&b, "temperatures", a->temperatures);
    psr_arg_mem(&b, "top_k", a->top_k);
    psr_arg_mem(&b, "top_p", a->top_p);
    psr_arg_mem(&b, "min_p", a->min_p);
    psr_arg_mem(&b, "scratch", ctx->filter.buffer);
    psr_arg_mem(&b, "seeds", draws ? a->seeds : NULL);
    psr_arg_mem(&b, "positions", draws ? a->positions : NULL);
    psr_arg_mem(&b, "tokens", direct_tokens);
    psr_arg_mem(&b, "row_flags", draws ? a->row_flags : NULL);
    return psr_kernel_args_end(&b);
}

/* Gets kernel `name` of the filter program of the caller's variant v and
 * binds its arguments. */
static psr_status filter_kernel(psr_context *ctx, const psr_variant *v, const char *name,
                                const psr_sample_args *a, const psr_filter_params *params, bool draws,
                                cl_mem direct_tokens, cl_kernel *k)
{
    psr_variant fv = *v;
    fv.set = PSR_KERNELS_FILTER;
    psr_status st = psr_kernel_get(ctx, &fv, name, k);
    return st == PSR_OK ? bind_filter(ctx, *k, name, a, params, draws, direct_tokens) : st;
}

/* The regions of ctx->filter; the thresholds come first, at its start,
 * where the sampler and logprobs read them (as a shard's state). */
enum { FILTER_CUT, FILTER_STATE, FILTER_HIST, FILTER_CAND, FILTER_REGIONS };

/* The filter kernels a call launches, in order (1 to 3). */
static size_t filter_passes(const psr_context *ctx, const psr_sample_args *a, const char *names[3])
{
    bool mass = a->top_p || a->all_top_p != 1.0f;
    bool searches = mass || a->top_k || a->all_top_k > 0;
    /* One top-k below the vocabulary for every row: no row takes top-p
     * alone, so pass 3 (which only such rows take) is not enqueued, nor
     * pass 2 where pass 1 finishes every row (a small k on the vector
     * path, cl/filter.cl). */
    bool every_row_top_k = !a->top_k && a->all_top_k > 0 && (size_t)a->all_top_k < a->vocab;
    bool every_row_streams = every_row_top_k && a->all_top_k <= PSR_FILTER_STREAM_K &&
                             ctx->tuning.sample.vector_width;
    size_t n = 0;
    names[n++] = "psr_filter_scan";
    /* No row with top-k: pass 2 only sums top-p rows' masses, in a kernel
     * without the gather and the finish (a first call compiles less). */
    if (searches && !every_row_streams)
        names[n++] = !a->top_k && a->all_top_k <= 0 ? "psr_filter_masses" : "psr_filter_collect";
    if (mass && !every_row_top_k)
        names[n++] = "psr_filter_collect_mass";
    return n;
}

size_t psr_filter_kernels(const psr_context *ctx, const psr_sample_args *a, const psr_variant *v,
                          psr_variant *variants, const char **names)
{
    size_t n = filter_passes(ctx, a, names);
    for (size_t i = 0; i < n; i++) {
        variants[i] = *v;
        variants[i].set = PSR_KERNELS_FILTER;
    }
    return n;
}

psr_status psr_filter_prepare(psr_context *ctx, const psr_sample_args *a, const psr_variant *v,
                              bool draw, psr_filter_plan *plan)
{
    memset(plan, 0, sizeof *plan);
    bool mass = a->top_p || a->all_top_p != 1.0f;
    bool searches = mass || a->top_k || a->all_top_k > 0;
    const char *passes[3];
    size_t pass_count = filter_passes(ctx, a, passes);
    /* Rows whose kept tokens all lie in the list are drawn by the search's
     * last group: the Gumbel-max sampler only (the race scales by a
     * group's own maximum), and not while it also fills a draft cache.
     * Nor with fast math on the vector path, whose native logs may differ
     * in the last bits from the scalar ones the list is drawn with. */
    draw = draw && v->method == 0 && !a->draft_cache && !(v->fast_math && ctx->tuning.sample.vector_width);
    cl_uint direct_max = !draw ? 0
                         : ctx->tuning.filter.direct_max < PSR_FILTER_CAP ? (cl_uint)ctx->tuning.filter.direct_max
                                                                          : PSR_FILTER_CAP;
    cl_mem direct_tokens = direct_max ? a->tokens : NULL;
    /* a multiple of 4: the last group reads the list 16 bytes a load */
    cl_uint cap = (cl_uint)((a->vocab < PSR_FILTER_CAP ? a->vocab : PSR_FILTER_CAP) + 3) / 4 * 4;
    const size_t need[FILTER_REGIONS] = {a->rows * 2 * sizeof(cl_float), a->rows * 4 * sizeof(cl_uint),
                                         a->rows * PSR_FILTER_HBINS * sizeof(cl_uint),
                                         searches ? a->rows * 2 * cap * sizeof(cl_uint) : 0};
    psr_status st = psr_regions_reserve(ctx, &ctx->filter, &ctx->filter_regions, need, FILTER_REGIONS,
                                        PSR_FILTER_AT_UNIT, "the filters");
    if (st != PSR_OK)
        return st;
    const size_t *at = ctx->filter_regions.at;
    plan->cut = ctx->filter.buffer;

    cl_uint chunk, groups;
    psr_split_rows(ctx, a->rows, a->vocab, &chunk, &groups);
    plan->groups = a->rows * groups;
    psr_filter_params params = {
        .rows = psr_rows_params_of(a->logits_offset, a->row_stride, a->vocab, a->requests, groups, chunk),
        .cap = cap,
        .direct_max = direct_max,
        .all_top_k = a->all_top_k,
        .all_top_p = a->all_top_p,
        .all_min_p = a->all_min_p,
        .tokens64 = a->tokens_dtype == PSR_TOKENS_I64,
        /* the noise and stream of the rows the filter draws: arguments on
         * CPUs, where one filter program serves every noise and stream */
        .noise = v->fp64   ? PSR_FILTER_NOISE_FP64
                 : v->wide ? PSR_FILTER_NOISE_WIDE
                           : PSR_FILTER_NOISE_FP32,
        .drafting = v->drafting,
        .state_at = (cl_uint)(at[FILTER_STATE] / PSR_FILTER_AT_UNIT),
        .hist_at = (cl_uint)(at[FILTER_HIST] / PSR_FILTER_AT_UNIT),
        .cand_at = searches ? (cl_uint)(at[FILTER_CAND] / PSR_FILTER_AT_UNIT) : PSR_FILTER_NONE};
    /* Off the vector path the sampler draws the top-p-alone rows whose
     * lists hold every kept token (cl/filter.cl, pass 3); on it, and for
     * top-k rows, the filter does. */
    if (direct_max && mass && !ctx->tuning.sample.vector_width) {
        plan->list_at = (cl_uint)(at[FILTER_CAND] / PSR_FILTER_AT_UNIT);
        plan->list_cap = cap;
    }
    /* Pass 1 finishes rows only on the vector path (cl/filter.cl). */
    bool scan_draws = ctx->tuning.sample.vector_width != 0;
    st = filter_kernel(ctx, v, passes[0], a, &params, searches && scan_draws, scan_draws ? direct_tokens : NULL,
                       &plan->scan);
    for (size_t i = 1; i < pass_count && st == PSR_OK; i++) {
        bool third = strcmp(passes[i], "psr_filter_collect_mass") == 0;
        if (!third)
            plan->collect_name = passes[i];
        st = filter_kernel(ctx, v, passes[i], a, &params, searches, direct_tokens,
                           third ? &plan->collect_mass : &plan->collect);
    }
    return st;
}

psr_status psr_filter_launch(psr_context *ctx, const psr_sample_args *a, const psr_filter_plan *plan,
                             cl_event *event)
{
    /* The kernels leave their state zero; a launch cut short by a failed
     * enqueue may not have, so the next one clears it first. The first
     * command waits on the caller's list and gives the caller's event. */
    cl_uint nwait = a->num_events_in_wait_list;
    const cl_event *wait = a->event_wait_list;
    psr_status st = PSR_OK;
    bool clear = ctx->filter_dirty;
    if (clear) { /* the state and the histograms, side by side */
        cl_uint zero = 0;
        const psr_regions *r = &ctx->filter_regions;
        size_t from = r->at[FILTER_STATE], to = r->at[FILTER_HIST] + r->capacity[FILTER_HIST];
        cl_int err = clEnqueueFillBuffer(ctx->queue, ctx->filter.buffer, &zero, sizeof zero, from, to - from,
                                         nwait, wait, event);
        if (err != CL_SUCCESS)
            st = psr_fail_cl(ctx, err, "clearing the filter state failed");
        nwait = 0, wait = NULL; /* queue order from here */
    }
    ctx->filter_dirty = true;
    size_t wg = ctx->tuning.sample.work_group_size;
    if (st == PSR_OK)
        st = psr_enqueue_groups(ctx, plan->scan, "psr_filter_scan", plan->groups, wg, nwait, wait,
                                clear ? NULL : event);
    if (st == PSR_OK && plan->collect)
        st = psr_enqueue_groups(ctx, plan->collect, plan->collect_name, plan->groups, wg, 0, NULL, NULL);
    if (st == PSR_OK && plan->collect_mass)
        st = psr_enqueue_groups(ctx, plan->collect_mass, "psr_filter_collect_mass", plan->groups, wg, 0,
                                NULL, NULL);
    if (st == PSR_OK)
        ctx->filter_dirty = false;
    else if (event && *event) {
        clReleaseEvent(*event);
        *event = NULL;
    }
    return st;
}
