/* The command line's arguments: options as `--opt value` or `--opt=value`,
 * and numbers that reject what they cannot hold. Nothing here touches
 * libpsr, so the fuzz targets link it alone. */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_usage_error(const char *command, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "psr %s: ", command);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n(see `psr %s --help`)\n", command);
    va_end(ap);
    return CLI_USAGE;
}

bool cli_is_help(const char *arg)
{
    return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0;
}

bool cli_word_in(const char *list, char sep, const char *word, size_t len)
{
    for (const char *p = list;;) {
        const char *end = strchr(p, sep);
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == len && strncmp(p, word, len) == 0)
            return true;
        if (!end)
            return false;
        p = end + 1;
    }
}

/* The option's name, and in *val the value joined to it by '=' ("--seed=5"),
 * else NULL. Only options ("--...") are split: a value may hold '='. */
static const char *split_option(const char *arg, char *buf, size_t cap, const char **val)
{
    const char *eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
    *val = NULL;
    if (!eq || (size_t)(eq - arg) >= cap)
        return arg;
    memcpy(buf, arg, (size_t)(eq - arg));
    buf[eq - arg] = '\0';
    *val = eq + 1;
    return buf;
}

/* Sets the option `name` when it takes no value (--json, where the command
 * has it, or one of p->flag's); false when it is none of them. */
static bool set_flag(const cli_options *p, const char *name, void *opts, bool *json)
{
    if (json && strcmp(name, "--json") == 0)
        return *json = true;
    return p->flag && p->flag(opts, name);
}

int cli_parse_values(const cli_options *p, const char *values, int argc, char **argv, int first, void *opts,
                     bool *json)
{
    for (int i = first; i < argc; i++) {
        char buf[64];
        const char *val, *name = split_option(argv[i], buf, sizeof buf, &val);
        if (cli_is_help(argv[i])) {
            p->usage(stdout);
            return CLI_OK;
        }
        if (set_flag(p, name, opts, json)) {
            if (val)
                return cli_usage_error(p->command, "%s takes no value", name);
            continue;
        }
        if (!p->value || (values && !cli_word_in(values, ' ', name, strlen(name))))
            return cli_usage_error(p->command, "unknown argument \"%s\"", argv[i]);
        if (!val && i + 1 < argc)
            val = argv[++i];
        if (!val)
            return cli_usage_error(p->command, "%s needs a value", name);
        if (p->value(opts, name, val) != CLI_OK)
            return CLI_USAGE;
    }
    return -1;
}

int cli_parse(const cli_options *p, int argc, char **argv, int first, void *opts, bool *json)
{
    return cli_parse_values(p, NULL, argc, argv, first, opts, json);
}

/* Says that option `opt` got `text`, which is not what it takes. */
static int bad_number(const char *command, const char *opt, const char *text, const char *why)
{
    return cli_usage_error(command, "%s \"%s\" %s", opt, text, why);
}

int cli_int(const char *command, const char *opt, const char *text, int64_t min, int64_t max, int64_t *out)
{
    char *end, range[64];
    errno = 0;
    long long v = strtoll(text, &end, 10);
    /* strtoll skips leading space and clamps what overflows: neither is taken */
    if (end == text || *end || isspace((unsigned char)text[0]))
        return bad_number(command, opt, text, "is not an integer");
    if (errno == ERANGE || v < min || v > max) {
        snprintf(range, sizeof range, "is not in [%lld, %lld]", (long long)min, (long long)max);
        return bad_number(command, opt, text,
                          min == INT64_MIN && max == INT64_MAX ? "is not a 64-bit integer" : range);
    }
    *out = v;
    return CLI_OK;
}

int cli_float(const char *command, const char *opt, const char *text, float *out)
{
    char *end;
    errno = 0;
    float v = strtof(text, &end);
    if (end == text || *end || isspace((unsigned char)text[0]))
        return bad_number(command, opt, text, "is not a number");
    if (errno == ERANGE && isinf(v)) /* what underflows is as good as 0 */
        return bad_number(command, opt, text, "is beyond a float's range");
    *out = v;
    return CLI_OK;
}

int cli_double(const char *command, const char *opt, const char *text, double min, double max, double *out)
{
    char *end, range[64];
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end || isspace((unsigned char)text[0]))
        return bad_number(command, opt, text, "is not a number");
    if ((errno == ERANGE && isinf(v)) || !(v >= min && v <= max)) {
        snprintf(range, sizeof range, "is not in [%g, %g]", min, max);
        return bad_number(command, opt, text, range);
    }
    *out = v;
    return CLI_OK;
}
