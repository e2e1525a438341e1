/* Times psr_mpi_sample_host against one process sampling the whole
 * vocabulary. Usage: mpirun -np N bench_mpi [rows [vocab [calls]]]
 * (default 8 rows x 128,256 tokens, 50 calls after 5 of warm-up). Prints
 * the median, in microseconds, of: the whole MPI call; its MPI part alone (the header and
 * records rounds, on buffers of the same sizes); this rank's shard alone;
 * one process (rank 0, the others waiting) sampling every token. */
#include <psr/psr_mpi.h>

#include <stdio.h>
#include <stdlib.h>

static int rank, size;
static psr_context *ctx;

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* What one timed call runs: 0 the MPI call, 1 the rounds alone, 2 the
 * shard alone, 3 the whole vocabulary in one process. */
typedef struct job {
    psr_sample_host_args shard, whole;
    psr_shard_record *records;
    unsigned char header[48], headers[48 * PSR_MAX_SHARDS];
} job;

static psr_status run(job *j, int what)
{
    switch (what) {
    case 0: return psr_mpi_sample_host(ctx, MPI_COMM_WORLD, &j->shard);
    case 1:
        MPI_Allgather(j->header, 48, MPI_BYTE, j->headers, 48, MPI_BYTE, MPI_COMM_WORLD);
        MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, j->records, (int)(j->shard.rows * 16), MPI_BYTE,
                      MPI_COMM_WORLD);
        return PSR_OK;
    case 2: {
        psr_sample_host_args a = j->shard;
        a.tokens = NULL, a.shard_count = (size_t)size, a.shard_index = (size_t)rank;
        a.shard_records = j->records + (size_t)rank * a.rows;
        return psr_sample_host(ctx, &a);
    }
    default: return rank == 0 ? psr_sample_host(ctx, &j->whole) : PSR_OK;
    }
}

static double median_ms(job *j, int what, int calls)
{
    double *t = malloc((size_t)calls * sizeof *t);
    for (int i = -5; i < calls; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        if (run(j, what) != PSR_OK) {
            fprintf(stderr, "rank %d: %s\n", rank, psr_last_error(ctx));
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        if (i >= 0)
            t[i] = (MPI_Wtime() - t0) * 1e3;
    }
    qsort(t, (size_t)calls, sizeof *t, by_value);
    double m = t[calls / 2];
    free(t);
    return m;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    size_t rows = argc > 1 ? strtoul(argv[1], NULL, 10) : 8, vocab = argc > 2 ? strtoul(argv[2], NULL, 10) : 128256;
    int calls = argc > 3 ? atoi(argv[3]) : 50;
    if (psr_context_create(NULL, &ctx) != PSR_OK || rows == 0 || vocab < (size_t)size || calls < 1)
        MPI_Abort(MPI_COMM_WORLD, 1);
    float *logits = malloc(rows * vocab * sizeof *logits), *temps = malloc(rows * sizeof *temps);
    int64_t *seeds = malloc(rows * 8), *positions = malloc(rows * 8);
    int32_t *tokens = malloc(rows * 4);
    uint64_t x = 1;
    for (size_t i = 0; i < rows * vocab; i++)
        x = x * 6364136223846793005u + 1442695040888963407u, logits[i] = (float)(x >> 40) / (float)(1 << 22);
    for (size_t r = 0; r < rows; r++)
        seeds[r] = (int64_t)r, positions[r] = (int64_t)r, temps[r] = 0.8f;
    job j;
    psr_sample_host_args_init(&j.whole, sizeof j.whole);
    j.whole.rows = rows, j.whole.vocab = vocab, j.whole.logits = logits, j.whole.seeds = seeds;
    j.whole.positions = positions, j.whole.temperatures = temps, j.whole.tokens = tokens;
    size_t lo = vocab * (size_t)rank / (size_t)size, hi = vocab * (size_t)(rank + 1) / (size_t)size;
    j.shard = j.whole;
    j.shard.logits = logits + lo, j.shard.vocab = hi - lo, j.shard.row_stride = vocab;
    j.shard.vocab_offset = lo, j.shard.vocab_total = vocab;
    j.records = calloc((size_t)size * rows, sizeof *j.records);
    static const char *names[] = {"psr_mpi_sample_host (whole call)", "MPI rounds alone (header + records)",
                                  "this rank's shard alone (psr_sample_host)", "one process, every token"};
    for (int what = 0; what < 4; what++) {
        double ms = median_ms(&j, what, calls);
        if (rank == 0)
            printf("%d ranks, %zu rows x %zu tokens: %-42s median %9.1f us\n", size, rows, vocab, names[what],
                   ms * 1e3);
    }
    free(logits), free(temps), free(seeds), free(positions), free(tokens), free(j.records);
    psr_context_free(ctx);
    MPI_Finalize();
    return 0;
}
