/* Known answers of the stream, embedded from tests/data (tools/embed_vectors.py). */
#ifndef PSR_CLI_VECTORS_H
#define PSR_CLI_VECTORS_H

#include <stdint.h>

typedef struct psr_uniform_vector {
    int64_t seed, pos;
    int drafting;
    uint32_t token;
    uint32_t row_key;  /* gseed */
    uint32_t u32_bits; /* the fp32 uniform's bits */
    uint64_t u64_bits; /* the fp64 uniform's bits */
} psr_uniform_vector;

extern const psr_uniform_vector psr_uniform_vectors[];
extern const unsigned psr_uniform_vector_count;

#endif
