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

/* The pattern of an output psr_verify did not write. */
#define SENTINEL 0x5a5a5a5a

/* How a case is verified. */
typedef struct vrun {
    psr_verify_method method;
    unsigned flags; /* internal noise bits too (set_verify_flags) */
    psr_token_dtype tokens_dtype;
    psr_dtype dtype;
    void (*tamper)(psr_verify_args *); /* bad-input tests change the arguments */
} vrun;

/* Runs psr_verify on a case on ctx: tokens [requests, max_drafts + 1] and
 * num_sampled come back (SENTINEL where nothing was written), *status the
 * device-side status word. bf16 runs round the case's logits first. */
psr_status vcase_run(psr_context *ctx, vcase *c, const vrun *run, int32_t *tokens, int32_t *num, uint32_t *status);

#endif
