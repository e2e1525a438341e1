/* The buffer memo: a small table of cl_mem handles and their facts. A
 * handle alone cannot name a buffer for long (a destroyed buffer's handle
 * may be handed out again), so each entry registers a destructor callback
 * that marks its slot dead; the slot is shared by the table and the
 * callback, and freed by whichever lets go of it last. */
#include "runtime/buffer_memo.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct psr_buffer_memo_slot {
    atomic_int refs;  /* the table's and the callback's */
    atomic_bool dead; /* the buffer has been destroyed */
};

static void release_slot(psr_buffer_memo_slot *s)
{
    if (atomic_fetch_sub(&s->refs, 1) == 1)
        free(s);
}

static void CL_CALLBACK on_destroyed(cl_mem mem, void *user_data)
{
    (void)mem;
    psr_buffer_memo_slot *s = user_data;
    atomic_store(&s->dead, true);
    release_slot(s);
}

static void forget(psr_buffer_memo *memo, size_t i)
{
    if (memo->slot[i])
        release_slot(memo->slot[i]);
    memo->slot[i] = NULL;
    memo->mem[i] = NULL;
}

bool psr_buffer_memo_find(psr_buffer_memo *memo, cl_mem mem, psr_buffer_facts *out)
{
    for (size_t i = 0; i < PSR_BUFFER_MEMO_SIZE; i++) {
        if (memo->mem[i] != mem || !mem)
            continue;
        if (atomic_load(&memo->slot[i]->dead)) {
            forget(memo, i);
            return false;
        }
        *out = memo->facts[i];
        return true;
    }
    return false;
}

void psr_buffer_memo_keep(psr_buffer_memo *memo, cl_mem mem, const psr_buffer_facts *facts)
{
    psr_buffer_memo_slot *s = malloc(sizeof *s);
    if (!s)
        return;
    atomic_init(&s->refs, 2);
    atomic_init(&s->dead, false);
    if (clSetMemObjectDestructorCallback(mem, on_destroyed, s) != CL_SUCCESS) {
        free(s);
        return;
    }
    size_t i = memo->next;
    memo->next = (i + 1) % PSR_BUFFER_MEMO_SIZE;
    forget(memo, i);
    memo->mem[i] = mem;
    memo->facts[i] = *facts;
    memo->slot[i] = s;
}

void psr_buffer_memo_clear(psr_buffer_memo *memo)
{
    for (size_t i = 0; i < PSR_BUFFER_MEMO_SIZE; i++)
        forget(memo, i);
    memo->next = 0;
}
