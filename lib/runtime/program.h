/* Kernel sets, variants and programs (kernels.c, program.c). */
#ifndef PSR_RUNTIME_PROGRAM_H
#define PSR_RUNTIME_PROGRAM_H

#include <psr/psr.h>

#include <stdbool.h>

/* ---- kernels and programs (kernels.c, program.c) ---- */

/* A kernel set is one family's kernels, one program per variant: a call
 * builds only the families it launches (docs/cache.md). */
typedef enum psr_kernel_set {
    PSR_KERNELS_STREAM = 0,   /* test only: the stream's known answers (cl/probe_stream.cl) */
    PSR_KERNELS_SAMPLE = 1,   /* the sampler (cl/gumbel.cl) */
    PSR_KERNELS_VERIFY = 2,   /* verification (cl/verify.cl) */
    PSR_KERNELS_NOISE = 3,    /* test only: noise probes and the tail census (cl/probe_noise.cl) */
    PSR_KERNELS_FILTER = 4,   /* the filters' threshold pre-pass (cl/filter.cl) */
    PSR_KERNELS_LOGPROBS = 5, /* logprobs (cl/logprobs.cl) */
    PSR_KERNEL_SET_COUNT
} psr_kernel_set;

typedef struct psr_variant {
    psr_kernel_set set;
    bool drafting;     /* IS_DRAFTING */
    bool fp64;         /* USE_FP64 */
    bool wide;         /* USE_WIDE (sets that draw noise) */
    int method;        /* PSR_METHOD: 0 Gumbel, 1 race over logits, 2 race over probabilities */
    psr_dtype dtype;   /* PSR_LOGIT_DTYPE (sets that read logits) */
    bool fast_math;    /* PSR_DETERMINISTIC=0 */
    bool filtered;     /* PSR_FILTERS=1: the sampler applies filter thresholds (built on demand) */
    const char *kernel; /* NULL: every kernel of the set; else this one alone (-DPSR_ONLY_<kernel>) */
} psr_variant;

/* The variant of a set that resolved PSR_SAMPLE_* flags select (normal). */
psr_variant psr_variant_of(psr_kernel_set set, unsigned flags, psr_dtype dtype);
/* The variant with the fields its set does not read cleared: two
 * variants build the same program exactly when their normal forms match. */
psr_variant psr_variant_normal(const psr_variant *v);
/* A short name for logs and progress: "sample f16 fp64 drafting". */
void psr_variant_name(const psr_variant *v, char *buf, size_t len);
/* Does the set read logits or compute noise (dtype, math mode, method)? */
bool psr_kernel_set_uses_logits(psr_kernel_set set);
/* A small integer naming a variant, for the kernel-object cache. */
unsigned psr_variant_code(const psr_variant *v);
/* Builds or loads every variant of the sets in set_mask (bit i: set i),
 * each program once; *variants (may be NULL) receives how many programs
 * (the tests warm the stream set; psr_context_warm takes warm variants). */
psr_status psr_warm_sets(psr_context *ctx, unsigned set_mask, size_t *variants);
/* The variant whose program holds kernel `name`: the family's program
 * where the driver compiles at first launch (PoCL), else one of that
 * kernel alone. */
psr_variant psr_variant_for_kernel(const psr_context *ctx, const psr_variant *v, const char *name);
/* Returns a kernel of a variant, created once per context and cached. */
psr_status psr_kernel_get(psr_context *ctx, const psr_variant *v, const char *name, cl_kernel *out);

const char *psr_kernel_set_name(psr_kernel_set set);
/* The full OpenCL C source of a kernel set (embedded Random123 included).
 * Malloc'ed; the caller frees it. NULL when out of memory. */
char *psr_kernel_source(psr_kernel_set set);
/* Canonical build options of a variant on this context's device. */
void psr_build_options(const psr_context *ctx, const psr_variant *v, char *buf, size_t len);

/* Returns the program of a variant: memory tier, then disk tier, then a
 * build from source. The context owns the program. Where the tuning has
 * quick builds and the optimized program is not in the memory tier, a
 * quick one (-cl-opt-disable) instead, and *quick (may be NULL) is true
 * (docs/cache.md). */
psr_status psr_program_get(psr_context *ctx, const psr_variant *v, cl_program *out);
psr_status psr_program_get_tier(psr_context *ctx, const psr_variant *v, cl_program *out, bool *quick);
/* Is the program of a variant at hand without a build: in the memory
 * tier (optimized, or quick where the tuning has quick builds) or a file
 * of the disk tier? (Background programs finished are adopted first.) */
bool psr_program_ready(psr_context *ctx, const psr_variant *v);
/* Puts a program under its memory-tier key (set '|' options) unless the
 * key is there; the context takes the reference. */
psr_status psr_program_remember(psr_context *ctx, const char *mem_key, cl_program p);
/* A monotonic clock in seconds, for build times. */
double psr_seconds(void);
/* Names the programs of variants a call or a warm is about to look up, so
 * that those the tiers lack build side by side on threads (at most the
 * tuning's build_threads) while the caller goes on; each lookup then takes
 * its build (docs/cache.md). Fewer than two such programs: nothing is
 * started. Failures to start count as nothing started. */
void psr_program_prefetch(psr_context *ctx, const psr_variant *v, size_t n);
/* psr_program_prefetch of the programs that hold kernels names[i] of
 * variants v[i], unless the first of them is already in the kernel cache
 * (a call's later lookups then are too: the cost on every call is one
 * lookup). */
void psr_kernels_prefetch(psr_context *ctx, const psr_variant *v, const char *const *names, size_t n);

/* ---- builds on threads (build_jobs.c) ---- */

typedef struct psr_build_batch psr_build_batch;
typedef struct psr_build_request {
    psr_kernel_set set;
    const char *options;
} psr_build_request;
typedef struct psr_build_result {
    cl_program program; /* on failure kept for its log; the taker releases it */
    cl_int err;
    double seconds;
} psr_build_result;
/* Starts building the sources of the requests on threads; the context
 * keeps the batch until every result is taken or the context is freed.
 * false: out of memory, nothing started. */
bool psr_build_jobs_start(psr_context *ctx, const psr_build_request *requests, size_t count);
/* Is a build of (set, options) started and not yet taken? */
bool psr_build_jobs_pending(const psr_context *ctx, psr_kernel_set set, const char *options);
/* Takes the build of (set, options) when one was started: waits for it
 * (builds it on the calling thread if no worker has begun it). */
bool psr_build_jobs_take(psr_context *ctx, psr_kernel_set set, const char *options, psr_build_result *out);
/* Stops the threads after their running builds; releases what nobody took. */
void psr_build_jobs_free(psr_context *ctx);

/* clCreateProgramWithSource and clBuildProgram, touching no psr state (the
 * build threads call it): the CL status; *out NULL when the create failed,
 * else the program (with its log when the build failed). */
cl_int psr_cl_build(cl_context cl_ctx, cl_device_id device, const char *source, const char *options,
                    cl_program *out);
/* Builds arbitrary source with options, bypassing both cache tiers (used
 * by psr_program_get and by tests). The caller releases the program. */
psr_status psr_program_build_source(psr_context *ctx, const char *label, const char *source,
                                    const char *options, cl_program *out);

#endif
