/* psr_mpi_verify (include/psr/psr_mpi.h): verification across the ranks'
 * vocabulary shards. The headers first (every rank's shard, max_drafts
 * and a hash of the request inputs), from which each rank finds its
 * slots; then psr_verify_shard_round's four rounds, the keys reduced by
 * MPI_Allreduce (MPI_MAX), the slots and the records gathered by
 * MPI_Allgatherv, each after the ranks agree that all got there. */
#include "mpi/rounds.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* This call's buffers on the device and their host copies. */
typedef struct vf_call {
    device_call d;
    psr_verify_args a;  /* the caller's, with the shard fields filled in */
    size_t slot_bytes;
    void *keys, *partials, *records;
    int slot_counts[PSR_MAX_SHARDS], slot_displs[PSR_MAX_SHARDS];
    int rec_counts[PSR_MAX_SHARDS], rec_displs[PSR_MAX_SHARDS];
} vf_call;

static void vf_free(vf_call *v)
{
    psrmpi_device_free(&v->d);
    cl_mem all[] = {v->a.shard_keys, v->a.shard_partials, v->a.shard_records};
    for (size_t i = 0; i < 3; i++)
        if (all[i])
            clReleaseMemObject(all[i]); /* enqueued rounds keep their own hold */
    free(v->keys), free(v->partials), free(v->records);
}

/* The hash of what every rank must share: cu, the draft tokens, seeds,
 * temperatures and positions (read back from the device). */
static psr_status hash_inputs(mpi_call *c, vf_call *v)
{
    const psr_verify_args *a = &v->a;
    size_t bytes[4] = {a->rows * 4, a->requests * 8, a->requests * 4, a->rows * 8};
    cl_mem from[4] = {a->draft_tokens, a->seeds, a->temperatures, a->positions};
    const char *names[4] = {"args->draft_tokens", "args->seeds", "args->temperatures", "args->positions"};
    uint64_t h = psrmpi_hash(0xcbf29ce484222325u, a->cu, (a->requests + 1) * sizeof *a->cu);
    psr_status st = PSR_OK;
    for (int i = 0; i < 4 && st == PSR_OK; i++) {
        st = psrmpi_check_size(c->ctx, from[i], bytes[i], names[i]);
        void *host = st == PSR_OK ? malloc(bytes[i]) : NULL;
        if (st == PSR_OK && !host)
            st = psr_fail(c->ctx, PSR_ERR_OUT_OF_HOST_MEMORY, "psr_mpi_verify: no memory for %s", names[i]);
        cl_int err = host ? clEnqueueReadBuffer(v->d.queue, from[i], CL_TRUE, 0, bytes[i], host, 0, NULL, NULL)
                          : CL_SUCCESS;
        if (st == PSR_OK && err != CL_SUCCESS)
            st = psr_fail_cl(c->ctx, err, "psr_mpi_verify: reading %s", names[i]);
        if (st == PSR_OK)
            h = psrmpi_hash(h, host, bytes[i]);
        free(host);
    }
    c->mine.inputs = h;
    return st;
}

/* This rank's own checks, its inputs' hash and header. */
static psr_status prepare(mpi_call *c, const psr_verify_args *args, vf_call *v)
{
    psr_context *ctx = c->ctx;
    if (!ctx)
        return psr_verify(NULL, args, NULL);
    psr_status st = psrmpi_check_struct(ctx, args, sizeof v->a, "psr_verify_args", "psr_mpi_verify");
    if (st != PSR_OK)
        return st;
    psr_verify_args *a = &v->a;
    size_t size = (size_t)c->size;
    REQUIRE(!args->shard_slot && !args->shard_slots && !args->shard_keys && !args->shard_partials &&
                !args->shard_records,
            PSR_ERR_INVALID_ARGUMENT,
            "args->shard_slot(s), shard_keys, shard_partials or shard_records is set: the MPI call makes its own");
    *a = *args; /* past that check: the buffers the call releases are its own */
    st = psrmpi_take_shard(c, &a->shard_count, &a->shard_index);
    if (st != PSR_OK)
        return st;
    REQUIRE(a->rows > 0 && a->rows <= INT_MAX / 64 && a->requests > 0 && a->requests <= INT_MAX / 64 / size,
            PSR_ERR_INVALID_ARGUMENT, "args->rows %zu or requests %zu is 0 or too large", a->rows, a->requests);
    REQUIRE(a->cu, PSR_ERR_NULL_ARGUMENT, "args->cu is NULL");
    REQUIRE(a->num_events_in_wait_list == 0 || a->event_wait_list, PSR_ERR_NULL_ARGUMENT,
            "args->event_wait_list is NULL but args->num_events_in_wait_list is %u", a->num_events_in_wait_list);
    c->rows = a->rows;
    st = psr_context_cl(ctx, &v->d.cl_ctx, NULL, &v->d.queue);
    cl_int err = CL_SUCCESS;
    if (st == PSR_OK && a->num_events_in_wait_list)
        err = clWaitForEvents(a->num_events_in_wait_list, a->event_wait_list);
    if (st == PSR_OK && err != CL_SUCCESS)
        st = psr_fail_cl(ctx, err, "psr_mpi_verify: waiting for args->event_wait_list");
    a->num_events_in_wait_list = 0, a->event_wait_list = NULL; /* waited for */
    return st == PSR_OK ? hash_inputs(c, v) : st;
}

/* Every rank's slots in vocab_offset order (the headers agree), this
 * rank's first one, and the buffers of the rounds. */
static psr_status place_slots(mpi_call *c, vf_call *v)
{
    psr_context *ctx = c->ctx;
    psr_verify_args *a = &v->a;
    size_t total = 0, rec = a->requests * sizeof(psr_shard_record);
    v->slot_bytes = psr_verify_shard_slot_bytes(a->rows);
    psr_status st = psrmpi_place_slots(c, v->slot_bytes, v->slot_counts, v->slot_displs, &a->shard_slot, &total);
    if (st != PSR_OK)
        return st;
    for (int r = 0; r < c->size; r++)
        v->rec_displs[r] = (int)((size_t)r * rec), v->rec_counts[r] = (int)rec;
    a->shard_slots = total;
    size_t bytes[3] = {(2 * a->rows + 1) * 4, total * v->slot_bytes, (size_t)c->size * rec};
    cl_mem *bufs[3] = {&a->shard_keys, &a->shard_partials, &a->shard_records};
    void **host[3] = {&v->keys, &v->partials, &v->records};
    for (int i = 0; i < 3; i++) {
        if (st == PSR_OK)
            st = psrmpi_buffer(ctx, &v->d, bytes[i], bufs[i], "a round's exchange");
        *host[i] = malloc(bytes[i]);
        if (st == PSR_OK && !*host[i])
            st = psr_fail(ctx, PSR_ERR_OUT_OF_HOST_MEMORY, "psr_mpi_verify: no memory for the rounds");
    }
    return st;
}

/* Rounds 0 to 2, each with its collective. */
static psr_status exchange_rounds(mpi_call *c, vf_call *v)
{
    psr_verify_args *a = &v->a;
    cl_mem bufs[3] = {a->shard_keys, a->shard_partials, a->shard_records};
    void *host[3] = {v->keys, v->partials, v->records};
    size_t total[3] = {(2 * a->rows + 1) * 4, a->shard_slots * v->slot_bytes,
                       (size_t)c->size * a->requests * sizeof(psr_shard_record)};
    const int *counts[3] = {NULL, v->slot_counts, v->rec_counts}, *displs[3] = {NULL, v->slot_displs, v->rec_displs};
    static const char *const what[3] = {"in round 0 (the keys)", "in round 1 (the slots)", "in round 2 (the records)"};
    psr_status st = PSR_OK;
    for (unsigned r = 0; r < 3 && st == PSR_OK; r++) {
        cl_event done = NULL;
        st = psr_verify_shard_round(c->ctx, a, r, &done);
        st = psrmpi_round_exchange(c, v->d.queue, st, done, bufs[r], host[r], total[r], r == 0, counts[r], displs[r],
                                   what[r]);
    }
    return st;
}

psr_status psr_mpi_verify(psr_context *ctx, MPI_Comm comm, const psr_verify_args *args, cl_event *event)
{
    if (event)
        *event = NULL;
    mpi_call c;
    psr_status st = psrmpi_begin(&c, ctx, comm);
    if (st != PSR_OK)
        return st;
    c.inputs_what = "args->cu, draft_tokens, seeds, temperatures or positions";
    c.shape_what = "args->max_drafts";
    vf_call v;
    memset(&v, 0, sizeof v);
    st = prepare(&c, args, &v);
    const psr_verify_args *a = &v.a;
    c.mine.status = st, c.mine.flags = (uint32_t)a->method | (a->draft_cache ? 1u << 8 : 0u);
    c.mine.noise = (int32_t)a->noise, c.mine.shape = (uint32_t)a->max_drafts, c.mine.rows = a->rows;
    c.mine.vocab_offset = a->vocab_offset, c.mine.vocab = a->vocab, c.mine.vocab_total = a->vocab_total;
    st = psrmpi_exchange_headers(&c);
    if (st == PSR_OK)
        st = psrmpi_agree(&c, place_slots(&c, &v), "preparing its shard");
    if (st == PSR_OK)
        st = exchange_rounds(&c, &v);
    if (st == PSR_OK)
        st = psr_verify_shard_round(ctx, &v.a, 3, event);
    vf_free(&v);
    return st;
}
