/*
 * psr — experimental interface.
 *
 * Calls that psr's own tools (the CLI, the benches, the tests) need and
 * that an engine may find useful, without the promise of psr.h: anything
 * here may change or go in any release, and a library that changes it
 * keeps its soname. Link the same version of libpsr that you compiled
 * against.
 */
#ifndef PSR_EXPERIMENTAL_H
#define PSR_EXPERIMENTAL_H

#include <psr/psr.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ */
/* Launch ends, for timing                                              */
/* ------------------------------------------------------------------ */

/* psr_sample and psr_verify with both ends of the launch exposed: *first
 * is the first kernel's event, *last the last kernel's (the same event
 * when one kernel ran). Either may be NULL; the caller releases what it
 * receives. With a profiling queue, first's start to last's end is the
 * call's device time. */
PSR_API psr_status psr_sample_enqueue(psr_context *ctx, const psr_sample_args *args, cl_event *first,
                                      cl_event *last);
PSR_API psr_status psr_verify_enqueue(psr_context *ctx, const psr_verify_args *args, cl_event *first,
                                      cl_event *last);

/* Which path the context's last calls took. */
typedef struct psr_last_paths {
    int verify_one_launch;   /* the last psr_verify ran as one kernel */
    int logprobs_one_launch; /* the last psr_logprobs ran as one kernel */
    int logprobs_few_blocks; /* the last psr_logprobs took the few-blocks partial */
    int host_served;         /* the last psr_sample, psr_logprobs or psr_verify ran on the host while its
                                programs built (psr_tuning.host_cold_elements) */
} psr_last_paths;
PSR_API psr_status psr_context_last_paths(const psr_context *ctx, psr_last_paths *out);

/* ------------------------------------------------------------------ */
/* Tuning                                                              */
/* ------------------------------------------------------------------ */

/* A device's tuning: one set of named values per kernel family, each
 * from the first row of that family's table that matches the device (a
 * row may name a vendor, a device type and a device-name substring; rows
 * run from vendor and type, through type alone, to a default row), then
 * changed by the PSR_TUNE_* variables when a context is created
 * (docs/devices.md lists them). `rule` names the row. */
typedef struct psr_tuning_sample {
    const char *rule;
    size_t work_group_size;   /* work-items per group of the sampling kernels (PSR_TUNE_WG) */
    size_t resident_per_unit; /* groups one compute unit runs at once (PSR_TUNE_RESIDENT) */
    unsigned vector_width;    /* lanes per work-item of the vector path; 0: off (PSR_TUNE_VECTOR) */
    unsigned min_steps;       /* steps of tokens a group takes at least (PSR_TUNE_MIN_STEPS) */
    int two_pass;             /* rows always finish in a second kernel (PSR_TUNE_TWO_PASS) */
    int mulhi;                /* Random123 multiplies through mul_hi (PSR_TUNE_MULHI); 2: and the
                                 tokens' words through PTX's mul.wide (NVIDIA GPUs only) */
} psr_tuning_sample;

typedef struct psr_tuning_verify {
    const char *rule;
    size_t resident_per_unit; /* groups of the verification sampler per compute unit (PSR_TUNE_RESIDENT) */
    size_t skip_groups;       /* rows past a rejection are skipped above this many groups (PSR_TUNE_VERIFY_SKIP) */
    size_t fused_groups;      /* one launch up to this many groups; 0: never (PSR_TUNE_VERIFY_FUSED) */
    int fused_broken;         /* the driver miscompiles the one-launch kernel: never use it */
    int warp_shuffle;         /* NVIDIA warp shuffles in the log-sum-exp tree (PSR_TUNE_SHUFFLE) */
} psr_tuning_verify;

typedef struct psr_tuning_logprobs {
    const char *rule;
    int segment_tau;     /* bound a block's top-N from segment maxima first */
    size_t one_blocks;   /* one launch up to this many blocks; 0: never (PSR_TUNE_LOGPROBS_ONE) */
    size_t few_blocks;   /* the few-blocks partial up to this many blocks; 0: never (PSR_TUNE_LOGPROBS_FEW) */
} psr_tuning_logprobs;

typedef struct psr_tuning_filter {
    const char *rule;
    size_t direct_max; /* rows whose kept tokens fit a list this long are drawn by the filter (PSR_TUNE_FILTER_DIRECT) */
} psr_tuning_filter;

typedef struct psr_tuning {
    psr_tuning_sample sample;
    psr_tuning_verify verify;
    psr_tuning_logprobs logprobs;
    psr_tuning_filter filter;
    int driver_caches;        /* the driver caches its own builds, so psr's disk tier is off by default */
    int one_kernel_programs;  /* a program per kernel instead of per kernel family: on where the
                                 driver compiles a whole program at its build, off on PoCL */
    int quick_builds;         /* a variant's first calls run unoptimized builds (-cl-opt-disable,
                                 the same bits) while the optimized ones compile in the
                                 background; on by default on PoCL only (PSR_TUNE_QUICK_BUILDS; docs/cache.md) */
    char extra_options[256];  /* appended to every build (PSR_TUNE_BUILD_OPTIONS), or "" */
    unsigned build_threads;   /* programs a call or a warm builds at once, on threads; 1: one after
                                 another (PSR_TUNE_BUILD_THREADS; docs/cache.md) */
    size_t host_cold_elements; /* a psr_sample, psr_logprobs or psr_verify whose programs are
                                  not built yet, with at most this many rows x row_stride, runs
                                  on the host (the same bits) while they build in the
                                  background; 0: never (PSR_TUNE_HOST_COLD; docs/cache.md) */
} psr_tuning;

/* The table's tuning of a device, before any PSR_TUNE_* variable. */
PSR_API psr_status psr_device_tuning(const psr_device_info *info, psr_tuning *out);
/* The tuning a context runs with (the table's, after PSR_TUNE_*). */
PSR_API psr_status psr_context_tuning(const psr_context *ctx, psr_tuning *out);
/* Replaces a context's tuning, for experiments and tests. Values that
 * change how kernels are built (work-group size, vector width, mul_hi,
 * segment bound, warp shuffles, extra options) may change only before
 * the context's first build: PSR_ERR_INVALID_ARGUMENT after it. Refused
 * too: a work-group size that is not a power of two from 16 up to the
 * device's largest, a vector width other than 0 or 16, and a zero
 * resident or step count. */
PSR_API psr_status psr_context_set_tuning(psr_context *ctx, const psr_tuning *tuning);
/* Appends -D options to every build of this context; only before its
 * first build (the unbiasedness control builds without the draft salt). */
PSR_API psr_status psr_context_add_build_options(psr_context *ctx, const char *options);

/* One PSR_TUNE_* variable: its name, what it sets and its bounds. */
typedef struct psr_tuning_variable {
    const char *name;  /* "PSR_TUNE_WG" */
    const char *field; /* "sample.work_group_size" */
    const char *range; /* "16 .. the device's maximum, a power of two" */
} psr_tuning_variable;
/* The PSR_TUNE_* variables psr reads, by index from 0; NULL past the last. */
PSR_API const psr_tuning_variable *psr_tuning_variable_at(size_t index);

/* ------------------------------------------------------------------ */
/* Small helpers                                                       */
/* ------------------------------------------------------------------ */

/* PSR_CACHE=1 (on, yes, true): the disk tier even where the driver caches its own builds. */
PSR_API int psr_cache_env_forced(void);

/* What a lookup makes of a binary in a cache directory (docs/cache.md). */
typedef enum psr_cache_entry_state {
    PSR_CACHE_ENTRY_LOADS = 0,      /* loaded */
    PSR_CACHE_ENTRY_INVALID = 1,    /* damaged, foreign or not psr's: discarded and rebuilt */
    PSR_CACHE_ENTRY_UNREADABLE = 2, /* cannot be read: rebuilt, and replaced */
    PSR_CACHE_ENTRY_IGNORED = 3,    /* not a regular file of this user that only it can write:
                                       never loaded; rebuilt, and replaced when this user's */
    PSR_CACHE_ENTRY_ON_TRIAL = 4,   /* a process died while its driver loaded it: discarded
                                       and rebuilt */
    PSR_CACHE_ENTRY_DIRECTORY = 5,  /* the directory is not this user's alone: the disk tier is off */
    PSR_CACHE_ENTRY_MISSING = 6     /* no such file (any more) */
} psr_cache_entry_state;
/* The state of the binary `file` (a name psr_cache_list gives) in dir
 * (NULL: psr_cache_directory()), and why in reason ("" when it loads;
 * capacity bytes, reason may be NULL when capacity is 0). */
PSR_API psr_status psr_cache_entry_check(const char *dir, const char *file,
                                         psr_cache_entry_state *state, char *reason,
                                         size_t capacity);
/* The name of an OpenCL error code ("CL_OUT_OF_RESOURCES"), or "unknown". */
PSR_API const char *psr_cl_error_string(cl_int err);
/* Bytes of one logit of a dtype. */
PSR_API size_t psr_dtype_size(psr_dtype dtype);

#ifdef __cplusplus
}
#endif

#endif
