/* What the MPI adapter's calls share (lib/mpi): the headers every rank
 * judges the same way, the buffers of a device call, and the filters'
 * rounds. A failure that only some ranks meet is always carried into the
 * next collective, never returned early, so no rank is left waiting. */
#ifndef PSR_MPI_ROUNDS_H
#define PSR_MPI_ROUNDS_H

#include <psr/psr_mpi.h>

#include "runtime/status.h"

#include <stdbool.h>
#include <stdint.h>

/* What each rank tells the others about its shard (after sampling it,
 * or before the logprobs' rounds). Sent as bytes: every rank runs this
 * same library. */
typedef struct shard_header {
    int32_t status;   /* psr_status of this rank's own part */
    int32_t noise;    /* the noise the shard was sampled with, after the fp64 policy (logprobs: 0) */
    uint32_t flags;   /* PSR_SAMPLE_* or PSR_LOGPROBS_* */
    uint32_t shape;   /* logprobs: top_n; verification: max_drafts; sampling: 0 */
    uint64_t rows, vocab_offset, vocab, vocab_total;
    uint64_t inputs;  /* hash of inputs every rank must share (mpi_call.inputs_what), or 0 */
} shard_header;

/* One call on this rank. */
typedef struct mpi_call {
    psr_context *ctx;
    MPI_Comm comm;
    int size, rank;
    size_t rows;
    const char *inputs_what; /* what shard_header.inputs hashes, for the message */
    const char *shape_what;  /* what shard_header.shape holds, for the message */
    shard_header mine;
    shard_header all[PSR_MAX_SHARDS];
    psr_shard_record *records; /* [size, rows]: this rank's at rank * rows, then every rank's */
    uint32_t *flags;           /* [rows]: the combined rows' flags */
} mpi_call;

/* This device call's OpenCL objects. */
typedef struct device_call {
    cl_context cl_ctx;
    cl_command_queue queue;
    cl_mem own, all; /* records: this shard's [rows]; every shard's [size, rows] */
    cl_mem state, partial, reduced; /* filters across shards (psrmpi_filter_rounds) */
    size_t rounds;
    uint64_t *words; /* host copies of a round's partial, then of the reduction */
} device_call;

/* PSR_ERR_COLLECTIVE for a failed MPI call rc, with MPI's words. */
psr_status psrmpi_fail(psr_context *ctx, int rc, const char *what);
/* The communicator's size and this rank into a fresh c. */
psr_status psrmpi_begin(mpi_call *c, psr_context *ctx, MPI_Comm comm);
/* The verdicts on c->all (the gathered headers), the same on every rank:
 * the first failing rank; what must agree (rows, vocab_total, flags,
 * top_n, noise, inputs); shards that tile [0, vocab_total). */
psr_status psrmpi_judge_status(const mpi_call *c);
psr_status psrmpi_judge_agreement(const mpi_call *c);
psr_status psrmpi_judge_tiling(const mpi_call *c);
/* c->mine gathered into c->all, then the three verdicts. */
psr_status psrmpi_exchange_headers(mpi_call *c);
/* Every rank's status st, reduced: st where this rank failed, else
 * PSR_ERR_COLLECTIVE naming the lowest rank that did (`what`: the step). */
psr_status psrmpi_agree(mpi_call *c, psr_status st, const char *what);
/* After a round that wrote this rank's part of device buffer m (st its
 * status, done its event, released here): every rank's parts, through
 * host memory `host` of `total` bytes. reduce: the whole buffer, uint32
 * words reduced by MPI_MAX; else each rank's part (counts[r] bytes at
 * displs[r]) gathered by MPI_Allgatherv. The ranks first agree that all
 * got there; m then holds the result. */
psr_status psrmpi_round_exchange(mpi_call *c, cl_command_queue q, psr_status st, cl_event done, cl_mem m, void *host,
                                 size_t total, bool reduce, const int *counts, const int *displs, const char *what);
/* The caller's shard_count and shard_index: 0 (then the communicator's
 * size and this rank are filled in) or those. */
psr_status psrmpi_take_shard(mpi_call *c, size_t *shard_count, size_t *shard_index);
/* Every rank's slots (psr_logprobs_shard_slots of its vocab), ranks
 * ordered by vocab_offset as the headers agree: counts[r] and displs[r]
 * in bytes of slot_bytes a slot, this rank's first slot in *first and all
 * ranks' in *total. Fails where the bytes pass what MPI's int counts hold
 * (the same verdict on every rank). */
psr_status psrmpi_place_slots(const mpi_call *c, size_t slot_bytes, int *counts, int *displs, size_t *first,
                              size_t *total);
/* FNV-1a over bytes, continuing from h. */
uint64_t psrmpi_hash(uint64_t h, const void *p, size_t n);
/* The caller's args struct must be exactly this library's size: the
 * calls copy it whole. */
psr_status psrmpi_check_struct(psr_context *ctx, const void *args, size_t own, const char *type, const char *call);
/* Fails unless buffer m (when set) holds `need` bytes. */
psr_status psrmpi_check_size(psr_context *ctx, cl_mem m, size_t need, const char *name);
void psrmpi_device_free(device_call *d);
/* A device buffer of the call, or the failure. */
psr_status psrmpi_buffer(psr_context *ctx, const device_call *d, size_t bytes, cl_mem *out, const char *what);
/* The filters' rounds of a sharded call whose sample args are a: their
 * state and buffers (a->shard_filter_state set), before any collective;
 * then the rounds themselves, with st this rank's status so far. */
psr_status psrmpi_filter_prepare(mpi_call *c, psr_sample_args *a, device_call *d);
psr_status psrmpi_filter_rounds(mpi_call *c, const psr_sample_args *a, device_call *d, psr_status st);

#endif
