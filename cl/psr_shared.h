/* Constants that the kernels and the host share: one definition, read by
 * OpenCL C (embedded with the kernel sources) and by C (lib/). Plain
 * integer macros only, so both languages read them alike. */
#ifndef PSR_SHARED_H
#define PSR_SHARED_H

/* The draft stream draws its row key at pos + 2^30, so positions must stay
 * below 2^30 (PSR_MAX_POSITION) for the two streams to stay disjoint. */
#define PSR_DRAFT_SALT_BITS 30

#endif
