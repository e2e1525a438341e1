/* The context: one device, its queue, programs, scratch and state (context.c). */
#ifndef PSR_RUNTIME_CONTEXT_H
#define PSR_RUNTIME_CONTEXT_H

#include "runtime/cache.h"
#include "runtime/status.h"
#include "runtime/tuning.h"

#include "psr_shared.h"

#include <stdbool.h>
#include <stdint.h>

/* psr_verify's launches are numbered 1 .. PSR_VERIFY_EPOCHS - 1 and then
 * again: the statistics kernel's rejection words keep the number in their
 * top 20 bits (cl/verify.cl, PSR_REJECT_BITS). */
#define PSR_VERIFY_EPOCHS (1u << 20)

/* ---- the context (context.c) ---- */

typedef struct psr_program_entry {
    char *key; /* kernel set name '|' options */
    cl_program program;
} psr_program_entry;

typedef struct psr_kernel_entry {
    unsigned variant;  /* psr_variant_code */
    const char *name;  /* a string literal */
    cl_kernel kernel;
    bool quick;        /* from a quick program (-cl-opt-disable) */
    unsigned adopted;  /* ctx->adopted when it was looked up last */
} psr_kernel_entry;

/* The background builds of a context (ops/upgrade.c). */
typedef struct psr_upgrader psr_upgrader;

/* Device scratch, grown to the largest shape seen, never shrunk. */
typedef struct psr_scratch {
    cl_mem buffer;
    size_t bytes;
} psr_scratch;

/* A split psr_split_rows_for chose, kept for the next call of the same
 * shape: choosing one walks every group count, over a microsecond of
 * host time at 128,256 tokens on a GPU. */
typedef struct psr_split_memo {
    size_t rows, vocab, resident_per_unit, min_steps; /* rows 0: unused */
    cl_uint chunk, groups;
} psr_split_memo;
#define PSR_SPLIT_MEMOS 8

/* After the tuning or the device's info change: whether the argument
 * builder checks names (the kernels are built with -cl-kernel-arg-info),
 * and the remembered splits, forgotten. */
void psr_context_options_changed(psr_context *ctx);

/* The start of a context call: a NULL ctx, then a NULL `arg` (its
 * pointer argument, `name` in the message), is PSR_ERR_NULL_ARGUMENT
 * from `call`; the second failure is also kept on ctx. */
psr_status psr_context_check_call(const psr_context *ctx, const void *arg, const char *call,
                                  const char *name);

/* Grows a scratch buffer to at least `bytes`; new memory is zero-filled
 * (enqueued, so it is ordered before the kernels that follow). */
psr_status psr_scratch_reserve(psr_context *ctx, psr_scratch *s, size_t bytes);

/* Regions of one scratch buffer, so a kernel takes one buffer argument
 * for them (on NVIDIA's driver each buffer argument adds about 0.4 us to
 * the host's enqueue). */
#define PSR_MAX_REGIONS 8
typedef struct psr_regions {
    size_t capacity[PSR_MAX_REGIONS]; /* bytes */
    size_t at[PSR_MAX_REGIONS];       /* byte offsets, multiples of 16 */
} psr_regions;

/* Room for need[i] bytes in each of the n regions of *s. Regions never
 * shrink; when one must grow the buffer is made anew and zero-filled, so
 * a region that is zero between launches is zero in the new buffer too
 * (what it held is not kept). The kernels take each region's start in
 * 32-bit counts of `unit` bytes, below 0xffffffff (kept for "none"): a
 * start past that is PSR_ERR_INVALID_ARGUMENT naming `call`. */
psr_status psr_regions_reserve(psr_context *ctx, psr_scratch *s, psr_regions *r, const size_t *need, size_t n,
                               size_t unit, const char *call);

struct psr_context {
    cl_platform_id platform;
    cl_context cl_ctx;
    cl_device_id device;
    cl_command_queue queue;
    bool device_retained; /* adopted device: released on free */
    psr_device_info info; /* capabilities already masked */
    bool host_byte_order; /* the device's byte order is the host's (shard records are read back as bytes) */
    psr_tuning tuning;

    psr_log_fn log;
    void *log_user_data;
    psr_log_level log_level;

    bool disk_enabled;  /* read binaries from cache_dir */
    bool disk_writable; /* and write new ones there */
    char cache_dir[PSR_PATH_MAX];
    psr_cache_stats stats;

    psr_program_entry *programs;
    size_t program_count;
    size_t program_capacity;
    psr_kernel_entry *kernels;
    size_t kernel_count;
    size_t kernel_capacity;
    struct psr_build_batch *builds; /* programs building on threads (build_jobs.c) */

    /* Quick builds (docs/cache.md): a call that used a quick program sets
     * quick_used; psr_context_warm sets warming, which builds optimized
     * programs only. The upgrader's hooks: adopt moves the optimized
     * programs it finished into the memory tier (counted in adopted), and
     * upgrader_free stops it. Kernels of quick programs replaced while a
     * call may hold them wait in retired until the context is freed. */
    bool quick_used;
    bool warming;
    unsigned adopted;
    psr_upgrader *upgrader;
    void (*adopt)(psr_context *ctx);
    void (*upgrader_free)(psr_context *ctx);
    cl_kernel *retired;
    size_t retired_count;

    psr_split_memo splits[PSR_SPLIT_MEMOS]; /* cleared by psr_context_options_changed */
    size_t splits_next;                     /* the entry the next new split replaces */

    psr_scratch part_value; /* per (row, work-group) best value */
    psr_scratch part_index; /* per (row, work-group) best index */
    psr_scratch best_scratch; /* one pass (cl/gumbel.cl): per row the groups that stored their best
                                 (zero between launches), then each group's best key */
    psr_regions best_scratch_regions;
    psr_scratch filter;       /* the filters' (filter.c): per row the threshold, from the start; the
                                 largest key and candidate count, and a 12-bit histogram (counts or
                                 masses), both zero between launches; candidate keys */
    psr_regions filter_regions;
    bool filter_dirty;        /* a filter launch was cut short: clear the state first */
    bool sample_dirty;        /* best_scratch's counts may hold a cut-short launch's counts (psr_context_recover) */
    bool logprobs_dirty;      /* so may psr_logprobs' row counts */
    psr_scratch verify_state; /* psr_verify's state, regions PSR_VS_* (ops/verify.c) */
    size_t verify_capacity[PSR_VS_REGIONS]; /* each region's bytes */
    cl_uint verify_at[PSR_VS_REGIONS];      /* and its offset in verify_state */
    psr_scratch logprobs;    /* psr_logprobs' per-block partials and per-row values and counts (logprobs.c) */
    /* The host-array calls' device copies of their arrays, one per array
     * of a call (ops/host_stage.c), kept and grown like the scratch: once
     * the largest call has been seen a call makes no buffer (on the H200 a
     * buffer per array per call cost more than the copies). */
#define PSR_STAGE_SLOTS 12
    psr_scratch stage[PSR_STAGE_SLOTS];
    psr_regions logprobs_regions;
    cl_mem verify_layout[3]; /* the last cu, row-to-request map and row order uploaded, and */
    int32_t *verify_cu;      /* a host copy of that cu, to reuse them when it repeats */
    size_t verify_requests;
    uint32_t verify_epoch; /* psr_verify's launch count, below PSR_VERIFY_EPOCHS (verify.c) */
    bool verify_fused_last; /* the last psr_verify ran in one launch (for tests and psr bench verify) */
    bool logprobs_one_last; /* the last psr_logprobs ran in one launch (for tests) */
    bool logprobs_few_last; /* the last psr_logprobs ran psr_logprobs_partial_few (for tests) */

    psr_fp64_policy fp64_policy;
    bool fp64_fallback_said;     /* the log has said once that fp64 became wide */
    unsigned last_sample_flags;
    bool host_served_last; /* the last psr_sample, psr_logprobs or psr_verify ran on the host (cold calls) */

    bool check_arg_names; /* built with -cl-kernel-arg-info: the argument builder checks names */
    char *build_log;
    char error[PSR_ERROR_MAX];
    cl_int cl_error;         /* the OpenCL code behind the last failure, or CL_SUCCESS */
};

#endif
