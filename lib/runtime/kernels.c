/* Kernel sets: which embedded sources make up each program, and the
 * canonical build options of a variant. */
#include "runtime/runtime.h"
#include "runtime/kernel_sources.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each set is one embedded source (cl/meson.build names its roots). */
static const char *const set_names[PSR_KERNEL_SET_COUNT] = {
    [PSR_KERNELS_STREAM] = "stream",
    [PSR_KERNELS_GUMBEL] = "gumbel",
    [PSR_KERNELS_VERIFY] = "verify",
    [PSR_KERNELS_NOISE] = "noise",
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
    return v;
}

bool psr_kernel_set_uses_logits(psr_kernel_set set)
{
    return set != PSR_KERNELS_STREAM;
}

unsigned psr_variant_code(const psr_variant *v)
{
    return (unsigned)v->filtered << 16 | (unsigned)v->method << 12 | (unsigned)v->set << 8 | (unsigned)v->dtype << 4 | (unsigned)v->wide << 3 |
           (unsigned)v->drafting << 2 | (unsigned)v->fp64 << 1 | (unsigned)v->fast_math;
}

const char *psr_kernel_set_name(psr_kernel_set set)
{
    return (unsigned)set < PSR_KERNEL_SET_COUNT ? set_names[set] : "unknown";
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

void psr_build_options(const psr_context *ctx, const psr_variant *v, char *buf, size_t len)
{
    char extra[192] = "", set_option[48] = "";
    /* Only the sampling program (and its noise probes) has a vector path, and only the verify
     * program (which holds logprobs.cl) a choice of bound and warp
     * shuffles. */
    if ((v->set == PSR_KERNELS_GUMBEL || v->set == PSR_KERNELS_NOISE) && ctx->tuning.sample.vector_width)
        snprintf(set_option, sizeof set_option, " -DPSR_VEC=%u", ctx->tuning.sample.vector_width);
    if (v->set == PSR_KERNELS_VERIFY)
        snprintf(set_option, sizeof set_option, "%s%s", ctx->tuning.logprobs.segment_tau ? "" : " -DPSR_LP_SEGMENT_TAU=0",
                 ctx->tuning.verify.warp_shuffle ? " -DPSR_NV_SHUFFLE=1" : "");
    if (psr_kernel_set_uses_logits(v->set))
        snprintf(extra, sizeof extra,
                 " -DPSR_LOGIT_DTYPE=%d -DPSR_DETERMINISTIC=%d -DUSE_WIDE=%d -DPSR_METHOD=%d%s%s%s",
                 (int)v->dtype, v->fast_math ? 0 : 1, v->wide ? 1 : 0, v->method,
                 v->filtered ? " -DPSR_FILTERS=1" : "",
                 ctx->info.capabilities & PSR_CAP_INT64_ATOMICS ? " -DPSR_INT64_ATOMICS=1" : "", set_option);
    /* mul_hi is core OpenCL C, and Random123 otherwise builds its 32-bit
     * multiply from a 64-bit product (9-12% slower on NVIDIA). Its 64-bit
     * path wins over the intrinsic unless R123_USE_64BIT=0 (psr uses only
     * philox4x32, so nothing is lost). */
    snprintf(buf, len,
             "%s-DIS_DRAFTING=%d -DUSE_FP64=%d -DPSR_WG_SIZE=%zu%s%s%s%s",
             opencl_c_version(&ctx->info) >= 12 ? "-cl-std=CL1.2 " : "", v->drafting ? 1 : 0,
             v->fp64 ? 1 : 0, ctx->tuning.sample.work_group_size,
             ctx->tuning.sample.mulhi ? " -DR123_USE_64BIT=0 -DR123_USE_MULHILO32_MULHI_INTRIN=1 "
                                 "-DR123_MULHILO32_MULHI_INTRIN=mul_hi"
                               : "",
             extra, *ctx->tuning.extra_options ? " " : "", ctx->tuning.extra_options);
}
