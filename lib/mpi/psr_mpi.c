/* The MPI adapter (include/psr/psr_mpi.h). Each rank samples its shard
 * into records, then two rounds: every rank's header (its status and
 * shard description), which every rank judges the same way, and, when
 * the shards fit together, every rank's records; each rank then combines
 * them into its own tokens. The header round always happens, so a rank
 * that fails on its own input never leaves the others waiting. */
#include "mpi/rounds.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* This rank's own checks of what the inner call does not see, its shard
 * fields from the communicator, and the records' memory (allocated before
 * any round, so no rank fails between rounds). */
static psr_status call_prepare(mpi_call *c, const shard_fields *f)
{
    psr_context *ctx = c->ctx;
    size_t size = (size_t)c->size;
    REQUIRE(!f->has_records, PSR_ERR_INVALID_ARGUMENT,
            "args->shard_records is set: the MPI call gathers the records itself");
    REQUIRE(f->has_tokens, PSR_ERR_NULL_ARGUMENT, "args->tokens is NULL");
    REQUIRE((unsigned)f->tokens_dtype <= PSR_TOKENS_I64, PSR_ERR_INVALID_ARGUMENT,
            "args->tokens_dtype %d is not a psr_token_dtype", (int)f->tokens_dtype);
    REQUIRE(f->rows > 0, PSR_ERR_INVALID_ARGUMENT, "args->rows is 0");
    REQUIRE(f->rows <= UINT32_MAX / PSR_MAX_SHARDS, PSR_ERR_INVALID_ARGUMENT, "args->rows %zu is too large",
            f->rows);
    psr_status st = psrmpi_take_shard(c, f->shard_count, f->shard_index);
    if (st != PSR_OK)
        return st;
    c->rows = f->rows;
    c->records = calloc(1, size * f->rows * sizeof(psr_shard_record) + f->rows * sizeof(uint32_t));
    REQUIRE(c->records, PSR_ERR_OUT_OF_HOST_MEMORY, "cannot allocate %zu ranks' records of %zu rows", size,
            f->rows);
    c->flags = (uint32_t *)(c->records + size * f->rows);
    return PSR_OK;
}

/* The two rounds. Every rank reaches the same verdict from the same
 * headers, so either all take part in the records round or none does. */
static psr_status call_exchange(mpi_call *c)
{
    psr_status st = psrmpi_exchange_headers(c);
    if (st != PSR_OK)
        return st;
    int rc;
    rc = MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, c->records, (int)(c->rows * sizeof *c->records),
                       MPI_BYTE, c->comm);
    return rc == MPI_SUCCESS ? PSR_OK : psrmpi_fail(c->ctx, rc, "MPI_Allgather of the shard records");
}

/* What every rank's host call must share: its seeds, positions and temperatures. */
static uint64_t hash_inputs(const psr_sample_host_args *a)
{
    uint64_t h = psrmpi_hash(0xcbf29ce484222325u, a->seeds, a->rows * sizeof *a->seeds);
    h = psrmpi_hash(h, a->positions, a->rows * sizeof *a->positions);
    return psrmpi_hash(h, a->temperatures, a->rows * sizeof *a->temperatures);
}

/* The header of a shard sampled (or refused) with status st. */
static void set_header(mpi_call *c, psr_status st, unsigned flags, psr_noise noise, size_t offset, size_t vocab,
                       size_t total)
{
    c->mine.status = st, c->mine.flags = flags, c->mine.noise = (int32_t)noise;
    c->mine.rows = c->rows, c->mine.vocab_offset = offset, c->mine.vocab = vocab, c->mine.vocab_total = total;
}

/* This rank's shard on host arrays, into its place in c->records. */
static psr_status host_shard(mpi_call *c, const psr_sample_host_args *args, psr_sample_host_args *a,
                             psr_noise *noise)
{
    psr_context *ctx = c->ctx;
    if (!ctx) /* psr_sample_host records the message where psr_last_error(NULL) finds it */
        return psr_sample_host(NULL, args);
    psr_status st = psrmpi_check_struct(ctx, args, sizeof *a, "psr_sample_host_args", "psr_mpi_sample_host");
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
    psr_status st = psrmpi_begin(&c, ctx, comm);
    if (st != PSR_OK)
        return st;
    c.inputs_what = "args->seeds, positions or temperatures";
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

/* This rank's checks and buffers for its shard on the device. */
static psr_status device_prepare(mpi_call *c, const psr_sample_args *args, psr_sample_args *a, device_call *d,
                                 psr_noise *noise)
{
    psr_context *ctx = c->ctx;
    if (!ctx)
        return psr_sample(NULL, args, NULL);
    psr_status st = psrmpi_check_struct(ctx, args, sizeof *a, "psr_sample_args", "psr_mpi_sample");
    if (st != PSR_OK)
        return st;
    *a = *args;
    const shard_fields f = {&a->shard_count, &a->shard_index, a->rows, a->shard_records != NULL, a->tokens != NULL,
                            a->tokens_dtype};
    st = call_prepare(c, &f);
    size_t bytes = c->rows * sizeof(psr_shard_record);
    if (st == PSR_OK)
        st = psrmpi_check_size(ctx, a->tokens, c->rows * (a->tokens_dtype == PSR_TOKENS_I64 ? 8 : 4), "args->tokens");
    if (st == PSR_OK)
        st = psrmpi_check_size(ctx, a->row_flags, c->rows * 4, "args->row_flags");
    if (st == PSR_OK)
        st = psr_context_cl(ctx, &d->cl_ctx, NULL, &d->queue);
    if (st == PSR_OK)
        st = psrmpi_buffer(ctx, d, bytes, &d->own, "the shard records");
    if (st == PSR_OK)
        st = psrmpi_buffer(ctx, d, bytes * (size_t)c->size, &d->all, "the gathered records");
    a->tokens = NULL, a->row_flags = NULL, a->shard_records = d->own, a->effective_noise = noise;
    return st == PSR_OK ? psrmpi_filter_prepare(c, a, d) : st;
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
    psr_status st = psrmpi_begin(&c, ctx, comm);
    if (st != PSR_OK)
        return st;
    c.mine.inputs = inputs;
    c.inputs_what = "args->seeds, positions or temperatures";
    psr_sample_args a;
    memset(&a, 0, sizeof a);
    psr_noise noise = PSR_NOISE_FP32;
    device_call d;
    memset(&d, 0, sizeof d);
    st = pre != PSR_OK ? pre : device_prepare(&c, args, &a, &d, &noise);
    st = psrmpi_filter_rounds(&c, &a, &d, st);
    if (st == PSR_OK)
        st = device_shard(&c, &a, &d);
    set_header(&c, st, a.flags, noise, a.vocab_offset, a.vocab, a.vocab_total);
    st = call_exchange(&c);
    if (st == PSR_OK)
        st = device_combine(&c, args, &d, event);
    if (st == PSR_OK && args->effective_noise)
        *args->effective_noise = noise;
    psrmpi_device_free(&d);
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
    psr_status pre = psrmpi_check_struct(ctx, h, sizeof *h, "psr_sample_host_args", "psr_mpi_sample_host");
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
