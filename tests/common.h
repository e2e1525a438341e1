/* Helpers shared by psr's cmocka tests. */
#ifndef PSR_TEST_COMMON_H
#define PSR_TEST_COMMON_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "check/check.h"
#include "ops/ops.h"
#include "oracle/oracle.h"

#include <psr/psr_experimental.h>

/* Warming only the small stream kernels keeps cache tests quick. */
#define STREAM_ONLY (1u << PSR_KERNELS_STREAM)

/* meson's exit code for a skipped test. */
#define TEST_SKIP 77

/* A TSV known-answer table: columns named by its header row. */
typedef struct tsv_table {
    size_t rows, cols;
    char **header;   /* cols names */
    char ***cells;   /* rows x cols strings */
} tsv_table;

/* Loads tests/data/NAME; fails the test when it is missing. */
tsv_table *tsv_load(const char *name);
void tsv_free(tsv_table *t);
/* Column index by name; fails the test when absent. */
size_t tsv_col(const tsv_table *t, const char *name);
uint64_t tsv_hex(const tsv_table *t, size_t row, const char *col);
int64_t tsv_int(const tsv_table *t, size_t row, const char *col);

/* A fresh directory under $TMPDIR (or /tmp); the caller removes it. */
void make_temp_dir(char *buf, size_t len);
/* rm -rf of a directory made by make_temp_dir. */
void remove_tree(const char *dir);
/* Number of entries in dir whose name starts with prefix. */
size_t count_files(const char *dir, const char *prefix);

/* True when the machine has an OpenCL device. */
bool have_device(void);
/* True in the long suite (PSR_TEST_LONG=1, which `meson test --setup long`
 * sets): the full flag x dtype x method matrix and full-size statistics.
 * The default suite keeps one variant per axis, so that each kernel
 * variant it needs is compiled once per run (tests/meson.build). */
bool test_long(void);
/* Skips the calling case outside the long suite. */
#define LONG_ONLY()                                                                                \
    do {                                                                                           \
        if (!test_long())                                                                          \
            skip();                                                                                \
    } while (0)

/* ---- the fixture of the device tests ---- */

/* What a device test executable shares among its cases. */
typedef struct device_fixture {
    psr_context **ctx;              /* receives the one context of the executable */
    bool *has_fp64;                 /* receives whether the device has fp64, or NULL */
    uint64_t seed;                  /* the test data generator starts here (test_seed) */
    void (*prepare)(psr_context *); /* runs once after the context opens, or NULL */
} device_fixture;

/* Runs the cases of a device test executable around one context, opened
 * on the suite's cache (open_suite_context) in cmocka's group setup and
 * freed in its teardown, so that every kernel variant the cases use is
 * built once per executable, never once per case. Cases may replace
 * *f->ctx for a while (a control context) but must put it back. Returns
 * cmocka's result, or TEST_SKIP on a machine without a device. */
int run_device_group(const char *name, const struct CMUnitTest *tests, size_t count,
                     const device_fixture *f);
#define run_device_tests(tests, ...)                                                               \
    run_device_group(#tests, tests, sizeof tests / sizeof tests[0], &(device_fixture){__VA_ARGS__})

/* A context on the default device with the given cache directory
 * (NULL: disk tier off); log messages are collected in captured_log. */
psr_context *open_context(const char *cache_dir);
/* open_context(NULL) off the vector path (PSR_TUNE_VECTOR=0): the scalar
 * path GPUs take, on any device. */
psr_context *open_scalar_context(void);
/* A context on the suite's cache directory ($PSR_CACHE_DIR, set by meson)
 * with the disk tier as an app gets it (PSR_DISK_CACHE_AUTO): on, except
 * on drivers that cache their own builds (PoCL). */
psr_context *open_suite_context(void);
/* open_suite_context with the warp shuffles flipped from the tuning's
 * choice (before its first build); NULL, with nothing opened, outside the
 * NVIDIA rule, where they do not exist. */
psr_context *open_shuffles_flipped(void);
extern char captured_log[8192];
void capture_log(psr_log_level level, const char *message, void *user_data);

/* ---- tuning and paths, through psr_experimental.h ---- */

/* The context's tuning (psr_context_tuning). */
psr_tuning tuning_of(const psr_context *ctx);
/* psr_context_set_tuning, which must accept t: change only launch-time
 * values once the context has built (two_pass, resident counts, skip and
 * one-launch thresholds, direct_max, min_steps). */
void set_tuning(psr_context *ctx, const psr_tuning *t);
/* The paths the context's last calls took (psr_context_last_paths). */
psr_last_paths last_paths(const psr_context *ctx);

/* ---- launches the default suite can afford ---- */

/* PoCL compiles a kernel again, at a few seconds each, for a launch of
 * 65,535 or more work-items in a dimension; the sampler launches at least
 * a group (64 work-items on PoCL) a row. Tests that sample thousands of
 * short rows go through sample_rows_f32, which launches at most
 * SAMPLE_CHUNK rows at a time: the tokens are the same (each row's depend
 * only on its logits, seed and position), and the default suite's
 * launches reuse the kernels every other test compiles. */
enum { SAMPLE_CHUNK = 1000 };
/* Tests write a call's noise as the library does inside: two bits beside
 * the PSR_SAMPLE_* flags (PSR_FLAG_FP64_NOISE, PSR_FLAG_WIDE_NOISE). */
void set_sample_flags(psr_sample_args *a, unsigned flags);
void set_verify_flags(psr_verify_args *a, unsigned flags);
/* psr_sample_host's positional form, for compact tests. */
psr_status sample_host(psr_context *ctx, const void *logits, psr_dtype dtype, size_t rows, size_t vocab,
                       size_t row_stride, const int64_t *seeds, const int64_t *positions,
                       const float *temperatures, unsigned flags, int32_t *tokens, uint32_t *row_flags,
                       size_t *no_finite_rows);
/* The same with per-row filters (NULL: off). */
psr_status sample_host_filtered(psr_context *ctx, const void *logits, psr_dtype dtype, size_t rows,
                                size_t vocab, size_t row_stride, const int64_t *seeds,
                                const int64_t *positions, const float *temperatures, const int32_t *top_k,
                                const float *top_p, const float *min_p, unsigned flags, int32_t *tokens,
                                uint32_t *row_flags, size_t *no_finite_rows);

/* psr_sample_host of f32 rows in launches of at most SAMPLE_CHUNK rows. */
psr_status sample_rows_f32(psr_context *ctx, const float *logits, size_t rows, size_t vocab,
                           const int64_t *seeds, const int64_t *positions, const float *temperatures,
                           unsigned flags, int32_t *tokens);

/* ---- buffers ---- */

/* The context's OpenCL context and queue (psr_context_cl). */
cl_context cl_context_of(const psr_context *ctx);
cl_command_queue queue_of(const psr_context *ctx);
/* A new read-write buffer of `bytes` on ctx holding a copy of host. */
cl_mem upload(const psr_context *ctx, const void *host, size_t bytes);
/* A new read-write buffer of `bytes` on ctx, contents unset. */
cl_mem device_buffer(const psr_context *ctx, size_t bytes);
/* Blocking read of the first `bytes` of m into host. */
void download(const psr_context *ctx, cl_mem m, void *host, size_t bytes);
/* Releases n buffers; NULL entries are skipped. */
void release_buffers(cl_mem *mems, size_t n);

/* ---- vocabulary shards ---- */

/* A call's status must be `want` and its message must name `words`
 * (psr_last_error(ctx)); anything else fails the test. */
void expect_status(const psr_context *ctx, psr_status st, psr_status want, const char *words);
/* `shards` uneven ranges tiling [0, vocab), some of one token where the
 * vocabulary allows, drawn from rnd(); bounds has shards + 1 entries. */
void random_bounds(size_t vocab, size_t shards, size_t *bounds);
/* The filters' rounds (psr_shard_filter_round) for every shard of args in
 * this process, each round's partials read back and reduced on the host
 * (max in round 0, else sum) into `reduced`, as an all-reduce would;
 * `forget_last_shard`: the reduction leaves out the last shard's partials.
 * partial holds one buffer of rows * PSR_SHARD_FILTER_WORDS words a shard. */
void run_filter_rounds(psr_context *ctx, const psr_sample_args *args, size_t shards, const cl_mem *partial,
                       cl_mem reduced, size_t rows, bool forget_last_shard);

/* ---- internal state that has no call (see common.c) ---- */

/* The filter pass's per-row scratch, regions of one buffer: its
 * thresholds (two floats a row, cl/filter.cl), its state and its
 * histograms. *offset and *bytes get the region's place in the buffer. */
typedef enum filter_scratch_kind { FILTER_CUT, FILTER_STATE, FILTER_HIST } filter_scratch_kind;
cl_mem filter_scratch(psr_context *ctx, filter_scratch_kind which, size_t *offset, size_t *bytes);
/* Marks the filters' state dirty (as a launch cut short leaves it) or clean. */
void set_filter_dirty(psr_context *ctx, bool dirty);
/* Garbage in the counters sampling and logprobs keep zero between launches,
 * as a launch cut short on the device may leave them. */
void poison_counters(psr_context *ctx);
/* The first nonzero word among those the kernels leave zero between
 * launches: the sampler's row counts and floors, the filters' state and
 * histograms, and psr_logprobs' row counts. Returns the region's name
 * (*word: the word's index in it, *value: what it holds), or NULL when
 * every word is zero. */
const char *nonzero_scratch_word(psr_context *ctx, size_t *word, uint32_t *value);
/* psr_verify's launch number: read, and set (to reach its wrap). */
uint32_t verify_epoch(const psr_context *ctx);
void set_verify_epoch(psr_context *ctx, uint32_t epoch);

/* A small deterministic generator for test data (not the sampler's stream):
 * test_seed() restarts it, rnd() gives 32 random bits, uniform() a double in
 * (0, 1), normal() a standard normal float. */
void test_seed(uint64_t seed);
uint32_t rnd(void);
/* A row's seed from two draws, the high word first: written inline as
 * `rnd() << 32 | rnd()`, the order of the draws would be the compiler's. */
int64_t random_seed(void);
/* The same bits, or both NaN (a NaN's payload is the driver's): how a
 * device's float output equals the oracle's. */
bool same_float(float a, float b);
double uniform(void);
float normal(void);

/* The oracle's noise for a call's PSR_SAMPLE_* flags. */
psr_noise_kind noise_of(unsigned flags);

/* The logits of gumbel_tokens.tsv, from the formula in its header. */
void vector_logits(uint32_t vcase, uint32_t row, size_t vocab, float *out);

/* Runs the Philox known-answer kernel of a program over
 * tests/data/philox4x32_10.tsv and asserts every word. */
void check_philox_vectors(psr_context *ctx, cl_program program);

#endif
