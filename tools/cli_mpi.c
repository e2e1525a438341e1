/* psr sample --mpi and psr verify unbiased --mpi: the few calls that need
 * MPI, built only where the build found it (PSR_CLI_MPI). Each rank is
 * one vocabulary shard; with --logprobs the ranks compute the logprobs
 * in rounds too, and verify unbiased verifies its drafts in rounds. */
#include "shards.h"
#include "cli.h"

#include <psr/psr_experimental.h>
#include <psr/psr_mpi.h>
#include <stdio.h>

int cli_mpi_init(int *rank, int *ranks)
{
    if (MPI_Init(NULL, NULL) != MPI_SUCCESS || MPI_Comm_rank(MPI_COMM_WORLD, rank) != MPI_SUCCESS ||
        MPI_Comm_size(MPI_COMM_WORLD, ranks) != MPI_SUCCESS) {
        fprintf(stderr, "psr: --mpi: MPI did not start\n");
        return CLI_FAILED;
    }
    return CLI_OK;
}

int cli_mpi_agree(int rc)
{
    int worst = rc;
    if (MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS)
        return CLI_FAILED;
    return worst;
}

psr_status cli_mpi_sample(psr_context *ctx, const psr_sample_host_args *args)
{
    return psr_mpi_sample_host(ctx, MPI_COMM_WORLD, args);
}

/* cli_mpi_logprobs' device buffers, by index. */
enum { L_LOGITS, L_TEMPS, L_TOKENS, L_LOGPROBS, L_RANKS, L_TOP_IDS, L_TOP_LOGPROBS, L_BUFFERS };

/* The rank's columns, temperatures and tokens uploaded; room for the outputs. */
static cl_int logprobs_buffers(psr_context *ctx, const psr_sample_host_args *m, const shards_logprobs *lp,
                               cl_mem *out)
{
    size_t rows = m->rows, top = rows * (size_t)lp->top_n * 4;
    size_t stride = m->row_stride ? m->row_stride : m->vocab;
    size_t logit_bytes = ((rows - 1) * stride + m->vocab) * psr_dtype_size(m->logits_dtype);
    const cli_buffer spec[L_BUFFERS] = {
        [L_LOGITS] = {logit_bytes, m->logits},
        [L_TEMPS] = {rows * 4, m->temperatures},
        [L_TOKENS] = {rows * (m->tokens_dtype == PSR_TOKENS_I64 ? 8 : 4), m->tokens},
        [L_LOGPROBS] = {rows * 4, NULL},
        [L_RANKS] = {rows * 4, NULL},
        [L_TOP_IDS] = {top, NULL},
        [L_TOP_LOGPROBS] = {top, NULL},
    };
    return cli_make_buffers(ctx, spec, L_BUFFERS, out);
}

/* psr_mpi_logprobs on the uploaded buffers, then the outputs read back
 * (a read that fails is this rank's alone: no collective follows). */
static psr_status logprobs_rounds(psr_context *ctx, const psr_sample_host_args *m, const shards_logprobs *lp,
                                  const cl_mem *b)
{
    psr_logprobs_args a;
    psr_logprobs_args_init(&a, sizeof a);
    a.rows = m->rows, a.vocab = m->vocab, a.logits = b[L_LOGITS], a.logits_dtype = m->logits_dtype;
    a.row_stride = m->row_stride, a.temperatures = b[L_TEMPS];
    a.tokens = b[L_TOKENS], a.tokens_dtype = m->tokens_dtype;
    a.top_n = lp->top_n, a.flags = lp->raw ? PSR_LOGPROBS_RAW : 0;
    if (!lp->raw) /* the filters shape processed logprobs only */
        a.all_top_k = m->all_top_k, a.all_top_p = m->all_top_p, a.all_min_p = m->all_min_p;
    a.token_logprobs = b[L_LOGPROBS], a.token_ranks = b[L_RANKS];
    a.top_ids = lp->top_n ? b[L_TOP_IDS] : NULL, a.top_logprobs = lp->top_n ? b[L_TOP_LOGPROBS] : NULL;
    a.vocab_offset = m->vocab_offset, a.vocab_total = m->vocab_total;
    cl_event done = NULL;
    psr_status st = psr_mpi_logprobs(ctx, MPI_COMM_WORLD, &a, &done);
    size_t rows = m->rows, top = rows * (size_t)lp->top_n * 4;
    const struct { int buffer; size_t bytes; void *host; } out[] = {
        {L_LOGPROBS, rows * 4, lp->token_logprobs}, {L_RANKS, rows * 4, lp->token_ranks},
        {L_TOP_IDS, top, lp->top_ids}, {L_TOP_LOGPROBS, top, lp->top_logprobs}};
    cl_int err = st == PSR_OK && done ? clWaitForEvents(1, &done) : CL_SUCCESS;
    for (size_t i = 0; st == PSR_OK && err == CL_SUCCESS && i < sizeof out / sizeof out[0]; i++)
        if (out[i].bytes)
            err = clEnqueueReadBuffer(cli_queue(ctx), b[out[i].buffer], CL_TRUE, 0, out[i].bytes, out[i].host, 0,
                                      NULL, NULL);
    if (done)
        clReleaseEvent(done);
    if (st == PSR_OK && err != CL_SUCCESS)
        st = cli_fail(PSR_ERR_OPENCL, "reading the logprobs failed: %s (%d)", psr_cl_error_string(err), err);
    return st;
}

psr_status cli_mpi_logprobs(psr_context *ctx, const psr_sample_host_args *mine, const shards_logprobs *lp)
{
    cl_mem b[L_BUFFERS] = {NULL};
    cl_int err = logprobs_buffers(ctx, mine, lp, b);
    /* a rank without its buffers would leave the others waiting in the rounds */
    psr_status st = PSR_OK;
    if (err != CL_SUCCESS)
        st = cli_fail(PSR_ERR_OPENCL, "allocating the logprobs' device buffers failed: %s (%d)",
                      psr_cl_error_string(err), err);
    if (cli_mpi_agree(st == PSR_OK ? CLI_OK : CLI_FAILED) != CLI_OK && st == PSR_OK)
        st = cli_fail(PSR_ERR_COLLECTIVE, "another rank could not allocate its logprobs' device buffers");
    if (st == PSR_OK)
        st = logprobs_rounds(ctx, mine, lp, b);
    clFinish(cli_queue(ctx)); /* nothing may still use the buffers below */
    cli_release_buffers(b, L_BUFFERS);
    return st;
}

psr_status cli_mpi_verify(psr_context *ctx, const psr_verify_host_args *whole, size_t lo, size_t hi)
{
    cl_mem b[VB_BUFFERS], cache = NULL;
    psr_verify_args a;
    cl_int err = shards_verify_stage(ctx, whole, lo, hi, b, &a);
    if (err == CL_SUCCESS)
        err = shards_verify_cache(ctx, whole, lo, hi, &cache);
    /* a rank without its buffers would leave the others waiting in the rounds */
    psr_status st = PSR_OK;
    if (err != CL_SUCCESS)
        st = cli_fail(PSR_ERR_OPENCL, "allocating the verification's device buffers failed: %s (%d)",
                      psr_cl_error_string(err), err);
    if (cli_mpi_agree(st == PSR_OK ? CLI_OK : CLI_FAILED) != CLI_OK && st == PSR_OK)
        st = cli_fail(PSR_ERR_COLLECTIVE, "another rank could not allocate its verification's device buffers");
    a.vocab = hi - lo, a.vocab_offset = lo, a.draft_cache = cache;
    cl_event done = NULL;
    if (st == PSR_OK)
        st = psr_mpi_verify(ctx, MPI_COMM_WORLD, &a, &done);
    err = st == PSR_OK && done ? clWaitForEvents(1, &done) : CL_SUCCESS;
    if (st == PSR_OK && err != CL_SUCCESS)
        st = cli_fail(PSR_ERR_OPENCL, "verifying failed: %s (%d)", psr_cl_error_string(err), err);
    if (st == PSR_OK) /* the same status on every rank: they fail together */
        st = shards_verify_finish(ctx, whole, b);
    if (done)
        clReleaseEvent(done);
    clFinish(cli_queue(ctx)); /* nothing may still use the buffers below */
    cli_release_buffers(b, VB_BUFFERS);
    cli_release_buffers(&cache, 1);
    return st;
}

void cli_mpi_finalize(void)
{
    MPI_Finalize();
}
