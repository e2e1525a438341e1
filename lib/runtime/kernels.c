/* Kernel sets: which embedded source makes up each program, the variants
 * each set tells apart, and the canonical build options of a variant. */
#include "runtime/runtime.h"
#include "runtime/kernel_sources.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each set is one embedded source (cl/meson.build names its root file). */
static const char *const set_names[PSR_KERNEL_SET_COUNT] = {
    [PSR_KERNELS_STREAM] = "stream", [PSR_KERNELS_SAMPLE] = "sample",     [PSR_KERNELS_VERIFY] = "verify",
    [PSR_KERNELS_NOISE] = "noise",   [PSR_KERNELS_FILTER] = "filter",     [PSR_KERNELS_LOGPROBS] = "logprobs",
};

psr_variant psr_variant_of(psr_kernel_set set, unsigned flags, psr_dtype dtype)
{
    psr_variant v = {.set = set,
                     .drafting = (flags & PSR_SAMPLE_DRAFTING) != 0,
                     .fp64 = (flags & PSR_FLAG_FP64_NOISE) != 0,
                     .wide = (flags & PSR_FLAG_WIDE_NOISE) != 0,
                     .dtype = dtype,
                     .fast_math = (flags & PSR_SAMPLE_FAST_MATH) != 0,
                     .method = !(flags & PSR_SAMPLE_RACE) ? 0 : (flags & PSR_SAMPLE_PROBS) ? 2 : 1};
    return psr_variant_normal(&v);
}

/* Only what a set's source reads tells its variants apart: the filters
 * draw (a row's token from its list) with Gumbel-max only, so the race's
 * calls share the Gumbel-max filter programs (on CPUs every noise and
 * stream does: psr_build_options); logprobs read logits and
 * nothing of the noise; verification runs on the target stream with
 * Gumbel-max and deterministic math; the stream set reads no logits. */
psr_variant psr_variant_normal(const psr_variant *in)
{
    psr_variant v = *in;
    switch (v.set) {
    case PSR_KERNELS_SAMPLE:
    case PSR_KERNELS_NOISE:
        break;
    case PSR_KERNELS_FILTER:
        v.method = 0;
        break;
    case PSR_KERNELS_VERIFY:
        v.drafting = v.fast_math = v.filtered = false;
        v.method = 0;
        break;
    case PSR_KERNELS_LOGPROBS:
        v = (psr_variant){.set = v.set, .dtype = v.dtype, .kernel = in->kernel};
        break;
    default:
        v = (psr_variant){.set = v.set, .drafting = v.drafting, .fp64 = v.fp64, .kernel = in->kernel};
        break;
    }
    if (v.set != PSR_KERNELS_SAMPLE)
        v.filtered = false;
    return v;
}

bool psr_kernel_set_uses_logits(psr_kernel_set set)
{
    return set != PSR_KERNELS_STREAM;
}

unsigned psr_variant_code(const psr_variant *v)
{
    return (unsigned)(v->kernel != NULL) << 20 | (unsigned)v->filtered << 16 | (unsigned)v->method << 12 | (unsigned)v->set << 8 | (unsigned)v->dtype << 4 | (unsigned)v->wide << 3 |
           (unsigned)v->drafting << 2 | (unsigned)v->fp64 << 1 | (unsigned)v->fast_math;
}

const char *psr_kernel_set_name(psr_kernel_set set)
{
    return (unsigned)set < PSR_KERNEL_SET_COUNT ? set_names[set] : "unknown";
}

void psr_variant_name(const psr_variant *v, char *buf, size_t len)
{
    static const char *const dtypes[] = {"f32", "f16", "bf16"};
    static const char *const methods[] = {"", " race", " race-probs"};
    bool logits = psr_kernel_set_uses_logits(v->set);
    snprintf(buf, len, "%s%s%s%s%s%s%s%s%s%s", psr_kernel_set_name(v->set),
             logits ? " " : "", logits ? dtypes[v->dtype % 3] : "", methods[v->method % 3],
             v->fp64 ? " fp64" : v->wide ? " wide" : "", v->fast_math ? " fast" : "",
             v->drafting ? " drafting" : "", v->filtered ? " filtered" : "", v->kernel ? ": " : "",
             v->kernel ? v->kernel : "");
}

char *psr_kernel_source(psr_kernel_set set)
{
    if ((unsigned)set >= PSR_KERNEL_SET_COUNT)
        return NULL;
    for (size_t i = 0; i < psr_embedded_source_count; i++) {
        const psr_embedded_source *e = &psr_embedded_sources[i];
        if (strcmp(e->name, set_names[set]) != 0)
            continue;
        char *src = malloc(e->length + 1);
        if (src) {
            memcpy(src, e->text, e->length);
            src[e->length] = '\0';
        }
        return src;
    }
    return NULL;
}

/* OpenCL C version of the device as major*10+minor (12 for "OpenCL C 1.2"). */
static int opencl_c_version(const psr_device_info *info)
{
    int major = 1, minor = 0;
    if (sscanf(info->opencl_c_version, "OpenCL C %d.%d", &major, &minor) != 2)
        return 10;
    return major * 10 + minor;
}

/* The options only some sets read: the vector path (the sampler, its
 * noise probes, the filters, verification's sampling and logprobs' lane
 * sums), logprobs' bound, warp shuffles in the sampler's and
 * verification's reductions. */
static void set_options(const psr_context *ctx, psr_kernel_set set, char *buf, size_t len)
{
    buf[0] = '\0';
    if ((set == PSR_KERNELS_SAMPLE || set == PSR_KERNELS_NOISE || set == PSR_KERNELS_FILTER ||
         set == PSR_KERNELS_VERIFY || set == PSR_KERNELS_LOGPROBS) &&
        ctx->tuning.sample.vector_width)
        snprintf(buf, len, " -DPSR_VEC=%u", ctx->tuning.sample.vector_width);
    if (set == PSR_KERNELS_LOGPROBS && !ctx->tuning.logprobs.segment_tau) {
        size_t used = strlen(buf);
        snprintf(buf + used, len - used, " -DPSR_LP_SEGMENT_TAU=0");
    }
    if ((set == PSR_KERNELS_VERIFY || set == PSR_KERNELS_SAMPLE) && ctx->tuning.verify.warp_shuffle) {
        size_t used = strlen(buf);
        snprintf(buf + used, len - used, " -DPSR_NV_SHUFFLE=1");
    }
}

void psr_build_options(const psr_context *ctx, const psr_variant *in, char *buf, size_t len)
{
    psr_variant n = psr_variant_normal(in);
    const psr_variant *v = &n;
    bool cpu = ctx->info.type == PSR_DEVICE_CPU;
    /* On CPUs the filters take the noise and the stream of the rows they
     * draw as arguments (psr_filter_params), so that every noise and
     * stream shares one filter program; GPUs build them in (on the H200
     * the arguments cost the top-k filters 12% at 256 rows). */
    bool noise_at_run_time = cpu && v->set == PSR_KERNELS_FILTER;
    if (noise_at_run_time)
        n.drafting = n.fp64 = n.wide = false;
    char extra[320] = "", set_option[64];
    set_options(ctx, v->set, set_option, sizeof set_option);
    /* On CPUs every sampler reads the filters' thresholds (where a call
     * passes them), so that a filtered variant's options, and so its
     * program, are the plain one's: PoCL compiles one sampler instead of
     * two. GPUs keep the plain sampler without them (on the H200 the
     * filters' code made plain calls 8-40% slower). */
    bool filters = v->filtered || (v->set == PSR_KERNELS_SAMPLE && cpu);
    /* CPU compilers copy the code after a barrier under a condition
     * (cl/tokens.cl, PSR_FLAT_BARRIERS). */
    if (psr_kernel_set_uses_logits(v->set))
        snprintf(extra, sizeof extra,
                 " -DPSR_LOGIT_DTYPE=%d -DPSR_DETERMINISTIC=%d -DUSE_WIDE=%d -DPSR_METHOD=%d%s%s%s%s",
                 (int)v->dtype, v->fast_math ? 0 : 1, v->wide ? 1 : 0, v->method,
                 filters ? " -DPSR_FILTERS=1" : "",
                 ctx->info.capabilities & PSR_CAP_INT64_ATOMICS ? " -DPSR_INT64_ATOMICS=1" : "",
                 cpu ? " -DPSR_FLAT_BARRIERS=1" : "", set_option);
    if (noise_at_run_time) {
        size_t used = strlen(extra);
        snprintf(extra + used, sizeof extra - used, " -DPSR_FILTER_NOISE_ARGS=1%s",
                 ctx->info.capabilities & PSR_CAP_FP64 ? " -DPSR_FP64_AT_RUN_TIME=1" : "");
    }
    /* mul_hi is core OpenCL C, and Random123 otherwise builds its 32-bit
     * multiply from a 64-bit product (9-12% slower on NVIDIA, faster on
     * PoCL: sample.mulhi chooses; 2 adds PTX's mul.wide for the tokens'
     * words, cl/stream.cl). Its 64-bit path wins over the intrinsic unless
     * R123_USE_64BIT=0 (psr uses only philox4x32, so nothing is lost). */
    char one[96] = "";
    if (v->kernel) /* a program of one kernel (cl/embed.py checks the guards) */
        snprintf(one, sizeof one, " -DPSR_ONE_KERNEL -DPSR_ONLY_%s", v->kernel);
    snprintf(buf, len,
             "%s-DIS_DRAFTING=%d -DUSE_FP64=%d -DPSR_WG_SIZE=%zu%s%s%s%s%s%s",
             opencl_c_version(&ctx->info) >= 12 ? "-cl-std=CL1.2 " : "", v->drafting ? 1 : 0,
             v->fp64 ? 1 : 0, ctx->tuning.sample.work_group_size,
             ctx->tuning.sample.mulhi ? " -DR123_USE_64BIT=0 -DR123_USE_MULHILO32_MULHI_INTRIN=1 "
                                 "-DR123_MULHILO32_MULHI_INTRIN=mul_hi"
                               : "",
             ctx->tuning.sample.mulhi == 2 ? " -DPSR_MUL_WIDE_PTX=1" : "",
             extra, one, *ctx->tuning.extra_options ? " " : "", ctx->tuning.extra_options);
}
