/* What the operations share among themselves: the filter pre-pass and the
 * two-ended launches (sample.c, filter.c, verify.c). */
#ifndef PSR_OPS_H
#define PSR_OPS_H

#include "runtime/runtime.h"

/* ---- logit filters (filter.c) ---- */

/* Are any of args' top_k, top_p, min_p (buffers or all_* values) set? */
bool psr_filter_requested(const psr_sample_args *args);
/* Host checks of the filters: not with PSR_SAMPLE_PROBS, a buffer or an
 * all_* value but not both, all_* values in range. (The buffers' sizes
 * are in the call's buffer list.) */
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
    const char *collect_name; /* pass 2's kernel: psr_filter_collect, or psr_filter_masses */
    size_t groups;
    cl_mem cut;
    cl_uint list_cap; /* candidates per row in the lists the sampler may draw rows from
                         (GPUs), in the buffer `cut` from list_at (16-byte units); 0: none */
    cl_uint list_at;
} psr_filter_plan;
psr_status psr_filter_prepare(psr_context *ctx, const psr_sample_args *args, const psr_variant *v,
                              bool draw, psr_filter_plan *plan);
psr_status psr_filter_launch(psr_context *ctx, const psr_sample_args *args, const psr_filter_plan *plan,
                             cl_event *event);
/* The filter kernels psr_filter_prepare will look up for args and the
 * caller's variant v (1 to 3, into variants and names), for
 * psr_kernels_prefetch. */
size_t psr_filter_kernels(const psr_context *ctx, const psr_sample_args *args, const psr_variant *v,
                          psr_variant *variants, const char **names);
/* The host check of one request's filter values: PSR_OK or
 * PSR_ERR_FILTER_RANGE naming who->top_p[index]; index SIZE_MAX checks
 * the all_* values (pointers to them). */
psr_status psr_filter_check_values(psr_context *ctx, const char *who, size_t index,
                                   const int32_t *top_k, const float *top_p, const float *min_p);

/* ---- the two-ended launches (sample.c, verify.c) ---- */

/* The start of an enqueue call: both events NULL (either may be absent)
 * until its launches give them, then psr_args_read of args into a. */
psr_status psr_enqueue_begin(psr_context *ctx, const void *args, const psr_struct_layout *layout,
                             const char *call, void *a, cl_event *first, cl_event *last);
/* After a launch is fully enqueued: the flags it used, kept on the
 * context and reported to the caller's effective_noise. */
void psr_record_flags(psr_context *ctx, void *effective_noise, bool legacy, unsigned flags);

/* The checks of a call's vocabulary (it must fit an int32 token id) and
 * of its logits' and tokens' types; `dtype_field` names the logits' field
 * in the message. */
psr_status psr_check_vocab_types(psr_context *ctx, size_t vocab, psr_dtype dtype, const char *dtype_field,
                                 psr_token_dtype tokens_dtype);
/* The entries of a call's buffer list (psr_check_buffers) for the inputs
 * of its noise: seeds and temperatures per request, positions per row. */
#define PSR_NOISE_INPUT_NEEDS(a)                                                                  \
    {(a)->seeds, (a)->requests * 8, "args->seeds", false},                                       \
        {(a)->temperatures, (a)->requests * 4, "args->temperatures", false},                     \
        {(a)->positions, (a)->rows * 8, "args->positions", false}

/* The arguments every row kernel of psr_sample starts with (cl/gumbel.cl's
 * psr_gumbel_sample, cl/filter.cl's PSR_FILTER_ROW_ARGS): its parameters
 * `p`, the logits and the row-to-request map. */
void psr_arg_rows(psr_kernel_args *b, const void *params, size_t size, const psr_sample_args *a);
/* psr_sample's own copy of args (defaults past the caller's size) after
 * the checks psr_sample makes, and its flags made internal; `call` names
 * the call in the NULL checks' messages. For the filters' rounds: the
 * seeds, positions and outputs may be NULL (checked when given). */
psr_status psr_sample_read_args(psr_context *ctx, const psr_sample_args *args, const char *call,
                                psr_sample_args *a, unsigned *flags);
/* part_value and part_index, the partials of rows split over groups
 * (psr_reserve_partials), for a launch whose finishing kernel reduces
 * them (`split`); NULL for one that keeps none. */
void psr_arg_partials(psr_kernel_args *b, bool split);

/* ---- host arrays for the host-array calls (host_stage.c) ---- */

/* One array of a host call: an input (`in`) or an output (`output`, read
 * back into `copy`, then into `out` when that is not NULL). */
typedef struct psr_staged {
    const void *in;
    void *out;
    size_t bytes;
    bool output;
    void *copy;
    cl_mem mem; /* NULL for an absent optional array */
} psr_staged;
psr_status psr_stage_create(psr_context *ctx, const char *call, psr_staged *s, size_t count);
/* Blocking reads of every output into its copy. */
psr_status psr_stage_read(psr_context *ctx, const char *call, psr_staged *s, size_t count);
/* Create, then the device call on the staged buffers, then read. */
psr_status psr_stage_run(psr_context *ctx, const char *call, psr_staged *s, size_t count,
                         psr_status (*device_call)(psr_context *ctx, const psr_staged *s, void *job), void *job);
/* The copies into the caller's arrays: only after the whole call succeeded. */
void psr_stage_commit(const psr_staged *s, size_t count);
void psr_stage_release(psr_staged *s, size_t count);
/* 0 or a positive normal number. */
bool psr_temperature_ok(float t);
/* Host checks naming the entry: positions in [0, 2^30) (PSR_ERR_POSITION_RANGE)
 * and temperatures (PSR_ERR_TEMPERATURE; NULL: none). */
psr_status psr_check_host_rows(psr_context *ctx, const int64_t *positions, size_t rows,
                               const float *temperatures, size_t temperature_count);
/* Every row's top_p and min_p in range (PSR_ERR_FILTER_RANGE). */
psr_status psr_check_host_filters(psr_context *ctx, size_t rows, const int32_t *top_k, const float *top_p,
                                  const float *min_p);
size_t psr_token_size(psr_token_dtype dtype);

/* ---- warming's launches (warm_launch.c): one call of each kind on tiny
 * inputs; flags are internal (noise bits included) ---- */

/* One warm variant (flags: the call's, resolved): its programs, then with
 * launch its call on tiny inputs (warm.c). */
psr_status psr_warm_one(psr_context *ctx, const psr_warm_variant *w, unsigned flags, bool launch);
/* After a call that ran quick programs (ctx->quick_used): the second such
 * call of a variant has the optimized programs built in the background
 * (upgrade.c). */
void psr_upgrade_after_call(psr_context *ctx, psr_warm_call call, unsigned flags, psr_dtype dtype, bool filtered);
/* Cold calls on the host (docs/cache.md): true when a call of this
 * variant, of rows x stride elements plus `extra`, is to run on the host
 * because its programs are not at hand; the second such call of a
 * variant has them built in the background (as quick builds do), and
 * calls go to the device once they are adopted, or once that build ended
 * in failure (the device path then reports it). False outside the
 * tuning's host_cold_elements, while warming, and where no background
 * thread can run. (upgrade.c) */
bool psr_cold_call_on_host(psr_context *ctx, psr_warm_call call, unsigned flags, psr_dtype dtype, bool filtered,
                           size_t rows, size_t stride, size_t extra);
/* Are the programs of a warm variant's call all at hand (psr_program_ready)? (warm.c) */
bool psr_warm_ready(psr_context *ctx, const psr_warm_variant *w, unsigned flags);

/* ---- calls served on the host (host_serve.c, host_logprobs.c, host_verify.c) ---- */

/* Blocking reads of a call's device buffers, each after its wait list;
 * the first read's event goes to *first where first is not NULL (and
 * *first still NULL). A failure sets st, and later reads do nothing. */
typedef struct psr_host_reads {
    psr_context *ctx;
    const char *call; /* "psr_sample", for messages */
    cl_uint nwait;
    const cl_event *wait;
    cl_event *first;
    psr_status st;
} psr_host_reads;
/* May a cold call wait on the host for these events? Not for a user event
 * still pending (the caller may set it only after the call returns);
 * other queues' pending commands are flushed first, so that they run. */
bool psr_host_can_wait(cl_uint nwait, const cl_event *wait);
/* `bytes` at `offset` of mem into a new array; NULL for a NULL mem or after a failure. */
void *psr_host_read(psr_host_reads *r, cl_mem mem, size_t offset, size_t bytes, const char *what);
/* Rows of logits of any dtype as fp32 [rows, vocab], as the kernels load them. */
float *psr_host_read_logits(psr_host_reads *r, cl_mem logits, psr_dtype dtype, size_t offset, size_t rows,
                            size_t stride, size_t vocab);
/* A blocking write; *event (may be NULL) its event. */
psr_status psr_host_write(psr_context *ctx, const char *call, cl_mem mem, size_t offset, size_t bytes,
                          const void *src, const char *what, cl_event *event);
/* Where the caller wants an event and no write gave one (nothing to
 * write): a marker's. */
psr_status psr_host_event(psr_context *ctx, const char *call, cl_event *event);

/* psr_sample of checked args `a` with resolved flags, computed by the
 * host oracle: the inputs read after a's wait list, the outputs written
 * back, both blocking; *first and *last (may be NULL) the first read's
 * and the last write's events. Not for shards, the race over logits or
 * fast math (the caller keeps those on the device). */
psr_status psr_host_sample(psr_context *ctx, const psr_sample_args *a, unsigned flags, cl_event *first,
                           cl_event *last);
/* psr_logprobs of checked, unsharded args computed by the host oracle;
 * *event (may be NULL) the last write's. */
psr_status psr_host_logprobs(psr_context *ctx, const psr_logprobs_args *a, bool filtered, cl_event *event);
/* psr_verify of checked, unsharded args with resolved flags, computed by
 * the host oracle; *event (may be NULL) the last write's. (host_verify.c) */
psr_status psr_host_verify(psr_context *ctx, const psr_verify_args *a, unsigned flags, cl_event *event);
psr_status psr_warm_launch_sample(psr_context *ctx, unsigned flags, psr_dtype dtype, bool filtered, bool sharded);
psr_status psr_warm_launch_logprobs(psr_context *ctx, psr_dtype dtype, bool filtered, bool sharded);
psr_status psr_warm_launch_verify(psr_context *ctx, unsigned flags, psr_dtype dtype, bool sharded);

/* ---- verification (verify.c) ---- */

/* The host check of args->cu against requests, rows, max_drafts and the draft cache. */
psr_status psr_verify_check_cu(psr_context *ctx, const psr_verify_args *args);
/* A verify call's own copy of the caller's args, checked (verify.c), and
 * whether the caller has the 0.1 layout. */
psr_status psr_verify_read_args(psr_context *ctx, const psr_verify_args *args, const char *call,
                                psr_verify_args *a, unsigned *flags);
bool psr_verify_legacy_layout(const psr_verify_args *a);
/* Uploads cu, the row-to-request map and the statistics' row order into
 * ctx->verify_layout (or keeps the last upload of the same cu). */
psr_status psr_verify_upload_layout(psr_context *ctx, const psr_verify_args *a);
/* A shard's place (shard_verify.c): count in 1 .. PSR_MAX_SHARDS, index
 * below it, vocab_total at most total_max (what_max names that limit),
 * [offset, offset + vocab) inside it; with slots (logprobs and
 * verification), [slot, slot + its own slots) inside `slots`, which is
 * 1 .. slots_max. The args->... names of the messages are the calls'. */
typedef struct psr_shard_place {
    size_t count, index, offset, vocab, total;
    size_t slot, slots;
} psr_shard_place;
psr_status psr_check_shard_place(psr_context *ctx, const psr_shard_place *p, size_t total_max, const char *what_max,
                                 size_t slots_max);
/* The shard fields of a verify call (shard_verify.c): all unset, or a
 * shard that fits its vocabulary and slots, with its buffers. */
psr_status psr_verify_check_shard(psr_context *ctx, const psr_verify_args *a);

#endif
