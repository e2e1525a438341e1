/* Per-device tuning with fallbacks: vendor and type -> type -> default.
 * The figures come from DESIGN.md's field notes (NVIDIA) and from each
 * vendor's documented SIMD width; unknown devices get the default row. */
#include "internal.h"

#include <string.h>

typedef struct tuning_rule {
    const char *vendor;     /* substring of the platform or device vendor; NULL: any */
    psr_device_type type;   /* PSR_DEVICE_OTHER: any type */
    size_t work_group_size;
    size_t resident_per_unit; /* groups of that size a compute unit holds at once */
    size_t verify_resident;   /* the same for the verification sampler (psr_verify_sample) */
    unsigned vector_width;    /* the sampler's explicit vector lanes per work-item; 0: off */
    bool lp_segment_tau;      /* logprobs bound a block's top-N from 32 segment maxima first */
    size_t verify_fused;      /* psr_verify in one launch up to this many groups per compute unit (0: never) */
    size_t logprobs_one;      /* psr_logprobs in one launch up to this many blocks per compute unit (0: never) */
    size_t logprobs_few;      /* psr_logprobs_partial_few up to this many blocks per compute unit (0: never) */
    bool warp_shuffle;        /* NVIDIA's warp shuffles through inline PTX (cl/shuffle.cl) */
    const char *name;
} tuning_rule;

/* First match wins, so specific rows come before general ones. */
static const tuning_rule rules[] = {
    /* Measured on the H200 (docs/benchmarks.md): 256-wide groups; the
     * sampling kernel's registers leave room for about 6 per SM, the
     * verification sampler's 63 registers for 4. The exact logprobs bound
     * alone beat the segment bound first by 10-13% at 64 and 256 rows
     * (and has only got faster since, as a sort). Verification in one
     * launch won up to about 900 groups (16 x 5 x 32,000) and lost at
     * 2,300 statistics groups (32 x 8 x 128,256 without a cache).
     * Logprobs in one launch saved 2 us of device time at one row but
     * cost 2 us from an idle queue (and lost at 64 rows), so it is off.
     * Warp shuffles (cl/shuffle.cl) in the verification statistics'
     * log-sum-exp tree took about 1 us off 32 x 8 x 128,256 (1.51 to
     * 1.49x the floor); logprobs, slower with them, do without. At up
     * to one block per SM the segment bound first was 1.0-1.6 us faster
     * than the exact bound alone (a third slower at 64 rows). */
    {"nvidia", PSR_DEVICE_GPU, 256, 6, 4, 0, false, 8, 0, 1, true, "nvidia-gpu"},
    /* 64-wide wavefronts, up to 40 waves per CU: keep groups a multiple of 64. */
    {"advanced micro devices", PSR_DEVICE_GPU, 256, 8, 8, 0, false, 0, 0, 0, false, "amd-gpu"},
    {"amd", PSR_DEVICE_GPU, 256, 8, 8, 0, false, 0, 0, 0, false, "amd-gpu"},
    /* Xe cores hold fewer threads than an SM. */
    {"intel", PSR_DEVICE_GPU, 256, 4, 4, 0, false, 0, 0, 0, false, "intel-gpu"},
    {NULL, PSR_DEVICE_GPU, 256, 4, 4, 0, false, 0, 0, 0, false, "gpu"},
    /* CPUs (PoCL): one group per core at a time, so whole rows stream.
     * PoCL does not vectorise the sampler's token loop across work-items,
     * so each work-item takes 16 tokens as explicit vectors (AVX-512's
     * width; narrower units split them). The segment bound first was
     * faster for logprobs here (docs/devices.md). */
    {NULL, PSR_DEVICE_CPU, 64, 1, 1, 16, true, 0, 0, 0, false, "cpu"},
    {NULL, PSR_DEVICE_OTHER, 128, 2, 2, 0, true, 0, 0, 0, false, "default"},
};

static bool vendor_is(const psr_device_info *info, const char *vendor)
{
    return psr_contains_nocase(info->platform_vendor, vendor) ||
           psr_contains_nocase(info->vendor, vendor);
}

/* PoCL caches every kernel it compiles (POCL_CACHE_DIR), keyed by the
 * program and options, and compiles again for each launch's work-group
 * size even from a binary. Asking it for binaries, as psr's disk tier
 * does, makes it compile every kernel once more for any size: 2.4x the
 * first build of test_verify's programs, for nothing a later run uses.
 * Its 3.1 compiler also builds psr_verify_fused wrongly (docs/devices.md). */
static bool is_pocl(const psr_device_info *info)
{
    return psr_contains_nocase(info->platform_name, "portable computing language") ||
           psr_contains_nocase(info->version, "pocl");
}

psr_tuning psr_tuning_for(const psr_device_info *info)
{
    const tuning_rule *r = &rules[sizeof rules / sizeof rules[0] - 1];
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        bool type_ok = rules[i].type == PSR_DEVICE_OTHER || rules[i].type == info->type;
        bool vendor_ok = !rules[i].vendor || vendor_is(info, rules[i].vendor);
        if (type_ok && vendor_ok) {
            r = &rules[i];
            break;
        }
    }
    size_t units = info->compute_units ? info->compute_units : 1;
    psr_tuning t = {.work_group_size = r->work_group_size,
                    .resident_per_unit = r->resident_per_unit,
                    .verify_resident_per_unit = r->verify_resident,
                    .vector_width = r->vector_width,
                    .lp_segment_tau = r->lp_segment_tau,
                    .warp_shuffle = r->warp_shuffle,
                    .rule = r->name,
                    .mulhi = true,
                    .two_pass = false,
                    .min_steps = 2,
                    /* 4 groups per compute unit, a little over a wave of the
                     * statistics kernel (it holds 3 per SM on the H200):
                     * within a wave every row starts before any decision,
                     * and deciding only lengthens the launch. */
                    .verify_skip_groups = 4 * units,
                    .verify_fused_groups = r->verify_fused * units,
                    .logprobs_one_blocks = r->logprobs_one * units,
                    .logprobs_few_blocks = r->logprobs_few * units,
                    /* Every list that fits (lib/filter.c's FILTER_CAP):
                     * on the H200 drawing from lists of thousands (top-p)
                     * beat the sampler's full pass at 32 to 256 rows. */
                    .filter_direct_max = 16384,
                    .driver_caches = is_pocl(info),
                    .verify_fused_broken = is_pocl(info),
                    .extra_options = ""};
    /* Never ask for more than the device allows; keep a power of two. */
    while (info->max_work_group_size && t.work_group_size > info->max_work_group_size &&
           t.work_group_size > 1)
        t.work_group_size /= 2;
    return t;
}
