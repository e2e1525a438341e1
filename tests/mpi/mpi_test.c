#include "mpi_test.h"

#include <string.h>

int rank, size;
psr_context *ctx;
cl_context cl_ctx;
cl_command_queue queue;
int failures, checks;

static uint64_t rng;

uint64_t rnd(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

float uniform_pm(void)
{
    return (float)((double)(rnd() >> 11) / 9007199254740992.0) * 2.0f - 1.0f;
}

cl_mem upload(const void *host, size_t bytes)
{
    cl_int err;
    cl_mem m = clCreateBuffer(cl_ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, (void *)host, &err);
    CHECK(err == CL_SUCCESS, "clCreateBuffer: %d", err);
    return m;
}

void expect(const char *name, psr_status got, psr_status want, const char *text)
{
    CHECK(got == want, "%s: status %d, not %d (%s)", name, (int)got, (int)want, psr_last_error(ctx));
    CHECK(got != want || !text || strstr(psr_last_error(ctx), text), "%s: '%s' does not say '%s'", name,
          psr_last_error(ctx), text);
}

int mpi_test_main(int argc, char **argv, uint64_t seed, void (*run_checks)(void))
{
    rng = seed;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (size < 2 || psr_context_create(NULL, &ctx) != PSR_OK) {
        fprintf(stderr, "rank %d: needs 2 ranks or more and a context: %s\n", rank, psr_last_error(NULL));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    psr_context_cl(ctx, &cl_ctx, NULL, &queue);
    run_checks();
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("%d ranks: %s (%d of rank 0's %d checks failed on some rank)\n", size, total ? "FAILED" : "ok",
               total, checks);
    psr_context_free(ctx);
    MPI_Finalize();
    return total != 0;
}
