/* Kernel sources compiled into the library by cl/embed.py. */
#ifndef PSR_KERNEL_SOURCES_H
#define PSR_KERNEL_SOURCES_H

#include <stddef.h>

typedef struct psr_embedded_source {
    const char *name;   /* the kernel set: "sample", "filter", "logprobs", "verify", ... */
    const char *text;   /* not NUL-terminated: use length */
    size_t length;
} psr_embedded_source;

extern const psr_embedded_source psr_embedded_sources[];
extern const size_t psr_embedded_source_count;

#endif
