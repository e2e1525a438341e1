/*
 * psr — portable sampling runtime.
 *
 * The whole public C API. psr samples LLM tokens on any OpenCL device and
 * draws the same random numbers as vLLM's GPU sampler (docs/stream.md).
 *
 * Conventions
 *  - Every call returns a psr_status; psr_status_string() names it and
 *    psr_last_error() gives the detail of the last failure.
 *  - Handles are opaque. psr_context_free() accepts NULL.
 *  - The library never prints. It reports through the optional log callback
 *    of psr_context_options.
 *  - Threads: a psr_context is NOT thread-safe. Use one context per thread,
 *    or guard each context with your own lock. Functions that take no
 *    context (device discovery, cache listing) are safe to call from any
 *    thread; their error detail is kept per thread.
 */
#ifndef PSR_H
#define PSR_H

/* The OpenCL headers are configured by the application (its own
 * CL_TARGET_OPENCL_VERSION, or the headers' default); psr needs only the
 * OpenCL 1.2 types and builds itself with its own setting. */
#if defined(__APPLE__) && !defined(PSR_USE_CL_CL_H)
#include <OpenCL/opencl.h>
#else
#include <CL/cl.h>
#endif
#include <stddef.h>
#include <stdint.h>

#include <psr/psr_version.h>

#if defined(PSR_BUILDING_LIBRARY) && defined(__GNUC__)
#define PSR_API __attribute__((visibility("default")))
#else
#define PSR_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* One device, one queue, its programs and caches. */
typedef struct psr_context psr_context;

/* ------------------------------------------------------------------ */
/* Status codes. The numbers are stable: they are never reused or      */
/* renumbered, new codes are only appended.                            */
/* ------------------------------------------------------------------ */
typedef enum psr_status {
    PSR_OK = 0,
    PSR_ERR_NULL_ARGUMENT = 1,     /* a required pointer or handle is NULL */
    PSR_ERR_INVALID_ARGUMENT = 2,  /* a value is out of its documented range */
    PSR_ERR_OUT_OF_HOST_MEMORY = 3,
    PSR_ERR_NO_DEVICE = 4,         /* no OpenCL platform or device at all */
    PSR_ERR_BAD_SELECTOR = 5,      /* a device selector cannot be parsed */
    PSR_ERR_DEVICE_NOT_FOUND = 6,  /* the selector matches no device */
    PSR_ERR_OPENCL = 7,            /* an OpenCL call failed (detail has the code) */
    PSR_ERR_BUILD_FAILED = 8,      /* kernel build failed; see psr_context_build_log() */
    PSR_ERR_FP64_UNSUPPORTED = 9,  /* fp64 asked for on a device without it */
    PSR_ERR_CACHE_IO = 10,         /* the cache directory cannot be read or changed */
    PSR_ERR_BUFFER_TOO_SMALL = 11, /* an array, string or cl_mem is smaller than the shape needs */
    PSR_ERR_POSITION_RANGE = 12,   /* a position is negative or at/past PSR_MAX_POSITION */
    PSR_ERR_TEMPERATURE = 13,      /* a temperature is negative, NaN, infinite or subnormal */
    PSR_ERR_TOKEN_RANGE = 14,      /* a token id is below -1 or at/past the vocabulary */
    PSR_ERR_NOT_SUPPORTED = 15,    /* an optional part is absent at run time (CLBlast for the LM head) */
    PSR_ERR_FILTER_RANGE = 16,     /* a top-p outside (0, 1] or a min-p outside [0, 1] (or NaN) */
    PSR_ERR_STRUCT_SIZE = 17,      /* a struct_size this library does not accept (see "ABI") */
    PSR_ERR_FOREIGN_BUFFER = 18,   /* a cl_mem belongs to another cl_context than the psr context's */
    PSR_ERR_BUFFER_OVERLAP = 19,   /* an output buffer overlaps an input or another output */
    PSR_ERR_OUT_OF_DEVICE_MEMORY = 20, /* the device is out of memory or resources
                                         (CL_MEM_OBJECT_ALLOCATION_FAILURE, CL_OUT_OF_RESOURCES) */
    PSR_ERR_SHARD_MISMATCH = 21,   /* vocabulary shards that do not fit together: ranges that
                                      overlap or leave a gap, records of another shard count,
                                      different row counts on different shards */
    PSR_ERR_COLLECTIVE = 22        /* a collective across shards (MPI) failed, or another shard
                                      reported an error (psr_mpi.h) */
} psr_status;

/* A short, constant name for a status ("PSR_ERR_NO_DEVICE: ..."). Never NULL. */
PSR_API const char *psr_status_string(psr_status status);

/* Detail of the last failed call: with a context, that context's last
 * failure; with NULL, the last failure of a context-less call (or of a
 * failed psr_context_create*) on the calling thread. "" when none. The
 * string stays valid until the next call on the same context or thread. */
PSR_API const char *psr_last_error(const psr_context *ctx);

/* The OpenCL error code behind the last failure (same scope as
 * psr_last_error): the code of the OpenCL call that failed, or CL_SUCCESS
 * when the last failure was not an OpenCL call's. Failures of OpenCL calls
 * give PSR_ERR_OPENCL, or PSR_ERR_OUT_OF_DEVICE_MEMORY and
 * PSR_ERR_OUT_OF_HOST_MEMORY where the code says so. */
PSR_API cl_int psr_last_cl_error(const psr_context *ctx);

/* ------------------------------------------------------------------ */
/* ABI: argument structs                                               */
/* ------------------------------------------------------------------ */
/* Every argument and option struct starts with struct_size and is set up
 * by its init call with the caller's sizeof, which fills the defaults:
 *
 *     psr_sample_args a;
 *     psr_sample_args_init(&a, sizeof a);
 *
 * Structs only grow, at their end. The library accepts any struct_size
 * from a struct's first released layout up to its own and treats the
 * fields past the caller's size as their defaults, so a program built
 * against an older psr.h runs with a newer library of the same soname
 * (docs/api.md, "Compatibility"). Any other size is PSR_ERR_STRUCT_SIZE,
 * from the init call (which then sets struct_size to 0) and from every
 * call given the struct. Structs that the library fills (psr_device_info,
 * psr_cache_stats, psr_cache_entry) keep their layout for the whole
 * soname. */

/* ------------------------------------------------------------------ */
/* Version                                                             */
/* ------------------------------------------------------------------ */
PSR_API const char *psr_version(void);        /* "MAJOR.MINOR.PATCH" */
PSR_API unsigned psr_version_number(void);    /* PSR_VERSION_NUMBER of the library */

/* Optional parts this process can use (CLBlast: loaded at the first call that asks). */
#define PSR_FEATURE_CLBLAST (1u << 0)
PSR_API unsigned psr_features(void);

/* ------------------------------------------------------------------ */
/* Logging                                                             */
/* ------------------------------------------------------------------ */
typedef enum psr_log_level {
    PSR_LOG_DEBUG = 0,
    PSR_LOG_INFO = 1,
    PSR_LOG_WARNING = 2,
    PSR_LOG_ERROR = 3
} psr_log_level;

/* Called synchronously from the thread that made the call. */
typedef void (*psr_log_fn)(psr_log_level level, const char *message, void *user_data);

/* ------------------------------------------------------------------ */
/* Devices                                                             */
/* ------------------------------------------------------------------ */
typedef enum psr_device_type {
    PSR_DEVICE_OTHER = 0,
    PSR_DEVICE_CPU = 1,
    PSR_DEVICE_GPU = 2,
    PSR_DEVICE_ACCELERATOR = 3
} psr_device_type;

/* Capability bits of psr_device_info.capabilities. */
#define PSR_CAP_FP64 (1u << 0)      /* cl_khr_fp64 or a non-zero CL_DEVICE_DOUBLE_FP_CONFIG */
#define PSR_CAP_FP16 (1u << 1)      /* cl_khr_fp16 */
#define PSR_CAP_SUBGROUPS (1u << 2) /* cl_khr_subgroups or cl_intel_subgroups */
#define PSR_CAP_INT64_ATOMICS (1u << 3) /* cl_khr_int64_base_atomics: rows finish in one kernel */

typedef struct psr_device_info {
    unsigned platform_index;       /* P of the "P:D" selector */
    unsigned device_index;         /* D of the "P:D" selector (within its platform) */
    psr_device_type type;
    char platform_name[128];
    char platform_vendor[128];
    char platform_version[128];
    char name[128];
    char vendor[128];
    char version[128];             /* CL_DEVICE_VERSION */
    char driver_version[128];
    char opencl_c_version[64];
    uint32_t vendor_id;
    uint32_t compute_units;
    uint32_t max_clock_mhz;
    uint32_t preferred_work_group_multiple; /* 0 when not known without a kernel */
    size_t max_work_group_size;
    uint64_t local_mem_bytes;
    uint64_t global_mem_bytes;
    uint64_t max_alloc_bytes;
    uint32_t capabilities;         /* PSR_CAP_* */
    cl_platform_id platform;       /* the OpenCL handles, for an app that makes its own */
    cl_device_id device;           /* cl_context on this device (not retained) */
} psr_device_info;

/* Lists every device of every platform, in (platform, device) order.
 * Writes min(capacity, total) entries and sets *count to the total, so a
 * first call with devices = NULL, capacity = 0 counts them. A machine
 * without any OpenCL platform gives PSR_OK with *count = 0. */
PSR_API psr_status psr_device_list(psr_device_info *devices, size_t capacity, size_t *count);

/* The device a selector picks, as psr_context_create() would pick it.
 * Selectors (case-insensitive):
 *   "auto"                       the first GPU, else the first CPU, else the first device
 *   "gpu", "cpu", "accelerator"  the first device of that type
 *   "nvidia", "amd", "intel",    the first device whose platform vendor is that
 *   "pocl"                       vendor (pocl: the PoCL platform), GPUs first
 *   "P:D"                        device D of platform P, both decimal indices
 *   anything else                the first device whose name, vendor or
 *                                platform name contains the text
 * NULL means: $PSR_DEVICE if set and not empty, else "auto".
 * PSR_ERR_BAD_SELECTOR for text that cannot be a selector (empty, or a
 * malformed "P:D"), PSR_ERR_DEVICE_NOT_FOUND when nothing matches. */
PSR_API psr_status psr_device_select(const char *selector, psr_device_info *out);

/* ------------------------------------------------------------------ */
/* Context                                                             */
/* ------------------------------------------------------------------ */
typedef enum psr_disk_cache_mode {
    PSR_DISK_CACHE_AUTO = 0, /* on, unless the environment says PSR_CACHE=0, or the driver
                                keeps its own cache of compiled kernels (PoCL) and the
                                environment does not say PSR_CACHE=1 */
    PSR_DISK_CACHE_ON = 1,   /* on, whatever the environment says */
    PSR_DISK_CACHE_OFF = 2
} psr_disk_cache_mode;

/* What a request for fp64 noise does on a device without fp64. */
typedef enum psr_fp64_policy {
    PSR_FP64_ERROR = 0, /* fail with PSR_ERR_FP64_UNSUPPORTED (the default) */
    PSR_FP64_WIDE = 1   /* use wide-tail noise instead; said once through the log callback
                           (warning) and in the effective_noise of every call */
} psr_fp64_policy;

typedef struct psr_context_options {
    size_t struct_size;          /* sizeof, through psr_context_options_init() */
    const char *device;          /* selector (psr_device_select); create() only */
    psr_log_fn log;              /* optional; NULL: silent */
    void *log_user_data;
    psr_log_level log_level;     /* the least severe level delivered; default WARNING */
    const char *cache_dir;       /* NULL: $PSR_CACHE_DIR, $XDG_CACHE_HOME/psr, ~/.cache/psr */
    psr_disk_cache_mode disk_cache;
    int profiling;               /* non-zero: create()'s queue has profiling on */
    /* Testing aid: PSR_CAP_* bits to treat as absent on this device, so the
     * paths for devices without fp64 (or fp16) can be exercised anywhere. */
    uint32_t hide_capabilities;
    psr_fp64_policy fp64_policy; /* what PSR_NOISE_FP64 does without fp64 */
} psr_context_options;

/* Fills *options with the defaults (see "ABI"); call it before setting fields. */
PSR_API psr_status psr_context_options_init(psr_context_options *options, size_t struct_size);

/* Picks a device by options->device (NULL options: all defaults), creates
 * its cl_context and in-order queue, and returns the new context. */
PSR_API psr_status psr_context_create(const psr_context_options *options, psr_context **out);

/* Wraps the application's own OpenCL objects so its buffers can be used
 * directly. The context, device and queue are retained here and released
 * by psr_context_free(). The queue must belong to the context and device
 * and be in-order (psr's launches share scratch memory and rely on queue
 * order); options->device is ignored. options may be NULL. */
PSR_API psr_status psr_context_create_from_cl(cl_context cl_ctx, cl_device_id device,
                                              cl_command_queue queue,
                                              const psr_context_options *options,
                                              psr_context **out);

/* Releases everything the context holds. NULL is fine. */
PSR_API void psr_context_free(psr_context *ctx);

/* The device the context runs on (capabilities after hide_capabilities). */
PSR_API psr_status psr_context_device_info(const psr_context *ctx, psr_device_info *out);

/* The context's OpenCL objects, not retained for the caller. Any out
 * pointer may be NULL. */
PSR_API psr_status psr_context_cl(const psr_context *ctx, cl_context *cl_ctx,
                                  cl_device_id *device, cl_command_queue *queue);

/* The log of the last kernel build that failed on this context ("" if none). */
PSR_API const char *psr_context_build_log(const psr_context *ctx);

/* ------------------------------------------------------------------ */
/* Sampling                                                            */
/* ------------------------------------------------------------------ */
typedef enum psr_dtype {
    PSR_DTYPE_F32 = 0,
    PSR_DTYPE_F16 = 1,
    PSR_DTYPE_BF16 = 2
} psr_dtype;

/* Token ids in device and host arrays. */
typedef enum psr_token_dtype {
    PSR_TOKENS_I32 = 0,
    PSR_TOKENS_I64 = 1
} psr_token_dtype;

/* The noise of sampling, of the residual and bonus sampling of
 * verification, and what psr_context_options.fp64_policy resolves to. */
typedef enum psr_noise {
    PSR_NOISE_FP32 = 0, /* vLLM's fp32 Gumbel noise (the default) */
    PSR_NOISE_FP64 = 1, /* fp64 uniforms and argmax, vLLM's USE_FP64 (needs cl_khr_fp64) */
    PSR_NOISE_WIDE = 2  /* wide-tail noise: the fp64 path's 64-bit uniform in fp32 arithmetic,
                           for devices without fp64 (docs/statistics.md) */
} psr_noise;

/* Positions are below 2^30: the draft stream uses position + 2^30, and the
 * two streams must never meet (docs/stream.md). */
#define PSR_MAX_POSITION (INT64_C(1) << 30)

/* psr_sample_args.flags. Bits 1 and 3 are reserved (they chose the noise
 * in the 0.1 layout, which the library still accepts). */
#define PSR_SAMPLE_DRAFTING (1u << 0)  /* the draft stream (IS_DRAFTING): position + 2^30 */
#define PSR_SAMPLE_FAST_MATH (1u << 2) /* native logs: noise may differ by device in the
                                          last bits (default: deterministic) */
#define PSR_SAMPLE_RACE (1u << 4)  /* exponential race argmax p / E instead of Gumbel-max: the
                                      same token up to rounding; over softmax(logits / T) */
#define PSR_SAMPLE_PROBS (1u << 5) /* with RACE: `logits` holds fp32 probabilities (any
                                      scale below 2^64; 0, negative and NaN never win); T = 0
                                      is argmax, other temperatures are not applied */

/* Per-row result flags (psr_sample_args.row_flags). */
#define PSR_ROW_NO_FINITE (1u << 0)       /* every logit is NaN or -inf: token still in range */
#define PSR_ROW_BAD_POSITION (1u << 1)    /* position out of range: token -1 */
#define PSR_ROW_BAD_TEMPERATURE (1u << 2) /* temperature invalid: token -1 */
#define PSR_ROW_BAD_INDEX (1u << 3)       /* row_request >= requests, or draft_cache_rows >=
                                             draft_cache_rows_total: token -1 */
#define PSR_ROW_BAD_FILTER (1u << 4)      /* top_p outside (0, 1] or min_p outside [0, 1]
                                             (NaN included): token -1 */
#define PSR_ROW_BAD_SHARD (1u << 5)       /* psr_combine: a record of another shard or shard
                                             count than its place in the buffer: token -1 */

/* ---- Vocabulary shards (docs/sharded.md) ---- */

#define PSR_MAX_SHARDS 255

/* A sharded psr_sample's result for one row and one shard: 16 bytes, in
 * the host's byte order (psr refuses shards on a device whose byte order
 * differs). Records of the same row from different shards compare as
 * (value, then the lower token): the larger value wins, so an unsigned
 * maximum of `value` finds the winning shard. Move them between devices
 * or processes as plain bytes. */
typedef struct psr_shard_record {
    uint64_t value;  /* the shard's best score as an unsigned integer of the same order */
    int32_t token;   /* its global token id; -1 for padding rows and rows with bad input */
    uint32_t flags;  /* bits 0-15: the row's PSR_ROW_* in this shard (PSR_ROW_NO_FINITE: no
                        finite logit in this shard); bits 16-23: shard_index; bits 24-31:
                        shard_count */
} psr_shard_record;

/* Gumbel-max sampling of `rows` rows of logits already on the device:
 *   token = argmax_i (logit_i / T + g_i)   (T = 0: plain argmax)
 * with g_i vLLM's Philox Gumbel noise for (seed, position, i). Ties go to
 * the lowest index; NaN counts as -inf. Nothing waits on the host: the
 * call enqueues kernels after event_wait_list and returns their event.
 * Every cl_mem must belong to the context's cl_context
 * (PSR_ERR_FOREIGN_BUFFER), and no output may overlap an input or another
 * output (PSR_ERR_BUFFER_OVERLAP). */
typedef struct psr_sample_args {
    size_t struct_size;       /* sizeof, through psr_sample_args_init() */
    size_t rows;              /* rows of logits (batch) */
    size_t vocab;             /* tokens per row, 1 .. 2^31 - 1 */
    cl_mem logits;            /* [rows, row_stride] of logits_dtype */
    psr_dtype logits_dtype;
    size_t logits_offset;     /* elements before row 0 */
    size_t row_stride;        /* elements between rows; 0 means vocab */
    cl_mem row_request;       /* optional int32 [rows]: request of each row, -1 = padding
                                 (token -1); NULL: row i is request i */
    size_t requests;          /* entries in seeds and temperatures; 0 means rows (only
                                 without row_request) */
    cl_mem seeds;             /* int64 [requests] */
    cl_mem temperatures;      /* float32 [requests]; 0 = greedy */
    cl_mem positions;         /* int64 [rows], each in [0, PSR_MAX_POSITION) */
    cl_mem tokens;            /* out: [rows] of tokens_dtype (int32 by default) */
    cl_mem row_flags;         /* optional out: uint32 [rows] of PSR_ROW_* */
    cl_mem draft_cache;       /* optional out: float32 [draft_cache_rows_total, vocab]: the
                                 pre-temperature logits, for the verifier */
    cl_mem draft_cache_rows;  /* optional int32 [rows]: cache row of each row, -1 = skip;
                                 NULL: row i goes to cache row i */
    size_t draft_cache_rows_total;
    size_t draft_cache_k;     /* with draft_cache and no draft_cache_rows: the cache is
                                 [requests, draft_cache_k, vocab] (psr_verify's layout) and
                                 the row of request q goes to cache row q * draft_cache_k +
                                 draft_step; 0: row i goes to cache row i */
    size_t draft_step;        /* which draft of the request this call samples, < draft_cache_k */
    /* Filters on s = logit / T, applied as min-p, top-k, top-p (docs/api.md,
     * "Filters"): per request from a buffer, or one value for every request
     * (all_top_k, all_top_p, all_min_p below); with neither, nothing extra
     * runs. Greedy rows (T = 0) ignore them. Not with PSR_SAMPLE_PROBS
     * (PSR_ERR_INVALID_ARGUMENT). A bad value in a buffer gives token -1 and
     * PSR_ROW_BAD_FILTER; a bad all_* value fails the call. */
    cl_mem top_k;             /* optional int32 [requests]: keeps the k largest s and every
                                 token tied with the k-th; k <= 0 or >= vocab = off */
    cl_mem top_p;             /* optional float32 [requests] in (0, 1]: removes the tokens
                                 whose probability mass of strictly larger s, after min-p
                                 and top-k, already reaches top_p; 1 = off */
    cl_mem min_p;             /* optional float32 [requests] in [0, 1]: removes s < max s +
                                 log(min_p); 0 = off */
    unsigned flags;           /* PSR_SAMPLE_* */
    psr_noise *effective_noise; /* optional out, written before psr_sample returns: the noise
                                   used, after the context's fp64 policy */
    cl_uint num_events_in_wait_list;
    const cl_event *event_wait_list;
    /* Added in 0.2 (a 0.1-layout caller gets the defaults). */
    psr_noise noise;          /* default PSR_NOISE_FP32 */
    psr_token_dtype tokens_dtype; /* of tokens; default PSR_TOKENS_I32 */
    int all_top_k;            /* every request's top-k when top_k is NULL; <= 0 or >= vocab: off */
    float all_top_p;          /* every request's top-p when top_p is NULL; default 1 (off) */
    float all_min_p;          /* every request's min-p when min_p is NULL; default 0 (off) */
    /* Added in 0.3: this call samples one shard of a vocabulary split
     * across devices or processes (docs/sharded.md). Noise is drawn for
     * global token ids, and each row's result is a psr_shard_record in
     * shard_records instead of a token; psr_combine (or psr_combine_host)
     * turns the records of every shard into the tokens the unsharded call
     * gives. `vocab` and the logits are this shard's; the draft cache, if
     * any, holds this shard's columns. Filters need the rounds of
     * psr_shard_filter_round first (below). */
    size_t shard_count;       /* shards of the vocabulary, 1 .. PSR_MAX_SHARDS; 0: not sharded */
    size_t shard_index;       /* this shard, < shard_count */
    size_t vocab_offset;      /* global id of this shard's first token */
    size_t vocab_total;       /* the whole vocabulary: vocab_offset + vocab <= vocab_total
                                 <= 2^31 - 1 */
    cl_mem shard_records;     /* out, with shards: psr_shard_record [rows] (tokens is then NULL) */
    size_t shard_records_offset; /* records before row 0's: shards on one device can write
                                    into one [shards, rows] buffer for psr_combine */
    cl_mem shard_filter_state; /* filters with shards: PSR_SHARD_FILTER_STATE_BYTES per row,
                                  filled by the psr_shard_filter_round calls before this one */
} psr_sample_args;

PSR_API psr_status psr_sample_args_init(psr_sample_args *args, size_t struct_size);

/* Validates the arguments (shapes, buffer sizes and contexts, overlaps,
 * flags, fp64 support) and enqueues the sampling. *event (may be NULL)
 * receives an event the caller releases. Values inside device buffers
 * (positions, temperatures) cannot be checked without waiting: bad ones
 * give token -1 and a PSR_ROW_* flag instead. */
PSR_API psr_status psr_sample(psr_context *ctx, const psr_sample_args *args, cl_event *event);

/* Host arrays in and out, one request per row, blocking: for tools, tests
 * and simple embedders. Every value is checked before anything reaches
 * the device (a bad one fails the call, naming its entry), and nothing is
 * written unless the whole call succeeds. */
typedef struct psr_sample_host_args {
    size_t struct_size;        /* sizeof, through psr_sample_host_args_init() */
    size_t rows, vocab;
    size_t row_stride;         /* elements between rows of logits; 0 means vocab */
    const void *logits;        /* [rows, row_stride] of logits_dtype */
    psr_dtype logits_dtype;
    const int64_t *seeds;      /* [rows] */
    const int64_t *positions;  /* [rows], each in [0, PSR_MAX_POSITION) */
    const float *temperatures; /* [rows]; 0 = greedy */
    const int32_t *top_k;      /* optional [rows], as psr_sample_args.top_k */
    const float *top_p;        /* optional [rows] */
    const float *min_p;        /* optional [rows] */
    int all_top_k;             /* as psr_sample_args.all_top_k, and so on */
    float all_top_p;
    float all_min_p;
    unsigned flags;            /* PSR_SAMPLE_* */
    psr_noise noise;
    void *tokens;              /* out: [rows] of tokens_dtype */
    psr_token_dtype tokens_dtype;
    uint32_t *row_flags;       /* optional out: [rows] of PSR_ROW_* */
    size_t *no_finite_rows;    /* optional out: rows without a finite logit */
    psr_noise *effective_noise; /* optional out */
    /* Added in 0.3: one shard of a vocabulary, as in psr_sample_args;
     * `logits` holds this shard's columns and tokens is then NULL. */
    size_t shard_count, shard_index, vocab_offset, vocab_total;
    psr_shard_record *shard_records; /* out, with shards: [rows] */
} psr_sample_host_args;

PSR_API psr_status psr_sample_host_args_init(psr_sample_host_args *args, size_t struct_size);
PSR_API psr_status psr_sample_host(psr_context *ctx, const psr_sample_host_args *args);

/* Filters across shards. A sharded psr_sample with top-k, top-p or
 * min-p needs the rows' thresholds over the whole vocabulary, found in
 * rounds: in round r (0 .. rounds) every shard calls
 * psr_shard_filter_round with the same sample args (shard fields,
 * filters and shard_filter_state set); for r < rounds it writes this
 * shard's `partial`, uint64 [rows, PSR_SHARD_FILTER_WORDS], which the app
 * reduces element-wise across all shards (round 0: maximum; later rounds:
 * sum) and passes as `reduced` to round r + 1. After round `rounds`, the
 * sharded psr_sample gives the tokens of the unsharded filtered call, bit
 * for bit. rounds is 1, plus 4 with top-k, plus 4 with top-p. The rounds
 * read no seeds, positions or outputs, so those may be NULL in their
 * sample args (sharded logprobs without a sampling call). */
#define PSR_SHARD_FILTER_WORDS 256
#define PSR_SHARD_FILTER_STATE_BYTES 40

/* The number of exchanges (0 without filters) the sample args need. */
PSR_API psr_status psr_shard_filter_rounds(psr_context *ctx, const psr_sample_args *args, size_t *rounds);

typedef struct psr_shard_filter_args {
    size_t struct_size;            /* sizeof, through psr_shard_filter_args_init() */
    const psr_sample_args *sample; /* this shard's sampling call */
    size_t round;                  /* 0 .. rounds */
    cl_mem reduced;                /* rounds 1 .. rounds: the previous round's partials reduced */
    cl_mem partial;                /* out, rounds 0 .. rounds - 1: this shard's partial */
    cl_uint num_events_in_wait_list;
    const cl_event *event_wait_list;
} psr_shard_filter_args;

PSR_API psr_status psr_shard_filter_args_init(psr_shard_filter_args *args, size_t struct_size);
PSR_API psr_status psr_shard_filter_round(psr_context *ctx, const psr_shard_filter_args *args, cl_event *event);

/* The tokens of a sharded sampling from the records of all its shards,
 * gathered in one buffer shard after shard: records[s * rows + r] is row
 * r's record from shard s. Per row, the record with the largest value
 * wins, the lower token on equal values: the token the unsharded call
 * gives. A row whose records carry -1 gets -1 and their flags; a row
 * with no finite logit in any shard gets PSR_ROW_NO_FINITE and the
 * lowest token its shards report (the unsharded call's token); a record
 * whose shard index or count does not match its place gives -1 and
 * PSR_ROW_BAD_SHARD (psr_combine) or PSR_ERR_SHARD_MISMATCH
 * (psr_combine_host). Asynchronous, like psr_sample. */
typedef struct psr_combine_args {
    size_t struct_size;       /* sizeof, through psr_combine_args_init() */
    size_t rows;
    size_t shards;            /* 1 .. PSR_MAX_SHARDS */
    cl_mem records;           /* psr_shard_record [shards, rows] */
    cl_mem tokens;            /* out: [rows] of tokens_dtype */
    psr_token_dtype tokens_dtype;
    cl_mem row_flags;         /* optional out: uint32 [rows] of PSR_ROW_* */
    cl_uint num_events_in_wait_list;
    const cl_event *event_wait_list;
} psr_combine_args;

PSR_API psr_status psr_combine_args_init(psr_combine_args *args, size_t struct_size);
PSR_API psr_status psr_combine(psr_context *ctx, const psr_combine_args *args, cl_event *event);

/* psr_combine on host arrays, on the calling thread; ctx (which may be
 * NULL) only receives the message of a failure. Nothing is written
 * unless every record fits its place. */
typedef struct psr_combine_host_args {
    size_t struct_size;       /* sizeof, through psr_combine_host_args_init() */
    size_t rows, shards;
    const psr_shard_record *records; /* [shards, rows] */
    void *tokens;             /* out: [rows] of tokens_dtype */
    psr_token_dtype tokens_dtype;
    uint32_t *row_flags;      /* optional out: [rows] of PSR_ROW_* */
} psr_combine_host_args;

PSR_API psr_status psr_combine_host_args_init(psr_combine_host_args *args, size_t struct_size);
PSR_API psr_status psr_combine_host(psr_context *ctx, const psr_combine_host_args *args);

/* The noise the context's last sampling or verification used (see
 * psr_context_options.fp64_policy); PSR_NOISE_FP32 before the first. */
PSR_API psr_status psr_context_last_noise(const psr_context *ctx, psr_noise *noise);

/* Device memory psr holds for this context beyond the caller's buffers:
 * scratch for per-row partial results, O(rows x work-groups per row), and
 * the host-array calls' device copies of their arrays, which grow to the
 * largest call seen. */
PSR_API psr_status psr_context_scratch_bytes(const psr_context *ctx, size_t *bytes);

/* After a launch of this context that failed or was abandoned on the device
 * (one of its events ended with a negative status: a device fault, a
 * watchdog): the counters psr's kernels leave zero for the next launch may
 * be left half-counted, so the next launch that uses each clears it first.
 * Calls that fail while enqueueing do this by themselves. The context's
 * queue must still work. PSR_ERR_NULL_ARGUMENT for a NULL ctx. */
PSR_API psr_status psr_context_recover(psr_context *ctx);

/* ------------------------------------------------------------------ */
/* Speculative decoding: verification of draft tokens                  */
/* ------------------------------------------------------------------ */
/* How drafts are judged (docs/speculative.md). */
typedef enum psr_verify_method {
    PSR_VERIFY_PROBABILISTIC = 0, /* rejection sampling; requests at temperature 0 are greedy */
    PSR_VERIFY_GREEDY = 1         /* every request greedy: accept while draft == target argmax */
} psr_verify_method;

/* Bits of psr_verify_args.status: input errors only the device can see.
 * Any of them means the call wrote nothing to tokens and num_sampled. */
#define PSR_VERIFY_BAD_TOKEN (1u << 0)       /* a draft token is below -1 or >= vocab */
#define PSR_VERIFY_BAD_POSITION (1u << 1)    /* a position is outside [0, PSR_MAX_POSITION) */
#define PSR_VERIFY_BAD_TEMPERATURE (1u << 2) /* a temperature is not 0 or a positive normal */

/* Verification of speculative drafts, vLLM's rejection sampler. Request r
 * owns target rows cu[r] .. cu[r+1] - 1: n = cu[r+1] - cu[r] >= 1 rows,
 * the first n - 1 scored at its draft tokens, the last the bonus row.
 * Per request, drafts are walked in order:
 *  - greedy: accept while draft == argmax of its target row; the first
 *    rejected row emits its argmax; if all pass, the bonus row's argmax;
 *  - probabilistic: accept iff log p(d) > log u + log q(d), p = softmax(
 *    target / T), q = softmax(draft / T) from the draft cache (log q = 0
 *    without a cache: one-hot drafts), u = the fp32 uniform of word 0 of
 *    draw(seed, position) (the target row key). A -1 draft is rejected.
 *    The first rejected row samples the residual log max(p - q, 0) by
 *    Gumbel-max on the target stream (no salt, no temperature re-applied);
 *    if all pass, the bonus row is sampled as psr_sample would.
 * Output: request r's accepted drafts, then the sampled token, then -1,
 * in row r of tokens; num_sampled[r] = accepted + 1. Nothing waits on the
 * host. */
typedef struct psr_verify_args {
    size_t struct_size;         /* sizeof, through psr_verify_args_init() */
    size_t requests;            /* R */
    const int32_t *cu;          /* host [R + 1]: cu[0] = 0, cu[r + 1] > cu[r], cu[R] = rows;
                                   copied, so it may change after the call */
    size_t rows;                /* target rows: sum of the requests' rows */
    size_t max_drafts;          /* K: tokens has K + 1 columns; every request has <= K drafts */
    size_t vocab;
    cl_mem target_logits;       /* [cu[R], row_stride] of target_dtype, already processed */
    psr_dtype target_dtype;
    size_t target_offset;       /* elements before row 0 */
    size_t target_row_stride;   /* 0 means vocab */
    cl_mem draft_cache;         /* optional float32 [R, draft_cache_k, vocab]: the pre-
                                   temperature draft logits (psr_sample_args.draft_cache_k);
                                   NULL: drafts are one-hot (greedy or n-gram drafting) */
    size_t draft_cache_k;       /* drafts per request the cache holds, >= each request's */
    cl_mem draft_tokens;        /* int32 [cu[R]]: the draft token scored at each row, -1 for
                                   a placeholder; the bonus row's entry is not read */
    cl_mem seeds;               /* int64 [R] */
    cl_mem temperatures;        /* float32 [R]; 0 = greedy */
    cl_mem positions;           /* int64 [cu[R]], each in [0, PSR_MAX_POSITION) */
    psr_verify_method method;
    unsigned flags;             /* reserved: 0 (in the 0.1 layout: the noise bits) */
    cl_mem tokens;              /* out: [R, K + 1] of tokens_dtype */
    psr_token_dtype tokens_dtype;
    cl_mem num_sampled;         /* out: int32 [R] */
    cl_mem status;              /* optional out: uint32 [1], PSR_VERIFY_* bits (0: all good) */
    psr_noise *effective_noise; /* optional out: the noise used, after the fp64 policy */
    cl_uint num_events_in_wait_list;
    const cl_event *event_wait_list;
    /* Added in 0.2 (a 0.1-layout caller gets the defaults). */
    psr_noise noise;            /* of the residual and bonus sampling; default PSR_NOISE_FP32 */
    /* Added in 0.3: one shard of a vocabulary split across devices or
     * processes, through psr_verify_shard_round (psr_verify refuses
     * shards; docs/sharded.md). `vocab`, target_logits and draft_cache
     * hold this shard's columns; draft_tokens and the output tokens are
     * global ids. */
    size_t shard_count;         /* shards of the vocabulary, 1 .. PSR_MAX_SHARDS; 0: not sharded */
    size_t shard_index;         /* this shard, < shard_count */
    size_t vocab_offset;        /* global id of this shard's first token */
    size_t vocab_total;         /* the whole vocabulary */
    size_t shard_slot;          /* this shard's first slot: the sum of psr_logprobs_shard_slots()
                                   over the shards before it */
    size_t shard_slots;         /* the slots of all shards */
    cl_mem shard_keys;          /* uint32 [2 rows + 1]: round 0 writes this shard's, which the
                                   app reduces by maximum across shards before round 1 */
    cl_mem shard_partials;      /* shard_slots slots of psr_verify_shard_slot_bytes() each:
                                   round 1 writes this shard's, which the app gathers */
    cl_mem shard_records;       /* psr_shard_record [shard_count, requests]: round 2 writes row
                                   shard_index, which the app gathers */
} psr_verify_args;

PSR_API psr_status psr_verify_args_init(psr_verify_args *args, size_t struct_size);

/* Validates shapes, cu, buffer sizes and flags (a failure returns its
 * status and enqueues nothing), then enqueues verification. Draft tokens,
 * positions and temperatures live on the device: if any is bad, nothing
 * is written to tokens or num_sampled and args->status says why.
 * *event (may be NULL) receives an event the caller releases. */
PSR_API psr_status psr_verify(psr_context *ctx, const psr_verify_args *args, cl_event *event);

/* Verification across vocabulary shards: PSR_VERIFY_SHARD_ROUNDS rounds,
 * every shard calling psr_verify_shard_round with the same args (shard
 * fields set) for round 0 .. 3, the app moving bytes between them:
 *   0: writes shard_keys (per row the draft token's target and draft
 *      logits where this shard holds the token, and the inputs' check);
 *      reduce them element-wise by maximum (uint32) across shards.
 *   1: writes this shard's slots of shard_partials (one per 16,384 tokens
 *      of the shard, as for logprobs); gather every shard's slots.
 *   2: writes this shard's row of shard_records (the residual or bonus
 *      token of each request over its columns); gather every shard's.
 *   3: writes tokens, num_sampled and status, the same on every shard.
 * Shards whose first tokens are multiples of 16,384 give the tokens of
 * the unsharded psr_verify, bit for bit; other splits the same up to
 * floating-point near-ties of the acceptance test. */
#define PSR_VERIFY_SHARD_ROUNDS 4

/* Bytes of one slot for `rows` target rows: 24 rows, rounded up to 16. */
PSR_API size_t psr_verify_shard_slot_bytes(size_t rows);
PSR_API psr_status psr_verify_shard_round(psr_context *ctx, const psr_verify_args *args, unsigned round,
                                          cl_event *event);

/* psr_verify on host arrays, blocking. Draft tokens, positions and
 * temperatures are checked on the host first (PSR_ERR_TOKEN_RANGE,
 * PSR_ERR_POSITION_RANGE, PSR_ERR_TEMPERATURE, naming the entry), and
 * nothing is written unless the whole call succeeds. */
typedef struct psr_verify_host_args {
    size_t struct_size;          /* sizeof, through psr_verify_host_args_init() */
    size_t requests;             /* R */
    const int32_t *cu;           /* [R + 1], as psr_verify_args.cu */
    size_t rows;                 /* cu[R] */
    size_t max_drafts;           /* K */
    size_t vocab;
    const void *target_logits;   /* [rows, target_row_stride] of target_dtype */
    psr_dtype target_dtype;
    size_t target_row_stride;    /* 0 means vocab */
    const float *draft_cache;    /* optional [R, draft_cache_k, vocab] */
    size_t draft_cache_k;
    const int32_t *draft_tokens; /* [rows] */
    const int64_t *seeds;        /* [R] */
    const float *temperatures;   /* [R] */
    const int64_t *positions;    /* [rows] */
    psr_verify_method method;
    psr_noise noise;
    void *tokens;                /* out: [R, K + 1] of tokens_dtype */
    psr_token_dtype tokens_dtype;
    int32_t *num_sampled;        /* out: [R] */
    psr_noise *effective_noise;  /* optional out */
} psr_verify_host_args;

PSR_API psr_status psr_verify_host_args_init(psr_verify_host_args *args, size_t struct_size);
PSR_API psr_status psr_verify_host(psr_context *ctx, const psr_verify_host_args *args);

/* ------------------------------------------------------------------ */
/* Logprobs                                                            */
/* ------------------------------------------------------------------ */
#define PSR_LOGPROBS_MAX_TOP_N 20
/* psr_logprobs_args.flags */
#define PSR_LOGPROBS_RAW (1u << 0) /* of the logits as given; default: of logits / T */

/* Logprobs of sampled tokens, as vLLM reports them: per row the sampled
 * token's logprob and rank (1 + the tokens with a larger logprob), and the
 * row's top_n tokens (logprob descending, lowest index first on ties) with
 * their logprobs. Processed logprobs use logits / T (T = 0 counts as 1);
 * NaN counts as -inf. The log-sum-exp has a fixed order, so every device
 * gives the same bits. Asynchronous, like psr_sample. */
typedef struct psr_logprobs_args {
    size_t struct_size;      /* sizeof, through psr_logprobs_args_init() */
    size_t rows, vocab;      /* vocab up to 2^20 */
    cl_mem logits;           /* [rows, row_stride] of logits_dtype */
    psr_dtype logits_dtype;
    size_t logits_offset;
    size_t row_stride;       /* 0 means vocab */
    cl_mem row_request;      /* optional int32 [rows], as in psr_sample_args */
    size_t requests;         /* 0 means rows (only without row_request; not read with
                                PSR_LOGPROBS_RAW, which reads no per-request array) */
    cl_mem temperatures;     /* float32 [requests]; not read with PSR_LOGPROBS_RAW */
    cl_mem tokens;           /* [rows] of tokens_dtype: the sampled tokens; outside [0, vocab)
                                (e.g. -1 padding) gives logprob NaN and rank 0 */
    cl_mem top_k;            /* optional int32 [requests], as psr_sample_args.top_k: processed */
    cl_mem top_p;            /* optional float32 [requests]  logprobs then see only the tokens */
    cl_mem min_p;            /* optional float32 [requests]  the filters keep (T > 0 rows) */
    int top_n;               /* 0 .. PSR_LOGPROBS_MAX_TOP_N */
    unsigned flags;          /* PSR_LOGPROBS_* */
    cl_mem token_logprobs;   /* optional out: float32 [rows] */
    cl_mem token_ranks;      /* optional out: int32 [rows] */
    cl_mem top_ids;          /* out with top_n > 0: int32 [rows, top_n] */
    cl_mem top_logprobs;     /* out with top_n > 0: float32 [rows, top_n] */
    cl_uint num_events_in_wait_list;
    const cl_event *event_wait_list;
    /* Added in 0.2 (a 0.1-layout caller gets the defaults). */
    psr_token_dtype tokens_dtype; /* of tokens; default PSR_TOKENS_I32 */
    int all_top_k;           /* as psr_sample_args: one value for every request */
    float all_top_p;
    float all_min_p;
    /* Added in 0.3: one shard of a vocabulary split across devices or
     * processes, through psr_logprobs_shard_round (psr_logprobs refuses
     * shards; docs/sharded.md). `vocab` and the logits are this shard's;
     * tokens and top_ids are global ids. */
    size_t shard_count;        /* shards of the vocabulary, 1 .. PSR_MAX_SHARDS; 0: not sharded */
    size_t shard_index;        /* this shard, < shard_count */
    size_t vocab_offset;       /* global id of this shard's first token */
    size_t vocab_total;        /* the whole vocabulary, up to 2^20 */
    size_t shard_slot;         /* this shard's first slot of shard_partials: the sum of
                                  psr_logprobs_shard_slots() over the shards before it */
    size_t shard_slots;        /* the slots of all shards, at most PSR_LOGPROBS_MAX_SLOTS */
    cl_mem shard_token_keys;   /* uint32 [rows]: round 0 writes this shard's keys, which the app
                                  reduces by maximum across shards before round 1 */
    cl_mem shard_partials;     /* shard_slots slots of psr_logprobs_shard_slot_bytes() each: round 1
                                  writes this shard's, which the app gathers before round 2 */
    cl_mem shard_filter_state; /* filters with shards: as psr_sample_args.shard_filter_state */
} psr_logprobs_args;

PSR_API psr_status psr_logprobs_args_init(psr_logprobs_args *args, size_t struct_size);
PSR_API psr_status psr_logprobs(psr_context *ctx, const psr_logprobs_args *args, cl_event *event);

/* Logprobs across vocabulary shards: PSR_LOGPROBS_SHARD_ROUNDS rounds,
 * every shard calling psr_logprobs_shard_round with the same args (shard
 * fields set) for round 0, 1 and 2, the app moving bytes between them:
 *   0: writes this shard's keys of the sampled tokens to shard_token_keys;
 *      reduce them element-wise by maximum (uint32) across shards.
 *   1: writes this shard's slots of shard_partials (slots shard_slot ..);
 *      gather every shard's slots into each shard's shard_partials.
 *   2: writes the outputs, the same on every shard.
 * A slot holds one super-block (PSR_LOGPROBS_SHARD_BLOCK tokens of a
 * shard, from its first) for every row. Shards whose first tokens are
 * multiples of PSR_LOGPROBS_SHARD_BLOCK give the unsharded call's bits;
 * other splits may differ in the logprobs' last bits (ranks and top ids
 * never). Filters: the rounds of psr_shard_filter_round first, with a
 * psr_sample_args of the same rows, logits, temperatures and filters (a
 * sharded psr_sample's state serves both). */
#define PSR_LOGPROBS_SHARD_ROUNDS 3
#define PSR_LOGPROBS_SHARD_BLOCK 16384
#define PSR_LOGPROBS_MAX_SLOTS 64

/* Slots a shard of `shard_vocab` tokens fills: ceil(shard_vocab / PSR_LOGPROBS_SHARD_BLOCK). */
PSR_API size_t psr_logprobs_shard_slots(size_t shard_vocab);
/* Bytes of one slot for `rows` rows and top_n: rows x (12 + 8 top_n), rounded up to 16. */
PSR_API size_t psr_logprobs_shard_slot_bytes(size_t rows, int top_n);
PSR_API psr_status psr_logprobs_shard_round(psr_context *ctx, const psr_logprobs_args *args, unsigned round,
                                            cl_event *event);

/* psr_logprobs on host arrays, one request per row, blocking; values are
 * checked on the host first and nothing is written unless the whole call
 * succeeds. */
typedef struct psr_logprobs_host_args {
    size_t struct_size;        /* sizeof, through psr_logprobs_host_args_init() */
    size_t rows, vocab;
    size_t row_stride;         /* 0 means vocab */
    const void *logits;        /* [rows, row_stride] of logits_dtype */
    psr_dtype logits_dtype;
    const float *temperatures; /* [rows]; may be NULL with PSR_LOGPROBS_RAW */
    const void *tokens;        /* [rows] of tokens_dtype */
    psr_token_dtype tokens_dtype;
    const int32_t *top_k;      /* optional [rows] */
    const float *top_p;        /* optional [rows] */
    const float *min_p;        /* optional [rows] */
    int all_top_k;
    float all_top_p;
    float all_min_p;
    int top_n;                 /* 0 .. PSR_LOGPROBS_MAX_TOP_N */
    unsigned flags;            /* PSR_LOGPROBS_* */
    float *token_logprobs;     /* optional out: [rows] */
    int32_t *token_ranks;      /* optional out: [rows] */
    int32_t *top_ids;          /* out with top_n > 0: [rows, top_n] */
    float *top_logprobs;       /* out with top_n > 0: [rows, top_n] */
} psr_logprobs_host_args;

PSR_API psr_status psr_logprobs_host_args_init(psr_logprobs_host_args *args, size_t struct_size);
PSR_API psr_status psr_logprobs_host(psr_context *ctx, const psr_logprobs_host_args *args);

/* ------------------------------------------------------------------ */
/* LM head (CLBlast)                                                   */
/* ------------------------------------------------------------------ */
/* The LM head's projection, logits [B, V] = hidden [B, H] x weights^T,
 * weights [V, H], row-major, through CLBlast: fp32, or fp16 inputs where
 * the device has cl_khr_fp16 (the output dtype follows the inputs). The
 * result feeds psr_sample directly. Without CLBlast: PSR_ERR_NOT_SUPPORTED. */
typedef struct psr_lm_head_args {
    size_t struct_size;   /* sizeof, through psr_lm_head_args_init() */
    size_t batch;         /* B */
    size_t hidden_size;   /* H */
    size_t vocab;         /* V */
    psr_dtype dtype;      /* PSR_DTYPE_F32 or PSR_DTYPE_F16, for all three buffers */
    cl_mem hidden;        /* [B, H] */
    cl_mem weights;       /* [V, H] */
    cl_mem logits;        /* out: [B, V] */
    cl_uint num_events_in_wait_list;
    const cl_event *event_wait_list;
} psr_lm_head_args;

PSR_API psr_status psr_lm_head_args_init(psr_lm_head_args *args, size_t struct_size);
PSR_API psr_status psr_lm_head(psr_context *ctx, const psr_lm_head_args *args, cl_event *event);

/* ------------------------------------------------------------------ */
/* Warming: the first call without a compile                           */
/* ------------------------------------------------------------------ */
/* Which call a psr_warm_variant prepares. */
typedef enum psr_warm_call {
    PSR_WARM_SAMPLE = 0,   /* psr_sample and psr_sample_host */
    PSR_WARM_LOGPROBS = 1, /* psr_logprobs and psr_logprobs_host */
    PSR_WARM_VERIFY = 2    /* psr_verify and psr_verify_host */
} psr_warm_call;

/* One kind of call an application will make: warming it builds what the
 * first such call would (docs/cache.md lists the programs of each). An
 * element of an array the library reads, so its layout stays for the
 * whole soname (new fields would come in a new struct). */
/* psr_warm_variant.flags, any call (added in 0.3): also the kernels of the
 * call across vocabulary shards (docs/sharded.md): psr_combine and, with
 * filters, psr_shard_filter_round; psr_logprobs_shard_round;
 * psr_verify_shard_round. */
#define PSR_WARM_SHARDED (1u << 30)

typedef struct psr_warm_variant {
    psr_warm_call call;
    unsigned flags;   /* sample: PSR_SAMPLE_* as in psr_sample_args.flags; others: 0; any:
                         PSR_WARM_SHARDED */
    psr_noise noise;  /* sample, verify: the call's noise; logprobs: PSR_NOISE_FP32 */
    psr_dtype dtype;  /* the logits' (verify: the target's) */
    int filtered;     /* sample, logprobs: non-zero for calls with top_k, top_p or min_p */
} psr_warm_variant;

/* Called after each variant is warmed: index from 1 to total, a short
 * name ("sample f16 drafting"), and the seconds it took. */
typedef void (*psr_warm_progress_fn)(size_t index, size_t total, const char *name, double seconds,
                                     void *user_data);

/* psr_warm_options.launch: whether warming also launches each kernel once
 * on a tiny input, for drivers that compile a kernel at its first launch
 * (PoCL: per work-group size, so a launch of the sizes psr uses). */
typedef enum psr_warm_launch {
    PSR_WARM_LAUNCH_AUTO = 0, /* where the driver compiles at first launch (PoCL) */
    PSR_WARM_LAUNCH_ON = 1,   /* always (on other drivers it only runs the kernels) */
    PSR_WARM_LAUNCH_OFF = 2   /* build the programs only */
} psr_warm_launch;

typedef struct psr_warm_options {
    size_t struct_size;                 /* sizeof, through psr_warm_options_init() */
    const psr_warm_variant *variants;   /* NULL: every variant the device can run */
    size_t variant_count;               /* entries in variants (0 with NULL) */
    psr_warm_launch launch;
    psr_warm_progress_fn progress;      /* optional */
    void *progress_user_data;
} psr_warm_options;

/* The defaults (see "ABI"): every variant, PSR_WARM_LAUNCH_AUTO. */
PSR_API psr_status psr_warm_options_init(psr_warm_options *options, size_t struct_size);

/* Builds (or loads from the cache) the programs of each variant asked for
 * (options NULL: every variant this device can run, fp64 ones only with
 * fp64), and with options->launch runs each of its kernels once on a tiny
 * input, so the first real call of each starts without compiling (on
 * PoCL: calls of fewer than 65,535 work-items, docs/cache.md). Each build
 * is logged at INFO with its time, and options->progress is called per
 * variant. A bad entry fails before anything is built, with a message
 * naming it; a build failure stops warming. *variants (may be NULL)
 * receives how many variants are now warm. */
PSR_API psr_status psr_context_warm(psr_context *ctx, const psr_warm_options *options, size_t *variants);

/* ------------------------------------------------------------------ */
/* Kernel cache                                                        */
/* ------------------------------------------------------------------ */
/* Counters of one context's program lookups. Each lookup ends in exactly
 * one of memory_hits, disk_hits or builds. */
typedef struct psr_cache_stats {
    uint64_t memory_hits;   /* served from the context's memory tier */
    uint64_t disk_hits;     /* loaded from a valid binary on disk */
    uint64_t builds;        /* compiled from source */
    uint64_t rebuilds;      /* of builds: a disk file was discarded first (truncated, corrupt, foreign, refused) */
    uint64_t disk_writes;   /* binaries written to disk */
    uint64_t disk_write_failures;
    int disk_enabled;       /* the disk tier is in use by this context */
    char cache_dir[512];    /* the directory in use ("" when off) */
} psr_cache_stats;

PSR_API psr_status psr_context_cache_stats(const psr_context *ctx, psr_cache_stats *out);

/* One binary in a cache directory. */
typedef struct psr_cache_entry {
    char file[128];          /* file name inside the directory */
    char kernels[32];        /* kernel set */
    char platform[128];
    char device[128];
    char driver_version[128];
    char options[512];       /* the build options */
    uint64_t bytes;          /* file size */
    int64_t mtime;           /* seconds since the epoch */
    int valid;               /* header and checksum are intact */
} psr_cache_entry;

/* Non-zero when the environment turns the disk tier off: PSR_CACHE is
 * "0", "off", "no" or "false" (any case). */
PSR_API int psr_cache_env_disabled(void);

/* The cache directory the environment selects (it may not exist yet):
 * $PSR_CACHE_DIR, else $XDG_CACHE_HOME/psr, else $HOME/.cache/psr. */
PSR_API psr_status psr_cache_directory(char *buf, size_t capacity);

/* Lists the binaries in dir (NULL: psr_cache_directory()). Writes
 * min(capacity, total) entries, sets *count to the total. A directory
 * that does not exist lists as empty. */
PSR_API psr_status psr_cache_list(const char *dir, psr_cache_entry *entries, size_t capacity,
                                  size_t *count);

/* Removes psr's binaries, and temporary files left over 10 minutes by
 * writers that died, from dir (NULL: the default). Other files are left
 * alone. *removed (may be NULL) counts them. */
PSR_API psr_status psr_cache_clear(const char *dir, size_t *removed);

#ifdef __cplusplus
}
#endif

#endif /* PSR_H */
