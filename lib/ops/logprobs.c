/* Host side of logprobs (cl/logprobs.cl): argument checks and launches. */
#include "ops/ops.h"

#include <string.h>


/* The regions of ctx->logprobs. */
enum { LSE, BEAT, TOP_V, TOP_I, ROW_DONE, TOKEN_VALUE, LOGPROBS_SCRATCH };
_Static_assert(sizeof(psr_logprobs_params) == 96, "psr_logprobs_params is laid out as in OpenCL C");
_Static_assert(LOGPROBS_SCRATCH <= PSR_MAX_REGIONS, "the regions of ctx->logprobs");

/* The 0.1 layout ended at event_wait_list. */
PSR_ARGS_STRUCT(psr_logprobs_args, PSR_LAYOUT_END(psr_logprobs_args, event_wait_list),
                .logits_dtype = PSR_DTYPE_F32, .tokens_dtype = PSR_TOKENS_I32, .all_top_p = 1.0f)

/* The sampling arguments the filter pre-pass (filter.c) reads. */
static psr_sample_args filter_view(const psr_logprobs_args *a)
{
    psr_sample_args v;
    psr_sample_args_init(&v, sizeof v);
    v.rows = a->rows, v.vocab = a->vocab, v.requests = a->requests;
    v.logits = a->logits, v.logits_dtype = a->logits_dtype;
    v.logits_offset = a->logits_offset, v.row_stride = a->row_stride;
    v.row_request = a->row_request, v.temperatures = a->temperatures;
    v.top_k = a->top_k;
    v.top_p = a->top_p;
    v.min_p = a->min_p;
    v.all_top_k = a->all_top_k;
    v.all_top_p = a->all_top_p;
    v.all_min_p = a->all_min_p;
    v.tokens_dtype = a->tokens_dtype;
    v.num_events_in_wait_list = a->num_events_in_wait_list;
    v.event_wait_list = a->event_wait_list;
    return v;
}

size_t psr_logprobs_shard_slots(size_t shard_vocab)
{
    return shard_vocab / PSR_SB + (shard_vocab % PSR_SB != 0);
}

size_t psr_logprobs_shard_slot_bytes(size_t rows, int top_n)
{
    if (top_n < 0 || top_n > PSR_LOGPROBS_MAX_TOP_N || rows > SIZE_MAX / 256)
        return 0;
    size_t bytes = rows * (12 + 8 * (size_t)top_n);
    return (bytes + 15) / 16 * 16;
}

_Static_assert(PSR_LOGPROBS_SHARD_BLOCK == PSR_SB, "a slot is one super-block");

/* A shard's place in the whole vocabulary and its exchange buffers
 * (psr_logprobs_args.shard_*). */
static psr_status check_shard(psr_context *ctx, const psr_logprobs_args *a)
{
    if (!a->shard_count) {
        REQUIRE(!a->shard_index && !a->vocab_offset && !a->vocab_total && !a->shard_slot && !a->shard_slots &&
                    !a->shard_token_keys && !a->shard_partials && !a->shard_filter_state,
                PSR_ERR_INVALID_ARGUMENT, "args->shard_* or vocab_offset/vocab_total set with args->shard_count 0");
        return PSR_OK;
    }
    const psr_shard_place place = {a->shard_count, a->shard_index, a->vocab_offset, a->vocab,
                                   a->vocab_total, a->shard_slot,  a->shard_slots};
    psr_status st = psr_check_shard_place(ctx, &place, 1u << 20, "2^20, the most logprobs support",
                                          PSR_LOGPROBS_MAX_SLOTS);
    if (st != PSR_OK)
        return st;
    REQUIRE(psr_logprobs_shard_slot_bytes(a->rows, a->top_n) / 4 <= UINT32_MAX / a->shard_slots,
            PSR_ERR_INVALID_ARGUMENT, "args->rows %zu: the shards' partials would pass 16 GiB", a->rows);
    REQUIRE(a->shard_token_keys, PSR_ERR_NULL_ARGUMENT, "args->shard_token_keys is NULL with shards");
    REQUIRE(a->shard_partials, PSR_ERR_NULL_ARGUMENT, "args->shard_partials is NULL with shards");
    REQUIRE(ctx->host_byte_order, PSR_ERR_NOT_SUPPORTED,
            "args->shard_count: the device's byte order differs from the host's, so keys would not reduce");
    return PSR_OK;
}

static psr_status check_args(psr_context *ctx, const psr_logprobs_args *a)
{
    REQUIRE(a->rows > 0, PSR_ERR_INVALID_ARGUMENT, "args->rows is 0");
    REQUIRE(a->rows <= UINT32_MAX / 64, PSR_ERR_INVALID_ARGUMENT, "args->rows %zu is too large", a->rows);
    REQUIRE(a->vocab > 0, PSR_ERR_INVALID_ARGUMENT, "args->vocab is 0");
    REQUIRE(a->vocab <= (1u << 20), PSR_ERR_INVALID_ARGUMENT,
            "args->vocab %zu is above 2^20, the most logprobs support", a->vocab);
    psr_status shard_st = check_shard(ctx, a);
    if (shard_st != PSR_OK)
        return shard_st;
    REQUIRE(a->top_n >= 0 && a->top_n <= PSR_LOGPROBS_MAX_TOP_N, PSR_ERR_INVALID_ARGUMENT,
            "args->top_n %d is outside 0 .. %d", a->top_n, PSR_LOGPROBS_MAX_TOP_N);
    REQUIRE(!(a->flags & ~PSR_LOGPROBS_RAW), PSR_ERR_INVALID_ARGUMENT, "args->flags has unknown bits 0x%x",
            a->flags & ~PSR_LOGPROBS_RAW);
    REQUIRE((unsigned)a->logits_dtype <= PSR_DTYPE_BF16, PSR_ERR_INVALID_ARGUMENT,
            "args->logits_dtype %d is not a psr_dtype", (int)a->logits_dtype);
    REQUIRE((unsigned)a->tokens_dtype <= PSR_TOKENS_I64, PSR_ERR_INVALID_ARGUMENT,
            "args->tokens_dtype %d is not a psr_token_dtype", (int)a->tokens_dtype);
    size_t stride = a->row_stride ? a->row_stride : a->vocab;
    REQUIRE(stride >= a->vocab, PSR_ERR_INVALID_ARGUMENT,
            "args->row_stride %zu is smaller than args->vocab %zu", stride, a->vocab);
    REQUIRE(a->logits, PSR_ERR_NULL_ARGUMENT, "args->logits is NULL");
    REQUIRE(a->tokens, PSR_ERR_NULL_ARGUMENT, "args->tokens is NULL");
    bool raw = a->flags & PSR_LOGPROBS_RAW;
    REQUIRE(raw || a->temperatures, PSR_ERR_NULL_ARGUMENT,
            "args->temperatures is NULL (processed logprobs need them; or PSR_LOGPROBS_RAW)");
    REQUIRE(raw || a->requests > 0, PSR_ERR_INVALID_ARGUMENT, "args->requests is 0");
    REQUIRE(a->requests <= INT32_MAX, PSR_ERR_INVALID_ARGUMENT, "args->requests %zu is too large",
            a->requests);
    REQUIRE(raw || a->row_request || a->requests >= a->rows, PSR_ERR_INVALID_ARGUMENT,
            "args->requests %zu < args->rows %zu, and there is no args->row_request", a->requests,
            a->rows);
    REQUIRE(a->top_n == 0 || (a->top_ids && a->top_logprobs), PSR_ERR_NULL_ARGUMENT,
            "args->top_ids or args->top_logprobs is NULL with args->top_n %d", a->top_n);
    psr_sample_args view = filter_view(a);
    bool filtered = psr_filter_requested(&view);
    REQUIRE(!filtered || !raw, PSR_ERR_INVALID_ARGUMENT,
            "args->top_k, top_p or min_p with PSR_LOGPROBS_RAW: filters apply to processed logprobs");
    REQUIRE(a->token_logprobs || a->token_ranks || a->top_n > 0, PSR_ERR_INVALID_ARGUMENT,
            "nothing to compute: no args->token_logprobs, args->token_ranks or args->top_n");
    REQUIRE(a->num_events_in_wait_list == 0 || a->event_wait_list, PSR_ERR_NULL_ARGUMENT,
            "args->event_wait_list is NULL but args->num_events_in_wait_list is %u",
            a->num_events_in_wait_list);
    size_t bytes = psr_logits_bytes(a->logits_offset, a->rows, stride, a->vocab, psr_dtype_size(a->logits_dtype));
    REQUIRE(bytes > 0, PSR_ERR_INVALID_ARGUMENT,
            "args->logits_offset %zu + (rows - 1) x row_stride %zu overflows the address space",
            a->logits_offset, stride);
    size_t top_bytes = a->rows * (size_t)a->top_n * 4;
    bool sharded = a->shard_count > 0;
    REQUIRE(!filtered || !sharded || a->shard_filter_state, PSR_ERR_NULL_ARGUMENT,
            "args->shard_filter_state is NULL: filters with shards need the rounds of psr_shard_filter_round");
    size_t slot_bytes = psr_logprobs_shard_slot_bytes(a->rows, a->top_n);
    const psr_buffer_need needs[] = {
        {a->logits, bytes, "args->logits", false},
        {a->tokens, a->rows * (a->tokens_dtype == PSR_TOKENS_I64 ? 8 : 4), "args->tokens", false},
        {a->row_request, a->rows * 4, "args->row_request", false},
        {raw ? NULL : a->temperatures, a->requests * 4, "args->temperatures", false},
        {a->top_k, a->requests * 4, "args->top_k", false},
        {a->top_p, a->requests * 4, "args->top_p", false},
        {a->min_p, a->requests * 4, "args->min_p", false},
        {a->token_logprobs, a->rows * 4, "args->token_logprobs", true},
        {a->token_ranks, a->rows * 4, "args->token_ranks", true},
        {a->top_n > 0 ? a->top_ids : NULL, top_bytes, "args->top_ids", true},
        {a->top_n > 0 ? a->top_logprobs : NULL, top_bytes, "args->top_logprobs", true},
        {a->shard_token_keys, a->rows * 4, "args->shard_token_keys", true},
        {a->shard_partials, a->shard_slots * slot_bytes, "args->shard_partials", true},
        {filtered ? a->shard_filter_state : NULL, a->rows * PSR_SHARD_FILTER_STATE_BYTES,
         "args->shard_filter_state", false}};
    psr_status st = psr_check_buffers(ctx, needs, sizeof needs / sizeof needs[0]);
    if (st == PSR_OK && filtered)
        st = psr_filter_check(ctx, &view, 0);
    return st;
}

/* The params every kernel of a call shares, before the partials' layout. */
static psr_logprobs_params base_params(const psr_logprobs_args *a)
{
    cl_uint vocab = (cl_uint)a->vocab;
    psr_logprobs_params p = {.logits_offset = a->logits_offset,
                             .row_stride = a->row_stride ? a->row_stride : a->vocab,
                             .vocab = vocab,
                             .rows = (cl_uint)a->rows,
                             .requests = (cl_uint)a->requests,
                             .blocks_per_row = (vocab + PSR_SB - 1) / PSR_SB,
                             .top_n = (cl_uint)a->top_n,
                             .raw = (a->flags & PSR_LOGPROBS_RAW) != 0,
                             .tokens64 = a->tokens_dtype == PSR_TOKENS_I64,
                             .token_base = (cl_uint)a->vocab_offset};
    return p;
}

/* One call's partials: an array of each kind in its region of
 * ctx->logprobs, a row's blocks together. */
static void layout_rows(psr_logprobs_params *p, const psr_regions *r)
{
    p->lse_base = (cl_uint)(r->at[LSE] / 8);
    p->beat_base = (cl_uint)(r->at[BEAT] / 4);
    p->top_v_base = (cl_uint)(r->at[TOP_V] / 4);
    p->top_i_base = (cl_uint)(r->at[TOP_I] / 4);
    p->done_base = (cl_uint)(r->at[ROW_DONE] / 4);
    p->token_value_base = (cl_uint)(r->at[TOKEN_VALUE] / 4);
    p->part_row_step = p->blocks_per_row;
    p->lse_slot_step = p->beat_slot_step = 1;
    p->top_row_step = p->blocks_per_row * p->top_n;
    p->top_slot_step = p->top_n;
}

/* Shards' partials: slots of psr_logprobs_shard_slot_bytes, each the
 * log-sum-exp pairs of every row, then their counts, top values and top
 * ids. The exchange buffer is the kernels' `parts`; the bases and steps
 * are in each array's elements. No token values: the keys carry them. */
static void layout_slots(psr_logprobs_params *p)
{
    size_t words = psr_logprobs_shard_slot_bytes(p->rows, (int)p->top_n) / 4;
    p->lse_base = 0;
    p->beat_base = 2 * p->rows;
    p->top_v_base = 3 * p->rows;
    p->top_i_base = (3 + p->top_n) * p->rows;
    p->token_value_base = p->done_base = PSR_LP_NONE;
    p->part_row_step = 1;
    p->lse_slot_step = (cl_uint)(words / 2);
    p->beat_slot_step = (cl_uint)words;
    p->top_row_step = p->top_n;
    p->top_slot_step = (cl_uint)words;
}

/* The call's own copy of the caller's args (0.2 defaults filled in). */
static psr_status read_args(psr_context *ctx, const psr_logprobs_args *caller, psr_logprobs_args *a)
{
    psr_status st = psr_args_read(ctx, caller, &psr_logprobs_args_layout, "psr_logprobs", a);
    if (st == PSR_OK)
        ctx->logprobs_one_last = ctx->logprobs_few_last = false;
    if (st == PSR_OK && a->requests == 0 && !a->row_request)
        a->requests = a->rows;
    return st == PSR_OK ? check_args(ctx, a) : st;
}

/* The outputs every logprobs kernel writes: a row's merged values. */
static void bind_outputs(psr_kernel_args *b, const psr_logprobs_args *a)
{
    psr_arg_mem(b, "token_logprobs", a->token_logprobs);
    psr_arg_mem(b, "token_ranks", a->token_ranks);
    psr_arg_mem(b, "top_ids", a->top_ids);
    psr_arg_mem(b, "top_logprobs", a->top_logprobs);
}

/* The per-block pass; psr_logprobs_one merges the rows too, so it also
 * takes the outputs and the rows' counts. */
static psr_status bind_partial(psr_context *ctx, cl_kernel k, const char *name, const psr_logprobs_args *a,
                               const psr_logprobs_params *params, cl_mem temps, cl_mem cuts, cl_mem parts,
                               bool one)
{
    psr_kernel_args b = psr_kernel_args_begin(ctx, k, name);
    psr_arg_value(&b, "p", params, sizeof *params);
    psr_arg_mem(&b, "logits", a->logits);
    psr_arg_mem(&b, "row_request", a->row_request);
    psr_arg_mem(&b, "temperatures", temps);
    psr_arg_mem(&b, "tokens", a->tokens);
    if (!one)
        psr_arg_mem(&b, "token_keys", a->shard_token_keys);
    psr_arg_mem(&b, "parts", parts);
    psr_arg_mem(&b, "cuts", cuts);
    if (one)
        bind_outputs(&b, a);
    return psr_kernel_args_end(&b);
}

static psr_status bind_finish(psr_context *ctx, cl_kernel k, const psr_logprobs_args *a,
                              const psr_logprobs_params *params, cl_mem parts)
{
    psr_kernel_args b = psr_kernel_args_begin(ctx, k, "psr_logprobs_finish");
    psr_arg_value(&b, "p", params, sizeof *params);
    psr_arg_mem(&b, "tokens", a->tokens);
    psr_arg_mem(&b, "token_keys", a->shard_token_keys);
    psr_arg_mem(&b, "parts", parts);
    bind_outputs(&b, a);
    return psr_kernel_args_end(&b);
}

/* The variant's kernels and scratch of a call (or a shard's round). */
typedef struct logprobs_plan {
    const char *pname; /* the partial kernel's name */
    cl_kernel partial, finish;
    bool one, few, filtered;
    psr_sample_args view; /* the filters' view of the args */
} logprobs_plan;

static psr_status plan_call(psr_context *ctx, const psr_logprobs_args *a, bool sharded, logprobs_plan *pl)
{
    size_t nsb = (a->vocab + PSR_SB - 1) / PSR_SB, blocks = a->rows * nsb;
    cl_uint top_n = (cl_uint)a->top_n;
    /* Few blocks: one launch, each row merged by its last block (a launch
     * costs more than the work at one row); or the partial kernel with the
     * segment bound first (cl/logprobs.cl). Shards merge after the
     * exchange, so never in one launch. */
    pl->one = !sharded && blocks <= ctx->tuning.logprobs.one_blocks;
    pl->few = !pl->one && blocks <= ctx->tuning.logprobs.few_blocks;
    pl->pname = pl->one ? "psr_logprobs_one" : pl->few ? "psr_logprobs_partial_few" : "psr_logprobs_partial";
    pl->view = filter_view(a);
    pl->filtered = psr_filter_requested(&pl->view);
    psr_variant v = {.set = PSR_KERNELS_LOGPROBS, .dtype = a->logits_dtype};
    psr_variant wants[5] = {v, v};
    const char *names[5] = {pl->pname, "psr_logprobs_finish"};
    size_t n = pl->one ? 1 : 2;
    if (pl->filtered && !sharded) {
        psr_variant fv = {.set = PSR_KERNELS_FILTER, .dtype = a->logits_dtype};
        n += psr_filter_kernels(ctx, &pl->view, &fv, wants + n, names + n);
    }
    psr_kernels_prefetch(ctx, wants, names, n);
    pl->partial = pl->finish = NULL;
    psr_status st = psr_kernel_get(ctx, &v, pl->pname, &pl->partial);
    if (st == PSR_OK && !pl->one)
        st = psr_kernel_get(ctx, &v, "psr_logprobs_finish", &pl->finish);
    if (sharded)
        return st; /* the exchange buffer holds the partials */
    const size_t need[LOGPROBS_SCRATCH] = {blocks * 8, blocks * 4, blocks * (top_n ? top_n : 1) * 4,
                                           blocks * (top_n ? top_n : 1) * 4, a->rows * 4, a->rows * 4};
    return st == PSR_OK ? psr_regions_reserve(ctx, &ctx->logprobs, &ctx->logprobs_regions, need, LOGPROBS_SCRATCH,
                                              sizeof(cl_uint), "psr_logprobs")
                        : st;
}

psr_status psr_logprobs(psr_context *ctx, const psr_logprobs_args *args, cl_event *event)
{
    if (event)
        *event = NULL;
    psr_logprobs_args call;
    psr_status st = read_args(ctx, args, &call);
    if (st != PSR_OK)
        return st;
    const psr_logprobs_args *a = &call;
    REQUIRE(!a->shard_count, PSR_ERR_INVALID_ARGUMENT,
            "args->shard_count %zu: logprobs across shards run in rounds (psr_logprobs_shard_round)",
            a->shard_count);
    psr_sample_args view = filter_view(a);
    bool filtered = psr_filter_requested(&view);
    if (psr_cold_call_on_host(ctx, PSR_WARM_LOGPROBS, 0, a->logits_dtype, filtered, a->rows,
                              a->row_stride ? a->row_stride : a->vocab, 0) &&
        psr_host_can_wait(a->num_events_in_wait_list, a->event_wait_list)) {
        st = psr_host_logprobs(ctx, a, filtered, event);
        ctx->host_served_last = st == PSR_OK;
        return st;
    }
    ctx->host_served_last = false;
    logprobs_plan pl;
    st = plan_call(ctx, a, false, &pl);
    if (st != PSR_OK)
        return st;
    cl_mem temps = (a->flags & PSR_LOGPROBS_RAW) ? NULL : a->temperatures;
    /* Filters: their threshold pre-pass, launched first (it waits on the wait list). */
    cl_mem cuts = NULL;
    cl_uint nwait = a->num_events_in_wait_list;
    const cl_event *wait = a->event_wait_list;
    psr_filter_plan filter = {0};
    if (pl.filtered) {
        psr_variant fv = {.set = PSR_KERNELS_FILTER, .dtype = a->logits_dtype};
        st = psr_filter_prepare(ctx, &pl.view, &fv, false, &filter);
        if (st != PSR_OK)
            return st;
        cuts = filter.cut;
    }
    psr_logprobs_params params = base_params(a);
    layout_rows(&params, &ctx->logprobs_regions);
    st = bind_partial(ctx, pl.partial, pl.pname, a, &params, temps, cuts, ctx->logprobs.buffer, pl.one);
    if (st == PSR_OK && !pl.one)
        st = bind_finish(ctx, pl.finish, a, &params, ctx->logprobs.buffer);
    /* Every kernel's arguments are set first, so nothing that can fail
     * comes between the launches (as in lib/ops/verify.c). */
    if (st == PSR_OK && pl.filtered) {
        st = psr_filter_launch(ctx, &pl.view, &filter, NULL);
        nwait = 0, wait = NULL;
    }
    size_t local = ctx->tuning.sample.work_group_size < 256 ? ctx->tuning.sample.work_group_size : 256;
    size_t blocks = a->rows * params.blocks_per_row;
    if (st == PSR_OK && pl.one)
        st = psr_clear_if_dirty(ctx, &ctx->logprobs_dirty, &ctx->logprobs, &nwait, &wait,
                                "psr_logprobs' row counts");
    if (st == PSR_OK)
        st = psr_enqueue_groups(ctx, pl.partial, pl.pname, blocks, local, nwait, wait, pl.one ? event : NULL);
    if (st == PSR_OK && !pl.one)
        st = psr_enqueue_groups(ctx, pl.finish, "psr_logprobs_finish", a->rows, local, 0, NULL, event);
    ctx->logprobs_one_last = pl.one && st == PSR_OK;
    ctx->logprobs_few_last = pl.few && st == PSR_OK;
    if (st == PSR_OK)
        psr_upgrade_after_call(ctx, PSR_WARM_LOGPROBS, 0, a->logits_dtype, pl.filtered);
    return st;
}

/* Round 0 of a shard: its keys of the sampled tokens. */
static psr_status shard_keys(psr_context *ctx, const psr_logprobs_args *a, const psr_logprobs_params *params,
                             cl_mem temps, cl_mem cuts, cl_event *event)
{
    psr_variant v = {.set = PSR_KERNELS_LOGPROBS, .dtype = a->logits_dtype};
    cl_kernel k = NULL;
    psr_status st = psr_kernel_get(ctx, &v, "psr_logprobs_token_key", &k);
    if (st != PSR_OK)
        return st;
    psr_kernel_args b = psr_kernel_args_begin(ctx, k, "psr_logprobs_token_key");
    psr_arg_value(&b, "p", params, sizeof *params);
    psr_arg_mem(&b, "logits", a->logits);
    psr_arg_mem(&b, "row_request", a->row_request);
    psr_arg_mem(&b, "temperatures", temps);
    psr_arg_mem(&b, "tokens", a->tokens);
    psr_arg_mem(&b, "cuts", cuts);
    psr_arg_mem(&b, "token_keys", a->shard_token_keys);
    st = psr_kernel_args_end(&b);
    if (st == PSR_OK)
        st = psr_enqueue_groups(ctx, k, "psr_logprobs_token_key", (a->rows + 63) / 64, 64,
                                a->num_events_in_wait_list, a->event_wait_list, event);
    return st;
}

psr_status psr_logprobs_shard_round(psr_context *ctx, const psr_logprobs_args *args, unsigned round,
                                    cl_event *event)
{
    if (event)
        *event = NULL;
    psr_logprobs_args call;
    psr_status st = read_args(ctx, args, &call);
    if (st != PSR_OK)
        return st;
    const psr_logprobs_args *a = &call;
    REQUIRE(a->shard_count, PSR_ERR_INVALID_ARGUMENT,
            "args->shard_count is 0: psr_logprobs_shard_round is for shards (else psr_logprobs)");
    REQUIRE(round < PSR_LOGPROBS_SHARD_ROUNDS, PSR_ERR_INVALID_ARGUMENT, "round %u is not below %d", round,
            PSR_LOGPROBS_SHARD_ROUNDS);
    cl_mem temps = (a->flags & PSR_LOGPROBS_RAW) ? NULL : a->temperatures;
    logprobs_plan pl;
    st = plan_call(ctx, a, true, &pl);
    if (st != PSR_OK)
        return st;
    /* psr_shard_filter_round found the thresholds */
    cl_mem cuts = pl.filtered ? a->shard_filter_state : NULL;
    psr_logprobs_params params = base_params(a);
    layout_slots(&params);
    if (round == 0)
        return shard_keys(ctx, a, &params, temps, cuts, event);
    size_t local = ctx->tuning.sample.work_group_size < 256 ? ctx->tuning.sample.work_group_size : 256;
    if (round == 1) {
        params.first_slot = (cl_uint)a->shard_slot;
        st = bind_partial(ctx, pl.partial, pl.pname, a, &params, temps, cuts, a->shard_partials, false);
        if (st == PSR_OK)
            st = psr_enqueue_groups(ctx, pl.partial, pl.pname, a->rows * params.blocks_per_row, local,
                                    a->num_events_in_wait_list, a->event_wait_list, event);
        return st;
    }
    params.vocab = (cl_uint)a->vocab_total; /* the finish: the tokens' range, every shard's slots */
    params.blocks_per_row = (cl_uint)a->shard_slots;
    st = bind_finish(ctx, pl.finish, a, &params, a->shard_partials);
    if (st == PSR_OK)
        st = psr_enqueue_groups(ctx, pl.finish, "psr_logprobs_finish", a->rows, local, a->num_events_in_wait_list,
                                a->event_wait_list, event);
    return st;
}
