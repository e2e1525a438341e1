/* The MPI adapter (include/psr/psr_mpi.h). Each rank samples its shard
 * into records, then two rounds: every rank's header (its status and
 * shard description), which every rank judges the same way, and, when
 * the shards fit together, every rank's records; each rank then combines
 * them into its own tokens. The header round always happens, so a rank
 * that fails on its own input never leaves the others waiting. */
#include <psr/psr_mpi.h>

#include "runtime/status.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What each rank tells the others after sampling its shard. Sent as
 * bytes: every rank runs this same library. */
typedef struct shard_header {
    int32_t status;   /* psr_status of this rank's own part */
    int32_t noise;    /* the noise the shard was sampled with, after the fp64 policy */
    uint32_t flags;   /* PSR_SAMPLE_* */
    uint32_t reserved;
    uint64_t rows, vocab_offset, vocab, vocab_total;
    uint64_t inputs;  /* hash of the seeds, positions and temperatures (host calls; 0 on device) */
} shard_header;

/* One call on this rank. */
typedef struct mpi_call {
    psr_context *ctx;
    MPI_Comm comm;
    int size, rank;
    size_t rows;
    shard_header mine;
    shard_header all[PSR_MAX_SHARDS];
    psr_shard_record *records; /* [size, rows]: this rank's at rank * rows, then every rank's */
    uint32_t *flags;           /* [rows]: the combined rows' flags */
} mpi_call;

/* The caller's shard fields and outputs, as both calls name them. */
typedef struct shard_fields {
    size_t *shard_count, *shard_index;
    size_t rows;
    bool has_records, has_tokens;
    psr_token_dtype tokens_dtype;
} shard_fields;

/* Host arrays with filters go through the device path (at the end). */
static bool host_filtered(const psr_sample_host_args *h);
static psr_status host_via_device(psr_context *ctx, MPI_Comm comm, const psr_sample_host_args *h);

static psr_status fail_mpi(psr_context *ctx, int rc, const char *what)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
        snprintf(text, sizeof text, "MPI error %d", rc);
    return psr_fail(ctx, PSR_ERR_COLLECTIVE, "%s failed: %s", what, text);
}

/* The communicator's size and this rank: failures here are the same on
 * every rank of a usable communicator, so the call ends before any round. */
static psr_status call_begin(mpi_call *c, psr_context *ctx, MPI_Comm comm)
{
    memset(c, 0, offsetof(mpi_call, all));
    c->ctx = ctx, c->comm = comm, c->records = NULL, c->flags = NULL;
    if (comm == MPI_COMM_NULL)
        return psr_fail(ctx, PSR_ERR_NULL_ARGUMENT, "comm is MPI_COMM_NULL");
    int rc = MPI_Comm_size(comm, &c->size);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_rank(comm, &c->rank);
    if (rc != MPI_SUCCESS)
        return fail_mpi(ctx, rc, "MPI_Comm_size/MPI_Comm_rank");
    if (c->size > PSR_MAX_SHARDS)
        return psr_fail(ctx, PSR_ERR_INVALID_ARGUMENT, "comm has %d ranks, more than PSR_MAX_SHARDS (%d)",
                        c->size, PSR_MAX_SHARDS);
    return PSR_OK;
}

/* This rank's own checks of what the inner call does not see, its shard
 * fields from the communicator, and the records' memory (allocated before
 * any round, so no rank fails between rounds). */
static psr_status call_prepare(mpi_call *c, const shard_fields *f)
{
    psr_context *ctx = c->ctx;
    size_t size = (size_t)c->size, rank = (size_t)c->rank;
    REQUIRE(!f->has_records, PSR_ERR_INVALID_ARGUMENT,
            "args->shard_records is set: the MPI call gathers the records itself");
    REQUIRE(f->has_tokens, PSR_ERR_NULL_ARGUMENT, "args->tokens is NULL");
    REQUIRE((unsigned)f->tokens_dtype <= PSR_TOKENS_I64, PSR_ERR_INVALID_ARGUMENT,
            "args->tokens_dtype %d is not a psr_token_dtype", (int)f->tokens_dtype);
    REQUIRE(f->rows > 0, PSR_ERR_INVALID_ARGUMENT, "args->rows is 0");
    REQUIRE(f->rows <= UINT32_MAX / PSR_MAX_SHARDS, PSR_ERR_INVALID_ARGUMENT, "args->rows %zu is too large",
            f->rows);
    REQUIRE(!*f->shard_count || *f->shard_count == size, PSR_ERR_SHARD_MISMATCH,
            "args->shard_count %zu is not the communicator's size %zu (leave it 0)", *f->shard_count, size);
    REQUIRE(!*f->shard_index || *f->shard_index == rank, PSR_ERR_SHARD_MISMATCH,
            "args->shard_index %zu is not this process's rank %zu (leave it 0)", *f->shard_index, rank);
    *f->shard_count = size, *f->shard_index = rank;
    c->rows = f->rows;
    c->records = calloc(1, size * f->rows * sizeof(psr_shard_record) + f->rows * sizeof(uint32_t));
    REQUIRE(c->records, PSR_ERR_OUT_OF_HOST_MEMORY, "cannot allocate %zu ranks' records of %zu rows", size,
            f->rows);
    c->flags = (uint32_t *)(c->records + size * f->rows);
    return PSR_OK;
}

/* The first failing rank's status: this rank's own if it failed (its
 * message is already recorded), else PSR_ERR_COLLECTIVE naming it. */
static psr_status judge_status(const mpi_call *c)
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
static psr_status judge_agreement(const mpi_call *c)
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
        REQUIRE(b->inputs == a->inputs, PSR_ERR_SHARD_MISMATCH,
                "args->seeds, positions or temperatures: rank %d's differ from rank 0's", r);
    }
    return PSR_OK;
}

/* The shards, ordered by vocab_offset, must tile [0, vocab_total). */
static psr_status judge_tiling(const mpi_call *c)
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

/* The two rounds. Every rank reaches the same verdict from the same
 * headers, so either all take part in the records round or none does. */
static psr_status call_exchange(mpi_call *c)
{
    int rc = MPI_Allgather(&c->mine, (int)sizeof c->mine, MPI_BYTE, c->all, (int)sizeof c->mine, MPI_BYTE,
                           c->comm);
    if (rc != MPI_SUCCESS)
        return c->mine.status != PSR_OK ? (psr_status)c->mine.status
                                        : fail_mpi(c->ctx, rc, "MPI_Allgather of the shard headers");
    psr_status st = judge_status(c);
    if (st == PSR_OK)
        st = judge_agreement(c);
    if (st == PSR_OK)
        st = judge_tiling(c);
    if (st != PSR_OK)
        return st;
    rc = MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, c->records, (int)(c->rows * sizeof *c->records),
                       MPI_BYTE, c->comm);
    return rc == MPI_SUCCESS ? PSR_OK : fail_mpi(c->ctx, rc, "MPI_Allgather of the shard records");
}

/* FNV-1a over bytes, continuing from h. */
static uint64_t hash_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3u;
    return h;
}

/* What every rank's host call must share: its seeds, positions and temperatures. */
static uint64_t hash_inputs(const psr_sample_host_args *a)
{
    uint64_t h = hash_bytes(0xcbf29ce484222325u, a->seeds, a->rows * sizeof *a->seeds);
    h = hash_bytes(h, a->positions, a->rows * sizeof *a->positions);
    return hash_bytes(h, a->temperatures, a->rows * sizeof *a->temperatures);
}

/* The header of a shard sampled (or refused) with status st. */
static void set_header(mpi_call *c, psr_status st, unsigned flags, psr_noise noise, size_t offset, size_t vocab,
                       size_t total)
{
    c->mine.status = st, c->mine.flags = flags, c->mine.noise = (int32_t)noise;
    c->mine.rows = c->rows, c->mine.vocab_offset = offset, c->mine.vocab = vocab, c->mine.vocab_total = total;
}

/* The caller's args struct, of exactly this library's size: the call
 * copies it whole. */
static psr_status check_struct(psr_context *ctx, const void *args, size_t own, const char *type, const char *call)
{
    REQUIRE(args, PSR_ERR_NULL_ARGUMENT, "%s: args is NULL", call);
    size_t size;
    memcpy(&size, args, sizeof size);
    REQUIRE(size == own, PSR_ERR_STRUCT_SIZE,
            "args->struct_size is %zu, not sizeof(%s) %zu of this library (0.3 on): set it up with %s_init(&a, "
            "sizeof a)", size, type, own, type);
    return PSR_OK;
}

/* This rank's shard on host arrays, into its place in c->records. */
static psr_status host_shard(mpi_call *c, const psr_sample_host_args *args, psr_sample_host_args *a,
                             psr_noise *noise)
{
    psr_context *ctx = c->ctx;
    if (!ctx) /* psr_sample_host records the message where psr_last_error(NULL) finds it */
        return psr_sample_host(NULL, args);
    psr_status st = check_struct(ctx, args, sizeof *a, "psr_sample_host_args", "psr_mpi_sample_host");
    if (st != PSR_OK)
        return st;
    *a = *args;
    const shard_fields f = {&a->shard_count, &a->shard_index, a->rows, a->shard_records != NULL, a->tokens != NULL,
                            a->tokens_dtype};
    st = call_prepare(c, &f);
    if (st != PSR_OK)
        return st;
    a->tokens = NULL, a->row_flags = NULL, a->no_finite_rows = NULL, a->effective_noise = noise;
    a->shard_records = c->records + (size_t)c->rank * c->rows;
    st = psr_sample_host(ctx, a);
    if (st == PSR_OK)
        c->mine.inputs = hash_inputs(a);
    return st;
}

psr_status psr_mpi_sample_host(psr_context *ctx, MPI_Comm comm, const psr_sample_host_args *args)
{
    if (ctx && args && host_filtered(args))
        return host_via_device(ctx, comm, args);
    mpi_call c;
    psr_status st = call_begin(&c, ctx, comm);
    if (st != PSR_OK)
        return st;
    psr_sample_host_args a;
    memset(&a, 0, sizeof a);
    psr_noise noise = PSR_NOISE_FP32;
    st = host_shard(&c, args, &a, &noise);
    set_header(&c, st, a.flags, noise, a.vocab_offset, a.vocab, a.vocab_total);
    st = call_exchange(&c);
    if (st == PSR_OK) {
        psr_combine_host_args m;
        psr_combine_host_args_init(&m, sizeof m);
        m.rows = c.rows, m.shards = (size_t)c.size, m.records = c.records, m.tokens = args->tokens;
        m.tokens_dtype = args->tokens_dtype, m.row_flags = c.flags;
        st = psr_combine_host(ctx, &m);
    }
    if (st == PSR_OK) {
        size_t no_finite = 0;
        for (size_t r = 0; r < c.rows; r++)
            no_finite += (c.flags[r] & PSR_ROW_NO_FINITE) != 0;
        if (args->row_flags)
            memcpy(args->row_flags, c.flags, c.rows * sizeof *c.flags);
        if (args->no_finite_rows)
            *args->no_finite_rows = no_finite;
        if (args->effective_noise)
            *args->effective_noise = noise;
    }
    free(c.records);
    return st;
}

/* ---- device buffers ---- */

/* Fails unless buffer m (when set) holds `need` bytes. */
static psr_status check_size(psr_context *ctx, cl_mem m, size_t need, const char *name)
{
    size_t have = 0;
    cl_int err = m ? clGetMemObjectInfo(m, CL_MEM_SIZE, sizeof have, &have, NULL) : CL_SUCCESS;
    if (err != CL_SUCCESS)
        return psr_fail_cl(ctx, err, "%s: clGetMemObjectInfo", name);
    REQUIRE(!m || have >= need, PSR_ERR_BUFFER_TOO_SMALL, "%s holds %zu bytes, the call needs %zu", name, have,
            need);
    return PSR_OK;
}

/* This device call's OpenCL objects. */
typedef struct device_call {
    cl_context cl_ctx;
    cl_command_queue queue;
    cl_mem own, all; /* records: this shard's [rows]; every shard's [size, rows] */
    cl_mem state, partial, reduced; /* filters across shards (filter_rounds) */
    size_t rounds;
    uint64_t *words; /* host copies of a round's partial, then of the reduction */
} device_call;

static void device_call_free(device_call *d)
{
    cl_mem all[] = {d->own, d->all, d->state, d->partial, d->reduced};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i])
            clReleaseMemObject(all[i]); /* the combine keeps its own hold until it has run */
    free(d->words);
}

/* A device buffer of the call, or the failure. */
static psr_status call_buffer(psr_context *ctx, const device_call *d, size_t bytes, cl_mem *out, const char *what)
{
    cl_int err = CL_SUCCESS;
    *out = clCreateBuffer(d->cl_ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
    return err == CL_SUCCESS ? PSR_OK : psr_fail_cl(ctx, err, "psr_mpi_sample: clCreateBuffer of %s", what);
}

/* The filters' rounds and their buffers, before any collective (so a
 * rank that cannot have them still takes part in the agreement). */
static psr_status filter_prepare(mpi_call *c, psr_sample_args *a, device_call *d)
{
    psr_context *ctx = c->ctx;
    psr_status st = call_buffer(ctx, d, c->rows * PSR_SHARD_FILTER_STATE_BYTES, &d->state, "the filter state");
    a->shard_filter_state = d->state;
    if (st == PSR_OK)
        st = psr_shard_filter_rounds(ctx, a, &d->rounds);
    size_t bytes = c->rows * PSR_SHARD_FILTER_WORDS * sizeof(uint64_t);
    if (st == PSR_OK && d->rounds)
        st = call_buffer(ctx, d, bytes, &d->partial, "the filter partials");
    if (st == PSR_OK && d->rounds)
        st = call_buffer(ctx, d, bytes, &d->reduced, "the filter reductions");
    if (st == PSR_OK && d->rounds && !(d->words = malloc(2 * bytes)))
        st = psr_fail(ctx, PSR_ERR_OUT_OF_HOST_MEMORY, "psr_mpi_sample: no memory for the filter rounds");
    return st;
}

/* Every rank's status and number of filter rounds: the same verdict on
 * every rank before any round. */
static psr_status filter_agree(mpi_call *c, const device_call *d, psr_status st)
{
    int mine[2] = {(int)st, (int)d->rounds}, all[2 * PSR_MAX_SHARDS];
    int rc = MPI_Allgather(mine, 2, MPI_INT, all, 2, MPI_INT, c->comm);
    if (rc != MPI_SUCCESS)
        return st != PSR_OK ? st : fail_mpi(c->ctx, rc, "MPI_Allgather of the filter rounds");
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
static psr_status filter_reduce(mpi_call *c, device_call *d, size_t round, psr_status st)
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
        return fail_mpi(c->ctx, rc, "MPI_Allreduce of a filter round's status");
    if (failed)
        return psr_fail(c->ctx, PSR_ERR_COLLECTIVE, "another rank failed in filter round %zu", round);
    rc = MPI_Allreduce(d->words, d->words + words, (int)words, MPI_UINT64_T, round == 0 ? MPI_MAX : MPI_SUM,
                       c->comm);
    if (rc != MPI_SUCCESS)
        return fail_mpi(c->ctx, rc, "MPI_Allreduce of a filter round's partials");
    err = clEnqueueWriteBuffer(d->queue, d->reduced, CL_TRUE, 0, words * 8, d->words + words, 0, NULL, NULL);
    return err == CL_SUCCESS ? PSR_OK : psr_fail_cl(c->ctx, err, "psr_mpi_sample: writing filter round %zu", round);
}

/* The filters' rounds (docs/sharded.md): every rank runs them, with
 * st its status so far, and all stop together at the first failure. */
static psr_status filter_rounds(mpi_call *c, const psr_sample_args *a, device_call *d, psr_status st)
{
    st = filter_agree(c, d, st);
    for (size_t r = 0; st == PSR_OK && r <= d->rounds && d->rounds; r++) {
        psr_shard_filter_args f;
        psr_shard_filter_args_init(&f, sizeof f);
        f.sample = a, f.round = r, f.reduced = d->reduced, f.partial = d->partial;
        st = psr_shard_filter_round(c->ctx, &f, NULL);
        if (r < d->rounds)
            st = filter_reduce(c, d, r, st);
    }
    return st;
}


/* This rank's checks and buffers for its shard on the device. */
static psr_status device_prepare(mpi_call *c, const psr_sample_args *args, psr_sample_args *a, device_call *d,
                                 psr_noise *noise)
{
    psr_context *ctx = c->ctx;
    if (!ctx)
        return psr_sample(NULL, args, NULL);
    psr_status st = check_struct(ctx, args, sizeof *a, "psr_sample_args", "psr_mpi_sample");
    if (st != PSR_OK)
        return st;
    *a = *args;
    const shard_fields f = {&a->shard_count, &a->shard_index, a->rows, a->shard_records != NULL, a->tokens != NULL,
                            a->tokens_dtype};
    st = call_prepare(c, &f);
    size_t bytes = c->rows * sizeof(psr_shard_record);
    if (st == PSR_OK)
        st = check_size(ctx, a->tokens, c->rows * (a->tokens_dtype == PSR_TOKENS_I64 ? 8 : 4), "args->tokens");
    if (st == PSR_OK)
        st = check_size(ctx, a->row_flags, c->rows * 4, "args->row_flags");
    if (st == PSR_OK)
        st = psr_context_cl(ctx, &d->cl_ctx, NULL, &d->queue);
    if (st == PSR_OK)
        st = call_buffer(ctx, d, bytes, &d->own, "the shard records");
    if (st == PSR_OK)
        st = call_buffer(ctx, d, bytes * (size_t)c->size, &d->all, "the gathered records");
    a->tokens = NULL, a->row_flags = NULL, a->shard_records = d->own, a->effective_noise = noise;
    return st == PSR_OK ? filter_prepare(c, a, d) : st;
}

/* This rank's shard sampled, read back into its place in c->records. */
static psr_status device_shard(mpi_call *c, const psr_sample_args *a, device_call *d)
{
    cl_event done = NULL;
    psr_status st = psr_sample(c->ctx, a, &done);
    if (st != PSR_OK)
        return st;
    cl_int err = clEnqueueReadBuffer(d->queue, d->own, CL_TRUE, 0, c->rows * sizeof(psr_shard_record),
                                     c->records + (size_t)c->rank * c->rows, 1, &done, NULL);
    clReleaseEvent(done);
    return err == CL_SUCCESS ? PSR_OK : psr_fail_cl(c->ctx, err, "psr_mpi_sample: reading the shard records");
}

/* The gathered records to the device, and psr_combine into the caller's buffers. */
static psr_status device_combine(mpi_call *c, const psr_sample_args *args, device_call *d, cl_event *event)
{
    size_t bytes = (size_t)c->size * c->rows * sizeof(psr_shard_record);
    cl_int err = clEnqueueWriteBuffer(d->queue, d->all, CL_TRUE, 0, bytes, c->records, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return psr_fail_cl(c->ctx, err, "psr_mpi_sample: writing the gathered records");
    psr_combine_args m;
    psr_combine_args_init(&m, sizeof m);
    m.rows = c->rows, m.shards = (size_t)c->size, m.records = d->all, m.tokens = args->tokens;
    m.tokens_dtype = args->tokens_dtype, m.row_flags = args->row_flags;
    return psr_combine(c->ctx, &m, event);
}

/* psr_mpi_sample, after `pre`: a failure of the caller's own (the host
 * call's staging), with which this rank still takes part in the rounds. */
static psr_status sample_device(psr_context *ctx, MPI_Comm comm, const psr_sample_args *args, cl_event *event,
                                psr_status pre, uint64_t inputs)
{
    mpi_call c;
    psr_status st = call_begin(&c, ctx, comm);
    if (st != PSR_OK)
        return st;
    c.mine.inputs = inputs;
    psr_sample_args a;
    memset(&a, 0, sizeof a);
    psr_noise noise = PSR_NOISE_FP32;
    device_call d;
    memset(&d, 0, sizeof d);
    st = pre != PSR_OK ? pre : device_prepare(&c, args, &a, &d, &noise);
    st = filter_rounds(&c, &a, &d, st);
    if (st == PSR_OK)
        st = device_shard(&c, &a, &d);
    set_header(&c, st, a.flags, noise, a.vocab_offset, a.vocab, a.vocab_total);
    st = call_exchange(&c);
    if (st == PSR_OK)
        st = device_combine(&c, args, &d, event);
    if (st == PSR_OK && args->effective_noise)
        *args->effective_noise = noise;
    device_call_free(&d);
    free(c.records);
    return st;
}

psr_status psr_mpi_sample(psr_context *ctx, MPI_Comm comm, const psr_sample_args *args, cl_event *event)
{
    return sample_device(ctx, comm, args, event, PSR_OK, 0);
}

/* ---- host arrays with filters: staged on the device ---- */

/* The filters' rounds run on device buffers: host arrays with filters
 * are copied there and take the device path. */
static bool host_filtered(const psr_sample_host_args *h)
{
    return h->top_k || h->top_p || h->min_p || h->all_top_k > 0 || h->all_top_p != 1.0f || h->all_min_p != 0.0f;
}

/* The host call's value checks (psr_sample_host fails on them, naming the
 * entry, where the device call would flag the row). */
static psr_status check_host_values(psr_context *ctx, const psr_sample_host_args *h)
{
    REQUIRE(h->logits && h->seeds && h->positions && h->temperatures, PSR_ERR_NULL_ARGUMENT,
            "args->logits, seeds, positions or temperatures is NULL");
    for (size_t r = 0; r < h->rows; r++) {
        float t = h->temperatures[r], p = h->top_p ? h->top_p[r] : 1.0f, m = h->min_p ? h->min_p[r] : 0.0f;
        REQUIRE(h->positions[r] >= 0 && h->positions[r] < PSR_MAX_POSITION, PSR_ERR_POSITION_RANGE,
                "args->positions[%zu] = %lld is outside [0, 2^30)", r, (long long)h->positions[r]);
        REQUIRE(t == 0.0f || (isnormal(t) && t > 0.0f), PSR_ERR_TEMPERATURE,
                "args->temperatures[%zu] = %g is not 0 or a positive normal number", r, (double)t);
        REQUIRE(p > 0.0f && p <= 1.0f, PSR_ERR_FILTER_RANGE, "args->top_p[%zu] = %g is outside (0, 1]", r, (double)p);
        REQUIRE(m >= 0.0f && m <= 1.0f, PSR_ERR_FILTER_RANGE, "args->min_p[%zu] = %g is outside [0, 1]", r, (double)m);
    }
    return PSR_OK;
}

/* The host arrays as device buffers of the sample args a (NULL stays NULL). */
static psr_status stage_host(psr_context *ctx, const psr_sample_host_args *h, psr_sample_args *a, cl_mem *mems)
{
    cl_context cl;
    psr_status st = psr_context_cl(ctx, &cl, NULL, NULL);
    size_t rows = h->rows, elem = h->logits_dtype == PSR_DTYPE_F32 ? 4 : 2;
    size_t stride = h->row_stride ? h->row_stride : h->vocab;
    const struct {
        const void *host;
        size_t bytes;
    } in[] = {{h->logits, ((rows - 1) * stride + h->vocab) * elem}, {h->seeds, rows * 8}, {h->positions, rows * 8},
              {h->temperatures, rows * 4}, {h->top_k, rows * 4}, {h->top_p, rows * 4}, {h->min_p, rows * 4},
              {NULL, rows * (h->tokens_dtype == PSR_TOKENS_I64 ? 8 : 4)}, {NULL, rows * 4}};
    for (size_t i = 0; st == PSR_OK && i < 9; i++) {
        cl_int err = CL_SUCCESS;
        if (in[i].host || i >= 7)
            mems[i] = clCreateBuffer(cl, CL_MEM_READ_WRITE | (in[i].host ? CL_MEM_COPY_HOST_PTR : 0), in[i].bytes,
                                     (void *)in[i].host, &err);
        if (err != CL_SUCCESS)
            st = psr_fail_cl(ctx, err, "psr_mpi_sample_host: staging the host arrays");
    }
    psr_sample_args_init(a, sizeof *a);
    a->rows = a->requests = rows, a->vocab = h->vocab, a->row_stride = h->row_stride, a->logits = mems[0];
    a->logits_dtype = h->logits_dtype, a->seeds = mems[1], a->positions = mems[2], a->temperatures = mems[3];
    a->top_k = mems[4], a->top_p = mems[5], a->min_p = mems[6], a->tokens = mems[7], a->row_flags = mems[8];
    a->all_top_k = h->all_top_k, a->all_top_p = h->all_top_p, a->all_min_p = h->all_min_p;
    a->flags = h->flags, a->noise = h->noise, a->tokens_dtype = h->tokens_dtype;
    a->shard_count = h->shard_count, a->shard_index = h->shard_index;
    a->vocab_offset = h->vocab_offset, a->vocab_total = h->vocab_total, a->shard_records = NULL;
    return st;
}

/* The staged call's outputs back into the caller's arrays. */
static psr_status unstage_host(psr_context *ctx, const psr_sample_host_args *h, cl_mem *mems, cl_event ev,
                               psr_noise noise)
{
    cl_command_queue q;
    psr_status st = psr_context_cl(ctx, NULL, NULL, &q);
    uint32_t *flags = malloc(h->rows * sizeof *flags);
    REQUIRE(flags, PSR_ERR_OUT_OF_HOST_MEMORY, "psr_mpi_sample_host: no memory for the row flags");
    cl_int err = clEnqueueReadBuffer(q, mems[8], CL_TRUE, 0, h->rows * 4, flags, 1, &ev, NULL);
    if (err == CL_SUCCESS)
        err = clEnqueueReadBuffer(q, mems[7], CL_TRUE, 0, h->rows * (h->tokens_dtype == PSR_TOKENS_I64 ? 8 : 4),
                                  h->tokens, 0, NULL, NULL);
    if (st == PSR_OK && err != CL_SUCCESS)
        st = psr_fail_cl(ctx, err, "psr_mpi_sample_host: reading the tokens");
    size_t no_finite = 0;
    for (size_t r = 0; st == PSR_OK && r < h->rows; r++)
        no_finite += (flags[r] & PSR_ROW_NO_FINITE) != 0;
    if (st == PSR_OK && h->row_flags)
        memcpy(h->row_flags, flags, h->rows * sizeof *flags);
    if (st == PSR_OK && h->no_finite_rows)
        *h->no_finite_rows = no_finite;
    if (st == PSR_OK && h->effective_noise)
        *h->effective_noise = noise;
    free(flags);
    return st;
}

static psr_status host_via_device(psr_context *ctx, MPI_Comm comm, const psr_sample_host_args *h)
{
    cl_mem mems[9] = {NULL};
    psr_sample_args a;
    psr_noise noise = PSR_NOISE_FP32;
    psr_status pre = check_struct(ctx, h, sizeof *h, "psr_sample_host_args", "psr_mpi_sample_host");
    if (pre == PSR_OK)
        pre = h->tokens ? check_host_values(ctx, h) : psr_fail(ctx, PSR_ERR_NULL_ARGUMENT, "args->tokens is NULL");
    if (pre == PSR_OK)
        pre = stage_host(ctx, h, &a, mems);
    a.effective_noise = &noise;
    cl_event ev = NULL;
    psr_status st = sample_device(ctx, comm, &a, &ev, pre, pre == PSR_OK ? hash_inputs(h) : 0);
    if (st == PSR_OK)
        st = unstage_host(ctx, h, mems, ev, noise);
    if (ev)
        clReleaseEvent(ev);
    for (size_t i = 0; i < 9; i++)
        if (mems[i])
            clReleaseMemObject(mems[i]);
    return st;
}
