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
/* A context on the default device with the given cache directory
 * (NULL: disk tier off); log messages are collected in captured_log. */
psr_context *open_context(const char *cache_dir);
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

/* A read-write buffer on ctx, filled from host when it is not NULL. */
cl_mem test_buffer(psr_context *ctx, size_t bytes, const void *host);
/* Blocking read of bytes from m into host. */
void test_read(psr_context *ctx, cl_mem m, size_t bytes, void *host);

/* A small deterministic generator for test data (not the sampler's stream):
 * test_seed() restarts it, rnd() gives 32 random bits, uniform() a double in
 * (0, 1), normal() a standard normal float. */
void test_seed(uint64_t seed);
uint32_t rnd(void);
double uniform(void);
float normal(void);

/* The logits of gumbel_tokens.tsv, from the formula in its header. */
void vector_logits(uint32_t vcase, uint32_t row, size_t vocab, float *out);

/* Runs the Philox known-answer kernel of a program over
 * tests/data/philox4x32_10.tsv and asserts every word. */
void check_philox_vectors(psr_context *ctx, cl_program program);

#endif
