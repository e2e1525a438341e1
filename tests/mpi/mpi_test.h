/* What the MPI tests share: the check counter, the globals every check
 * reads, a generator that gives every rank the same sequence, and main()'s
 * set-up and tally. Each test keeps its own seed and its own checks. */
#ifndef PSR_MPI_TEST_H
#define PSR_MPI_TEST_H

#include <psr/psr_mpi.h>

#include <stdint.h>
#include <stdio.h>

extern int rank, size;
extern psr_context *ctx;
extern cl_context cl_ctx;
extern cl_command_queue queue;
extern int failures, checks;

/* Counts a check; a failed one is printed with its rank and line. */
#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        checks++;                                                          \
        if (!(cond)) {                                                     \
            failures++;                                                    \
            fprintf(stderr, "rank %d: %s:%d: ", rank, __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fputc('\n', stderr);                                           \
        }                                                                  \
    } while (0)

/* splitmix64 from the test's seed: the same sequence on every rank. */
uint64_t rnd(void);
/* Uniform in [-1, 1). */
float uniform_pm(void);

/* A new read-write buffer on the context's OpenCL context holding a copy of host. */
cl_mem upload(const void *host, size_t bytes);

/* A call's status must be `want`, and then its message must contain
 * `text` (NULL: any message). */
void expect(const char *name, psr_status got, psr_status want, const char *text);

/* Runs a test's checks on every rank (2 or more) around one context, the
 * generator starting at `seed`; rank 0 prints the tally. Returns main()'s
 * exit status: 0 when no check failed on any rank. */
int mpi_test_main(int argc, char **argv, uint64_t seed, void (*run_checks)(void));

#endif
