/* psr_mpi_sample_host and psr_mpi_sample under mpirun (-np 2 and -np 4).
 * Every rank builds the same random batch from a fixed seed, samples it
 * whole on its own (psr_sample_host) as the reference, then samples its
 * slice of the vocabulary through the MPI calls; the tokens and row flags
 * must equal the reference on every rank: uneven splits with one-token
 * shards, vocabularies from one token (a communicator of one rank) to
 * 70,000, rows all -inf or NaN, greedy rows, fp32, wide and fp64 noise, the
 * draft stream, int32 and int64 tokens. Bad shards (rows that differ,
 * ranges that overlap or leave a gap, one rank's bad temperature or shard
 * index, seeds that differ) give their status on every rank, and no rank
 * hangs. A control swaps the ranks' offsets while each keeps its own
 * columns: the ranges still tile, and the tokens must then differ. */
#include "mpi_test.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct batch {
    size_t rows, vocab;
    float *logits;
    int64_t *seeds, *positions;
    float *temps;
} batch;

/* Rows of roughly N(0, 3); with 5 rows or more, row 1 all -inf, row 2 all
 * NaN, row 3 +inf at two tokens; every fourth row greedy. */
static batch make_batch(size_t rows, size_t vocab)
{
    batch b = {rows, vocab, malloc(rows * vocab * 4), malloc(rows * 8), malloc(rows * 8), malloc(rows * 4)};
    for (size_t r = 0; r < rows; r++) {
        for (size_t i = 0; i < vocab; i++) {
            float u = 0.0f;
            for (int k = 0; k < 4; k++)
                u += (float)(rnd() >> 40) / (float)(1 << 24);
            b.logits[r * vocab + i] = 3.0f * (u - 2.0f) * 1.7f;
        }
        for (size_t i = 0; rows > 4 && r == 1 && i < vocab; i++)
            b.logits[r * vocab + i] = -INFINITY;
        for (size_t i = 0; rows > 4 && r == 2 && i < vocab; i++)
            b.logits[r * vocab + i] = NAN;
        if (rows > 4 && r == 3 && vocab > 2)
            b.logits[r * vocab + vocab - 1] = b.logits[r * vocab + vocab / 2] = INFINITY;
        b.seeds[r] = (int64_t)(rnd() >> 1);
        b.positions[r] = (int64_t)(rnd() % (1u << 30));
        b.temps[r] = r % 4 == 0 ? 0.0f : 0.5f + (float)(rnd() % 100) / 50.0f;
    }
    return b;
}

static void free_batch(batch *b)
{
    free(b->logits), free(b->seeds), free(b->positions), free(b->temps);
}

/* `shards` uneven ranges tiling [0, vocab), one token each now and then. */
static void split(size_t vocab, int shards, size_t *bounds)
{
    bounds[0] = 0, bounds[shards] = vocab;
    for (int s = 1; s < shards; s++) {
        size_t left = vocab - bounds[s - 1] - (size_t)(shards - s);
        size_t even = (vocab - bounds[s - 1]) / (size_t)(shards - s + 1);
        size_t take = rnd() % 3 == 0 ? 1 : 1 + rnd() % (2 * even > 1 ? 2 * even - 1 : 1);
        bounds[s] = bounds[s - 1] + (take < left ? take : left);
    }
}

/* One sampling: flags, noise and the token dtype. */
typedef struct mode {
    unsigned flags;
    psr_noise noise;
    psr_token_dtype tokens_dtype;
    const char *name;
} mode;

static psr_sample_host_args whole_args(const batch *b, const mode *m)
{
    psr_sample_host_args a;
    psr_sample_host_args_init(&a, sizeof a);
    a.rows = b->rows, a.vocab = b->vocab, a.logits = b->logits;
    a.seeds = b->seeds, a.positions = b->positions, a.temperatures = b->temps;
    a.flags = m->flags, a.noise = m->noise, a.tokens_dtype = m->tokens_dtype;
    return a;
}

/* This rank's slice [offset, offset + vocab) of the batch, as psr_mpi_sample_host takes it. */
static psr_sample_host_args shard_args(const batch *b, const mode *m, size_t offset, size_t vocab)
{
    psr_sample_host_args a = whole_args(b, m);
    a.logits = b->logits + offset, a.vocab = vocab, a.row_stride = b->vocab;
    a.vocab_offset = offset, a.vocab_total = b->vocab;
    return a;
}

/* The token of row r in an array of dtype d. */
static long long token_at(const void *tokens, psr_token_dtype d, size_t r)
{
    return d == PSR_TOKENS_I64 ? (long long)((const int64_t *)tokens)[r] : ((const int32_t *)tokens)[r];
}

/* Rows where (tokens, flags) differ from the reference's. */
static size_t differences(const void *want, const uint32_t *want_f, const void *got, const uint32_t *got_f,
                          size_t rows, psr_token_dtype d, const char *what)
{
    size_t n = 0;
    for (size_t r = 0; r < rows; r++) {
        if (token_at(want, d, r) == token_at(got, d, r) && want_f[r] == got_f[r])
            continue;
        if (n++ < 2 && what)
            fprintf(stderr, "rank %d: %s row %zu: %lld (flags %u), unsharded %lld (flags %u)\n", rank, what, r,
                    token_at(got, d, r), got_f[r], token_at(want, d, r), want_f[r]);
    }
    return n;
}

/* The unsharded call's tokens and flags. */
static void reference(const batch *b, const mode *m, void *tokens, uint32_t *flags, size_t *no_finite)
{
    psr_sample_host_args a = whole_args(b, m);
    a.tokens = tokens, a.row_flags = flags, a.no_finite_rows = no_finite;
    psr_status st = psr_sample_host(ctx, &a);
    CHECK(st == PSR_OK, "reference: %s", psr_last_error(ctx));
}

/* psr_mpi_sample_host over comm against the reference, on every rank. */
static void check_host(MPI_Comm comm, const batch *b, const size_t *bounds, const mode *m)
{
    int me;
    MPI_Comm_rank(comm, &me);
    size_t rows = b->rows, want_nf = 0, got_nf = 99;
    void *want = calloc(rows, 8), *got = calloc(rows, 8);
    uint32_t *want_f = calloc(rows, 4), *got_f = calloc(rows, 4);
    reference(b, m, want, want_f, &want_nf);
    psr_sample_host_args a = shard_args(b, m, bounds[me], bounds[me + 1] - bounds[me]);
    psr_noise noise = (psr_noise)-1;
    a.tokens = got, a.row_flags = got_f, a.no_finite_rows = &got_nf, a.effective_noise = &noise;
    psr_status st = psr_mpi_sample_host(ctx, comm, &a);
    char what[96];
    snprintf(what, sizeof what, "host, vocab %zu, %s, shard [%zu, %zu)", b->vocab, m->name, bounds[me],
             bounds[me + 1]);
    CHECK(st == PSR_OK, "%s: %s", what, psr_last_error(ctx));
    if (st == PSR_OK) {
        CHECK(differences(want, want_f, got, got_f, rows, m->tokens_dtype, what) == 0, "%s: tokens differ", what);
        CHECK(got_nf == want_nf, "%s: no_finite_rows %zu, unsharded %zu", what, got_nf, want_nf);
        CHECK(noise == m->noise, "%s: effective noise %d", what, (int)noise);
    }
    free(want), free(got), free(want_f), free(got_f);
}

/* psr_mpi_sample on device buffers (the whole batch uploaded, this rank's
 * slice through logits_offset); tokens_bytes sizes the tokens buffer. */
static psr_status device_call(const batch *b, const size_t *bounds, const mode *m, size_t tokens_bytes,
                              void *tokens, uint32_t *flags)
{
    size_t rows = b->rows;
    cl_mem logits = upload(b->logits, rows * b->vocab * 4), seeds = upload(b->seeds, rows * 8);
    cl_mem pos = upload(b->positions, rows * 8), temps = upload(b->temps, rows * 4);
    cl_mem tok = upload(tokens, tokens_bytes), fl = upload(flags, rows * 4);
    psr_sample_args a;
    psr_sample_args_init(&a, sizeof a);
    a.rows = rows, a.vocab = bounds[rank + 1] - bounds[rank], a.row_stride = b->vocab;
    a.logits = logits, a.logits_offset = bounds[rank], a.seeds = seeds, a.positions = pos, a.temperatures = temps;
    a.tokens = tok, a.tokens_dtype = m->tokens_dtype, a.row_flags = fl, a.flags = m->flags, a.noise = m->noise;
    a.vocab_offset = bounds[rank], a.vocab_total = b->vocab;
    cl_event ev = NULL;
    psr_status st = psr_mpi_sample(ctx, MPI_COMM_WORLD, &a, &ev);
    if (st == PSR_OK) {
        clEnqueueReadBuffer(queue, tok, CL_TRUE, 0, tokens_bytes, tokens, 1, &ev, NULL);
        clEnqueueReadBuffer(queue, fl, CL_TRUE, 0, rows * 4, flags, 0, NULL, NULL);
        clReleaseEvent(ev);
    }
    cl_mem all[] = {logits, seeds, pos, temps, tok, fl};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        clReleaseMemObject(all[i]);
    return st;
}

static void check_device(const batch *b, const size_t *bounds, const mode *m)
{
    size_t rows = b->rows;
    void *want = calloc(rows, 8), *got = calloc(rows, 8);
    uint32_t *want_f = calloc(rows, 4), *got_f = calloc(rows, 4);
    reference(b, m, want, want_f, NULL);
    psr_status st = device_call(b, bounds, m, rows * 8, got, got_f);
    char what[96];
    snprintf(what, sizeof what, "device, vocab %zu, %s, shard [%zu, %zu)", b->vocab, m->name, bounds[rank],
             bounds[rank + 1]);
    CHECK(st == PSR_OK, "%s: %s", what, psr_last_error(ctx));
    if (st == PSR_OK)
        CHECK(differences(want, want_f, got, got_f, rows, m->tokens_dtype, what) == 0, "%s: tokens differ", what);
    free(want), free(got), free(want_f), free(got_f);
}

static const mode modes[] = {
    {0, PSR_NOISE_FP32, PSR_TOKENS_I32, "fp32"},
    {0, PSR_NOISE_WIDE, PSR_TOKENS_I64, "wide noise, int64 tokens"},
    {PSR_SAMPLE_DRAFTING, PSR_NOISE_FP32, PSR_TOKENS_I32, "drafting"},
    {0, PSR_NOISE_FP64, PSR_TOKENS_I32, "fp64 noise"},
};

static bool has_fp64(void)
{
    psr_device_info info;
    return psr_context_device_info(ctx, &info) == PSR_OK && (info.capabilities & PSR_CAP_FP64);
}

/* Every mode on each vocabulary, split unevenly across the ranks; the
 * device call on two; one rank alone (MPI_COMM_SELF) down to one token. */
static void check_same_tokens(void)
{
    const size_t vocabs[] = {(size_t)size, 1000, 70001};
    size_t nmodes = has_fp64() ? 4 : 3;
    for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; v++) {
        batch b = make_batch(v == 2 ? 6 : 9, vocabs[v]);
        size_t bounds[PSR_MAX_SHARDS + 1];
        split(b.vocab, size, bounds);
        for (size_t m = 0; m < nmodes; m++)
            check_host(MPI_COMM_WORLD, &b, bounds, &modes[m]);
        if (v > 0)
            check_device(&b, bounds, &modes[v == 1 ? 0 : 1]);
        free_batch(&b);
    }
    const size_t alone[] = {1, 777};
    for (size_t v = 0; v < 2; v++) {
        batch b = make_batch(5, alone[v]);
        size_t bounds[2] = {0, alone[v]};
        check_host(MPI_COMM_SELF, &b, bounds, &modes[0]);
        free_batch(&b);
    }
}

/* ---- filters across the ranks ---- */

/* Per-row top-k, top-p and min-p (some rows off), the same on every rank. */
typedef struct row_filters {
    int32_t k[16];
    float p[16], mp[16];
} row_filters;

static row_filters make_filters(void)
{
    row_filters f;
    for (int r = 0; r < 16; r++) {
        f.k[r] = r % 5 == 0 ? 0 : (int32_t)(1 + rnd() % 100);
        f.p[r] = r % 3 == 0 ? 1.0f : 0.6f + (float)(rnd() % 40) / 100.0f;
        f.mp[r] = r % 4 == 0 ? 0.0f : (float)(rnd() % 10) / 100.0f;
    }
    return f;
}

/* psr_mpi_sample_host with filters (the rounds over MPI) against the
 * unsharded filtered call; `bad_rank` >= 0: that rank's top_p[1] is out
 * of range, and it alone gets PSR_ERR_FILTER_RANGE. */
static void check_filtered(const batch *b, const size_t *bounds, const mode *m, const row_filters *f, int bad_rank)
{
    size_t rows = b->rows;
    void *want = calloc(rows, 8), *got = calloc(rows, 8);
    uint32_t *want_f = calloc(rows, 4), *got_f = calloc(rows, 4);
    psr_sample_host_args a = whole_args(b, m);
    a.top_k = f->k, a.top_p = f->p, a.min_p = f->mp, a.tokens = want, a.row_flags = want_f;
    CHECK(psr_sample_host(ctx, &a) == PSR_OK, "filtered reference: %s", psr_last_error(ctx));
    row_filters mine = *f;
    mine.p[1] = rank == bad_rank ? 1.5f : mine.p[1];
    a = shard_args(b, m, bounds[rank], bounds[rank + 1] - bounds[rank]);
    a.top_k = mine.k, a.top_p = mine.p, a.min_p = mine.mp, a.tokens = got, a.row_flags = got_f;
    psr_status st = psr_mpi_sample_host(ctx, MPI_COMM_WORLD, &a);
    char what[96];
    snprintf(what, sizeof what, "filtered, vocab %zu, %s, shard [%zu, %zu)", b->vocab, m->name, bounds[rank],
             bounds[rank + 1]);
    if (bad_rank >= 0) {
        expect("filtered top_p", st, rank == bad_rank ? PSR_ERR_FILTER_RANGE : PSR_ERR_COLLECTIVE,
               rank == bad_rank ? "args->top_p[1]" : "failed");
    } else {
        CHECK(st == PSR_OK, "%s: %s", what, psr_last_error(ctx));
        if (st == PSR_OK)
            CHECK(differences(want, want_f, got, got_f, rows, m->tokens_dtype, what) == 0, "%s: tokens differ",
                  what);
    }
    free(want), free(got), free(want_f), free(got_f);
}

static void check_filters(void)
{
    row_filters f = make_filters();
    const size_t vocabs[] = {1000, 70001};
    for (size_t v = 0; v < 2; v++) {
        batch b = make_batch(v ? 6 : 16, vocabs[v]);
        size_t bounds[PSR_MAX_SHARDS + 1];
        split(b.vocab, size, bounds);
        check_filtered(&b, bounds, &modes[v], &f, -1);
        if (v == 0)
            check_filtered(&b, bounds, &modes[0], &f, size - 1);
        free_batch(&b);
    }
}

/* ---- bad shards: a status on every rank, and nobody waits ---- */

/* This rank's share of an even split of the batch, with tokens. */
static psr_sample_host_args even_args(const batch *b, void *tokens)
{
    size_t lo = b->vocab * (size_t)rank / (size_t)size, hi = b->vocab * (size_t)(rank + 1) / (size_t)size;
    psr_sample_host_args a = shard_args(b, &modes[0], lo, hi - lo);
    a.tokens = tokens;
    return a;
}

/* Ranges that do not tile: one rank reaching into its neighbour's, one
 * leaving a token out between two ranks, the last stopping short. */
static void check_bad_ranges(const batch *b, int32_t *tokens)
{
    psr_sample_host_args a = even_args(b, tokens);
    if (rank == 1)
        a.vocab_offset--, a.vocab++, a.logits = (const float *)a.logits - 1;
    expect("overlap", psr_mpi_sample_host(ctx, MPI_COMM_WORLD, &a), PSR_ERR_SHARD_MISMATCH, "overlap");
    a = even_args(b, tokens);
    if (rank == 1)
        a.vocab_offset++, a.vocab--, a.logits = (const float *)a.logits + 1;
    expect("gap", psr_mpi_sample_host(ctx, MPI_COMM_WORLD, &a), PSR_ERR_SHARD_MISMATCH, "no rank holds tokens");
    a = even_args(b, tokens);
    if (rank == size - 1)
        a.vocab--;
    expect("short", psr_mpi_sample_host(ctx, MPI_COMM_WORLD, &a), PSR_ERR_SHARD_MISMATCH, "of vocab_total");
    a = even_args(b, tokens);
    if (rank == 0)
        a.vocab_total++;
    expect("vocab_total", psr_mpi_sample_host(ctx, MPI_COMM_WORLD, &a), PSR_ERR_SHARD_MISMATCH,
           "args->vocab_total");
}

/* Descriptions that differ between ranks: rows, seeds, flags. */
static void check_disagreements(const batch *b, int32_t *tokens)
{
    psr_sample_host_args a = even_args(b, tokens);
    if (rank == size - 1)
        a.rows--;
    expect("rows", psr_mpi_sample_host(ctx, MPI_COMM_WORLD, &a), PSR_ERR_SHARD_MISMATCH, "args->rows");
    int64_t *seeds = malloc(b->rows * 8);
    memcpy(seeds, b->seeds, b->rows * 8);
    seeds[b->rows - 1] ^= rank == 1;
    a = even_args(b, tokens);
    a.seeds = seeds;
    expect("seeds", psr_mpi_sample_host(ctx, MPI_COMM_WORLD, &a), PSR_ERR_SHARD_MISMATCH, "seeds");
    free(seeds);
    a = even_args(b, tokens);
    if (rank == 1)
        a.flags = PSR_SAMPLE_DRAFTING;
    expect("flags", psr_mpi_sample_host(ctx, MPI_COMM_WORLD, &a), PSR_ERR_SHARD_MISMATCH, "args->flags");
    a = even_args(b, tokens);
    a.shard_count = (size_t)size + 1;
    expect("shard_count", psr_mpi_sample_host(ctx, MPI_COMM_WORLD, &a), PSR_ERR_SHARD_MISMATCH,
           "args->shard_count");
}

/* One rank's own error: that rank gets its status, the others
 * PSR_ERR_COLLECTIVE naming it. */
static void check_one_rank_fails(const batch *b, int32_t *tokens)
{
    float *temps = malloc(b->rows * 4);
    memcpy(temps, b->temps, b->rows * 4);
    int bad = size - 1;
    temps[2] = rank == bad ? -1.0f : temps[2];
    psr_sample_host_args a = even_args(b, tokens);
    a.temperatures = temps;
    char text[64];
    snprintf(text, sizeof text, "rank %d failed: PSR_ERR_TEMPERATURE", bad);
    psr_status st = psr_mpi_sample_host(ctx, MPI_COMM_WORLD, &a);
    expect("temperature", st, rank == bad ? PSR_ERR_TEMPERATURE : PSR_ERR_COLLECTIVE, rank == bad ? NULL : text);
    free(temps);
    a = even_args(b, tokens);
    if (rank == 0)
        a.shard_index = 1;
    expect("shard_index", psr_mpi_sample_host(ctx, MPI_COMM_WORLD, &a),
           rank == 0 ? PSR_ERR_SHARD_MISMATCH : PSR_ERR_COLLECTIVE, rank == 0 ? "args->shard_index" : "rank 0 failed");
    a = even_args(b, rank == 1 ? NULL : tokens);
    expect("tokens", psr_mpi_sample_host(ctx, MPI_COMM_WORLD, &a),
           rank == 1 ? PSR_ERR_NULL_ARGUMENT : PSR_ERR_COLLECTIVE, rank == 1 ? "args->tokens" : "rank 1 failed");
    psr_shard_record records[16];
    a = even_args(b, tokens);
    a.shard_records = rank == 0 ? records : NULL;
    expect("shard_records", psr_mpi_sample_host(ctx, MPI_COMM_WORLD, &a),
           rank == 0 ? PSR_ERR_INVALID_ARGUMENT : PSR_ERR_COLLECTIVE, rank == 0 ? "args->shard_records" : NULL);
    a = even_args(b, tokens);
    psr_status st_ctx = psr_mpi_sample_host(rank == 1 ? NULL : ctx, MPI_COMM_WORLD, &a);
    if (rank == 1)
        CHECK(st_ctx == PSR_ERR_NULL_ARGUMENT && strstr(psr_last_error(NULL), "ctx"), "ctx NULL: %d (%s)",
              (int)st_ctx, psr_last_error(NULL));
    else
        expect("ctx", st_ctx, PSR_ERR_COLLECTIVE, "rank 1 failed: PSR_ERR_NULL_ARGUMENT");
    expect("comm", psr_mpi_sample_host(ctx, MPI_COMM_NULL, &a), PSR_ERR_NULL_ARGUMENT, "comm");
    expect("args", psr_mpi_sample_host(ctx, MPI_COMM_WORLD, NULL), PSR_ERR_NULL_ARGUMENT, "args");
    size_t bounds[PSR_MAX_SHARDS + 1];
    for (int s = 0; s <= size; s++)
        bounds[s] = b->vocab * (size_t)s / (size_t)size;
    uint32_t flags[16] = {0};
    expect("device tokens", device_call(b, bounds, &modes[0], rank == 0 ? 4 : b->rows * 4, tokens, flags),
           rank == 0 ? PSR_ERR_BUFFER_TOO_SMALL : PSR_ERR_COLLECTIVE, rank == 0 ? "args->tokens" : "rank 0 failed");
}

static void check_errors(void)
{
    batch b = make_batch(6, 1000);
    int32_t tokens[6];
    for (int r = 0; r < 6; r++)
        tokens[r] = -7;
    check_bad_ranges(&b, tokens);
    check_disagreements(&b, tokens);
    check_one_rank_fails(&b, tokens);
    for (int r = 0; r < 6; r++)
        CHECK(tokens[r] == -7, "a failed call wrote row %d's token", r);
    free_batch(&b);
}

/* The control: the ranks take each other's offsets (in reverse rank
 * order, so the ranges still tile) and keep their own columns. Every
 * check above passes because the tokens equal the reference, so they must
 * differ here, on most rows. */
static void check_control(void)
{
    batch b = make_batch(9, 1000);
    size_t bounds[PSR_MAX_SHARDS + 1];
    split(b.vocab, size, bounds);
    size_t offset = 0;
    for (int s = size - 1; s > rank; s--)
        offset += bounds[s + 1] - bounds[s];
    int32_t want[9], got[9];
    uint32_t want_f[9], got_f[9];
    reference(&b, &modes[0], want, want_f, NULL);
    psr_sample_host_args a = shard_args(&b, &modes[0], bounds[rank], bounds[rank + 1] - bounds[rank]);
    a.vocab_offset = offset, a.tokens = got, a.row_flags = got_f;
    psr_status st = psr_mpi_sample_host(ctx, MPI_COMM_WORLD, &a);
    CHECK(st == PSR_OK, "control: %s", psr_last_error(ctx));
    size_t differ = differences(want, want_f, got, got_f, b.rows, PSR_TOKENS_I32, NULL);
    CHECK(differ >= b.rows / 2, "control: only %zu of %zu rows differ with the offsets swapped", differ, b.rows);
    if (rank == 0)
        printf("control: %zu of %zu rows differ with the offsets swapped\n", differ, b.rows);
    free_batch(&b);
}

static void run_checks(void)
{
    check_same_tokens();
    check_filters();
    check_errors();
    check_control();
}

int main(int argc, char **argv)
{
    return mpi_test_main(argc, argv, 20240611, run_checks);
}
