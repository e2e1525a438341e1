/* psr bench sample --shards N: one psr_sample call split into N
 * vocabulary shards on the same device logits, each shard writing its
 * records, then psr_combine of the records into the tokens; the shards on
 * the context's one queue, or each on a queue of its own (a psr context
 * per shard over the same cl_context), which lets the device run them at
 * once as it would shards on devices of their own. And the timing of
 * calls made in rounds across shards (psr bench logprobs and verify
 * --shards): each round's span, the app's exchange between rounds left
 * out. */
#include "bench.h"
#include "cli.h"
#include "shards.h"

#include <stdlib.h>
#include <string.h>

struct bench_shards {
    size_t count, rows;
    size_t *bounds;
    psr_sample_args *shard;   /* [count] */
    psr_combine_args combine;
    cl_mem *logits;           /* [count]: a sub-buffer per shard, or NULL (logits_offset) */
    cl_mem *records;          /* [count]: the shard's records, in `gathered` or apart */
    cl_mem gathered;          /* [count, rows] of psr_shard_record */
    bool copy;                /* the records are apart and copied into `gathered` */
    psr_context **ctx;        /* [count]: each shard's context (the caller's for shard 0) */
    cl_event *done;           /* [count]: each shard's last event, for the combine */
};

/* The device's base address alignment in bytes (at least 1). */
static size_t base_align(psr_context *ctx)
{
    cl_device_id dev = NULL;
    cl_uint bits = 8;
    clGetCommandQueueInfo(cli_queue(ctx), CL_QUEUE_DEVICE, sizeof dev, &dev, NULL);
    if (!dev || clGetDeviceInfo(dev, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof bits, &bits, NULL) != CL_SUCCESS ||
        bits < 8)
        bits = 8;
    return bits / 8;
}

/* A sub-buffer of `parent` from byte `origin`, `bytes` long, with its access. */
static cl_mem sub_buffer(cl_mem parent, size_t origin, size_t bytes, cl_int *err)
{
    cl_buffer_region region = {origin, bytes};
    return clCreateSubBuffer(parent, 0, CL_BUFFER_CREATE_TYPE_REGION, &region, err);
}

/* Shard s's logits (a sub-buffer where its first column is aligned) and
 * records (a sub-buffer of `gathered` where rows x 16 bytes is aligned). */
static cl_int make_shard(psr_context *ctx, bench_shards *b, const psr_sample_args *whole, size_t s, size_t align)
{
    size_t lo = b->bounds[s], hi = b->bounds[s + 1], stride = whole->row_stride ? whole->row_stride : whole->vocab;
    size_t es = psr_dtype_size(whole->logits_dtype), origin = (whole->logits_offset + lo) * es;
    psr_sample_args *a = &b->shard[s];
    cl_int err = CL_SUCCESS;
    *a = *whole;
    a->vocab = hi - lo, a->row_stride = stride, a->tokens = NULL, a->row_flags = NULL;
    a->shard_count = b->count, a->shard_index = s, a->vocab_offset = lo, a->vocab_total = whole->vocab;
    a->logits_offset += lo;
    if (origin % align == 0) {
        b->logits[s] = sub_buffer(whole->logits, origin, ((b->rows - 1) * stride + hi - lo) * es, &err);
        a->logits = b->logits[s], a->logits_offset = 0;
    }
    size_t rec = b->rows * sizeof(psr_shard_record);
    if (err == CL_SUCCESS)
        b->records[s] = b->copy ? clCreateBuffer(cli_cl_context(ctx), CL_MEM_READ_WRITE, rec, NULL, &err)
                                : sub_buffer(b->gathered, s * rec, rec, &err);
    a->shard_records = b->records[s];
    return err;
}

/* Shard s's own context: a new profiling queue on the caller's device
 * and cl_context. */
static psr_status shard_context(psr_context *ctx, psr_context **out)
{
    cl_context cl;
    cl_device_id dev;
    psr_status st = psr_context_cl(ctx, &cl, &dev, NULL);
    if (st != PSR_OK)
        return st;
    cl_int err = CL_SUCCESS;
    cl_command_queue q = clCreateCommandQueue(cl, dev, CL_QUEUE_PROFILING_ENABLE, &err);
    if (err != CL_SUCCESS)
        return cli_fail(PSR_ERR_OPENCL, "a shard's queue: %s (%d)", psr_cl_error_string(err), err);
    psr_context_options o;
    psr_context_options_init(&o, sizeof o);
    o.profiling = 1;
    st = psr_context_create_from_cl(cl, dev, q, &o, out);
    clReleaseCommandQueue(q); /* the context holds its own */
    if (st == PSR_OK)
        cli_optimized_builds_only(*out);
    return st;
}

psr_status bench_shards_make(psr_context *ctx, const psr_sample_args *whole, size_t count, const size_t *bounds,
                             bool own_queues, bench_shards **out)
{
    bench_shards *b = calloc(1, sizeof *b);
    size_t align = base_align(ctx), rec = whole->rows * sizeof(psr_shard_record);
    if (b) {
        b->count = count, b->rows = whole->rows;
        b->bounds = malloc((count + 1) * sizeof *bounds), b->shard = calloc(count, sizeof *b->shard);
        b->logits = calloc(count, sizeof *b->logits), b->records = calloc(count, sizeof *b->records);
        b->ctx = calloc(count, sizeof *b->ctx), b->done = calloc(count, sizeof *b->done);
    }
    *out = b;
    if (!b || !b->bounds || !b->shard || !b->logits || !b->records || !b->ctx || !b->done)
        return PSR_ERR_OUT_OF_HOST_MEMORY;
    b->ctx[0] = ctx;
    for (size_t s = 1; s < count; s++) {
        psr_status st = own_queues ? shard_context(ctx, &b->ctx[s]) : PSR_OK;
        if (st != PSR_OK)
            return st;
        if (!own_queues)
            b->ctx[s] = ctx;
    }
    memcpy(b->bounds, bounds, (count + 1) * sizeof *bounds);
    b->copy = rec % align != 0;
    cl_int err = CL_SUCCESS;
    b->gathered = clCreateBuffer(cli_cl_context(ctx), CL_MEM_READ_WRITE, count * rec, NULL, &err);
    for (size_t s = 0; s < count && err == CL_SUCCESS; s++)
        err = make_shard(ctx, b, whole, s, align);
    if (err != CL_SUCCESS)
        return cli_fail(PSR_ERR_OPENCL, "the shards' buffers: %s (%d)", psr_cl_error_string(err), err);
    psr_combine_args_init(&b->combine, sizeof b->combine);
    b->combine.rows = whole->rows, b->combine.shards = count, b->combine.records = b->gathered;
    b->combine.tokens = whole->tokens, b->combine.tokens_dtype = whole->tokens_dtype;
    return PSR_OK;
}

psr_status bench_launch_shards(psr_context *ctx, const void *args, cl_event *first, cl_event *last)
{
    const bench_shards *b = args;
    size_t rec = b->rows * sizeof(psr_shard_record);
    psr_status st = PSR_OK;
    cl_int err = CL_SUCCESS;
    *first = NULL, *last = NULL;
    size_t waits = 0;
    for (size_t s = 0; s < b->count && st == PSR_OK && err == CL_SUCCESS; s++) {
        cl_event *done = b->ctx[s] != ctx ? &b->done[waits++] : NULL;
        st = psr_sample_enqueue(b->ctx[s], &b->shard[s], s == 0 ? first : NULL, done);
        if (st == PSR_OK && b->copy) /* the records' gather, where they cannot be written in place */
            err = clEnqueueCopyBuffer(cli_queue(b->ctx[s]), b->records[s], b->gathered, 0, s * rec, rec, done ? 1 : 0,
                                      done, NULL);
    }
    if (st == PSR_OK && err != CL_SUCCESS)
        st = cli_fail(PSR_ERR_OPENCL, "copying the records: %s (%d)", psr_cl_error_string(err), err);
    psr_combine_args c = b->combine; /* the shards on other queues: waited for by event */
    c.num_events_in_wait_list = (cl_uint)waits, c.event_wait_list = waits ? b->done : NULL;
    if (st == PSR_OK) /* the context's queue is in order: the combine follows its own shards */
        st = psr_combine(ctx, &c, last);
    for (size_t i = 0; i < waits; i++)
        if (b->done[i])
            clReleaseEvent(b->done[i]), b->done[i] = NULL;
    return st;
}

void bench_shards_free(bench_shards *b)
{
    if (!b)
        return;
    for (size_t s = 0; s < b->count && b->logits && b->records; s++) {
        if (b->logits[s])
            clReleaseMemObject(b->logits[s]);
        if (b->records[s])
            clReleaseMemObject(b->records[s]);
    }
    if (b->gathered)
        clReleaseMemObject(b->gathered);
    for (size_t s = 1; s < b->count && b->ctx; s++)
        if (b->ctx[s] && b->ctx[s] != b->ctx[0]) {
            clFinish(cli_queue(b->ctx[s])); /* nothing may still use the shards' buffers */
            psr_context_free(b->ctx[s]);
        }
    free(b->bounds), free(b->shard), free(b->logits), free(b->records), free(b->ctx), free(b->done), free(b);
}

/* ---- calls in rounds across shards ---- */

void bench_keep_ends(cl_event ev, cl_event *first, cl_event *last)
{
    if (!ev)
        return;
    if (!*first) {
        *first = ev;
        clRetainEvent(ev); /* held once as first and once as last */
    } else {
        clReleaseEvent(*last);
    }
    *last = ev;
}

psr_status bench_time_rounds(psr_context *ctx, bench_round_fn round, bench_exchange_fn exchange, void *args,
                             unsigned rounds, int warmup, int iters, double *median)
{
    double *times = calloc((size_t)iters, sizeof *times);
    if (!times)
        return PSR_ERR_OUT_OF_HOST_MEMORY;
    psr_status st = PSR_OK;
    for (int i = -warmup; i < iters && st == PSR_OK; i++) {
        double sum = 0;
        for (unsigned r = 0; r < rounds && st == PSR_OK; r++) {
            cl_event first = NULL, last = NULL;
            st = round(ctx, args, r, &first, &last);
            if (st == PSR_OK && (!first || clWaitForEvents(1, &last) != CL_SUCCESS))
                st = cli_fail(PSR_ERR_OPENCL, "waiting for round %u failed", r);
            if (st == PSR_OK)
                sum += event_span_us(first, last);
            if (first)
                clReleaseEvent(first);
            if (last)
                clReleaseEvent(last);
            if (st == PSR_OK && exchange && r + 1 < rounds)
                st = exchange(ctx, args, r);
        }
        if (st == PSR_OK && i >= 0)
            times[i] = sum;
    }
    if (st == PSR_OK) {
        qsort(times, (size_t)iters, sizeof *times, cmp_double);
        *median = times[iters / 2];
    }
    free(times);
    return st;
}

psr_status bench_reduce_keys(psr_context *ctx, const cl_mem *keys, size_t count, size_t words, uint32_t *scratch)
{
    uint32_t *reduced = scratch, *mine = scratch + words;
    cl_command_queue q = cli_queue(ctx);
    cl_int err = CL_SUCCESS;
    memset(reduced, 0, words * 4);
    for (size_t s = 0; s < count && err == CL_SUCCESS; s++) {
        err = clEnqueueReadBuffer(q, keys[s], CL_TRUE, 0, words * 4, mine, 0, NULL, NULL);
        for (size_t i = 0; i < words && err == CL_SUCCESS; i++)
            reduced[i] = mine[i] > reduced[i] ? mine[i] : reduced[i];
    }
    for (size_t s = 0; s < count && err == CL_SUCCESS; s++)
        err = clEnqueueWriteBuffer(q, keys[s], CL_TRUE, 0, words * 4, reduced, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return cli_fail(PSR_ERR_OPENCL, "reducing the shards' keys: %s (%d)", psr_cl_error_string(err), err);
    return PSR_OK;
}
