/* The context calls of psr_experimental.h: tuning, build options and the
 * paths the last calls took. */
#include "runtime/runtime.h"

#include <stdio.h>
#include <string.h>

psr_status psr_device_tuning(const psr_device_info *info, psr_tuning *out)
{
    psr_clear_thread_error();
    if (!info || !out)
        return psr_fail(NULL, PSR_ERR_NULL_ARGUMENT, "psr_device_tuning: %s is NULL", info ? "out" : "info");
    *out = psr_tuning_for(info);
    return PSR_OK;
}

psr_status psr_context_tuning(const psr_context *ctx, psr_tuning *out)
{
    psr_status st = psr_context_check_call(ctx, out, "psr_context_tuning", "out");
    if (st == PSR_OK)
        *out = ctx->tuning;
    return st;
}

psr_status psr_context_set_tuning(psr_context *ctx, const psr_tuning *t)
{
    psr_status st = psr_context_check_call(ctx, t, "psr_context_set_tuning", "tuning");
    if (st != PSR_OK)
        return st;
    size_t wg = t->sample.work_group_size;
    REQUIRE(wg >= 16 && !(wg & (wg - 1)) && wg <= ctx->info.max_work_group_size, PSR_ERR_INVALID_ARGUMENT,
            "tuning->sample.work_group_size %zu is not a power of two from 16 up to the device's %zu", wg,
            ctx->info.max_work_group_size);
    REQUIRE(t->sample.vector_width == 0 || t->sample.vector_width == 16, PSR_ERR_INVALID_ARGUMENT,
            "tuning->sample.vector_width %u is not 0 (off) or 16", t->sample.vector_width);
    REQUIRE(t->sample.resident_per_unit && t->verify.resident_per_unit && t->sample.min_steps,
            PSR_ERR_INVALID_ARGUMENT,
            "tuning->sample.resident_per_unit, verify.resident_per_unit and sample.min_steps must not be 0");
    REQUIRE(t->sample.mulhi >= 0 && t->sample.mulhi <= 2 &&
                (t->sample.mulhi < 2 || psr_device_is_nvidia_gpu(&ctx->info)),
            PSR_ERR_INVALID_ARGUMENT, "tuning->sample.mulhi %d is not 0, 1 or (on NVIDIA GPUs) 2",
            t->sample.mulhi);
    REQUIRE(t->build_threads >= 1 && t->build_threads <= 16, PSR_ERR_INVALID_ARGUMENT,
            "tuning->build_threads %u is not in 1 .. 16", t->build_threads);
    REQUIRE(memchr(t->extra_options, '\0', sizeof t->extra_options), PSR_ERR_INVALID_ARGUMENT,
            "tuning->extra_options is not terminated");
    REQUIRE(!ctx->program_count || psr_tuning_same_build(&ctx->tuning, t), PSR_ERR_INVALID_ARGUMENT,
            "tuning: values that change how kernels build may change only before the context's first build");
    ctx->tuning = *t;
    psr_context_options_changed(ctx);
    return PSR_OK;
}

psr_status psr_context_add_build_options(psr_context *ctx, const char *options)
{
    psr_status st = psr_context_check_call(ctx, options, "psr_context_add_build_options", "options");
    if (st != PSR_OK)
        return st;
    REQUIRE(!ctx->program_count, PSR_ERR_INVALID_ARGUMENT,
            "build options must be added before the context builds any program");
    char *extra = ctx->tuning.extra_options;
    size_t used = strlen(extra);
    int n = snprintf(extra + used, sizeof ctx->tuning.extra_options - used, "%s%s", used ? " " : "", options);
    if (n < 0 || (size_t)n >= sizeof ctx->tuning.extra_options - used) {
        extra[used] = '\0';
        return psr_fail(ctx, PSR_ERR_INVALID_ARGUMENT, "build options \"%s\" do not fit", options);
    }
    psr_context_options_changed(ctx);
    return PSR_OK;
}

psr_status psr_context_last_paths(const psr_context *ctx, psr_last_paths *out)
{
    psr_status st = psr_context_check_call(ctx, out, "psr_context_last_paths", "out");
    if (st != PSR_OK)
        return st;
    out->verify_one_launch = ctx->verify_fused_last;
    out->logprobs_one_launch = ctx->logprobs_one_last;
    out->logprobs_few_blocks = ctx->logprobs_few_last;
    out->host_served = ctx->host_served_last;
    return PSR_OK;
}
