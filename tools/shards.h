/* Vocabulary shards inside one process: the --shards option of psr sample,
 * psr bench sample and psr verify unbiased (shards.c). */
#ifndef PSR_CLI_SHARDS_H
#define PSR_CLI_SHARDS_H

#include <psr/psr.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* --shards N, or N:B1,...,B(N-1) with the global ids where shards 1 .. N-1
 * start. */
typedef struct shard_spec {
    size_t count;                     /* 0: not sharded */
    size_t starts[PSR_MAX_SHARDS];    /* with explicit bounds: starts[1 ..] */
    bool explicit_bounds;
} shard_spec;

/* Parses the text of --shards into *spec: CLI_OK, or CLI_USAGE after a
 * message that names the option (`command` as in cli_usage_error). */
int shards_parse(const char *command, const char *text, shard_spec *spec);

/* The shards' bounds over `vocab` tokens: shard s is [bounds[s],
 * bounds[s + 1]), bounds[count] = vocab. Without explicit bounds the
 * first vocab % count shards are one token longer. CLI_OK, or CLI_USAGE
 * after a message naming `opt` (more shards than tokens, bounds past the
 * vocabulary). */
int shards_bounds(const char *command, const char *opt, const shard_spec *spec, size_t vocab, size_t *bounds);

/* What sharding (`opt`: "--shards", "--mpi") may not go with yet, by the
 * options' names ("--top-k"): CLI_USAGE after the message when `given`,
 * else CLI_OK. */
int shards_refuse(const char *command, const char *opt, bool given, const char *what);

/* psr_sample_host of `whole` (unsharded: rows of `vocab` logits, tokens,
 * and optionally row_flags and no_finite_rows) as `count` shards over
 * `bounds`: one sharded call per shard on its columns, then
 * psr_combine_host of the records into whole's outputs. */
psr_status shards_sample_host(psr_context *ctx, const psr_sample_host_args *whole, size_t count,
                              const size_t *bounds);

/* Does `a` ask for top-k, top-p or min-p (what psr counts as a filter)? */
bool shards_filtered(const psr_sample_host_args *a);

/* shards_sample_host with the filters: the logits and rows' inputs
 * uploaded once, the rounds of psr_shard_filter_round on every shard with
 * the partials reduced on the host between rounds, every shard's
 * psr_sample into one records buffer, then psr_combine_host. Positions
 * and temperatures are not checked on the host: check them first. */
psr_status shards_sample_filtered(psr_context *ctx, const psr_sample_host_args *whole, size_t count,
                                  const size_t *bounds);

/* --logprobs N with --shards: what to compute and where it goes on the
 * host ([rows], and [rows, top_n] for the top ids and logprobs). */
typedef struct shards_logprobs {
    int top_n;
    bool raw; /* PSR_LOGPROBS_RAW: no temperature and no filters */
    float *token_logprobs, *top_logprobs;
    int32_t *token_ranks, *top_ids;
} shards_logprobs;

/* CLI_OK when the shards' logprobs fit one exchange (the sum of
 * psr_logprobs_shard_slots over the shards at most
 * PSR_LOGPROBS_MAX_SLOTS), else CLI_USAGE after a message naming `opt`
 * ("--shards", "--mpi"). */
int shards_logprobs_fit(const char *command, const char *opt, size_t count, const size_t *bounds);

/* shards_sample_filtered, filters or not, then the tokens' logprobs in
 * the same shards on the same buffers: the three rounds of
 * psr_logprobs_shard_round on every shard, the keys reduced by maximum on
 * the host and every shard's partials written into one buffer; the
 * filters' thresholds are the ones the sampling's rounds found. The same
 * checks to make first as there. */
psr_status shards_sample_logprobs(psr_context *ctx, const psr_sample_host_args *whole, size_t count,
                                  const size_t *bounds, const shards_logprobs *lp);

/* whole's columns of shard s of `count` over `bounds` (whole: rows of
 * `vocab` logits): the logits from column bounds[s], vocab the shard's
 * width, row_stride whole's row, the shard fields; outputs as whole's. */
psr_sample_host_args shards_columns(const psr_sample_host_args *whole, size_t count, size_t s,
                                    const size_t *bounds);

/* psr_verify_host of `whole` (target rows of `vocab` logits; the draft
 * cache, if any, [requests, draft_cache_k, vocab]) as `count` shards over
 * `bounds`, on device buffers: the inputs uploaded once, each shard its
 * columns of the draft cache and its own keys, the four rounds of
 * psr_verify_shard_round on every shard (the keys reduced by maximum on
 * the host, every shard's slots and records written into one buffer each,
 * as an all-gather would leave them; round 3 on shard 0), then tokens and
 * num_sampled read back. A draft token, position or temperature the
 * device flags fails with PSR_ERR_INVALID_ARGUMENT, writing nothing. */
psr_status shards_verify_host(psr_context *ctx, const psr_verify_host_args *whole, size_t count,
                              const size_t *bounds);

/* The pieces of shards_verify_host that cli_mpi_verify shares. Device
 * buffers by index: */
enum { VB_TARGET, VB_DRAFTS, VB_SEEDS, VB_TEMPS, VB_POSITIONS, VB_TOKENS, VB_NUM, VB_STATUS, VB_BUFFERS };
/* whole's target logits from column lo to hi (every row at whole's
 * stride) and its request inputs uploaded into b, room for the outputs,
 * and *a over them with what every shard shares (vocab, target_offset,
 * draft_cache and the shard fields but vocab_total left to set). Release
 * b with cli_release_buffers either way. */
cl_int shards_verify_stage(psr_context *ctx, const psr_verify_host_args *whole, size_t lo, size_t hi, cl_mem *b,
                           psr_verify_args *a);
/* whole's draft cache, columns lo to hi, uploaded as [requests,
 * draft_cache_k, hi - lo] into *out (NULL without a cache). */
cl_int shards_verify_cache(psr_context *ctx, const psr_verify_host_args *whole, size_t lo, size_t hi, cl_mem *out);
/* After the last round: the status read back and, when the device
 * flagged nothing, the tokens and num_sampled into whole's. */
psr_status shards_verify_finish(psr_context *ctx, const psr_verify_host_args *whole, const cl_mem *b);

/* How shards_unbiased_run samples and verifies the drafts: every one of
 * `count` shards over `bounds` in this process (rank -1), or, under
 * --mpi, only this rank's shard through cli_mpi_sample and
 * cli_mpi_verify, the other ranks doing theirs. */
typedef struct shard_plan {
    size_t count;
    const size_t *bounds; /* [count + 1] */
    int rank;
} shard_plan;

/* The unbiasedness experiment (check.h's psr_unbiased_run, the same
 * requests) with every draft sampled and verified in shards as `plan`
 * says (unbiased_shards.c). */
struct psr_unbiased_result;
psr_status shards_unbiased_run(psr_context *ctx, size_t k, size_t trials, uint64_t seed, const shard_plan *plan,
                               struct psr_unbiased_result *out);

#ifdef PSR_CLI_MPI
/* The MPI side of psr sample --mpi and psr verify unbiased --mpi
 * (cli_mpi.c, built only with MPI). */

/* MPI_Init, then this process's rank and the ranks' count; CLI_FAILED
 * after the message when MPI cannot start. */
int cli_mpi_init(int *rank, int *ranks);
/* The largest of every rank's exit code so far, on every rank: a rank
 * that failed alone stops them all before any collective waits for it. */
int cli_mpi_agree(int rc);
/* psr_mpi_sample_host over MPI_COMM_WORLD. */
psr_status cli_mpi_sample(psr_context *ctx, const psr_sample_host_args *args);
/* psr_mpi_logprobs over MPI_COMM_WORLD of the tokens cli_mpi_sample just
 * drew: `mine` is this rank's call to it (its columns, the rows' inputs,
 * the filters, the tokens of every row), uploaded for the rounds; the
 * outputs in `lp` on every rank. Every rank must call it, a rank that
 * cannot upload included: they fail together. */
psr_status cli_mpi_logprobs(psr_context *ctx, const psr_sample_host_args *mine, const shards_logprobs *lp);
/* psr_mpi_verify over MPI_COMM_WORLD with this rank's shard the columns
 * lo to hi of `whole` (only those uploaded, the draft cache's included);
 * tokens and num_sampled on every rank. Every rank must call it, as
 * cli_mpi_logprobs. */
psr_status cli_mpi_verify(psr_context *ctx, const psr_verify_host_args *whole, size_t lo, size_t hi);
void cli_mpi_finalize(void);
#endif

#endif
