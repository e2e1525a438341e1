/* Random verification cases: requests of 0 .. max_drafts drafts with
 * their target logits, draft cache, draft tokens, seeds, positions and
 * temperatures (tests/verify_case.c). */
#ifndef PSR_TEST_VERIFY_CASE_H
#define PSR_TEST_VERIFY_CASE_H

#include "common.h"

typedef struct vcase {
    size_t requests, rows, vocab, max_drafts, cache_k, stride;
    int32_t *cu;
    float *target;  /* [rows, vocab] */
    float *cache;   /* [requests, cache_k, vocab] or NULL */
    int32_t *drafts; /* [rows] */
    int64_t *seeds, *positions;
    float *temps;
} vcase;

void free_case(vcase *c);
/* The index of the largest of x[0 .. n), NaN below everything. */
int32_t host_argmax(const float *x, size_t n);
/* Random requests of 0..max_drafts drafts. Drafts are often the target's
 * argmax (so greedy accepts some), sometimes random, sometimes -1; some
 * rows are all NaN; temperatures mix 0.7, 1 and 0 (greedy). */
vcase make_case(size_t requests, size_t vocab, size_t max_drafts, bool cache);

#endif
