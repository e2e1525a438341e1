/* psr_experimental.h first, in C89, C11 and C++ (tests/header/meson.build).
 * Compiled, never linked. */
#include <psr/psr_experimental.h>

int psr_header_tuning(psr_context *ctx);

int psr_header_tuning(psr_context *ctx)
{
    psr_tuning tuning;
    psr_last_paths paths;
    const psr_tuning_variable *v = psr_tuning_variable_at(0);
    cl_event first = NULL, last = NULL;
    psr_sample_args args;

    if (psr_context_tuning(ctx, &tuning) != PSR_OK || psr_context_last_paths(ctx, &paths) != PSR_OK)
        return 1;
    psr_sample_args_init(&args, sizeof args);
    if (psr_sample_enqueue(ctx, &args, &first, &last) != PSR_OK)
        return 2;
    if (!v || tuning.sample.work_group_size == 0 || paths.verify_one_launch)
        return 3;
    return psr_dtype_size(PSR_DTYPE_BF16) == 2 ? 0 : 4;
}
