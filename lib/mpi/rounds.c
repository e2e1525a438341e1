/* The MPI adapter's shared rounds (rounds.h). */
#include "mpi/rounds.h"

#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

psr_status psrmpi_fail(psr_context *ctx, int rc, const char *what)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
        snprintf(text, sizeof text, "MPI error %d", rc);
    return psr_fail(ctx, PSR_ERR_COLLECTIVE, "%s failed: %s", what, text);
}

/* The communicator's size and this rank: failures here are the same on
 * every rank of a usable communicator, so the call ends before any round. */
psr_status psrmpi_begin(mpi_call *c, psr_context *ctx, MPI_Comm comm)
{
    memset(c, 0, offsetof(mpi_call, all));
    c->ctx = ctx, c->comm = comm, c->records = NULL, c->flags = NULL, c->inputs_what = c->shape_what = NULL;
    if (comm == MPI_COMM_NULL)
        return psr_fail(ctx, PSR_ERR_NULL_ARGUMENT, "comm is MPI_COMM_NULL");
    int rc = MPI_Comm_size(comm, &c->size);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_rank(comm, &c->rank);
    if (rc != MPI_SUCCESS)
        return psrmpi_fail(ctx, rc, "MPI_Comm_size/MPI_Comm_rank");
    if (c->size > PSR_MAX_SHARDS)
        return psr_fail(ctx, PSR_ERR_INVALID_ARGUMENT, "comm has %d ranks, more than PSR_MAX_SHARDS (%d)",
                        c->size, PSR_MAX_SHARDS);
    return PSR_OK;
}

/* The first failing rank's status: this rank's own if it failed (its
 * message is already recorded), else PSR_ERR_COLLECTIVE naming it. */
psr_status psrmpi_judge_status(const mpi_call *c)
{
    if (c->mine.status != PSR_OK)
        return (psr_status)c->mine.status;
    int failed = -1, others = 0;
    for (int r = 0; r < c->size; r++) {
        if (c->all[r].status == PSR_OK)
            continue;
        if (failed < 0)
            failed = r;
        else
            others++;
    }
    if (failed < 0)
        return PSR_OK;
    return psr_fail(c->ctx, PSR_ERR_COLLECTIVE, "rank %d failed: %s%s", failed,
                    psr_status_string((psr_status)c->all[failed].status),
                    others ? " (and other ranks failed too)" : "");
}

/* Every rank's header against rank 0's: what must be the same everywhere. */
psr_status psrmpi_judge_agreement(const mpi_call *c)
{
    psr_context *ctx = c->ctx;
    const shard_header *a = &c->all[0];
    for (int r = 1; r < c->size; r++) {
        const shard_header *b = &c->all[r];
        REQUIRE(b->rows == a->rows, PSR_ERR_SHARD_MISMATCH, "args->rows: rank %d has %llu rows, rank 0 has %llu",
                r, (unsigned long long)b->rows, (unsigned long long)a->rows);
        REQUIRE(b->vocab_total == a->vocab_total, PSR_ERR_SHARD_MISMATCH,
                "args->vocab_total: rank %d has %llu, rank 0 has %llu", r, (unsigned long long)b->vocab_total,
                (unsigned long long)a->vocab_total);
        REQUIRE(b->flags == a->flags, PSR_ERR_SHARD_MISMATCH, "args->flags: rank %d has 0x%x, rank 0 has 0x%x", r,
                b->flags, a->flags);
        REQUIRE(b->noise == a->noise, PSR_ERR_SHARD_MISMATCH,
                "the noise: rank %d sampled with noise %d, rank 0 with %d (a device without fp64 falls back "
                "to PSR_NOISE_WIDE: ask every rank for one noise its device has)",
                r, (int)b->noise, (int)a->noise);
        REQUIRE(b->shape == a->shape, PSR_ERR_SHARD_MISMATCH, "%s: rank %d has %u, rank 0 has %u",
                c->shape_what ? c->shape_what : "the shape", r, b->shape, a->shape);
        REQUIRE(b->inputs == a->inputs, PSR_ERR_SHARD_MISMATCH, "%s: rank %d's differ from rank 0's",
                c->inputs_what ? c->inputs_what : "the inputs", r);
    }
    return PSR_OK;
}

/* The shards, ordered by vocab_offset, must tile [0, vocab_total). */
psr_status psrmpi_judge_tiling(const mpi_call *c)
{
    psr_context *ctx = c->ctx;
    int order[PSR_MAX_SHARDS];
    for (int r = 0; r < c->size; r++) {
        int i = r;
        for (; i > 0 && c->all[order[i - 1]].vocab_offset > c->all[r].vocab_offset; i--)
            order[i] = order[i - 1];
        order[i] = r;
    }
    unsigned long long end = 0; /* tokens below `end` are held */
    for (int i = 0; i < c->size; i++) {
        int r = order[i], p = i ? order[i - 1] : -1;
        unsigned long long off = c->all[r].vocab_offset, stop = off + c->all[r].vocab;
        REQUIRE(off <= end, PSR_ERR_SHARD_MISMATCH,
                "args->vocab_offset: no rank holds tokens [%llu, %llu) (rank %d starts at %llu)", end, off, r, off);
        REQUIRE(off == end, PSR_ERR_SHARD_MISMATCH,
                "args->vocab_offset: rank %d's tokens [%llu, %llu) overlap rank %d's [%llu, %llu)", r, off, stop, p,
                (unsigned long long)c->all[p].vocab_offset, end);
        end = stop;
    }
    REQUIRE(end == c->all[0].vocab_total, PSR_ERR_SHARD_MISMATCH,
            "args->vocab_offset: no rank holds tokens [%llu, %llu) of vocab_total %llu", end,
            (unsigned long long)c->all[0].vocab_total, (unsigned long long)c->all[0].vocab_total);
    return PSR_OK;
}

uint64_t psrmpi_hash(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3u;
    return h;
}

/* The caller's args struct, of exactly this library's size: the call
 * copies it whole. */
psr_status psrmpi_check_struct(psr_context *ctx, const void *args, size_t own, const char *type, const char *call)
{
    REQUIRE(args, PSR_ERR_NULL_ARGUMENT, "%s: args is NULL", call);
    size_t size;
    memcpy(&size, args, sizeof size);
    REQUIRE(size == own, PSR_ERR_STRUCT_SIZE,
            "args->struct_size is %zu, not sizeof(%s) %zu of this library (0.3 on): set it up with %s_init(&a, "
            "sizeof a)", size, type, own, type);
    return PSR_OK;
}

/* Fails unless buffer m (when set) holds `need` bytes. */
psr_status psrmpi_check_size(psr_context *ctx, cl_mem m, size_t need, const char *name)
{
    size_t have = 0;
    cl_int err = m ? clGetMemObjectInfo(m, CL_MEM_SIZE, sizeof have, &have, NULL) : CL_SUCCESS;
    if (err != CL_SUCCESS)
        return psr_fail_cl(ctx, err, "%s: clGetMemObjectInfo", name);
    REQUIRE(!m || have >= need, PSR_ERR_BUFFER_TOO_SMALL, "%s holds %zu bytes, the call needs %zu", name, have,
            need);
    return PSR_OK;
}

void psrmpi_device_free(device_call *d)
{
    cl_mem all[] = {d->own, d->all, d->state, d->partial, d->reduced};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i])
            clReleaseMemObject(all[i]); /* the combine keeps its own hold until it has run */
    free(d->words);
}

/* A device buffer of the call, or the failure. */
psr_status psrmpi_buffer(psr_context *ctx, const device_call *d, size_t bytes, cl_mem *out, const char *what)
{
    cl_int err = CL_SUCCESS;
    *out = clCreateBuffer(d->cl_ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
    return err == CL_SUCCESS ? PSR_OK : psr_fail_cl(ctx, err, "psr_mpi_sample: clCreateBuffer of %s", what);
}

/* The filters' rounds and their buffers, before any collective (so a
 * rank that cannot have them still takes part in the agreement). */
psr_status psrmpi_filter_prepare(mpi_call *c, psr_sample_args *a, device_call *d)
{
    psr_context *ctx = c->ctx;
    psr_status st = psrmpi_buffer(ctx, d, c->rows * PSR_SHARD_FILTER_STATE_BYTES, &d->state, "the filter state");
    a->shard_filter_state = d->state;
    if (st == PSR_OK)
        st = psr_shard_filter_rounds(ctx, a, &d->rounds);
    size_t bytes = c->rows * PSR_SHARD_FILTER_WORDS * sizeof(uint64_t);
    if (st == PSR_OK && d->rounds)
        st = psrmpi_buffer(ctx, d, bytes, &d->partial, "the filter partials");
    if (st == PSR_OK && d->rounds)
        st = psrmpi_buffer(ctx, d, bytes, &d->reduced, "the filter reductions");
    if (st == PSR_OK && d->rounds && !(d->words = malloc(2 * bytes)))
        st = psr_fail(ctx, PSR_ERR_OUT_OF_HOST_MEMORY, "psr_mpi_sample: no memory for the filter rounds");
    return st;
}

/* Every rank's status and number of filter rounds: the same verdict on
 * every rank before any round. */
static psr_status psrmpi_filter_agree(mpi_call *c, const device_call *d, psr_status st)
{
    int mine[2] = {(int)st, (int)d->rounds}, all[2 * PSR_MAX_SHARDS];
    int rc = MPI_Allgather(mine, 2, MPI_INT, all, 2, MPI_INT, c->comm);
    if (rc != MPI_SUCCESS)
        return st != PSR_OK ? st : psrmpi_fail(c->ctx, rc, "MPI_Allgather of the filter rounds");
    if (st != PSR_OK)
        return st;
    psr_context *ctx = c->ctx;
    for (int r = 0; r < c->size; r++) {
        if (all[2 * r] != PSR_OK)
            return psr_fail(c->ctx, PSR_ERR_COLLECTIVE, "rank %d failed: %s", r,
                            psr_status_string((psr_status)all[2 * r]));
        REQUIRE(all[2 * r + 1] == all[1], PSR_ERR_SHARD_MISMATCH,
                "args: rank %d needs %d filter rounds, rank 0 %d: their filters differ", r, all[2 * r + 1], all[1]);
    }
    return PSR_OK;
}

/* One round's partial reduced across the ranks into d->reduced (round 0
 * by maximum, the others by sum), after every rank said it has one. */
static psr_status psrmpi_filter_reduce(mpi_call *c, device_call *d, size_t round, psr_status st)
{
    size_t words = c->rows * PSR_SHARD_FILTER_WORDS;
    cl_int err = CL_SUCCESS;
    if (st == PSR_OK)
        err = clEnqueueReadBuffer(d->queue, d->partial, CL_TRUE, 0, words * 8, d->words, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        st = psr_fail_cl(c->ctx, err, "psr_mpi_sample: reading filter round %zu's partial", round);
    int failed = st != PSR_OK;
    int rc = MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, c->comm);
    if (st != PSR_OK)
        return st;
    if (rc != MPI_SUCCESS)
        return psrmpi_fail(c->ctx, rc, "MPI_Allreduce of a filter round's status");
    if (failed)
        return psr_fail(c->ctx, PSR_ERR_COLLECTIVE, "another rank failed in filter round %zu", round);
    rc = MPI_Allreduce(d->words, d->words + words, (int)words, MPI_UINT64_T, round == 0 ? MPI_MAX : MPI_SUM,
                       c->comm);
    if (rc != MPI_SUCCESS)
        return psrmpi_fail(c->ctx, rc, "MPI_Allreduce of a filter round's partials");
    err = clEnqueueWriteBuffer(d->queue, d->reduced, CL_TRUE, 0, words * 8, d->words + words, 0, NULL, NULL);
    return err == CL_SUCCESS ? PSR_OK : psr_fail_cl(c->ctx, err, "psr_mpi_sample: writing filter round %zu", round);
}

/* The filters' rounds (docs/sharded.md): every rank runs them, with
 * st its status so far, and all stop together at the first failure. */
psr_status psrmpi_filter_rounds(mpi_call *c, const psr_sample_args *a, device_call *d, psr_status st)
{
    st = psrmpi_filter_agree(c, d, st);
    for (size_t r = 0; st == PSR_OK && r <= d->rounds && d->rounds; r++) {
        psr_shard_filter_args f;
        psr_shard_filter_args_init(&f, sizeof f);
        f.sample = a, f.round = r, f.reduced = d->reduced, f.partial = d->partial;
        st = psr_shard_filter_round(c->ctx, &f, NULL);
        if (r < d->rounds)
            st = psrmpi_filter_reduce(c, d, r, st);
    }
    return st;
}

psr_status psrmpi_exchange_headers(mpi_call *c)
{
    int rc = MPI_Allgather(&c->mine, (int)sizeof c->mine, MPI_BYTE, c->all, (int)sizeof c->mine, MPI_BYTE,
                           c->comm);
    if (rc != MPI_SUCCESS)
        return c->mine.status != PSR_OK ? (psr_status)c->mine.status
                                        : psrmpi_fail(c->ctx, rc, "MPI_Allgather of the shard headers");
    psr_status st = psrmpi_judge_status(c);
    if (st == PSR_OK)
        st = psrmpi_judge_agreement(c);
    return st == PSR_OK ? psrmpi_judge_tiling(c) : st;
}

psr_status psrmpi_agree(mpi_call *c, psr_status st, const char *what)
{
    int first = st != PSR_OK ? c->rank : c->size; /* the lowest failing rank */
    int rc = MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, c->comm);
    if (st != PSR_OK)
        return st;
    if (rc != MPI_SUCCESS)
        return psrmpi_fail(c->ctx, rc, "MPI_Allreduce of the ranks' status");
    return first < c->size ? psr_fail(c->ctx, PSR_ERR_COLLECTIVE, "rank %d failed %s", first, what) : PSR_OK;
}

psr_status psrmpi_round_exchange(mpi_call *c, cl_command_queue q, psr_status st, cl_event done, cl_mem m, void *host,
                                 size_t total, bool reduce, const int *counts, const int *displs, const char *what)
{
    size_t at = reduce ? 0 : (size_t)displs[c->rank], bytes = reduce ? total : (size_t)counts[c->rank];
    cl_int err = CL_SUCCESS;
    if (st == PSR_OK)
        err = clEnqueueReadBuffer(q, m, CL_TRUE, at, bytes, (unsigned char *)host + at, done ? 1 : 0,
                                  done ? &done : NULL, NULL);
    if (done)
        clReleaseEvent(done);
    if (st == PSR_OK && err != CL_SUCCESS)
        st = psr_fail_cl(c->ctx, err, "reading %s", what);
    st = psrmpi_agree(c, st, what);
    if (st != PSR_OK)
        return st;
    int rc = reduce ? MPI_Allreduce(MPI_IN_PLACE, host, (int)(total / 4), MPI_UINT32_T, MPI_MAX, c->comm)
                    : MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, host, counts, displs, MPI_BYTE, c->comm);
    if (rc != MPI_SUCCESS)
        return psrmpi_fail(c->ctx, rc, reduce ? "MPI_Allreduce of a round's keys" : "MPI_Allgatherv of a round's parts");
    err = clEnqueueWriteBuffer(q, m, CL_TRUE, 0, total, host, 0, NULL, NULL);
    return err == CL_SUCCESS ? PSR_OK : psr_fail_cl(c->ctx, err, "writing back %s", what);
}

psr_status psrmpi_take_shard(mpi_call *c, size_t *shard_count, size_t *shard_index)
{
    psr_context *ctx = c->ctx;
    size_t size = (size_t)c->size, rank = (size_t)c->rank;
    REQUIRE(!*shard_count || *shard_count == size, PSR_ERR_SHARD_MISMATCH,
            "args->shard_count %zu is not the communicator's size %zu (leave it 0)", *shard_count, size);
    REQUIRE(!*shard_index || *shard_index == rank, PSR_ERR_SHARD_MISMATCH,
            "args->shard_index %zu is not this process's rank %zu (leave it 0)", *shard_index, rank);
    *shard_count = size, *shard_index = rank;
    return PSR_OK;
}

psr_status psrmpi_place_slots(const mpi_call *c, size_t slot_bytes, int *counts, int *displs, size_t *first,
                              size_t *total)
{
    psr_context *ctx = c->ctx;
    *total = 0;
    for (int r = 0; r < c->size; r++) {
        size_t before = 0, slots = psr_logprobs_shard_slots(c->all[r].vocab);
        for (int q = 0; q < c->size; q++)
            if (c->all[q].vocab_offset < c->all[r].vocab_offset)
                before += psr_logprobs_shard_slots(c->all[q].vocab);
        REQUIRE(slot_bytes && (before + slots) * slot_bytes <= INT_MAX, PSR_ERR_INVALID_ARGUMENT,
                "args->rows %zu: the slots pass what one MPI_Allgatherv moves", c->rows);
        displs[r] = (int)(before * slot_bytes), counts[r] = (int)(slots * slot_bytes);
        *total += slots;
        if (r == c->rank)
            *first = before;
    }
    return PSR_OK;
}
