/* psr sample --mpi and psr verify unbiased --mpi: the few calls that need
 * MPI, built only where the build found it (PSR_CLI_MPI). Each rank is
 * one vocabulary shard. */
#include "shards.h"
#include "cli.h"

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

void cli_mpi_finalize(void)
{
    MPI_Finalize();
}
