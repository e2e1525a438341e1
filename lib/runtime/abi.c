/* Argument structs across library versions: every struct starts with its
 * caller's sizeof, and the library reads only that many bytes, over its
 * own defaults, so structs can grow at their end without breaking
 * programs built against an older psr.h. */
#include "runtime/abi.h"
#include "runtime/status.h"

#include <string.h>

static int size_accepted(size_t size, const psr_struct_layout *layout)
{
    return size >= layout->first_size && size <= layout->own_size;
}

psr_status psr_struct_init(void *args, size_t struct_size, const psr_struct_layout *layout)
{
    if (!args)
        return psr_fail(NULL, PSR_ERR_NULL_ARGUMENT, "%s_init: args is NULL", layout->type);
    if (!size_accepted(struct_size, layout)) {
        if (struct_size >= sizeof(size_t))
            memset(args, 0, sizeof(size_t));
        return psr_fail(NULL, PSR_ERR_STRUCT_SIZE,
                        "%s_init: struct_size %zu is not a layout of %s this library accepts "
                        "(%zu .. %zu bytes): pass sizeof of the struct",
                        layout->type, struct_size, layout->type, layout->first_size, layout->own_size);
    }
    memcpy(args, layout->defaults, struct_size);
    memcpy(args, &struct_size, sizeof struct_size);
    return PSR_OK;
}

psr_status psr_args_read(psr_context *ctx, const void *args, const psr_struct_layout *layout, const char *call,
                         void *out)
{
    if (!ctx)
        return psr_fail(NULL, PSR_ERR_NULL_ARGUMENT, "%s: ctx is NULL", call);
    REQUIRE(args, PSR_ERR_NULL_ARGUMENT, "%s: args is NULL", call);
    return psr_struct_read(ctx, args, layout, "args", out);
}

psr_status psr_struct_read(psr_context *ctx, const void *args, const psr_struct_layout *layout,
                           const char *name, void *out)
{
    size_t size;
    memcpy(&size, args, sizeof size);
    REQUIRE(size_accepted(size, layout), PSR_ERR_STRUCT_SIZE,
            "%s->struct_size is %zu, not a layout of %s this library accepts (%zu .. %zu "
            "bytes): set it up with %s_init(&a, sizeof a)",
            name, size, layout->type, layout->first_size, layout->own_size, layout->type);
    memcpy(out, layout->defaults, layout->own_size);
    memcpy(out, args, size);
    return PSR_OK;
}
