/* Timing helpers shared by the psr bench subcommands (bench_util.c). */
#ifndef PSR_CLI_BENCH_H
#define PSR_CLI_BENCH_H

#include <psr/psr_experimental.h>
#include "json.h"

#include <stdio.h>

/* qsort comparator of doubles, ascending. */
int cmp_double(const void *a, const void *b);
/* Microseconds from the start of `first` to the end of `last` (profiling queue). */
double event_span_us(cl_event first, cl_event last);
/* Microseconds from the end of `earlier` (such as a marker enqueued just
 * before a call) to the end of `later`. */
double ends_apart_us(cl_event earlier, cl_event later);
/* Device copy bandwidth in bytes/s, counting bytes read plus written. */
double copy_bandwidth(psr_context *ctx, size_t bytes);
/* Median span of a kernel that does nothing: the fixed cost per launch. */
double empty_kernel_us(psr_context *ctx);
/* The host's time to enqueue one kernel, with or without an event. */
double enqueue_host_us(psr_context *ctx, bool with_event);
/* A monotonic clock in microseconds. */
double bench_now_us(void);

/* One timed call: enqueues it and returns its first and last events. */
typedef psr_status (*bench_launch_fn)(psr_context *ctx, const void *args, cl_event *first, cl_event *last);
/* psr_sample as a bench_launch_fn (args: a psr_sample_args). */
psr_status bench_launch_sample(psr_context *ctx, const void *args, cl_event *first, cl_event *last);
/* Median of `iters` calls (after 3 warm-up calls), each waited for, from
 * the end of a marker enqueued just before to the end of the last kernel. */
psr_status bench_time_launch(psr_context *ctx, bench_launch_fn fn, const void *args, int iters,
                             double *median);
/* Device time per call of `iters` + 1 calls enqueued back to back, as an
 * engine that never waits between steps sees it: the end of the first
 * call's last kernel to the end of the last call's, over iters. */
psr_status bench_time_piped(psr_context *ctx, bench_launch_fn fn, const void *args, int iters,
                            double *per_call);

/* Median device time of `iters` calls with the host ahead, as an engine
 * whose queue is never idle sees it: each call is enqueued behind a buffer
 * copy that outlasts the host's enqueue, and timed from the end of a
 * marker after the copy to the end of the call's last kernel. */
psr_status bench_time_ahead(psr_context *ctx, bench_launch_fn fn, const void *args, int iters,
                            double *median);

/* The options every bench takes. */
typedef struct bench_options {
    const char *shapes; /* --shapes (the caller sets the default) */
    const char *device; /* --device, or NULL */
    bool json;          /* --json */
    int iters;          /* --iters, 1 .. 10000 (the caller sets the default) */
} bench_options;
/* A bench's own options: called with an argument the common parser does
 * not know and the argument after it (NULL at the end). Returns how many
 * it used (1 or 2), 0 when `arg` is not its option, or -1 after a
 * cli_usage_error. */
typedef int (*bench_option_fn)(const char *arg, const char *val, void *user);
/* Parses argv[1 ..] for `command` ("bench filters"): --help, --json,
 * --shapes, --device, --iters, then `extra` (may be NULL). Returns -1 when
 * the bench should run, else the exit code: CLI_OK after printing `usage`
 * for --help, CLI_USAGE after a usage error. */
int bench_parse_options(int argc, char **argv, const char *command, void (*usage)(FILE *),
                        bench_option_fn extra, void *user, bench_options *o);

/* Parses "BxV,BxV,..." (each 1 .. 2^20) into rows and vocab; false when malformed. */
bool bench_parse_bxv(const char *s, size_t *rows, size_t *vocab, size_t cap, size_t *n);
/* n values of N(0, sigma^2) from a small LCG (the benches' logits). */
void bench_normal_fill(float *x, size_t n, double sigma, uint64_t *state);
/* {"device": name, "results": [ ... opened for the rows. */
void bench_json_begin(json_writer *w, const psr_device_info *info);

/* psr bench verify (bench_verify.c) and psr bench logprobs (bench_logprobs.c). */
int bench_verify(int argc, char **argv);
int bench_logprobs(int argc, char **argv);
/* psr bench filters (bench_filters.c). */
int bench_filters(int argc, char **argv);

#endif
