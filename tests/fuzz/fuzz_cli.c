/* The command line's option parser and number readers (tools/cli_args.c):
 * the input is split at newlines into arguments. */
#include "cli.h"
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>

typedef struct opts {
    int64_t seed;
    float top_p;
    double gap;
    bool drafting;
} opts;

static void usage(FILE *out)
{
    (void)out;
}

static int value(void *o, const char *name, const char *val)
{
    opts *p = o;
    if (strcmp(name, "--seed") == 0)
        return cli_int("fuzz", name, val, INT64_MIN, INT64_MAX, &p->seed);
    if (strcmp(name, "--top-p") == 0)
        return cli_float("fuzz", name, val, &p->top_p);
    if (strcmp(name, "--gap") == 0)
        return cli_double("fuzz", name, val, 0.0, 1e6, &p->gap);
    return cli_usage_error("fuzz", "unknown argument \"%s\"", name);
}

static bool flag(void *o, const char *name)
{
    return strcmp(name, "--drafting") == 0 && (((opts *)o)->drafting = true);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    char **argv = malloc((size + 2) * sizeof *argv);
    if (!text || !argv) {
        free(text);
        free(argv);
        return 0;
    }
    memcpy(text, data, size);
    text[size] = '\0';
    int argc = 0;
    argv[argc++] = "fuzz";
    for (char *s = text, *nl; s; s = nl ? nl + 1 : NULL) {
        nl = strchr(s, '\n');
        if (nl)
            *nl = '\0';
        argv[argc++] = s;
    }
    opts o = {0};
    bool json = false;
    const cli_options p = {.command = "fuzz", .usage = usage, .value = value, .flag = flag};
    cli_parse_values(&p, "--seed --top-p --gap", argc, argv, 1, &o, &json);
    cli_parse(&p, argc, argv, 1, &o, &json);
    if (o.gap < 0.0 || o.gap > 1e6)
        abort(); /* a value outside the range it was read in */
    free(argv);
    free(text);
    return 0;
}
