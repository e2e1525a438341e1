/* Vocabulary shards inside one process: each shard is sampled on its
 * columns of the same rows (row_stride the whole vocabulary), and the
 * records of all the shards are combined into the unsharded call's
 * tokens. */
#include "shards.h"
#include "cli.h"
#include <psr/psr_experimental.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int wrong_count(const char *command, const char *text, size_t count)
{
    return cli_usage_error(command, "--shards \"%s\": %zu shards need %zu starts after ':' (the first shard "
                           "starts at 0)", text, count, count - 1);
}

/* The explicit starts after ':' ("100,2000"): count - 1 increasing
 * numbers above 0. */
static int parse_starts(const char *command, const char *text, const char *list, shard_spec *spec)
{
    const char *p = list;
    for (size_t n = 1; n < spec->count; n++) {
        if (n > 1 && *p++ != ',')
            return wrong_count(command, text, spec->count);
        char *end;
        errno = 0;
        unsigned long long v = strtoull(p, &end, 10);
        if (end == p || *p == '-' || *p == '+' || errno == ERANGE || v <= spec->starts[n - 1])
            return cli_usage_error(command, "--shards \"%s\": the starts after ':' are %zu increasing token "
                                   "ids above 0, separated by commas", text, spec->count - 1);
        spec->starts[n] = (size_t)v;
        p = end;
    }
    if (*p)
        return wrong_count(command, text, spec->count);
    spec->explicit_bounds = true;
    return CLI_OK;
}

int shards_parse(const char *command, const char *text, shard_spec *spec)
{
    char count[16];
    const char *colon = strchr(text, ':');
    size_t len = colon ? (size_t)(colon - text) : strlen(text);
    if (len >= sizeof count)
        len = sizeof count - 1; /* too long for 1..255: cli_int says so */
    memcpy(count, text, len);
    count[len] = '\0';
    int64_t n = 0;
    memset(spec, 0, sizeof *spec);
    if (cli_int(command, "--shards", count, 1, PSR_MAX_SHARDS, &n) != CLI_OK)
        return CLI_USAGE;
    spec->count = (size_t)n;
    if (!colon)
        return CLI_OK;
    if (n == 1)
        return cli_usage_error(command, "--shards \"%s\": one shard has no starts to give", text);
    return parse_starts(command, text, colon + 1, spec);
}

int shards_bounds(const char *command, const char *opt, const shard_spec *spec, size_t vocab, size_t *bounds)
{
    size_t n = spec->count;
    if (n > vocab)
        return cli_usage_error(command, "%s: %zu shards, more than the vocabulary's %zu tokens", opt, n, vocab);
    if (spec->explicit_bounds && spec->starts[n - 1] >= vocab)
        return cli_usage_error(command, "--shards: the last shard starts at %zu, past the vocabulary's last "
                               "token %zu", spec->starts[n - 1], vocab - 1);
    for (size_t s = 0; s < n; s++)
        bounds[s] = spec->explicit_bounds ? spec->starts[s] : s * (vocab / n) + (s < vocab % n ? s : vocab % n);
    bounds[n] = vocab;
    return CLI_OK;
}

int shards_refuse(const char *command, const char *opt, bool given, const char *what)
{
    if (!given)
        return CLI_OK;
    return cli_usage_error(command, "%s is not available with %s yet", what, opt);
}

/* One shard's call on its columns; its record of row r goes to records[r]. */
static psr_status sample_one(psr_context *ctx, const psr_sample_host_args *whole, size_t count, size_t s,
                             const size_t *bounds, psr_shard_record *records)
{
    psr_sample_host_args a = *whole;
    a.logits = (const char *)whole->logits + bounds[s] * psr_dtype_size(whole->logits_dtype);
    a.vocab = bounds[s + 1] - bounds[s];
    a.row_stride = whole->row_stride ? whole->row_stride : whole->vocab;
    a.tokens = NULL, a.row_flags = NULL, a.no_finite_rows = NULL;
    a.shard_count = count, a.shard_index = s, a.vocab_offset = bounds[s], a.vocab_total = whole->vocab;
    a.shard_records = records;
    return psr_sample_host(ctx, &a);
}

psr_status shards_sample_host(psr_context *ctx, const psr_sample_host_args *whole, size_t count,
                              const size_t *bounds)
{
    size_t rows = whole->rows;
    psr_shard_record *records = malloc(count * rows * sizeof *records);
    uint32_t *flags = whole->row_flags ? whole->row_flags : malloc(rows * sizeof *flags);
    psr_status st = records && flags ? PSR_OK : PSR_ERR_OUT_OF_HOST_MEMORY;
    for (size_t s = 0; s < count && st == PSR_OK; s++)
        st = sample_one(ctx, whole, count, s, bounds, records + s * rows);
    psr_combine_host_args c;
    psr_combine_host_args_init(&c, sizeof c);
    c.rows = rows, c.shards = count, c.records = records;
    c.tokens = whole->tokens, c.tokens_dtype = whole->tokens_dtype, c.row_flags = flags;
    if (st == PSR_OK)
        st = psr_combine_host(ctx, &c);
    size_t no_finite = 0;
    for (size_t r = 0; st == PSR_OK && r < rows; r++)
        no_finite += (flags[r] & PSR_ROW_NO_FINITE) != 0;
    if (st == PSR_OK && whole->no_finite_rows)
        *whole->no_finite_rows = no_finite;
    if (flags != whole->row_flags)
        free(flags);
    free(records);
    return st;
}
