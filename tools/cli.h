/* Shared pieces of the psr command-line tool. */
#ifndef PSR_CLI_H
#define PSR_CLI_H

#include <psr/psr.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Exit codes: 0 success, 1 a failure psr reported, 2 bad usage. */
enum { CLI_OK = 0, CLI_FAILED = 1, CLI_USAGE = 2 };

/* Prints "psr: STATUS: detail" to stderr and returns CLI_FAILED. The
 * detail is the tool's own (cli_fail) when it reported st last, else psr's
 * (psr_last_error). */
int cli_report(psr_status st, const psr_context *ctx);
/* Records a failure of the tool's own making (an OpenCL call it made
 * itself, an input it refused) for cli_report; returns st. */
psr_status cli_fail(psr_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The OpenCL context and queue of a psr context. */
cl_context cli_cl_context(const psr_context *ctx);
cl_command_queue cli_queue(const psr_context *ctx);
/* One device buffer to make: `bytes` long (0: none, its slot stays NULL),
 * filled from `host` when that is not NULL (kernels only read those). */
typedef struct cli_buffer {
    size_t bytes;
    const void *host;
} cli_buffer;
/* Makes n buffers into out[], stopping at the first failure, and returns
 * its error (CL_SUCCESS when all were made). Release them all with
 * cli_release_buffers either way. */
cl_int cli_make_buffers(const psr_context *ctx, const cli_buffer *spec, size_t n, cl_mem *out);
/* Releases the buffers that were made and sets every slot to NULL. */
void cli_release_buffers(cl_mem *m, size_t n);
/* Sets POCL_AFFINITY=1 (PoCL's worker threads pinned, thread i to CPU i)
 * unless it is set, or the process may not run on every CPU, or PoCL would
 * start more threads than there are CPUs; says so at PSR_LOG_LEVEL info.
 * Call before any OpenCL call. */
void cli_pin_pocl_threads(void);
/* On a PoCL CPU device, "pinned" where POCL_AFFINITY=1 and "unpinned"
 * otherwise, for benches to say how their times were taken; else NULL. */
const char *cli_pocl_threads(const psr_device_info *info);
/* Case-insensitive substring test. */
bool cli_contains_nocase(const char *haystack, const char *needle);
/* Prints "psr COMMAND: message" and a hint to stderr; returns CLI_USAGE. */
int cli_usage_error(const char *command, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool cli_is_help(const char *arg);

/* A command's options, for cli_parse. */
typedef struct cli_options {
    const char *command;        /* "verify", in messages */
    void (*usage)(FILE *out);   /* for --help */
    /* Sets the option `arg` that takes no value; false when it is none.
     * NULL: --json is the only one. */
    bool (*flag)(void *opts, const char *arg);
    /* Sets the option `arg` from `val`: CLI_OK, or CLI_USAGE after saying
     * why (an unknown option included). */
    int (*value)(void *opts, const char *arg, const char *val);
} cli_options;
/* Parses argv[first ..] into opts: --help prints the usage, --json sets
 * *json (json NULL: the command has no --json), then p->flag's (may be
 * NULL), then options with a value, given as "--opt value" or
 * "--opt=value" ("--opt" last "needs a value"; a flag given a value is an
 * error). Returns -1 when the command should run, else the exit code. */
int cli_parse(const cli_options *p, int argc, char **argv, int first, void *opts, bool *json);
/* cli_parse that knows the options taking a value, separated by spaces
 * ("--device --k"): any other that is no flag is unknown, even last (NULL:
 * as cli_parse, every other argument goes to p->value). p->value may be
 * NULL when `values` is "". */
int cli_parse_values(const cli_options *p, const char *values, int argc, char **argv, int first, void *opts,
                     bool *json);
/* Numbers of options, for cli_options' value: the whole text, no leading
 * space, in range, else a usage error that names the option and the text.
 * CLI_OK, or CLI_USAGE after the message. cli_float takes inf and nan as
 * written (the calls check those) but nothing beyond a float's range. */
int cli_int(const char *command, const char *opt, const char *text, int64_t min, int64_t max, int64_t *out);
int cli_float(const char *command, const char *opt, const char *text, float *out);
int cli_double(const char *command, const char *opt, const char *text, double min, double max, double *out);
/* Is word[0 .. len) one of the `sep`-separated words of `list`? */
bool cli_word_in(const char *list, char sep, const char *word, size_t len);
/* "1.5 MiB" style sizes. */
void cli_format_bytes(unsigned long long bytes, char *buf, size_t len);
const char *cli_device_type_name(psr_device_type type);
/* The log level of PSR_LOG_LEVEL (debug, info, warning, error, in any case;
 * default warning, and a warning on stderr for anything else). */
psr_log_level cli_log_level(void);
/* A context on the selected device (NULL: $PSR_DEVICE or auto) that logs
 * to stderr; NULL after reporting the failure. */
psr_context *cli_open_context(const char *device, bool profiling);
/* Timing sees only optimized programs on the device: no quick builds and
 * no cold calls on the host (docs/cache.md). Contexts opened for
 * profiling get this. */
void cli_optimized_builds_only(psr_context *ctx);
/* Every call on the device, never a cold call on the host: for the
 * commands that check the device against the host (demo, verify). */
void cli_device_calls_only(psr_context *ctx);
/* A log callback that prints psr's messages to stderr with their level. */
void cli_log_to_stderr(psr_log_level level, const char *message, void *user_data);

/* Counts psr binaries in a cache directory and their total size. */
void cli_cache_summary(const char *dir, unsigned long long *files, unsigned long long *bytes);

/* A command (or a subcommand) by name, with a line for the usage. */
typedef struct cli_command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} cli_command;
/* "  NAME  summary" for each of the n commands. */
void cli_list_commands(FILE *out, const cli_command *table, size_t n);
/* Runs the command argv[0] names with argv[0 ..] and returns its exit
 * code; -1 when no command has that name. */
int cli_run_command(const cli_command *table, size_t n, int argc, char **argv);

int cmd_info(int argc, char **argv);
int cmd_cache(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_verify(int argc, char **argv);
/* psr verify's unbiasedness test (the umbrella of quick checks is in verify_report.h). */
int verify_unbiased(int argc, char **argv);

#endif
