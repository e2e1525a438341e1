/* The tuning database: one table per kernel family, each row a device
 * match and named values. A family takes its first matching row; rows run
 * from the most specific (vendor and type) through type alone to the
 * default row, which matches every device. The measurements behind a row
 * stay in that row's comment. */
#include "runtime/runtime.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Which devices a row is for; a NULL or PSR_DEVICE_OTHER key matches any. */
typedef struct device_match {
    const char *vendor; /* substring of the platform or device vendor, any case */
    psr_device_type type;
    const char *name;   /* substring of the device name, any case */
} device_match;

/* Counts below that scale with the device are given per compute unit. */
typedef struct sample_row {
    device_match match;
    psr_tuning_sample v;
} sample_row;

typedef struct verify_row {
    device_match match;
    psr_tuning_verify v;
    size_t fused_per_unit;
} verify_row;

typedef struct logprobs_row {
    device_match match;
    psr_tuning_logprobs v;
    size_t one_per_unit, few_per_unit;
} logprobs_row;

typedef struct filter_row {
    device_match match;
    psr_tuning_filter v;
} filter_row;

#define NVIDIA_GPU {.vendor = "nvidia", .type = PSR_DEVICE_GPU}
#define AMD_GPU {.vendor = "advanced micro devices", .type = PSR_DEVICE_GPU}
#define AMD_GPU_SHORT {.vendor = "amd", .type = PSR_DEVICE_GPU}
#define INTEL_GPU {.vendor = "intel", .type = PSR_DEVICE_GPU}
#define ANY_GPU {.type = PSR_DEVICE_GPU}
#define ANY_CPU {.type = PSR_DEVICE_CPU}
#define ANY_DEVICE {.type = PSR_DEVICE_OTHER}

/* Every row: min_steps steps of tokens per group at least, one kernel per
 * row where the device allows it, and Random123's scalar multiply through
 * mul_hi (9-12% faster than a 64-bit product on the H200) or not (PoCL,
 * below); on NVIDIA a token's words take PTX's mul.wide, both halves in
 * one instruction (mulhi 2: 3-4% off the sampler at 64 rows and more). */
#define SAMPLE(r, wg, resident, vec, steps, hi) \
    {.rule = r, .work_group_size = wg, .resident_per_unit = resident, .vector_width = vec, \
     .min_steps = steps, .two_pass = 0, .mulhi = hi}

static const sample_row sample_rows[] = {
    /* H200: 256-wide groups; the sampling kernel's registers leave room
     * for about 6 per SM. 512-wide groups lost at 64 rows. One step per
     * group at one row (126 groups) beat two (63). */
    {NVIDIA_GPU, SAMPLE("nvidia-gpu", 256, 6, 0, 1, 2)},
    /* 64-wide wavefronts, up to 40 waves per CU: a multiple of 64. */
    {AMD_GPU, SAMPLE("amd-gpu", 256, 8, 0, 2, 1)},
    {AMD_GPU_SHORT, SAMPLE("amd-gpu", 256, 8, 0, 2, 1)},
    /* Xe cores hold fewer threads than an SM. */
    {INTEL_GPU, SAMPLE("intel-gpu", 256, 4, 0, 2, 1)},
    {ANY_GPU, SAMPLE("gpu", 256, 4, 0, 2, 1)},
    /* PoCL: one group per core at a time, so whole rows stream. It does
     * not vectorise the token loop across work-items, so each work-item
     * takes 16 tokens as explicit vectors (AVX-512's width; narrower
     * units split them): without them the race took 10x longer. The
     * scalar draws (verification's residuals, filter lists) take the
     * 64-bit product: PoCL's mul_hi made verification 1.5-2.2x slower. */
    {ANY_CPU, SAMPLE("cpu", 64, 1, 16, 2, 0)},
    {ANY_DEVICE, SAMPLE("default", 128, 2, 0, 2, 1)},
};

/* skip_groups is 4 per compute unit everywhere (filled in below). */
#define VERIFY(r, resident, shuffle) \
    {.rule = r, .resident_per_unit = resident, .warp_shuffle = shuffle}

static const verify_row verify_rows[] = {
    /* H200: the verification sampler's 63 registers leave room for 4
     * groups per SM. One launch won up to about 900 groups (16 x 5 x
     * 32,000) and lost at 2,300 statistics groups (32 x 8 x 128,256
     * without a cache): 8 per SM. Warp shuffles in the log-sum-exp tree
     * took about 1 us off 32 x 8 x 128,256 (1.51 to 1.49x the floor). */
    {NVIDIA_GPU, VERIFY("nvidia-gpu", 4, 1), 8},
    {AMD_GPU, VERIFY("amd-gpu", 8, 0), 0},
    {AMD_GPU_SHORT, VERIFY("amd-gpu", 8, 0), 0},
    {INTEL_GPU, VERIFY("intel-gpu", 4, 0), 0},
    {ANY_GPU, VERIFY("gpu", 4, 0), 0},
    {ANY_CPU, VERIFY("cpu", 1, 0), 0},
    {ANY_DEVICE, VERIFY("default", 2, 0), 0},
};

static const logprobs_row logprobs_rows[] = {
    /* H200: the exact bound alone beat the segment bound first by 10-13%
     * at 64 and 256 rows, but at up to one block per SM the segment bound
     * first was 1.0-1.6 us faster. One launch saved 2 us of device time at
     * one row but cost 2 us from an idle queue (and lost at 64 rows): off. */
    {NVIDIA_GPU, {.rule = "nvidia-gpu", .segment_tau = 0}, 0, 1},
    {ANY_GPU, {.rule = "gpu", .segment_tau = 0}, 0, 0},
    /* PoCL: the segment bound first was faster (docs/devices.md). */
    {ANY_CPU, {.rule = "cpu", .segment_tau = 1}, 0, 0},
    {ANY_DEVICE, {.rule = "default", .segment_tau = 1}, 0, 0},
};

static const filter_row filter_rows[] = {
    /* Every list that fits the filter's candidate capacity: on the H200
     * drawing from lists of thousands (top-p) beat the sampler's full pass
     * at 32 to 256 rows. */
    {ANY_DEVICE, {.rule = "default", .direct_max = 16384}},
};

static bool matches(const device_match *m, const psr_device_info *info)
{
    if (m->type != PSR_DEVICE_OTHER && m->type != info->type)
        return false;
    if (m->vendor && !psr_contains_nocase(info->platform_vendor, m->vendor) &&
        !psr_contains_nocase(info->vendor, m->vendor))
        return false;
    return !m->name || psr_contains_nocase(info->name, m->name);
}

bool psr_device_is_nvidia_gpu(const psr_device_info *info)
{
    static const device_match nvidia = NVIDIA_GPU;
    return matches(&nvidia, info);
}

/* Index of the first row of a table whose match (at match_offset in each
 * row of row_size bytes) fits the device; the last row when none does. */
static size_t find_row(const void *rows, size_t count, size_t row_size, const psr_device_info *info)
{
    for (size_t i = 0; i + 1 < count; i++)
        if (matches((const device_match *)((const char *)rows + i * row_size), info))
            return i;
    return count - 1;
}

#define FIND(table, info) (&table[find_row(table, sizeof table / sizeof table[0], sizeof table[0], info)])

/* PoCL caches every kernel it compiles (POCL_CACHE_DIR) and compiles
 * again for each launch's work-group size even from a binary, so psr's
 * disk tier only makes it compile more (2.4x the first build of
 * test_verify's programs). Its 3.1 compiler also builds psr_verify_fused
 * wrongly (docs/devices.md). */
static bool is_pocl(const psr_device_info *info)
{
    return psr_contains_nocase(info->platform_name, "portable computing language") ||
           psr_contains_nocase(info->version, "pocl");
}

/* Up to 4 builds at once, one per core: on the H200 host 4 threads
 * built 8 programs in 0.74x the time of one thread, 16 no faster
 * (NVIDIA's compiler holds a lock for part of each build). PoCL 3.1
 * builds one program at a time: two side by side took 0.92 s each
 * against 0.62 and 0.17 one after the other. */
static unsigned build_threads_default(const psr_device_info *info)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    return is_pocl(info) || cores < 1 ? 1u : cores > 4 ? 4u : (unsigned)cores;
}

psr_tuning psr_tuning_for(const psr_device_info *info)
{
    size_t units = info->compute_units ? info->compute_units : 1;
    const verify_row *vr = FIND(verify_rows, info);
    const logprobs_row *lr = FIND(logprobs_rows, info);
    psr_tuning t = {.sample = FIND(sample_rows, info)->v,
                    .verify = vr->v,
                    .logprobs = lr->v,
                    .filter = FIND(filter_rows, info)->v,
                    .driver_caches = is_pocl(info),
                    /* Drivers that compile every kernel of a program at its
                     * build: on the H200 a first --logprobs call built its
                     * family in 4.4 s, its two kernels alone in 1.4 s. PoCL
                     * compiles a kernel at its first launch, and a program
                     * more costs it a front end over the whole source. */
                    .one_kernel_programs = !is_pocl(info),
                    /* PoCL compiles an unoptimized kernel in a third of
                     * the time. NVIDIA's first calls gained too little
                     * for what they cost (docs/cache.md). */
                    .quick_builds = is_pocl(info),
                    .build_threads = build_threads_default(info),
                    /* 16 rows of 131,072: about 0.3 s on the host (0.6
                     * with top-k and top-p; the H200's host CPU), where a
                     * first build takes 0.5-4 s. */
                    .host_cold_elements = (size_t)1 << 21};
    /* 4 groups per compute unit, a little over a wave of the statistics
     * kernel (it holds 3 per SM on the H200): within a wave every row
     * starts before any decision, and deciding only lengthens the launch. */
    t.verify.skip_groups = 4 * units;
    t.verify.fused_groups = vr->fused_per_unit * units;
    t.verify.fused_broken = is_pocl(info);
    t.logprobs.one_blocks = lr->one_per_unit * units;
    t.logprobs.few_blocks = lr->few_per_unit * units;
    /* Never ask for more than the device allows; keep a power of two. */
    while (info->max_work_group_size && t.sample.work_group_size > info->max_work_group_size &&
           t.sample.work_group_size > 1)
        t.sample.work_group_size /= 2;
    return t;
}

bool psr_tuning_same_build(const psr_tuning *a, const psr_tuning *b)
{
    return a->sample.work_group_size == b->sample.work_group_size &&
           a->sample.vector_width == b->sample.vector_width && a->sample.mulhi == b->sample.mulhi &&
           a->logprobs.segment_tau == b->logprobs.segment_tau &&
           a->verify.warp_shuffle == b->verify.warp_shuffle &&
           strcmp(a->extra_options, b->extra_options) == 0;
}

/* ---- the PSR_TUNE_* variables ---- */

typedef enum tune_kind {
    TUNE_SIZE,     /* a size_t count in [min, max] */
    TUNE_UNSIGNED, /* an unsigned in [min, max] */
    TUNE_EITHER,   /* an unsigned, exactly min or max */
    TUNE_BOOL,     /* an int: "0" false, any other non-empty value true */
    TUNE_TEXT      /* the extra build options */
} tune_kind;

enum {
    TUNE_POW2 = 1,       /* a power of two */
    TUNE_DEVICE_WG = 2,  /* at most the device's largest work-group */
    TUNE_NVIDIA = 4      /* 1 (or the largest value) only on NVIDIA GPUs (inline PTX) */
};

typedef struct tune_var {
    psr_tuning_variable doc;
    tune_kind kind;
    size_t offset, also; /* the field, and a second one it sets too (0: none) */
    unsigned long long min, max;
    unsigned rules;
} tune_var;

#define AT(field) offsetof(psr_tuning, field)
#define COUNT_MAX ((unsigned long long)SIZE_MAX)

static const tune_var tune_vars[] = {
    {{"PSR_TUNE_WG", "sample.work_group_size", "16 .. the device's largest work-group, a power of two"},
     TUNE_SIZE, AT(sample.work_group_size), 0, 16, COUNT_MAX, TUNE_POW2 | TUNE_DEVICE_WG},
    {{"PSR_TUNE_RESIDENT", "sample.resident_per_unit and verify.resident_per_unit", "1 .. 1024"},
     TUNE_SIZE, AT(sample.resident_per_unit), AT(verify.resident_per_unit), 1, 1024, 0},
    {{"PSR_TUNE_VECTOR", "sample.vector_width", "0 (off) or 16"},
     TUNE_EITHER, AT(sample.vector_width), 0, 0, 16, 0},
    {{"PSR_TUNE_MIN_STEPS", "sample.min_steps", "1 .. 64"}, TUNE_UNSIGNED, AT(sample.min_steps), 0, 1, 64, 0},
    {{"PSR_TUNE_TWO_PASS", "sample.two_pass", "0 or 1"}, TUNE_BOOL, AT(sample.two_pass), 0, 0, 1, 0},
    {{"PSR_TUNE_MULHI", "sample.mulhi", "0, 1 or 2; 2 only on NVIDIA GPUs"},
     TUNE_UNSIGNED, AT(sample.mulhi), 0, 0, 2, TUNE_NVIDIA},
    {{"PSR_TUNE_VERIFY_SKIP", "verify.skip_groups", "0 .. SIZE_MAX"},
     TUNE_SIZE, AT(verify.skip_groups), 0, 0, COUNT_MAX, 0},
    {{"PSR_TUNE_VERIFY_FUSED", "verify.fused_groups", "0 (never) .. SIZE_MAX"},
     TUNE_SIZE, AT(verify.fused_groups), 0, 0, COUNT_MAX, 0},
    {{"PSR_TUNE_SHUFFLE", "verify.warp_shuffle", "0 or 1; 1 only on NVIDIA GPUs"},
     TUNE_BOOL, AT(verify.warp_shuffle), 0, 0, 1, TUNE_NVIDIA},
    {{"PSR_TUNE_LOGPROBS_ONE", "logprobs.one_blocks", "0 (never) .. SIZE_MAX"},
     TUNE_SIZE, AT(logprobs.one_blocks), 0, 0, COUNT_MAX, 0},
    {{"PSR_TUNE_LOGPROBS_FEW", "logprobs.few_blocks", "0 (never) .. SIZE_MAX"},
     TUNE_SIZE, AT(logprobs.few_blocks), 0, 0, COUNT_MAX, 0},
    {{"PSR_TUNE_FILTER_DIRECT", "filter.direct_max", "0 (never) .. SIZE_MAX"},
     TUNE_SIZE, AT(filter.direct_max), 0, 0, COUNT_MAX, 0},
    {{"PSR_TUNE_ONE_KERNEL", "one_kernel_programs", "0 or 1"},
     TUNE_BOOL, AT(one_kernel_programs), 0, 0, 1, 0},
    {{"PSR_TUNE_QUICK_BUILDS", "quick_builds", "0 or 1"},
     TUNE_BOOL, AT(quick_builds), 0, 0, 1, 0},
    {{"PSR_TUNE_BUILD_THREADS", "build_threads", "1 .. 16"}, TUNE_UNSIGNED, AT(build_threads), 0, 1, 16, 0},
    {{"PSR_TUNE_HOST_COLD", "host_cold_elements", "0 (never) .. SIZE_MAX"},
     TUNE_SIZE, AT(host_cold_elements), 0, 0, COUNT_MAX, 0},
    {{"PSR_TUNE_BUILD_OPTIONS", "extra_options", "at most 255 bytes"}, TUNE_TEXT, AT(extra_options), 0, 0, 255, 0},
};

#define TUNE_VAR_COUNT (sizeof tune_vars / sizeof tune_vars[0])

const psr_tuning_variable *psr_tuning_variable_at(size_t index)
{
    return index < TUNE_VAR_COUNT ? &tune_vars[index].doc : NULL;
}

/* Parses a variable's text into *value: false when it is not a value of
 * the variable's kind within its bounds (why says what is wrong). */
static bool parse_value(const tune_var *v, const char *text, const psr_device_info *info,
                        unsigned long long *value, const char **why)
{
    if (v->kind == TUNE_BOOL) {
        *value = strcmp(text, "0") != 0;
        if (*value && (v->rules & TUNE_NVIDIA) && !psr_device_is_nvidia_gpu(info)) {
            *why = "needs an NVIDIA GPU";
            return false;
        }
        return true;
    }
    char *end;
    errno = 0;
    *value = strtoull(text, &end, 10);
    *why = "is out of range";
    if (errno || end == text || *end || text[0] == '-')
        return (*why = "is not a whole number"), false;
    if (v->kind == TUNE_EITHER)
        return *value == v->min || *value == v->max;
    if (*value < v->min || *value > v->max)
        return false;
    if (*value == v->max && (v->rules & TUNE_NVIDIA) && !psr_device_is_nvidia_gpu(info))
        return (*why = "needs an NVIDIA GPU"), false; /* the largest value is inline PTX */
    if ((v->rules & TUNE_POW2) && (*value & (*value - 1)))
        return (*why = "is not a power of two"), false;
    if ((v->rules & TUNE_DEVICE_WG) && info->max_work_group_size && *value > info->max_work_group_size)
        return (*why = "is larger than the device's largest work-group"), false;
    return true;
}

static void store(psr_tuning *t, size_t offset, tune_kind kind, unsigned long long value)
{
    char *field = (char *)t + offset;
    if (kind == TUNE_SIZE) {
        size_t s = (size_t)value;
        memcpy(field, &s, sizeof s);
    } else if (kind == TUNE_BOOL) {
        int b = (int)value;
        memcpy(field, &b, sizeof b);
    } else {
        unsigned u = (unsigned)value;
        memcpy(field, &u, sizeof u);
    }
}

void psr_tuning_apply_env(psr_context *ctx, const psr_device_info *info, psr_tuning *t)
{
    for (size_t i = 0; i < TUNE_VAR_COUNT; i++) {
        const tune_var *v = &tune_vars[i];
        const char *text = getenv(v->doc.name);
        if (!text || !*text)
            continue;
        if (v->kind == TUNE_TEXT) {
            if (strlen(text) > v->max) {
                psr_log(ctx, PSR_LOG_WARNING, "%s is longer than %llu bytes: ignored", v->doc.name, v->max);
                continue;
            }
            psr_strlcpy(t->extra_options, text, sizeof t->extra_options);
        } else {
            unsigned long long value;
            const char *why;
            if (!parse_value(v, text, info, &value, &why)) {
                psr_log(ctx, PSR_LOG_WARNING, "%s=%s %s (%s): ignored", v->doc.name, text, why, v->doc.range);
                continue;
            }
            store(t, v->offset, v->kind, value);
            if (v->also)
                store(t, v->also, v->kind, value);
        }
        psr_log(ctx, PSR_LOG_INFO, "tuning from the environment: %s=%s sets %s", v->doc.name, text,
                v->doc.field);
    }
}
