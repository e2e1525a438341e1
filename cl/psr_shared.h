/* What the kernels and the host share: constants, and the structs of
 * scalar parameters that kernels take by value. One definition, read by
 * OpenCL C (the embedding step inlines it into the kernel sources) and
 * by C (lib/). Fields are fixed-width and ordered widest first, so both
 * compilers lay the structs out alike; the host checks the sizes. */
#ifndef PSR_SHARED_H
#define PSR_SHARED_H

#ifdef __OPENCL_VERSION__
typedef int psr_int32_t;
typedef uint psr_uint32_t;
typedef ulong psr_uint64_t;
#else
#include <stdint.h>
typedef int32_t psr_int32_t;
typedef uint32_t psr_uint32_t;
typedef uint64_t psr_uint64_t;
#endif

/* ---- the random stream ---- */

/* The draft stream draws its row key at pos + 2^30, so positions must stay
 * below 2^30 (PSR_MAX_POSITION) for the two streams to stay disjoint. */
#define PSR_DRAFT_SALT_BITS 30

/* ---- the log-sum-exp's fixed order (verification and logprobs) ---- */

/* A row is cut into super-blocks of PSR_SB tokens; a super-block into
 * PSR_LANES lanes, lane w holding PSR_SB_STEPS runs of 4 tokens. */
#define PSR_LANES 256
#define PSR_SB_STEPS 16
#define PSR_SB (4 * PSR_LANES * PSR_SB_STEPS)

/* psr_verify's count and rejection words keep a count in their low
 * PSR_REJECT_BITS bits and the launch's number in the rest, so launches
 * are numbered 1 .. 2^(32 - PSR_REJECT_BITS) - 1 and then again. */
#define PSR_REJECT_BITS 12

/* ---- filters ---- */

/* Candidates a row may gather before its last group searches the whole
 * row instead (a flat top of the distribution, many ties). */
#define PSR_FILTER_CAP 16384
/* Top-k's histogram of the keys' top 12 bits. */
#define PSR_FILTER_HBINS 4096
/* On the vector path (CPU devices) top-k rows with k up to this stream
 * their candidates in the filters' pass 1, which then finishes them. */
#define PSR_FILTER_STREAM_K 512

/* ---- kernel parameters ---- */

/* The logits' shape and how rows are split over work-groups: the start
 * of every sampling and filter kernel's parameters. */
typedef struct psr_rows_params {
    psr_uint64_t logits_offset;  /* elements before row 0 */
    psr_uint64_t row_stride;     /* elements from a row to the next */
    psr_uint32_t vocab;
    psr_uint32_t requests;       /* entries of the per-request arrays */
    psr_uint32_t groups_per_row;
    psr_uint32_t chunk;          /* tokens per group, a multiple of the step */
} psr_rows_params;

/* psr_gumbel_sample and psr_gumbel_finalize. */
typedef struct psr_sample_params {
    psr_rows_params rows;
    psr_uint64_t draft_cache_stride;     /* elements from a cache row to the next */
    psr_uint32_t draft_cache_rows_total; /* cache rows that exist */
    psr_uint32_t draft_cache_k;          /* cache rows per request; 0: one per row */
    psr_uint32_t draft_step;             /* which of a request's K rows this launch fills */
    psr_uint32_t tokens64;               /* the tokens are int64 */
    psr_uint32_t token_base;             /* global id of the logits' first column (shards) */
    psr_uint32_t shard_tag;              /* 0: tokens out; else records out (psr_shard_record),
                                            their flags' bits 16-31 (index, count) */
    psr_uint32_t records_offset;         /* records before row 0's */
    psr_uint32_t list_cap;               /* filter.cl's candidate list per row (rows it lists) */
    psr_uint32_t keys_at;                /* one pass: 64-bit words from best_scratch's row
                                            counts to its group slots */
    psr_uint32_t list_at;                /* 16-byte units from thresholds to the lists */
} psr_sample_params;

/* A sharded sampling's result per row, as psr_shard_record in psr.h. */
typedef struct psr_shard_rec {
    psr_uint64_t value; /* the best score, ordered as an unsigned integer */
    psr_int32_t token;  /* global id, -1 for rows with no token */
    psr_uint32_t flags; /* PSR_ROW_* | shard_tag */
} psr_shard_rec;

/* psr_filter_scan, psr_filter_collect and psr_filter_collect_mass. */
/* psr_filter_params.noise (read on CPUs; elsewhere the variant's own). */
#define PSR_FILTER_NOISE_FP32 0
#define PSR_FILTER_NOISE_WIDE 1
#define PSR_FILTER_NOISE_FP64 2

typedef struct psr_filter_params {
    psr_rows_params rows;
    psr_uint32_t cap;        /* candidates per row, a multiple of 4 */
    psr_uint32_t direct_max; /* rows whose kept tokens fit this many are drawn by the filter; 0: never */
    int all_top_k;           /* every request's filters where its buffer is NULL */
    float all_top_p;
    float all_min_p;
    psr_uint32_t tokens64;   /* the tokens (of rows the filter draws) are int64 */
    psr_uint32_t noise;      /* the noise of the rows the filter draws: PSR_FILTER_NOISE_* */
    psr_uint32_t drafting;   /* 1: those rows are on the draft stream */
    /* The kernels' one scratch buffer holds the rows' thresholds from its
     * start, then these regions, at these offsets in PSR_FILTER_AT_UNIT. */
    psr_uint32_t state_at, hist_at;
    psr_uint32_t cand_at;    /* PSR_FILTER_NONE: the kernel has no candidates */
    psr_uint32_t unused;     /* keeps the size a multiple of 8 */
} psr_filter_params;
#define PSR_FILTER_NONE 0xffffffffu
#define PSR_FILTER_AT_UNIT 16 /* bytes */
/* An offset in PSR_FILTER_AT_UNIT as 32-bit words. */
#define PSR_FILTER_AT_WORDS(at) ((psr_uint64_t)(at) * (PSR_FILTER_AT_UNIT / 4))

/* psr_logprobs_partial, psr_logprobs_partial_few, psr_logprobs_finish
 * and psr_logprobs_one. */
typedef struct psr_logprobs_params {
    psr_uint64_t logits_offset;
    psr_uint64_t row_stride;
    psr_uint32_t vocab;          /* the logits' columns (finish: the tokens' range) */
    psr_uint32_t rows;
    psr_uint32_t requests;
    psr_uint32_t blocks_per_row; /* super-blocks of a row: ceil(vocab / PSR_SB); finish: slots merged */
    psr_uint32_t top_n;
    psr_uint32_t raw;            /* 1: logprobs of the raw logits (no temperature, no filter) */
    psr_uint32_t tokens64;       /* the sampled tokens are int64 */
    psr_uint32_t token_base;     /* global id of the logits' first column (shards) */
    psr_uint32_t first_slot;     /* the slot of block 0's partials */
    /* Every array below is a view of the kernels' one `parts` buffer, from
     * its start, in its own elements. Where (row, slot)'s partials are:
     * base + row * row_step + slot * slot_step (+ n for a top-N list). */
    psr_uint32_t lse_base, beat_base, top_v_base, top_i_base;
    psr_uint32_t part_row_step;  /* lse and beat */
    psr_uint32_t lse_slot_step, beat_slot_step;
    psr_uint32_t top_row_step, top_slot_step;
    psr_uint32_t token_value_base; /* the sampled tokens' values (PSR_LP_NONE: none, shards) */
    psr_uint32_t done_base;        /* psr_logprobs_one: each row's count of finished blocks */
} psr_logprobs_params;
#define PSR_LP_NONE 0xffffffffu

/* psr_verify_shard_keys, _stats, _sample and _finish (cl/verify_shards.cl). */
typedef struct psr_verify_shard_params {
    psr_uint64_t logits_offset;
    psr_uint64_t row_stride;
    psr_uint32_t vocab;          /* this shard's columns */
    psr_uint32_t vocab_total;
    psr_uint32_t token_base;     /* global id of the shard's first column */
    psr_uint32_t rows;
    psr_uint32_t requests;
    psr_uint32_t greedy_all;     /* PSR_VERIFY_GREEDY */
    psr_uint32_t cache_k;        /* draft cache rows per request; 0: one-hot drafts */
    psr_uint32_t first_slot;     /* this shard's first slot */
    psr_uint32_t slots;          /* every shard's slots */
    psr_uint32_t slot_words;     /* 4-byte words from a slot to the next */
    psr_uint32_t cols;           /* output tokens per request: max_drafts + 1 */
    psr_uint32_t tokens64;
    psr_uint32_t shard_tag;      /* the records' flags: index << 16 | count << 24 */
    psr_uint32_t records_offset; /* records before request 0's: shard_index x requests */
    psr_uint32_t shards;         /* shard_count */
    psr_uint32_t unused;
} psr_verify_shard_params;

/* psr_verify's state lives in one buffer of regions; psr_verify_params.at
 * holds each region's byte offset (PSR_VS_NONE: the kernel gets NULL).
 * Regions from PSR_VS_DONE to PSR_VS_BEST_COUNT hold launch-numbered
 * words, cleared together when the numbers start over. */
#define PSR_VS_T_LSE 0      /* per (row, super-block): the target's (max, sum) */
#define PSR_VS_T_BEST 1     /* and its best value */
#define PSR_VS_T_BEST_I 2   /* and that value's token */
#define PSR_VS_Q_LSE 3      /* per (row, super-block): the draft's (max, sum) */
#define PSR_VS_WALKS 4      /* per request: its walk, for the finishing kernel */
#define PSR_VS_STATUS 5     /* the input check's flags */
#define PSR_VS_DONE 6       /* per row: its statistics groups done */
#define PSR_VS_REJECTED 7   /* per request: the first rejection found */
#define PSR_VS_TICKETS 8    /* one launch: the groups' tickets, the check's word */
#define PSR_VS_REQ_DONE 9   /* one launch: per request, its statistics groups done */
#define PSR_VS_BEST_COUNT 10 /* per request: sampling groups that stored their key */
#define PSR_VS_ROW_LSE 11   /* per row: the merged (max, sum) */
#define PSR_VS_BEST_KEYS 12 /* per sampling group: its best key */
#define PSR_VS_REGIONS 13
#define PSR_VS_NONE 0xffffffffu

/* psr_verify_stats, psr_verify_sample, psr_verify_finalize and
 * psr_verify_fused. */
typedef struct psr_verify_params {
    psr_uint64_t logits_offset;
    psr_uint64_t row_stride;
    psr_uint32_t vocab;
    psr_uint32_t rows;
    psr_uint32_t requests;
    psr_uint32_t blocks_per_row;  /* super-blocks of a row */
    psr_uint32_t greedy_all;      /* PSR_VERIFY_GREEDY */
    psr_uint32_t cache_k;         /* draft cache rows per request; 0: one-hot drafts */
    psr_uint32_t epoch;           /* this launch's number */
    psr_uint32_t decide;          /* rows' last groups decide drafts and later rows skip */
    psr_uint32_t draft_rows;
    psr_uint32_t groups_per_row;  /* sampling groups per request */
    psr_uint32_t chunk;
    psr_uint32_t cols;            /* output tokens per request: max_drafts + 1 */
    psr_uint32_t tokens64;        /* the output tokens are int64 */
    psr_uint32_t first_sampling;  /* one launch: the first sampling group's ticket */
    psr_uint32_t at[PSR_VS_REGIONS + 1]; /* byte offsets (one spare keeps the size a multiple of 8) */
} psr_verify_params;

#endif
