/* Argument structs across library versions (abi.c): the init calls and
 * the calls' copies of what the caller passed. */
#ifndef PSR_RUNTIME_ABI_H
#define PSR_RUNTIME_ABI_H

#include <psr/psr.h>

#include <stddef.h>

/* One argument struct: the sizes the library accepts and its defaults. */
typedef struct psr_struct_layout {
    const char *type;     /* "psr_sample_args" */
    size_t first_size;    /* the struct's first released layout */
    size_t own_size;      /* its sizeof in this library */
    const void *defaults; /* own_size bytes of defaults (struct_size not read) */
} psr_struct_layout;

/* The size of a layout that ends with `member` of `type`. */
#define PSR_LAYOUT_END(type, member) (offsetof(type, member) + sizeof(((type *)0)->member))

/* An init call: the defaults into the caller's struct_size bytes, and
 * struct_size; PSR_ERR_STRUCT_SIZE (struct_size set to 0 where it fits)
 * for a size outside [first_size, own_size]. */
psr_status psr_struct_init(void *args, size_t struct_size, const psr_struct_layout *layout);

/* A call's own copy of the caller's struct: the defaults, then the
 * caller's struct_size bytes. PSR_ERR_STRUCT_SIZE (naming `call`'s
 * argument `name`) for a size the library does not accept. */
psr_status psr_struct_read(psr_context *ctx, const void *args, const psr_struct_layout *layout,
                           const char *name, void *out);

/* Does the caller's struct reach `end` bytes (a field added later)? */
#define PSR_HAS_FIELD(args, type, member) ((args)->struct_size >= PSR_LAYOUT_END(type, member))

#endif
