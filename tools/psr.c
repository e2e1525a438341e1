/* psr: the command-line face of libpsr. */
#include "cli.h"

#include <psr/psr_experimental.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const cli_command commands[] = {
    {"demo", cmd_demo, "sample on the default device and check every token against the host"},
    {"sample", cmd_sample, "sample tokens from logits in a .npy file"},
    {"info", cmd_info, "platforms, devices, capabilities, the auto choice and the cache"},
    {"cache", cmd_cache, "warm, list or clear the kernel cache"},
    {"verify", cmd_verify, "statistical self-tests of the noise on this device"},
    {"bench", cmd_bench, "time the kernels against the memory floor (and vLLM on NVIDIA)"},
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: psr COMMAND [OPTIONS]\n"
            "\n"
            "psr samples LLM tokens on any OpenCL device.\n"
            "\n"
            "commands:\n");
    cli_list_commands(out, commands, sizeof commands / sizeof commands[0]);
    fprintf(out,
            "\n"
            "`psr COMMAND --help` describes each command. Options take their value as\n"
            "`--opt value` or `--opt=value`.\n"
            "\n"
            "environment:\n"
            "  PSR_DEVICE     the default device selector (auto, gpu, cpu, a vendor, P:D or\n"
            "                 part of a name; psr info lists the devices)\n"
            "  PSR_CACHE_DIR  the kernel cache directory (default $XDG_CACHE_HOME/psr, else\n"
            "                 ~/.cache/psr)\n"
            "  PSR_CACHE      0: no disk cache; 1: the disk cache even where the driver\n"
            "                 caches its own builds\n"
            "  PSR_LOG_LEVEL  the least severe library message printed to stderr: debug,\n"
            "                 info, warning (the default) or error, in any case\n"
            "  POCL_AFFINITY  PoCL's own; unset, psr sets it to 1 (PoCL's threads pinned one\n"
            "                 per CPU) where the process may run on every CPU\n");
}

/* The tool's own last failure (cli_fail), until cli_report prints it. */
static psr_status own_status = PSR_OK;
static char own_detail[1024];

psr_status cli_fail(psr_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(own_detail, sizeof own_detail, fmt, ap);
    va_end(ap);
    own_status = st;
    return st;
}

int cli_report(psr_status st, const psr_context *ctx)
{
    const char *detail = own_status == st && st != PSR_OK ? own_detail : psr_last_error(ctx);
    own_status = PSR_OK;
    fprintf(stderr, "psr: %s\n", psr_status_string(st));
    if (detail && *detail)
        fprintf(stderr, "psr: %s\n", detail);
    return CLI_FAILED;
}

cl_context cli_cl_context(const psr_context *ctx)
{
    cl_context c = NULL;
    psr_context_cl(ctx, &c, NULL, NULL);
    return c;
}

cl_command_queue cli_queue(const psr_context *ctx)
{
    cl_command_queue q = NULL;
    psr_context_cl(ctx, NULL, NULL, &q);
    return q;
}

cl_int cli_make_buffers(const psr_context *ctx, const cli_buffer *spec, size_t n, cl_mem *out)
{
    cl_int err = CL_SUCCESS;
    for (size_t i = 0; i < n; i++)
        out[i] = NULL;
    for (size_t i = 0; i < n && err == CL_SUCCESS; i++) {
        if (spec[i].bytes == 0)
            continue;
        cl_mem_flags flags = spec[i].host ? CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR : CL_MEM_READ_WRITE;
        out[i] = clCreateBuffer(cli_cl_context(ctx), flags, spec[i].bytes, (void *)spec[i].host, &err);
    }
    return err;
}

void cli_release_buffers(cl_mem *m, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (m[i])
            clReleaseMemObject(m[i]);
        m[i] = NULL;
    }
}

bool cli_contains_nocase(const char *haystack, const char *needle)
{
    size_t n = strlen(needle);
    for (const char *h = haystack; *h; h++)
        if (strncasecmp(h, needle, n) == 0)
            return true;
    return !*needle;
}

void cli_format_bytes(unsigned long long bytes, char *buf, size_t len)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%llu B", bytes);
    else
        snprintf(buf, len, "%.1f %s", v, units[u]);
}

const char *cli_device_type_name(psr_device_type type)
{
    switch (type) {
    case PSR_DEVICE_CPU: return "cpu";
    case PSR_DEVICE_GPU: return "gpu";
    case PSR_DEVICE_ACCELERATOR: return "accelerator";
    default: return "other";
    }
}

/* The levels by psr_log_level, as PSR_LOG_LEVEL names them. */
static const char *const level_names[] = {"debug", "info", "warning", "error"};

void cli_log_to_stderr(psr_log_level level, const char *message, void *user_data)
{
    (void)user_data;
    if ((unsigned)level >= PSR_LOG_ERROR)
        return; /* failures reach the user through cli_report() */
    fprintf(stderr, "psr: %s: %s\n", level_names[level], message);
}

psr_log_level cli_log_level(void)
{
    static bool warned;
    const char *v = getenv("PSR_LOG_LEVEL");
    if (!v || !*v)
        return PSR_LOG_WARNING;
    for (int i = PSR_LOG_DEBUG; i <= PSR_LOG_ERROR; i++)
        if (strcasecmp(v, level_names[i]) == 0)
            return (psr_log_level)i;
    if (!warned) /* once, though every context reads it */
        fprintf(stderr, "psr: PSR_LOG_LEVEL \"%s\" is not debug, info, warning or error: using warning\n", v);
    warned = true;
    return PSR_LOG_WARNING;
}

psr_context *cli_open_context(const char *device, bool profiling)
{
    psr_context_options o;
    psr_context_options_init(&o, sizeof o);
    o.device = device;
    o.profiling = profiling;
    o.log = cli_log_to_stderr;
    o.log_level = cli_log_level();
    psr_context *ctx = NULL;
    psr_status st = psr_context_create(&o, &ctx);
    if (st != PSR_OK)
        cli_report(st, NULL);
    if (st == PSR_OK && profiling)
        cli_optimized_builds_only(ctx);
    return ctx;
}

void cli_optimized_builds_only(psr_context *ctx)
{
    psr_tuning t;
    if (psr_context_tuning(ctx, &t) == PSR_OK && (t.quick_builds || t.host_cold_elements)) {
        t.quick_builds = 0;
        t.host_cold_elements = 0;
        psr_context_set_tuning(ctx, &t);
    }
}

void cli_device_calls_only(psr_context *ctx)
{
    psr_tuning t;
    if (psr_context_tuning(ctx, &t) == PSR_OK && t.host_cold_elements) {
        t.host_cold_elements = 0;
        psr_context_set_tuning(ctx, &t);
    }
}

void cli_list_commands(FILE *out, const cli_command *table, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fprintf(out, "  %-9s %s\n", table[i].name, table[i].summary);
}

int cli_run_command(const cli_command *table, size_t n, int argc, char **argv)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(argv[0], table[i].name) == 0)
            return table[i].run(argc, argv);
    return -1;
}

/* The command line's command, run; its exit code. */
static int dispatch(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    if (cli_is_help(argv[1])) {
        usage(stdout);
        return CLI_OK;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("psr %s\n", psr_version());
        return CLI_OK;
    }
    int rc = cli_run_command(commands, sizeof commands / sizeof commands[0], argc - 1, argv + 1);
    if (rc >= 0)
        return rc;
    fprintf(stderr, "psr: unknown command \"%s\"\n\n", argv[1]);
    usage(stderr);
    return CLI_USAGE;
}

/* Output lost on a full disk or a closed pipe is a failure, whichever
 * command wrote it: stdout is flushed and closed here, and checked. A
 * stdout that was closed before psr ran and never written is no loss. */
static int close_stdout(int rc)
{
    errno = 0;
    bool failed = fflush(stdout) != 0 || ferror(stdout);
    int err = errno;
    if (fclose(stdout) != 0 && !failed && errno != EBADF)
        failed = true, err = errno;
    if (!failed)
        return rc;
    fprintf(stderr, "psr: writing the output failed: %s\n", err ? strerror(err) : "write error");
    return rc == CLI_OK ? CLI_FAILED : rc;
}

int main(int argc, char **argv)
{
    cli_pin_pocl_threads();
    return close_stdout(dispatch(argc, argv));
}
