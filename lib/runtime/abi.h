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

/* The start of every call that takes an argument struct: `call` names
 * the call in the messages of a NULL ctx or args (PSR_ERR_NULL_ARGUMENT),
 * then psr_struct_read of args into out. */
psr_status psr_args_read(psr_context *ctx, const void *args, const psr_struct_layout *layout, const char *call,
                         void *out);

/* Defines an argument struct's defaults (the designated initialisers
 * after `first_size`), its layout `type##_layout` and its public init call
 * type##_init(type *, size_t). */
#define PSR_ARGS_STRUCT(type, first_size, ...)                                                  \
    static const type type##_defaults = {__VA_ARGS__};                                          \
    static const psr_struct_layout type##_layout = {#type, first_size, sizeof(type),            \
                                                    &type##_defaults};                          \
    psr_status type##_init(type *args, size_t struct_size)                                      \
    {                                                                                           \
        return psr_struct_init(args, struct_size, &type##_layout);                              \
    }

#endif
