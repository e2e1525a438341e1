/* psr_mpi.h: vocabulary-sharded sampling, logprobs and verification across
 * the ranks of an MPI communicator (libpsr-mpi, built where MPI is found;
 * pkg-config psr-mpi).
 *
 * Each rank holds the same rows' logits for its own slice of the
 * vocabulary, samples it (psr_sample with the shard fields), and the
 * ranks exchange 16 bytes per row (psr_shard_record) instead of the
 * logits; every rank then holds the tokens the unsharded call gives.
 * docs/sharded.md has the rounds and the layout.
 *
 * Rounds: each rank samples its shard into records, then one
 * MPI_Allgather of a fixed-size header per rank (its status, rows,
 * vocab_offset, vocab, vocab_total, flags, the noise it sampled with and,
 * for the host call, a hash of the seeds, positions and temperatures),
 * from which every rank reaches the same verdict; then, only when it is
 * good, one MPI_Allgather of the records (16 bytes per row per rank); then
 * each rank combines them on its own.
 *
 * Filters (top-k, top-p, min-p): before its shard is sampled, every
 * rank runs the threshold rounds of psr_shard_filter_round, each
 * partial reduced with MPI_Allreduce (round 0 MPI_MAX, the others
 * MPI_SUM on MPI_UINT64_T, 2 KB per row), after an MPI_Allgather in which
 * the ranks agree on their status and number of rounds and, each round,
 * an MPI_Allreduce of a failure flag, so that all stop together. The
 * filter values must be the same on every rank (they are not compared).
 * The host call stages its arrays on the device for them.
 *
 * Errors: every rank first samples its shard, then all ranks exchange
 * their status and shard description, so a rank that fails on its own
 * input still takes part and no rank waits for it. A rank whose own call
 * failed returns that status; the others return PSR_ERR_COLLECTIVE naming
 * the failing rank. Shards that overlap, leave a gap, disagree on
 * vocab_total, rows, flags, the noise sampled with (a device without fp64
 * falls back to wide noise) or, for the host call, the seeds, positions
 * or temperatures give PSR_ERR_SHARD_MISMATCH on every rank. A failing
 * MPI call gives PSR_ERR_COLLECTIVE where the communicator's error
 * handler returns errors (MPI_ERRORS_RETURN); with MPI's default handler
 * MPI itself aborts the job. comm MPI_COMM_NULL, or more than
 * PSR_MAX_SHARDS ranks, fails before any round. Outputs are written only
 * on success. Every rank of comm must make the same call (host or
 * device) at the same point, as for any collective.
 */
#ifndef PSR_MPI_H
#define PSR_MPI_H

#include <mpi.h>
#include <psr/psr.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Blocking. `args` is this rank's shard as for psr_sample_host
 * (vocab_offset, vocab and vocab_total; `logits` holds this shard's
 * columns), with `tokens` (and optionally row_flags, no_finite_rows and
 * effective_noise) the output of the whole vocabulary, written on every
 * rank, and shard_records NULL. shard_count and shard_index may be left
 * 0: they are the communicator's size and this rank's rank, and must be
 * those where set. args->struct_size must be this library's
 * sizeof(psr_sample_host_args). */
PSR_API psr_status psr_mpi_sample_host(psr_context *ctx, MPI_Comm comm, const psr_sample_host_args *args);

/* The same on device buffers: args as for psr_sample with `tokens` (and
 * optionally row_flags) the output and shard_records NULL. Waits for the
 * shard's sampling, exchanges the records through host memory and
 * enqueues psr_combine; *event (may be NULL) is the combine's. The sizes
 * of tokens and row_flags are checked before the rounds; a device failure
 * of the combine itself (after them) is this rank's alone. */
PSR_API psr_status psr_mpi_sample(psr_context *ctx, MPI_Comm comm, const psr_sample_args *args, cl_event *event);
/* Logprobs of the sampled tokens across the ranks' shards (added in
 * 0.3): args as for psr_logprobs, with this rank's shard in vocab,
 * vocab_offset and vocab_total (`logits` holds its columns), the same
 * global `tokens` on every rank, and the outputs written on every rank.
 * shard_count and shard_index as for psr_mpi_sample; shard_slot,
 * shard_slots, shard_token_keys, shard_partials and shard_filter_state
 * stay unset: the call makes its own. Rounds: the headers (as above, with
 * top_n and a hash of the tokens, which must agree); the filters' rounds
 * where it has filters; then psr_logprobs_shard_round's: the keys reduced
 * by MPI_Allreduce (MPI_MAX on MPI_UINT32_T, 4 bytes per row), each
 * rank's slots gathered by MPI_Allgatherv (rows x (12 + 8 top_n) bytes per
 * 16,384 tokens of its shard), each after the ranks agree that all got
 * there. Shards starting on multiples of 16,384 tokens give the bits of
 * the unsharded psr_logprobs. Waits for the wait list and the rounds;
 * *event (may be NULL) is the last round's. */
PSR_API psr_status psr_mpi_logprobs(psr_context *ctx, MPI_Comm comm, const psr_logprobs_args *args,
                                   cl_event *event);
/* Verification of speculative drafts across the ranks' shards (added in
 * 0.3): args as for psr_verify, with this rank's shard in vocab,
 * vocab_offset and vocab_total (target_logits and draft_cache hold its
 * columns), the same cu, draft tokens, seeds, temperatures and positions
 * on every rank, and tokens, num_sampled and status written on every
 * rank. shard_count and shard_index as for psr_mpi_sample; shard_slot,
 * shard_slots, shard_keys, shard_partials and shard_records stay unset.
 * Rounds: the headers (with max_drafts, the method and a hash of the
 * request inputs, which must agree); then psr_verify_shard_round's: the
 * keys reduced by MPI_Allreduce (MPI_MAX on MPI_UINT32_T, 8 bytes per row),
 * the slots gathered by MPI_Allgatherv (24 bytes per row per 16,384 tokens
 * of a shard), the records by MPI_Allgatherv (16 bytes per request per
 * rank), each after the ranks agree that all got there. Shards starting on
 * multiples of 16,384 tokens give the tokens of the unsharded psr_verify.
 * Waits for the wait list and the rounds; *event (may be NULL) is the last
 * round's. */
PSR_API psr_status psr_mpi_verify(psr_context *ctx, MPI_Comm comm, const psr_verify_args *args, cl_event *event);

#ifdef __cplusplus
}
#endif

#endif
