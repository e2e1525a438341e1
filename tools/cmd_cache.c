/* psr cache: warm, list or clear the kernel cache. */
#include "cli.h"
#include "json.h"

#include <psr/psr_experimental.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char cache_about[] =
    "The kernel cache keeps compiled programs per device under $PSR_CACHE_DIR,\n"
    "else $XDG_CACHE_HOME/psr, else ~/.cache/psr. PSR_CACHE=0 turns it off; it is\n"
    "off by default where the driver caches its own builds (PoCL): PSR_CACHE=1.\n";
static const char warm_help[] =
    "  warm    build every kernel variant for a device into the cache, a line each:\n"
    "          [index/total] name ... seconds\n"
    "          --device SEL   a selector (see psr info); default $PSR_DEVICE or auto\n"
    "          --launch       also run each kernel once on a tiny input, for drivers\n"
    "                         that compile a kernel at its first launch (PoCL, into\n"
    "                         its own cache): 90-250 s on two CPU cores\n";
static const char list_help[] =
    "  list    entries with device, driver, size and age, and why psr would not\n"
    "          load one (--json: a JSON list, each with a status and a reason)\n";
static const char clear_help[] = "  clear   remove psr's cached binaries and their trial marks\n";

static void cache_usage(FILE *out)
{
    fprintf(out,
            "usage: psr cache warm [--device SEL] [--launch]\n"
            "       psr cache list [--json]\n"
            "       psr cache clear\n\n%s\n%s%s%s",
            cache_about, warm_help, list_help, clear_help);
}

static void warm_usage(FILE *out)
{
    fprintf(out, "usage: psr cache warm [--device SEL] [--launch]\n\n%s\n%s", warm_help, cache_about);
}

static void list_usage(FILE *out)
{
    fprintf(out, "usage: psr cache list [--json]\n\n%s\n%s", list_help, cache_about);
}

static void clear_usage(FILE *out)
{
    fprintf(out, "usage: psr cache clear\n\n%s\n%s", clear_help, cache_about);
}

/* psr's entries in a cache directory, read in two calls (how many, then
 * which); NULL with *st on failure. */
static psr_cache_entry *read_entries(const char *dir, size_t *n, psr_status *st)
{
    size_t cap = 0;
    *n = 0;
    *st = psr_cache_list(dir, NULL, 0, &cap);
    psr_cache_entry *e = *st == PSR_OK ? calloc(cap ? cap : 1, sizeof *e) : NULL;
    if (*st == PSR_OK && !e)
        *st = PSR_ERR_OUT_OF_HOST_MEMORY;
    if (e)
        *st = psr_cache_list(dir, e, cap, n);
    if (*st != PSR_OK) {
        free(e);
        return NULL;
    }
    if (*n > cap)
        *n = cap; /* entries written while we listed: show what we read */
    return e;
}

void cli_cache_summary(const char *dir, unsigned long long *files, unsigned long long *bytes)
{
    size_t n = 0;
    psr_status st;
    psr_cache_entry *e = read_entries(dir, &n, &st);
    *files = n;
    *bytes = 0;
    for (size_t i = 0; i < n; i++)
        *bytes += e[i].bytes;
    free(e);
}

static double cli_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* One line per variant warmed, as it ends. */
static void warm_progress(size_t index, size_t total, const char *name, double seconds, void *user_data)
{
    (void)user_data;
    int width = snprintf(NULL, 0, "%zu", total);
    printf("[%*zu/%zu] %s ... %.1f s\n", width, index, total, name, seconds);
    fflush(stdout);
}

/* psr cache warm's options. */
typedef struct warm_args {
    const char *device;
    psr_warm_options *options;
} warm_args;

static bool warm_flag(void *opts, const char *arg)
{
    if (strcmp(arg, "--launch") != 0)
        return false;
    /* where the driver compiles a kernel at its first launch */
    ((warm_args *)opts)->options->launch = PSR_WARM_LAUNCH_AUTO;
    return true;
}

static int warm_value(void *opts, const char *arg, const char *val)
{
    (void)arg; /* only --device takes a value */
    ((warm_args *)opts)->device = val;
    return CLI_OK;
}

static int cache_warm(int argc, char **argv)
{
    const char *device = NULL;
    psr_warm_options o;
    psr_warm_options_init(&o, sizeof o);
    o.launch = PSR_WARM_LAUNCH_OFF; /* every variant: launching them all takes 1-2 minutes on PoCL */
    o.progress = warm_progress;
    warm_args w = {.options = &o};
    static const cli_options options = {"cache warm", warm_usage, warm_flag, warm_value};
    int parsed = cli_parse_values(&options, "--device", argc, argv, 1, &w, NULL);
    if (parsed >= 0)
        return parsed;
    device = w.device;
    psr_context *ctx = cli_open_context(device, false);
    if (!ctx)
        return CLI_FAILED;
    size_t variants = 0;
    double start = cli_seconds();
    psr_status st = psr_context_warm(ctx, &o, &variants);
    if (st != PSR_OK) {
        int rc = cli_report(st, ctx);
        psr_context_free(ctx);
        return rc;
    }
    psr_device_info d;
    psr_cache_stats s;
    psr_context_device_info(ctx, &d);
    psr_context_cache_stats(ctx, &s);
    printf("%zu kernel variants ready for %u:%u %s in %.1f s\n", variants, d.platform_index, d.device_index,
           d.name, cli_seconds() - start);
    printf("built %llu, loaded from disk %llu, rebuilt %llu, written %llu%s%s\n",
           (unsigned long long)s.builds, (unsigned long long)s.disk_hits,
           (unsigned long long)s.rebuilds, (unsigned long long)s.disk_writes,
           s.disk_enabled ? " into "
                          : " (disk tier off: PSR_CACHE=0, or a driver that caches its own "
                            "builds, such as PoCL; PSR_CACHE=1 turns it on there)",
           s.disk_enabled ? s.cache_dir : "");
    psr_context_free(ctx);
    return CLI_OK;
}

/* Each psr_cache_entry_state's name in --json. */
static const char *const state_names[] = {"ok",     "invalid",   "unreadable", "ignored",
                                          "on-trial", "directory", "missing"};

/* What a lookup would make of an entry, and why. */
static psr_cache_entry_state entry_state(const char *dir, const psr_cache_entry *e, char *reason,
                                         size_t len)
{
    psr_cache_entry_state state = PSR_CACHE_ENTRY_MISSING;
    if (psr_cache_entry_check(dir, e->file, &state, reason, len) != PSR_OK)
        snprintf(reason, len, "%s", psr_last_error(NULL));
    return (unsigned)state < sizeof state_names / sizeof state_names[0] ? state
                                                                         : PSR_CACHE_ENTRY_MISSING;
}

static void json_entry(json_writer *w, const char *dir, const psr_cache_entry *e, time_t now)
{
    char reason[512];
    psr_cache_entry_state state = entry_state(dir, e, reason, sizeof reason);
    json_begin_object(w);
    json_key_string(w, "file", e->file);
    json_key_bool(w, "valid", e->valid);
    json_key_string(w, "status", state_names[state]);
    json_key_string(w, "reason", reason);
    json_key_string(w, "kernels", e->kernels);
    json_key_string(w, "platform", e->platform);
    json_key_string(w, "device", e->device);
    json_key_string(w, "driver_version", e->driver_version);
    json_key_string(w, "options", e->options);
    json_key_uint(w, "bytes", e->bytes);
    json_key_int(w, "age_seconds", (int64_t)now - e->mtime);
    json_end_object(w);
}

/* The flag of an entry a lookup would not load ("" for one it loads). */
static void entry_flag(const char *dir, const psr_cache_entry *e, char *buf, size_t len)
{
    char reason[512];
    psr_cache_entry_state state = entry_state(dir, e, reason, sizeof reason);
    const char *forms[] = {
        "%s",
        "  [invalid: %s; rebuilt on next use]",
        "  [unreadable: %s; rebuilt on next use]",
        "  [ignored: %s]",
        "  [on trial: %s; rebuilt on next use]",
        "  [not used: %s]",
        "  [gone: removed while listed%s]",
    };
    snprintf(buf, len, forms[state], reason);
}

static void text_entries(const char *dir, const psr_cache_entry *e, size_t n, time_t now)
{
    printf("%s: %zu entries\n", dir, n);
    for (size_t i = 0; i < n; i++) {
        char size[32], flag[600];
        cli_format_bytes(e[i].bytes, size, sizeof size);
        entry_flag(dir, &e[i], flag, sizeof flag);
        long long age = (long long)(now - e[i].mtime);
        printf("%.16s  %-8s %-10s %s, driver %s, age %lldh%02lldm%s\n", e[i].file,
               e[i].valid ? e[i].kernels : "?", size, e[i].valid ? e[i].device : "(damaged)",
               e[i].valid ? e[i].driver_version : "?", age / 3600, (age / 60) % 60, flag);
    }
}

static int cache_list(int argc, char **argv)
{
    bool as_json = false;
    static const cli_options options = {"cache list", list_usage, NULL, NULL};
    int parsed = cli_parse_values(&options, "", argc, argv, 1, NULL, &as_json);
    if (parsed >= 0)
        return parsed;
    char dir[512];
    size_t n = 0;
    psr_status st = psr_cache_directory(dir, sizeof dir);
    psr_cache_entry *e = st == PSR_OK ? read_entries(dir, &n, &st) : NULL;
    if (!e)
        return cli_report(st, NULL);
    time_t now = time(NULL);
    json_writer w;
    json_init(&w, stdout);
    if (as_json) {
        json_begin_array(&w);
        for (size_t i = 0; i < n; i++)
            json_entry(&w, dir, &e[i], now);
        json_end_array(&w);
        json_finish(&w);
    } else {
        text_entries(dir, e, n, now);
    }
    free(e);
    return CLI_OK;
}

static int cache_clear(int argc, char **argv)
{
    static const cli_options options = {"cache clear", clear_usage, NULL, NULL};
    int parsed = cli_parse_values(&options, "", argc, argv, 1, NULL, NULL);
    if (parsed >= 0)
        return parsed;
    char dir[512];
    psr_status st = psr_cache_directory(dir, sizeof dir);
    size_t removed = 0;
    if (st == PSR_OK)
        st = psr_cache_clear(dir, &removed);
    if (st != PSR_OK)
        return cli_report(st, NULL);
    printf("removed %zu files from %s\n", removed, dir);
    return CLI_OK;
}

int cmd_cache(int argc, char **argv)
{
    if (argc < 2) {
        cache_usage(stderr);
        return CLI_USAGE;
    }
    if (cli_is_help(argv[1])) {
        cache_usage(stdout);
        return CLI_OK;
    }
    if (strcmp(argv[1], "warm") == 0)
        return cache_warm(argc - 1, argv + 1);
    if (strcmp(argv[1], "list") == 0)
        return cache_list(argc - 1, argv + 1);
    if (strcmp(argv[1], "clear") == 0)
        return cache_clear(argc - 1, argv + 1);
    return cli_usage_error("cache", "unknown subcommand \"%s\"", argv[1]);
}
