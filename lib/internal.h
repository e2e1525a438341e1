/* Internal interfaces of libpsr, shared by lib/ and the tests. */
#ifndef PSR_INTERNAL_H
#define PSR_INTERNAL_H

#include <psr/psr.h>

#include <stdarg.h>
#include <stdbool.h>

#define PSR_ERROR_MAX 1024
#define PSR_PATH_MAX 512
/* psr_verify's launches are numbered 1 .. PSR_VERIFY_EPOCHS - 1 and then
 * again: the statistics kernel's rejection words keep the number in their
 * top 20 bits (cl/verify.cl, PSR_REJECT_BITS). */
#define PSR_VERIFY_EPOCHS (1u << 20)

/* ---- errors and logging (status.c) ---- */

/* Records the detail of a failure (on ctx, or per thread when ctx is NULL),
 * sends it to the log callback, and returns status. */
psr_status psr_fail(psr_context *ctx, psr_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Argument checks: fail with `status` and a message unless cond holds.
 * Needs a psr_context *ctx in scope. */
#define REQUIRE(cond, status, ...)                     \
    do {                                               \
        if (!(cond))                                   \
            return psr_fail(ctx, status, __VA_ARGS__); \
    } while (0)
void psr_log(const psr_context *ctx, psr_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Clears the thread's context-less error detail at the start of a call. */
void psr_clear_thread_error(void);
const char *psr_cl_error_name(cl_int err);

/* ---- devices (device.c, selector.c) ---- */

typedef struct psr_found_device {
    cl_platform_id platform;
    cl_device_id device;
    psr_device_info info;
} psr_found_device;

/* Every device of every platform. *devices is malloc'ed (NULL when none). */
psr_status psr_enumerate_devices(psr_found_device **devices, size_t *count);
/* Fills *out from the OpenCL queries of one device. */
psr_status psr_query_device(cl_platform_id platform, cl_device_id device, unsigned platform_index,
                            unsigned device_index, psr_device_info *out);

typedef enum psr_selector_kind {
    PSR_SELECT_AUTO,
    PSR_SELECT_TYPE,
    PSR_SELECT_VENDOR,
    PSR_SELECT_INDEX,
    PSR_SELECT_NAME
} psr_selector_kind;

typedef struct psr_selector {
    psr_selector_kind kind;
    psr_device_type type;     /* PSR_SELECT_TYPE */
    char text[128];           /* PSR_SELECT_VENDOR (canonical vendor) and PSR_SELECT_NAME */
    unsigned platform_index;  /* PSR_SELECT_INDEX */
    unsigned device_index;
} psr_selector;

/* Parses a selector; PSR_ERR_BAD_SELECTOR with a message in err otherwise. */
psr_status psr_selector_parse(const char *text, psr_selector *out, char *err, size_t err_len);
/* Resolves a selector (NULL: $PSR_DEVICE, else "auto") to one device. */
psr_status psr_select_found(const char *selector, psr_found_device *out);
/* Index into devices of the device the selector picks, or -1. */
long psr_selector_match(const psr_selector *sel, const psr_found_device *devices, size_t count);

/* ---- per-device tuning (tuning.c) ---- */

typedef struct psr_tuning {
    size_t work_group_size;    /* work-items per group of the sampling kernels */
    size_t resident_per_unit;  /* work-groups one compute unit runs at once */
    size_t verify_resident_per_unit; /* the same for psr_verify_sample (more registers) */
    const char *rule;          /* which table entry chose these */
    bool mulhi;                /* Random123 multiplies through mul_hi (else a 64-bit product) */
    bool two_pass;             /* always finish rows in a second kernel (PSR_TUNE_TWO_PASS) */
    unsigned min_steps;        /* steps of tokens a sampling work-group takes at least (2; PSR_TUNE_MIN_STEPS) */
    unsigned vector_width;     /* lanes per work-item of the sampler's vector path (cl/vecmath.cl); 0: off */
    bool lp_segment_tau;       /* logprobs: the segment bound before the exact one (cl/logprobs.cl) */
    bool warp_shuffle;         /* NVIDIA warp shuffles in the verify program (cl/shuffle.cl; PSR_TUNE_SHUFFLE) */
    size_t verify_skip_groups; /* psr_verify skips rows past a recorded rejection when its statistics
                                  take more groups than this (PSR_TUNE_VERIFY_SKIP) */
    size_t verify_fused_groups; /* psr_verify runs in one launch (psr_verify_fused) when it takes at most
                                   this many groups in all (PSR_TUNE_VERIFY_FUSED; 0: never) */
    bool verify_fused_broken;  /* the driver builds psr_verify_fused wrongly (PoCL 3.1: its work-item 0
                                  sections ran on every work-item), so it is never used */
    size_t logprobs_one_blocks; /* psr_logprobs runs in one launch (psr_logprobs_one) when it takes at
                                   most this many blocks (PSR_TUNE_LOGPROBS_ONE; 0: never) */
    size_t logprobs_few_blocks; /* psr_logprobs takes psr_logprobs_partial_few (the segment bound
                                   first) when it takes at most this many blocks
                                   (PSR_TUNE_LOGPROBS_FEW; 0: never) */
    size_t filter_direct_max;  /* filtered rows whose kept tokens lie in a candidate list of at most
                                  this many are drawn by the filter pass (PSR_TUNE_FILTER_DIRECT) */
    bool driver_caches;        /* the driver keeps its own cache of compiled kernels (PoCL), so
                                  psr's disk tier is off unless asked for (PSR_CACHE=1) */
    char extra_options[256];   /* appended to every build (PSR_TUNE_BUILD_OPTIONS), or "" */
} psr_tuning;

psr_tuning psr_tuning_for(const psr_device_info *info);
/* PSR_CACHE=1 (on, yes, true): the disk tier even where the driver caches. */
bool psr_cache_env_forced(void);
/* Appends -D options to every build of this context (tests and the
 * unbiasedness control); only before its first build. */
psr_status psr_context_add_build_options(psr_context *ctx, const char *options);

/* ---- kernels and programs (kernels.c, program.c) ---- */

typedef enum psr_kernel_set {
    PSR_KERNELS_STREAM = 0, /* Philox and the random stream (cl/stream.cl) */
    PSR_KERNELS_GUMBEL = 1, /* Gumbel-max sampling (cl/gumbel.cl) */
    PSR_KERNELS_VERIFY = 2, /* verification of speculative drafts (cl/verify.cl) */
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
} psr_variant;

/* Does the set read logits (dtype matters) or compute noise (math mode matters)? */
bool psr_kernel_set_uses_logits(psr_kernel_set set);
/* A small integer naming a variant, for the kernel-object cache. */
unsigned psr_variant_code(const psr_variant *v);
/* Builds or loads every variant of the sets in set_mask (bit i: set i). */
psr_status psr_warm_sets(psr_context *ctx, unsigned set_mask, size_t *variants);
/* Returns a kernel of a variant, created once per context and cached. */
psr_status psr_kernel_get(psr_context *ctx, const psr_variant *v, const char *name, cl_kernel *out);

const char *psr_kernel_set_name(psr_kernel_set set);
/* The full OpenCL C source of a kernel set (embedded Random123 included).
 * Malloc'ed; the caller frees it. NULL when out of memory. */
char *psr_kernel_source(psr_kernel_set set);
/* Canonical build options of a variant on this context's device. */
void psr_build_options(const psr_context *ctx, const psr_variant *v, char *buf, size_t len);

/* Returns the program of a variant: memory tier, then disk tier, then a
 * build from source. The context owns the program. */
psr_status psr_program_get(psr_context *ctx, const psr_variant *v, cl_program *out);
/* Builds arbitrary source with options, bypassing both cache tiers (used
 * by psr_program_get and by tests). The caller releases the program. */
psr_status psr_program_build_source(psr_context *ctx, const char *label, const char *source,
                                    const char *options, cl_program *out);

/* ---- sampling (sample.c) ---- */

size_t psr_dtype_size(psr_dtype dtype);
/* Bytes of logits a shape reads, or 0 when that overflows a size_t. */
size_t psr_logits_bytes(size_t offset, size_t rows, size_t stride, size_t vocab, size_t esize);
/* Checks PSR_SAMPLE_* flags and applies the fp64 policy: the flags to use. */
psr_status psr_resolve_flags(psr_context *ctx, unsigned flags, const char *name, unsigned *out);
/* Fails with PSR_ERR_BUFFER_TOO_SMALL unless buf holds `need` bytes. */
psr_status psr_check_buffer(psr_context *ctx, cl_mem buf, size_t need, const char *name);
/* How a row is split over work-groups: `groups` chunks of `chunk` tokens
 * (a multiple of 4). */
void psr_split_rows(const psr_context *ctx, size_t rows, size_t vocab, cl_uint *chunk, cl_uint *groups);
/* The same for a kernel of which `resident_per_unit` groups fit a compute unit. */
void psr_split_rows_for(const psr_context *ctx, size_t rows, size_t vocab, size_t resident_per_unit,
                        cl_uint *chunk, cl_uint *groups);
/* clSetKernelArg for arguments 0 .. n-1, failing with the kernel's name. */
psr_status psr_set_kernel_args(psr_context *ctx, cl_kernel k, const char *name, int n,
                               const size_t *sizes, const void *const *values);
/* Enqueues `groups` work-groups of `local` work-items. */
psr_status psr_enqueue_groups(psr_context *ctx, cl_kernel k, const char *name, size_t groups,
                              size_t local, cl_uint nwait, const cl_event *wait, cl_event *event);
/* psr_sample with both ends exposed: *first is the first kernel's event,
 * *last the last one's (the same event with one kernel). Either may be NULL. */
psr_status psr_sample_enqueue(psr_context *ctx, const psr_sample_args *args, cl_event *first,
                              cl_event *last);

/* ---- logit filters (filter.c) ---- */

/* Are any of args' top_k, top_p, min_p set? */
bool psr_filter_requested(const psr_sample_args *args);
/* Host checks of the filter buffers (sizes; not with PSR_SAMPLE_PROBS). */
psr_status psr_filter_check(psr_context *ctx, const psr_sample_args *args, unsigned flags);
/* The threshold pre-pass of variant v, in two steps so that a caller can
 * set its own kernels' arguments between them and then launch everything
 * back to back: psr_filter_prepare reserves the scratch and sets the
 * pass's arguments; plan->cut is the per-row output for psr_gumbel_sample
 * (two floats per row: the threshold, and 1 where the pass drew the row's
 * token into args->tokens, which `draw` allows). psr_filter_launch then
 * enqueues the pass after args' wait list. */
typedef struct psr_filter_plan {
    cl_kernel scan, collect, collect_mass; /* the last two NULL where not needed */
    size_t groups;
    cl_mem cut;
} psr_filter_plan;
psr_status psr_filter_prepare(psr_context *ctx, const psr_sample_args *args, const psr_variant *v,
                              bool draw, psr_filter_plan *plan);
psr_status psr_filter_launch(psr_context *ctx, const psr_sample_args *args, const psr_filter_plan *plan,
                             cl_event *event);
/* The host check of one request's filter values: PSR_OK or PSR_ERR_FILTER_RANGE. */
psr_status psr_filter_check_values(psr_context *ctx, const char *who, size_t index,
                                   const int32_t *top_k, const float *top_p, const float *min_p);

/* psr_verify with both ends exposed (for psr bench): *first is the first
 * kernel's event, *last the last one's. Either may be NULL. */
psr_status psr_verify_enqueue(psr_context *ctx, const psr_verify_args *args, cl_event *first,
                              cl_event *last);

/* ---- the lower-tail census (tail.c) ---- */

/* Counts draws of the exponential variate E behind one noise option's
 * Gumbel noise that fall below 2^-24 (*c24) and 2^-32 (*c32), over `draws`
 * draws rounded down to whole work-groups (*done: how many were drawn).
 * top_slice: only words whose 64-bit uniform is in its top 2^-32, where
 * E < 2^-32 needs all 64 bits. */
psr_status psr_tail_census(psr_context *ctx, unsigned flags, unsigned long long draws,
                           bool top_slice, unsigned long long *done, unsigned long long *c24,
                           unsigned long long *c32);

/* ---- disk cache (disk_cache.c) ---- */

typedef struct psr_cache_meta {
    char kernels[32];
    char platform[128];
    char device[128];
    char driver_version[128];
    char options[512];
    char library[32];
} psr_cache_meta;

typedef enum psr_cache_read {
    PSR_CACHE_READ_OK,
    PSR_CACHE_READ_MISSING,
    PSR_CACHE_READ_INVALID,   /* truncated, corrupt or foreign: discard it */
    PSR_CACHE_READ_UNREADABLE /* exists but cannot be read (permissions): build, don't discard */
} psr_cache_read;

/* Resolves the cache directory from options (NULL) and the environment. */
psr_status psr_cache_resolve_dir(const char *option_dir, char *buf, size_t len);
/* Creates dir and its parents (mode 0700 for new ones). 0 or an errno. */
int psr_mkdir_p(const char *dir);
/* The file of a key inside dir. */
void psr_cache_path(const char *dir, const uint8_t key[32], char *buf, size_t len);
/* Reads a binary; checks magic, format, sizes, key and checksum.
 * *payload is malloc'ed on PSR_CACHE_READ_OK. why says what was wrong. */
psr_cache_read psr_cache_read_file(const char *path, const uint8_t key[32], unsigned char **payload,
                                   size_t *payload_len, psr_cache_meta *meta, const char **why);
/* Writes a binary atomically (temporary file, then rename). 0 or an errno. */
int psr_cache_write_file(const char *dir, const uint8_t key[32], const psr_cache_meta *meta,
                         const unsigned char *payload, size_t payload_len);

/* ---- the context (context.c) ---- */

typedef struct psr_program_entry {
    char *key; /* kernel set name '|' options */
    cl_program program;
} psr_program_entry;

typedef struct psr_kernel_entry {
    unsigned variant;  /* psr_variant_code */
    const char *name;  /* a string literal */
    cl_kernel kernel;
} psr_kernel_entry;

/* Device scratch, grown to the largest shape seen, never shrunk. */
typedef struct psr_scratch {
    cl_mem buffer;
    size_t bytes;
} psr_scratch;

/* Grows a scratch buffer to at least `bytes`; new memory is zero-filled
 * (enqueued, so it is ordered before the kernels that follow). */
psr_status psr_scratch_reserve(psr_context *ctx, psr_scratch *s, size_t bytes);

struct psr_context {
    cl_platform_id platform;
    cl_context cl_ctx;
    cl_device_id device;
    cl_command_queue queue;
    bool device_retained; /* adopted device: released on free */
    psr_device_info info; /* capabilities already masked */
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

    psr_scratch part_value; /* per (row, work-group) best value */
    psr_scratch part_index; /* per (row, work-group) best index */
    psr_scratch best_keys;  /* per split row: each group's best key (one kernel, cl/gumbel.cl) */
    psr_scratch best_count; /* per split row: the groups that stored theirs, zero between launches */
    psr_scratch filter_cut;   /* per row: the filter threshold (filter.c) */
    psr_scratch filter_state; /* per row: largest key, candidate count; zero between launches */
    psr_scratch filter_hist;  /* per row: 12-bit histogram (counts or masses); zero between launches */
    psr_scratch filter_cand;  /* per row: candidate keys for the exact search */
    bool filter_dirty;        /* a filter launch was cut short: clear the state first */
    psr_scratch verify[13]; /* psr_verify's per-row statistics, walks, status, skip and ticket state (verify.c) */
    psr_scratch logprobs[6]; /* psr_logprobs' per-block partials and per-row values and counts (logprobs.c) */
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

    char *build_log;
    char error[PSR_ERROR_MAX];
};

/* ---- the host oracle (oracle.c): the stream and noise of the kernels ---- */

void psr_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
void psr_oracle_draw(uint64_t seed, uint64_t offset, uint32_t out[4]);
float psr_oracle_u32(uint32_t w);
double psr_oracle_u64(uint32_t w0, uint32_t w1);
uint32_t psr_oracle_row_key(uint64_t seed, uint64_t pos, bool drafting);
float psr_oracle_log(float x);
float psr_oracle_log1p_neg(float u);
float psr_oracle_recip(float b);
/* 1/T as the kernels take it (psr_temp_recip): T above 2^126 as 2^126. */
float psr_oracle_temp_recip(float t);
float psr_oracle_div(float a, float b, float r);
double psr_oracle_log_d(double x);
float psr_oracle_gumbel32(uint32_t row_key, uint32_t token);
double psr_oracle_gumbel64(uint32_t row_key, uint32_t token);
typedef enum psr_noise_kind { PSR_NOISE_FP32, PSR_NOISE_FP64, PSR_NOISE_WIDE } psr_noise_kind;
/* E = -log(u) of the 64-bit uniform, in fp32 only (cl/gumbel.cl, USE_WIDE). */
float psr_oracle_wide_e(uint32_t w0, uint32_t w1);
float psr_oracle_gumbel_wide(uint32_t row_key, uint32_t token);
/* The token the deterministic Gumbel kernel picks for one fp32 row. */
int32_t psr_oracle_sample_row(const float *logits, size_t vocab, float temperature, int64_t seed,
                              int64_t pos, bool drafting, psr_noise_kind noise, bool *no_finite);

/* The token the exponential race over probabilities picks (PSR_SAMPLE_RACE |
 * PSR_SAMPLE_PROBS): argmax p * (1/E), fp32 or (fp64) double. */
int32_t psr_oracle_race_row(const float *probs, size_t vocab, float temperature, int64_t seed,
                            int64_t pos, bool drafting, psr_noise_kind noise, bool *no_positive);

float psr_oracle_exp_neg(float y);
/* 2^z for z <= 0 as cl/detmath.cl psr_det_exp2_neg (the log-sum-exp term). */
float psr_oracle_exp2_neg(float z);

/* The filter threshold of cl/filter.cl for one fp32 row (lib/oracle_filter.c):
 * keep token i iff its scaled logit psr_oracle_div(x, T) >= the result;
 * -inf when nothing is removed, NaN for a bad top_p or min_p. top_p = 1,
 * min_p = 0 and top_k <= 0 or >= vocab are off. */
float psr_oracle_filter_threshold(const float *logits, size_t vocab, float temperature,
                                  int32_t top_k, float top_p, float min_p);
/* The scaled logit the kernels compare with the threshold (NaN stays NaN). */
float psr_oracle_scaled(float x, float temperature);

/* The log-sum-exp of x / T over a row in psr's fixed order (cl/verify.cl);
 * r = psr_oracle_recip(t); t = 1 uses x itself. */
float psr_oracle_row_lse(const float *x, size_t vocab, float t, float r);
/* psr_logprobs on the host (lib/oracle_logprobs.c), one fp32 row: the
 * token's logprob and rank, and the top_n ids and logprobs; cut is the
 * row's filter threshold (-inf: none). */
void psr_oracle_logprobs_row(const float *x, size_t vocab, float t, bool raw, float cut, int32_t token,
                             int top_n, float *logprob, int32_t *rank, int32_t *top_ids, float *top_logprobs);
/* psr_verify on the host (lib/oracle_verify.c), for fp32 target logits. */
typedef struct psr_oracle_verify_in {
    size_t requests, rows, vocab, max_drafts;
    const int32_t *cu;           /* [requests + 1] */
    const float *target;         /* [rows, vocab] */
    const float *draft_cache;    /* [requests, cache_k, vocab] or NULL (one-hot drafts) */
    size_t cache_k;
    const int32_t *draft_tokens; /* [rows] */
    const int64_t *seeds;        /* [requests] */
    const float *temperatures;   /* [requests] */
    const int64_t *positions;    /* [rows] */
    bool greedy_all;
    psr_noise_kind noise;
} psr_oracle_verify_in;
/* tokens: [requests, max_drafts + 1]; num_sampled: [requests]. */
void psr_oracle_verify(const psr_oracle_verify_in *in, int32_t *tokens, int32_t *num_sampled);

/* ---- goodness of fit (chi2.c) ---- */

typedef struct psr_chi2_result {
    double chi2;
    size_t df;
    double threshold; /* df + 10 * sqrt(2 df) */
} psr_chi2_result;
/* Pearson's chi-square of observed counts against expected probabilities
 * (n trials). Bins whose expected count is below 5 are merged, smallest
 * first, until each merged bin expects at least 5. A hit on a
 * zero-probability bin makes chi2 infinite. */
psr_chi2_result psr_chi2_test(const uint64_t *observed, const double *p, size_t bins, uint64_t n);
/* softmax(logits / t) in double precision; -inf and NaN get 0. */
void psr_softmax(const float *logits, size_t n, double t, double *p);

/* ---- the unbiasedness experiment (unbiased.c) ---- */

#define PSR_UNBIASED_VOCAB 16
#define PSR_UNBIASED_MAX_K 8
typedef struct psr_unbiased_result {
    size_t k, trials;
    double p[PSR_UNBIASED_VOCAB]; /* the target distribution, softmax(randn(16)) */
    double q[PSR_UNBIASED_VOCAB]; /* the draft's, softmax(-target) */
    uint64_t counts[PSR_UNBIASED_MAX_K + 1][PSR_UNBIASED_VOCAB]; /* output tokens per position */
    uint64_t reached[PSR_UNBIASED_MAX_K + 1]; /* requests that output a token there */
    uint64_t accepted;                        /* drafts accepted, all positions */
} psr_unbiased_result;
/* `trials` requests of k drafts, drawn by the salted draft sampler from q
 * (with the draft cache), verified against p at T = 1. Every position's
 * output should be distributed as p. A context built with
 * -DPSR_TEST_DISABLE_DRAFT_SALT=1 runs the control. */
psr_status psr_unbiased_run(psr_context *ctx, size_t k, size_t trials, uint64_t seed,
                            psr_unbiased_result *out);

/* ---- sha256.c ---- */

typedef struct psr_sha256 {
    uint32_t state[8];
    uint64_t length;
    unsigned char block[64];
    size_t used;
} psr_sha256;

void psr_sha256_init(psr_sha256 *h);
void psr_sha256_update(psr_sha256 *h, const void *data, size_t len);
void psr_sha256_final(psr_sha256 *h, uint8_t digest[32]);
void psr_hex(const uint8_t *bytes, size_t n, char *out /* 2n+1 */);

/* ---- small string helpers (status.c) ---- */

/* Copies like strlcpy: always terminates, returns strlen(src). */
size_t psr_strlcpy(char *dst, const char *src, size_t size);
/* True when the environment variable is set to anything but "" or "0". */
bool psr_env_flag(const char *name);
/* Case-insensitive substring test. */
bool psr_contains_nocase(const char *haystack, const char *needle);

#endif
