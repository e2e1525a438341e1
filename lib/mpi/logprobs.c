/* psr_mpi_logprobs (include/psr/psr_mpi.h): logprobs across the ranks'
 * vocabulary shards. The headers first (every rank's shard and a hash of
 * its tokens), from which each rank finds its slots; the filters' rounds
 * where the call has filters; then psr_logprobs_shard_round's three
 * rounds, the keys reduced by MPI_Allreduce (MPI_MAX) and the slots
 * gathered by MPI_Allgatherv. Before each collective the ranks agree
 * that all of them got there. */
#include "mpi/rounds.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* This call's buffers on the device and their host copies. */
typedef struct lp_call {
    device_call d;
    psr_logprobs_args a;       /* the caller's, with the shard fields filled in */
    psr_sample_args view;      /* the filters' rounds read these */
    bool filtered;
    size_t slot_bytes;
    uint32_t *keys;            /* [rows] */
    unsigned char *partials;   /* [shard_slots * slot_bytes] */
    int counts[PSR_MAX_SHARDS], displs[PSR_MAX_SHARDS]; /* each rank's slots, in bytes */
} lp_call;

static void lp_free(lp_call *l)
{
    psrmpi_device_free(&l->d);
    cl_mem all[] = {l->a.shard_token_keys, l->a.shard_partials};
    for (size_t i = 0; i < 2; i++)
        if (all[i])
            clReleaseMemObject(all[i]); /* enqueued rounds keep their own hold */
    free(l->keys);
    free(l->partials);
}

/* The sample args of the filters' rounds: the same rows, logits,
 * temperatures and filters as the logprobs call. */
static psr_status filter_view(mpi_call *c, lp_call *l)
{
    const psr_logprobs_args *a = &l->a;
    psr_sample_args *v = &l->view;
    psr_sample_args_init(v, sizeof *v);
    v->rows = a->rows, v->vocab = a->vocab, v->logits = a->logits, v->logits_dtype = a->logits_dtype;
    v->logits_offset = a->logits_offset, v->row_stride = a->row_stride, v->row_request = a->row_request;
    v->requests = a->requests ? a->requests : a->rows, v->temperatures = a->temperatures;
    v->top_k = a->top_k, v->top_p = a->top_p, v->min_p = a->min_p;
    v->all_top_k = a->all_top_k, v->all_top_p = a->all_top_p, v->all_min_p = a->all_min_p;
    v->shard_count = a->shard_count, v->shard_index = a->shard_index;
    v->vocab_offset = a->vocab_offset, v->vocab_total = a->vocab_total;
    return psrmpi_filter_prepare(c, v, &l->d); /* the rounds need no seeds, positions or records */
}

/* This rank's own checks, its tokens' hash and header. */
static psr_status prepare(mpi_call *c, const psr_logprobs_args *args, lp_call *l)
{
    psr_context *ctx = c->ctx;
    if (!ctx)
        return psr_logprobs(NULL, args, NULL);
    psr_status st = psrmpi_check_struct(ctx, args, sizeof l->a, "psr_logprobs_args", "psr_mpi_logprobs");
    if (st != PSR_OK)
        return st;
    psr_logprobs_args *a = &l->a;
    REQUIRE(!args->shard_slot && !args->shard_slots && !args->shard_token_keys && !args->shard_partials &&
                !args->shard_filter_state,
            PSR_ERR_INVALID_ARGUMENT,
            "args->shard_slot(s), shard_token_keys, shard_partials or shard_filter_state is set: the MPI call "
            "makes its own");
    *a = *args; /* past that check: the buffers the call releases are its own */
    st = psrmpi_take_shard(c, &a->shard_count, &a->shard_index);
    if (st != PSR_OK)
        return st;
    REQUIRE(a->rows > 0 && a->rows <= INT_MAX / 8, PSR_ERR_INVALID_ARGUMENT, "args->rows %zu is 0 or too large",
            a->rows);
    REQUIRE(a->tokens, PSR_ERR_NULL_ARGUMENT, "args->tokens is NULL");
    REQUIRE(a->num_events_in_wait_list == 0 || a->event_wait_list, PSR_ERR_NULL_ARGUMENT,
            "args->event_wait_list is NULL but args->num_events_in_wait_list is %u", a->num_events_in_wait_list);
    c->rows = a->rows;
    st = psr_context_cl(ctx, &l->d.cl_ctx, NULL, &l->d.queue);
    size_t token_bytes = a->rows * (a->tokens_dtype == PSR_TOKENS_I64 ? 8 : 4);
    if (st == PSR_OK)
        st = psrmpi_check_size(ctx, a->tokens, token_bytes, "args->tokens");
    void *tokens = st == PSR_OK ? malloc(token_bytes) : NULL;
    if (st == PSR_OK && !tokens)
        st = psr_fail(ctx, PSR_ERR_OUT_OF_HOST_MEMORY, "psr_mpi_logprobs: no memory for the tokens");
    cl_int err = CL_SUCCESS;
    if (st == PSR_OK && a->num_events_in_wait_list)
        err = clWaitForEvents(a->num_events_in_wait_list, a->event_wait_list);
    if (st == PSR_OK && err == CL_SUCCESS)
        err = clEnqueueReadBuffer(l->d.queue, a->tokens, CL_TRUE, 0, token_bytes, tokens, 0, NULL, NULL);
    if (st == PSR_OK && err != CL_SUCCESS)
        st = psr_fail_cl(ctx, err, "psr_mpi_logprobs: reading args->tokens");
    if (st == PSR_OK)
        c->mine.inputs = psrmpi_hash(0xcbf29ce484222325u, tokens, token_bytes);
    free(tokens);
    a->num_events_in_wait_list = 0, a->event_wait_list = NULL; /* waited for */
    return st;
}

/* The slots of every rank, ordered by vocab_offset (the headers agree),
 * this rank's first one, and the buffers of the rounds. */
static psr_status place_slots(mpi_call *c, lp_call *l)
{
    psr_context *ctx = c->ctx;
    psr_logprobs_args *a = &l->a;
    size_t total = 0, first = 0;
    l->slot_bytes = psr_logprobs_shard_slot_bytes(a->rows, a->top_n);
    psr_status st = psrmpi_place_slots(c, l->slot_bytes, l->counts, l->displs, &first, &total);
    if (st != PSR_OK)
        return st;
    REQUIRE(total <= PSR_LOGPROBS_MAX_SLOTS, PSR_ERR_INVALID_ARGUMENT,
            "the ranks' shards make %zu slots, more than PSR_LOGPROBS_MAX_SLOTS (%d): start shards on multiples "
            "of %d tokens",
            total, PSR_LOGPROBS_MAX_SLOTS, PSR_LOGPROBS_SHARD_BLOCK);
    a->shard_slot = first, a->shard_slots = total;
    st = psrmpi_buffer(ctx, &l->d, a->rows * 4, &a->shard_token_keys, "the token keys");
    if (st == PSR_OK)
        st = psrmpi_buffer(ctx, &l->d, total * l->slot_bytes, &a->shard_partials, "the partials");
    l->keys = malloc(a->rows * 4);
    l->partials = malloc(total * l->slot_bytes);
    if (st == PSR_OK && (!l->keys || !l->partials))
        st = psr_fail(ctx, PSR_ERR_OUT_OF_HOST_MEMORY, "psr_mpi_logprobs: no memory for the rounds");
    l->filtered = a->top_k || a->top_p || a->min_p || a->all_top_k > 0 || a->all_top_p != 1.0f ||
                  a->all_min_p != 0.0f;
    if (st == PSR_OK && l->filtered)
        st = filter_view(c, l);
    a->shard_filter_state = l->d.state;
    return st;
}

/* Rounds 0 and 1 with their collectives, the results back on the device. */
static psr_status exchange_rounds(mpi_call *c, lp_call *l)
{
    cl_event done = NULL;
    psr_status st = psr_logprobs_shard_round(c->ctx, &l->a, 0, &done);
    st = psrmpi_round_exchange(c, l->d.queue, st, done, l->a.shard_token_keys, l->keys, l->a.rows * 4, true, NULL,
                               NULL, "in round 0 (the token keys)");
    if (st != PSR_OK)
        return st;
    done = NULL;
    st = psr_logprobs_shard_round(c->ctx, &l->a, 1, &done);
    return psrmpi_round_exchange(c, l->d.queue, st, done, l->a.shard_partials, l->partials,
                                 l->a.shard_slots * l->slot_bytes, false, l->counts, l->displs,
                                 "in round 1 (the slots)");
}

psr_status psr_mpi_logprobs(psr_context *ctx, MPI_Comm comm, const psr_logprobs_args *args, cl_event *event)
{
    if (event)
        *event = NULL;
    mpi_call c;
    psr_status st = psrmpi_begin(&c, ctx, comm);
    if (st != PSR_OK)
        return st;
    c.inputs_what = "args->tokens";
    c.shape_what = "args->top_n";
    lp_call l;
    memset(&l, 0, sizeof l);
    st = prepare(&c, args, &l);
    const psr_logprobs_args *a = &l.a;
    c.mine.status = st, c.mine.flags = a->flags, c.mine.shape = (uint32_t)a->top_n, c.mine.rows = a->rows;
    c.mine.vocab_offset = a->vocab_offset, c.mine.vocab = a->vocab, c.mine.vocab_total = a->vocab_total;
    st = psrmpi_exchange_headers(&c);
    if (st == PSR_OK) {
        st = place_slots(&c, &l);
        st = l.filtered ? psrmpi_filter_rounds(&c, &l.view, &l.d, st) : psrmpi_agree(&c, st, "preparing its shard");
    }
    if (st == PSR_OK)
        st = exchange_rounds(&c, &l);
    if (st == PSR_OK)
        st = psr_logprobs_shard_round(ctx, &l.a, 2, event);
    lp_free(&l);
    return st;
}
