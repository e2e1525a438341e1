/* psr_mpi_logprobs under mpirun (-np 2 and -np 4). Every rank builds the
 * same random batch, computes its logprobs whole (psr_logprobs) as the
 * reference, then its slice of the vocabulary through psr_mpi_logprobs.
 * Shards starting on multiples of 16,384 tokens must give the reference's
 * bits on every rank (processed and raw, top-N 0, 5 and 20, filters, rows
 * of -inf, NaN and +inf, tokens outside the vocabulary); uneven shards the
 * same ranks and top ids, logprobs up to rounding. Ranks whose tokens or
 * top_n differ, one rank's bad argument and a rank that sets the call's
 * own fields give their status on every rank. A control swaps two ranks' offsets while each keeps its columns:
 * the outputs must then differ. */
#include "mpi_test.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROWS 8
#define TOP 20

typedef struct batch {
    size_t vocab;
    float *logits;
    float temps[ROWS], top_p[ROWS];
    int32_t tokens[ROWS], top_k[ROWS];
} batch;

/* Rows of uniform logits in (-6, 6); row 1 all -inf, row 2 all NaN, row 3
 * +inf at two tokens; token -1 in row 0 and vocab in row 5. */
static batch make_batch(size_t vocab)
{
    batch b = {.vocab = vocab, .logits = malloc(ROWS * vocab * 4)};
    for (size_t r = 0; r < ROWS; r++) {
        float *x = b.logits + r * vocab;
        for (size_t i = 0; i < vocab; i++)
            x[i] = r == 1 ? -INFINITY : r == 2 ? NAN : 6.0f * uniform_pm();
        if (r == 3 && vocab > 2)
            x[vocab / 3] = x[vocab - 1] = INFINITY;
        b.temps[r] = r % 4 == 0 ? 0.0f : 0.5f + (float)(rnd() % 100) / 50.0f;
        b.tokens[r] = r == 0 ? -1 : r == 5 ? (int32_t)vocab : (int32_t)(rnd() % vocab);
        b.top_k[r] = r % 3 == 0 ? 0 : (int32_t)(1 + rnd() % 300);
        b.top_p[r] = r % 2 == 0 ? 1.0f : 0.6f + (float)(rnd() % 40) / 100.0f;
    }
    return b;
}

typedef struct outputs {
    float lp[ROWS], top_lp[ROWS * TOP];
    int32_t rank[ROWS], ids[ROWS * TOP];
} outputs;

/* One call's settings. */
typedef struct mode {
    int top_n;
    unsigned flags;
    bool filtered;
} mode;

/* psr_logprobs (bounds NULL) or psr_mpi_logprobs over this rank's slice;
 * `tweak` changes this rank's args before the call. */
static psr_status call(const batch *b, const size_t *bounds, const mode *m, outputs *o,
                       void (*tweak)(psr_logprobs_args *))
{
    cl_mem logits = upload(b->logits, ROWS * b->vocab * 4), temps = upload(b->temps, sizeof b->temps);
    cl_mem tokens = upload(b->tokens, sizeof b->tokens), top_k = upload(b->top_k, sizeof b->top_k);
    cl_mem top_p = upload(b->top_p, sizeof b->top_p);
    memset(o, 0, sizeof *o);
    cl_mem lp = upload(o->lp, sizeof o->lp), rk = upload(o->rank, sizeof o->rank);
    cl_mem ids = upload(o->ids, sizeof o->ids), top_lp = upload(o->top_lp, sizeof o->top_lp);
    psr_logprobs_args a;
    psr_logprobs_args_init(&a, sizeof a);
    a.rows = ROWS, a.vocab = b->vocab, a.logits = logits, a.temperatures = temps, a.tokens = tokens;
    a.top_n = m->top_n, a.flags = m->flags, a.token_logprobs = lp, a.token_ranks = rk;
    a.top_ids = m->top_n ? ids : NULL, a.top_logprobs = m->top_n ? top_lp : NULL;
    if (m->filtered)
        a.top_k = top_k, a.top_p = top_p;
    if (bounds) {
        a.vocab = bounds[rank + 1] - bounds[rank], a.logits_offset = bounds[rank], a.row_stride = b->vocab;
        a.vocab_offset = bounds[rank], a.vocab_total = b->vocab;
    }
    if (tweak)
        tweak(&a);
    cl_event ev = NULL;
    psr_status st = bounds ? psr_mpi_logprobs(ctx, MPI_COMM_WORLD, &a, &ev) : psr_logprobs(ctx, &a, &ev);
    if (st == PSR_OK) {
        clEnqueueReadBuffer(queue, lp, CL_TRUE, 0, sizeof o->lp, o->lp, 1, &ev, NULL);
        clEnqueueReadBuffer(queue, rk, CL_TRUE, 0, sizeof o->rank, o->rank, 0, NULL, NULL);
        clEnqueueReadBuffer(queue, ids, CL_TRUE, 0, sizeof o->ids, o->ids, 0, NULL, NULL);
        clEnqueueReadBuffer(queue, top_lp, CL_TRUE, 0, sizeof o->top_lp, o->top_lp, 0, NULL, NULL);
        clReleaseEvent(ev);
    }
    cl_mem all[] = {logits, temps, tokens, top_k, top_p, lp, rk, ids, top_lp};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        clReleaseMemObject(all[i]);
    return st;
}

static bool same_float(float x, float y, bool exact)
{
    if (isnan(x) || isnan(y))
        return isnan(x) && isnan(y);
    if (exact || isinf(x) || isinf(y))
        return memcmp(&x, &y, 4) == 0;
    return fabsf(x - y) <= 1e-5f * (1.0f + fabsf(y));
}

static size_t differences(const outputs *got, const outputs *want, int top_n, bool exact)
{
    size_t differ = 0;
    for (size_t r = 0; r < ROWS; r++) {
        bool same = same_float(got->lp[r], want->lp[r], exact) && got->rank[r] == want->rank[r];
        for (int n = 0; n < top_n; n++) {
            size_t i = r * (size_t)top_n + (size_t)n;
            same = same && got->ids[i] == want->ids[i] && same_float(got->top_lp[i], want->top_lp[i], exact);
        }
        differ += !same;
    }
    return differ;
}

static const mode modes[] = {{0, 0, false}, {5, 0, false}, {TOP, PSR_LOGPROBS_RAW, false}, {5, 0, true}};

/* Every mode over bounds; `exact`: the reference's bits. */
static void check_split(const batch *b, const size_t *bounds, bool exact)
{
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        outputs want, got;
        CHECK(call(b, NULL, &modes[i], &want, NULL) == PSR_OK, "reference: %s", psr_last_error(ctx));
        psr_status st = call(b, bounds, &modes[i], &got, NULL);
        CHECK(st == PSR_OK, "vocab %zu, mode %zu: %s", b->vocab, i, psr_last_error(ctx));
        size_t differ = st == PSR_OK ? differences(&got, &want, modes[i].top_n, exact) : 0;
        CHECK(differ == 0, "vocab %zu, mode %zu: %zu rows differ", b->vocab, i, differ);
    }
}

static void check_same_outputs(void)
{
    /* each rank one block, the last one block and 1,000 tokens */
    batch b = make_batch((size_t)size * 16384 + 1000);
    size_t bounds[PSR_MAX_SHARDS + 1];
    for (int r = 0; r <= size; r++)
        bounds[r] = r == size ? b.vocab : (size_t)r * 16384;
    check_split(&b, bounds, true);
    free(b.logits);
    /* uneven: random bounds, one-token shards */
    batch u = make_batch(20000);
    bounds[0] = 0, bounds[size] = u.vocab;
    for (int r = 1; r < size; r++)
        bounds[r] = rnd() % 3 == 0 ? bounds[r - 1] + 1 : bounds[r - 1] + 1 + rnd() % (u.vocab / (size_t)size);
    check_split(&u, bounds, false);
    free(u.logits);
}

static void other_top_n(psr_logprobs_args *a)
{
    if (rank == size - 1)
        a->top_n = 4;
}

static void bad_stride(psr_logprobs_args *a)
{
    if (rank == 1)
        a->row_stride = 1;
}

static void own_slots(psr_logprobs_args *a)
{
    if (rank == 0)
        a->shard_slots = 3;
}

static void swap_offsets(psr_logprobs_args *a)
{
    /* ranks 0 and 1 hold one block each: swap where they say they start */
    if (rank < 2)
        a->vocab_offset = rank == 0 ? 16384 : 0;
}

static void check_errors(void)
{
    batch b = make_batch((size_t)size * 16384); /* a block each: the control swaps two */
    size_t bounds[PSR_MAX_SHARDS + 1];
    for (int r = 0; r <= size; r++)
        bounds[r] = r == size ? b.vocab : (size_t)r * 16384;
    outputs o, want;
    const mode m = {5, 0, false};
    /* rank 1's tokens differ from the others' */
    int32_t saved = b.tokens[6];
    if (rank == 1)
        b.tokens[6] = (b.tokens[6] + 1) % (int32_t)b.vocab;
    expect("tokens differ", call(&b, bounds, &m, &o, NULL), PSR_ERR_SHARD_MISMATCH, "args->tokens");
    b.tokens[6] = saved;
    expect("top_n differs", call(&b, bounds, &m, &o, other_top_n), PSR_ERR_SHARD_MISMATCH, "args->top_n");
    expect("one rank's bad row_stride", call(&b, bounds, &m, &o, bad_stride),
           rank == 1 ? PSR_ERR_INVALID_ARGUMENT : PSR_ERR_COLLECTIVE, rank == 1 ? "args->row_stride" : "rank 1");
    expect("slots set", call(&b, bounds, &m, &o, own_slots),
           rank == 0 ? PSR_ERR_INVALID_ARGUMENT : PSR_ERR_COLLECTIVE, rank == 0 ? "args->shard_slot" : "rank 0");
    /* still good after all that */
    CHECK(call(&b, NULL, &m, &want, NULL) == PSR_OK, "reference: %s", psr_last_error(ctx));
    expect("good again", call(&b, bounds, &m, &o, NULL), PSR_OK, NULL);
    CHECK(differences(&o, &want, m.top_n, true) == 0, "outputs after the errors differ");
    /* the control: offsets swapped, the ranges still tile */
    CHECK(call(&b, bounds, &m, &o, swap_offsets) == PSR_OK, "control: %s", psr_last_error(ctx));
    size_t differ = differences(&o, &want, m.top_n, true);
    CHECK(differ >= ROWS / 2, "control: only %zu of %d rows differ with swapped offsets", differ, ROWS);
    free(b.logits);
}

static void run_checks(void)
{
    check_same_outputs();
    check_errors();
}

int main(int argc, char **argv)
{
    return mpi_test_main(argc, argv, 20261203, run_checks);
}
