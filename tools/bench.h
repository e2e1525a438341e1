/* Pieces shared by the psr bench subcommands (bench_util.c): timing,
 * option parsing, the device's fixed costs and the benches' inputs. */
#ifndef PSR_CLI_BENCH_H
#define PSR_CLI_BENCH_H

#include <psr/psr_experimental.h>
#include "json.h"

#include <stdio.h>

/* ---- clocks and events ---- */

/* qsort comparator of doubles, ascending. */
int cmp_double(const void *a, const void *b);
/* Microseconds from the start of `first` to the end of `last` (profiling queue). */
double event_span_us(cl_event first, cl_event last);
/* Microseconds from the end of `earlier` (such as a marker enqueued just
 * before a call) to the end of `later`. */
double ends_apart_us(cl_event earlier, cl_event later);
/* A monotonic clock in microseconds. */
double bench_now_us(void);

/* ---- the device's fixed costs ---- */

/* Device copy bandwidth in bytes/s, counting bytes read plus written. */
double copy_bandwidth(psr_context *ctx, size_t bytes);
/* Median span of a kernel that does nothing: the fixed cost per launch. */
double empty_kernel_us(psr_context *ctx);
/* The host's time to enqueue one kernel, with or without an event. */
double enqueue_host_us(psr_context *ctx, bool with_event);

/* What every launch pays on this device, measured once before the rows. */
typedef struct bench_costs {
    double copy_bw;          /* bytes/s read plus written; <= 0 when it could not be measured */
    double empty_us;         /* an empty kernel's span */
    double enqueue_us;       /* the host's enqueue of one kernel */
    double enqueue_event_us; /* the same, asking for an event */
} bench_costs;
void bench_measure_costs(psr_context *ctx, const psr_device_info *info, bench_costs *c);
/* The costs as JSON keys: the bandwidth in GB/s under `bandwidth_key`,
 * then empty_kernel_us, enqueue_host_us and enqueue_event_host_us. */
void bench_json_costs(json_writer *w, const bench_costs *c, const char *bandwidth_key);

/* ---- timing a call ---- */

/* One timed call: enqueues it and returns its first and last events. */
typedef psr_status (*bench_launch_fn)(psr_context *ctx, const void *args, cl_event *first, cl_event *last);
/* psr_sample as a bench_launch_fn (args: a psr_sample_args). */
psr_status bench_launch_sample(psr_context *ctx, const void *args, cl_event *first, cl_event *last);
/* Median span, first kernel's start to last kernel's end, of `iters`
 * calls each waited for, after `warmup` calls; first_median (may be NULL)
 * gets the median span of the first kernel alone. */
psr_status bench_time_spans(psr_context *ctx, bench_launch_fn fn, const void *args, int warmup, int iters,
                            double *median, double *first_median);
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
/* Median host time of one call, from its start until it returns, with no
 * event asked for and the queue drained before each (as a decode step at
 * small batch pays it), over `iters` calls after 3 warm-up calls. fn gets
 * NULL first and last. */
psr_status bench_time_host(psr_context *ctx, bench_launch_fn fn, const void *args, int iters, double *median);
/* bench_time_launch (an idle queue, the host's enqueue included) and then
 * bench_time_ahead (the device's time alone) of the same call. */
psr_status bench_time_idle_and_device(psr_context *ctx, bench_launch_fn fn, const void *args, int iters,
                                      double *idle_us, double *device_us);

/* ---- options and the session every bench opens ---- */

#define BENCH_MAX_SHAPES 32

/* The options every bench takes. */
typedef struct bench_options {
    const char *shapes; /* --shapes (the caller sets the default, or NULL for none) */
    const char *device; /* --device, or NULL */
    bool json;          /* --json */
    int iters;          /* --iters, 1 .. 10000 (the caller sets the default) */
    size_t shape[BENCH_MAX_SHAPES][3]; /* --shapes parsed: B, V or R, K, V each */
    size_t nshapes;
} bench_options;

/* A bench's own option that takes a value: called with an option the
 * common parser does not know and its value. Returns CLI_OK, CLI_USAGE
 * after a cli_usage_error, or -1 when `arg` is not its option. */
typedef int (*bench_option_fn)(void *user, const char *arg, const char *val);
/* The options every bench takes with a value. */
#define BENCH_VALUES "--shapes --device --iters"

/* An open bench: its options, a profiling context, its device and the
 * JSON writer of --json. */
typedef struct bench_session {
    bench_options o;
    psr_context *ctx;
    psr_device_info info;
    json_writer w;
    bool json_open; /* bench_json_begin opened the document */
} bench_session;

/* What tells one bench from another: its command line, and for
 * bench_main its header and the work of one shape. */
typedef struct bench_command {
    const char *name;            /* "bench filters", in messages */
    void (*usage)(FILE *out);
    bench_option_fn extra;       /* the bench's own options, or NULL */
    const char *values;          /* with extra: BENCH_VALUES and its options ("... --top-n") */
    size_t dims;                 /* numbers per shape: 2 (BxV) or 3 (RxKxV) */
    size_t max_shapes;           /* at most BENCH_MAX_SHAPES */
    const char *shapes_expected; /* what a bad --shapes is not: "a list of BxV" */
    /* The first lines, or the JSON document's first keys (bench_json_begin). */
    void (*header)(bench_session *s, void *user);
    /* Times and prints one shape: its dims numbers. */
    psr_status (*shape)(bench_session *s, const size_t *shape, void *user);
    /* Optional: checks the parsed options against the shapes before the
     * header, CLI_OK or CLI_USAGE after a message. */
    int (*check)(bench_session *s, void *user);
} bench_command;

/* Parses argv[1 ..] into s->o (set its defaults first) as cli_parse does:
 * --help, --json, --shapes, --device, --iters, then cmd->extra's; then
 * the shapes, and opens a profiling context on the device. Returns -1 when the bench
 * should run, else the exit code: CLI_OK after printing the usage for
 * --help, CLI_USAGE after a usage error, CLI_FAILED when no context. */
int bench_open(bench_session *s, const bench_command *cmd, int argc, char **argv, void *user);
/* A whole bench: bench_open, cmd->header, cmd->shape for each shape until
 * one fails (reported), bench_close. Returns the exit code. */
int bench_main(const bench_command *cmd, bench_session *s, int argc, char **argv, void *user);
/* Ends a text header's "device:" line: on PoCL CPU devices with how PoCL's
 * threads ran (the JSON's "pocl_threads"), then the newline. */
void bench_end_device_line(const bench_session *s);
/* {"device": name, ... : the caller adds its keys, then bench_json_results. */
void bench_json_begin(bench_session *s);
/* "results": [ ... for the rows. */
void bench_json_results(bench_session *s);
/* Closes the JSON document when it is open and rc is CLI_OK, frees the
 * context and returns rc. */
int bench_close(bench_session *s, int rc);

/* Parses "AxB,..." (dims 2, each 1 .. 2^20) or "RxKxV,..." (dims 3: R 1 ..
 * 2^20, K 0 .. 64, V 1 .. 2^24) into shape[]; false when malformed or
 * longer than cap. */
bool bench_parse_shapes(const char *s, size_t dims, size_t cap, size_t (*shape)[3], size_t *n);

/* ---- inputs ---- */

/* One N(0, 1) value from a small LCG (the benches' logits). */
double bench_normal(uint64_t *state);
/* n values of N(0, sigma^2) from it. */
void bench_normal_fill(float *x, size_t n, double sigma, uint64_t *state);

/* Logit profiles (--logits): N(0, 3); peaked: N(0, 1) with one logit 25
 * above; zipf: -1.1 ln(rank) + N(0, 0.5), ranks shuffled over the row
 * (word frequencies); confident: N(0, 1) with the top token holding 90%
 * of the mass at T = 1. */
typedef enum { BENCH_NORMAL, BENCH_PEAKED, BENCH_ZIPF, BENCH_CONFIDENT, BENCH_PROFILES } bench_profile;
#define BENCH_PROFILE_NAMES "normal|peaked|zipf|confident"
/* --logits in a bench's usage text (a printf format: 90%%), its lines
 * after the first indented by `pad`, a string literal of spaces. */
#define BENCH_PROFILE_HELP(pad)                                                                    \
    BENCH_PROFILE_NAMES " (default normal): N(0, 3);\n" pad "N(0, 1) with one logit 25 above;"    \
                        " -1.1 ln(rank) + N(0, 0.5),\n" pad "shuffled; N(0, 1) with the top token"  \
                        " holding 90%% at T = 1\n"
/* The profile's name ("normal" ...). */
const char *bench_profile_name(bench_profile p);
/* --logits NAME into *p; a usage error naming `bench` otherwise. */
int bench_parse_profile(const char *bench, const char *val, bench_profile *p);
/* rows x vocab logits of profile p from *state. */
void bench_profile_fill(float *x, size_t rows, size_t vocab, bench_profile p, uint64_t *state);

/* The device buffers of `rows` requests of one row each, by index. */
enum { BENCH_LOGITS, BENCH_TEMPS, BENCH_SEEDS, BENCH_POSITIONS, BENCH_TOKENS, BENCH_ROW_BUFFERS };
/* Fills m[0 .. BENCH_ROW_BUFFERS): logits of `profile` from *state, T 0.8,
 * seed = the row, position `pos` on every row, and room for the tokens. */
psr_status bench_make_rows(psr_context *ctx, size_t rows, size_t vocab, int64_t pos, bench_profile profile,
                           uint64_t *state, cl_mem *m);
/* psr_sample_args over those buffers. */
void bench_sample_args(psr_sample_args *a, size_t rows, size_t vocab, const cl_mem *m);

/* A reference time under `key` and us over it under `ratio_key`, or two
 * nulls where there is none (ref <= 0). */
void bench_json_reference(json_writer *w, const char *key, const char *ratio_key, double ref, double us);

/* The same as text for a table: "%.1f" and "%.2f" of us over it, or "-"
 * and "-" (each buffer at least 16 bytes). */
void bench_format_reference(double ref, double us, char *ref_text, char *ratio_text);

/* ---- vocabulary shards (bench_shards.c) ---- */

/* One psr_sample call split into `count` shards over `bounds`: each shard
 * on its columns of the same logits (a sub-buffer where its first column
 * is aligned to CL_DEVICE_MEM_BASE_ADDR_ALIGN, else logits_offset),
 * writing its records, then psr_combine into whole's tokens. own_queues:
 * shards 1 .. count-1 each on a context and queue of its own. */
typedef struct bench_shards bench_shards;
/* *out is set even on failure: free it with bench_shards_free. */
psr_status bench_shards_make(psr_context *ctx, const psr_sample_args *whole, size_t count, const size_t *bounds,
                             bool own_queues, bench_shards **out);
/* A bench_launch_fn (args: a bench_shards): the first shard's first
 * event and the combine's. */
psr_status bench_launch_shards(psr_context *ctx, const void *args, cl_event *first, cl_event *last);
void bench_shards_free(bench_shards *b);

/* A call made in rounds across shards (psr_logprobs_shard_round,
 * psr_verify_shard_round), all on the context's queue. */
/* Enqueues round `round` on every shard that takes part: *first gets the
 * first shard's event and *last the last one's (both to release). */
typedef psr_status (*bench_round_fn)(psr_context *ctx, void *args, unsigned round, cl_event *first,
                                     cl_event *last);
/* The app's exchange after round `round` (it may do nothing), on the
 * host: not timed. */
typedef psr_status (*bench_exchange_fn)(psr_context *ctx, void *args, unsigned round);
/* Median over `iters` calls (after `warmup`) of the sum over the rounds of
 * each round's span, its first kernel's start to its last kernel's end;
 * each round is waited for, then `exchange` runs before the next. */
psr_status bench_time_rounds(psr_context *ctx, bench_round_fn round, bench_exchange_fn exchange, void *args,
                             unsigned rounds, int warmup, int iters, double *median);
/* Keeps a shard's event `ev` (owned) as the round's ends: the first stays
 * *first, every later one replaces *last (start both NULL). */
void bench_keep_ends(cl_event ev, cl_event *first, cl_event *last);
/* The shards' uint32 keys ([words] in each of keys[count]) reduced
 * element-wise by maximum on the host and written back into every
 * shard's; scratch holds 2 x words. */
psr_status bench_reduce_keys(psr_context *ctx, const cl_mem *keys, size_t count, size_t words, uint32_t *scratch);

/* psr bench verify (bench_verify.c), logprobs (bench_logprobs.c) and
 * filters (bench_filters.c). */
int bench_verify(int argc, char **argv);
int bench_logprobs(int argc, char **argv);
int bench_filters(int argc, char **argv);

#endif
