/* What psr learned of an app's buffers, kept per context (buffer_memo.c):
 * calls check every cl_mem (its context, size, parent and offset), and an
 * engine passes the same buffers call after call, so the answers of the
 * driver are kept until the buffer is destroyed. */
#ifndef PSR_RUNTIME_BUFFER_MEMO_H
#define PSR_RUNTIME_BUFFER_MEMO_H

#include <psr/psr.h>

#include <stdbool.h>
#include <stddef.h>

/* Where a buffer lies: its root (itself, or the parent of a sub-buffer),
 * its bytes there, and whether it belongs to the context. */
typedef struct psr_buffer_facts {
    cl_mem root;
    size_t offset, size;
    bool ours;
} psr_buffer_facts;

#define PSR_BUFFER_MEMO_SIZE 32

typedef struct psr_buffer_memo_slot psr_buffer_memo_slot;
typedef struct psr_buffer_memo {
    cl_mem mem[PSR_BUFFER_MEMO_SIZE];
    psr_buffer_facts facts[PSR_BUFFER_MEMO_SIZE];
    psr_buffer_memo_slot *slot[PSR_BUFFER_MEMO_SIZE]; /* told when the buffer is destroyed */
    size_t next;                                      /* the entry replaced next */
} psr_buffer_memo;

/* The facts of a buffer seen before and not destroyed since, or false. */
bool psr_buffer_memo_find(psr_buffer_memo *memo, cl_mem mem, psr_buffer_facts *out);
/* Keeps a buffer's facts (nothing happens where the driver cannot say
 * when the buffer goes). */
void psr_buffer_memo_keep(psr_buffer_memo *memo, cl_mem mem, const psr_buffer_facts *facts);
/* Forgets everything (context free). */
void psr_buffer_memo_clear(psr_buffer_memo *memo);

#endif
