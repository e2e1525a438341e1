/* psr_context_warm: the variants an application will call, checked as
 * those calls check them, their programs built (or loaded), and on drivers
 * that compile at first launch their calls run once (warm_launch.c). */
#include "ops/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

PSR_ARGS_STRUCT(psr_warm_options, sizeof(psr_warm_options), .launch = PSR_WARM_LAUNCH_AUTO)

/* A warm variant's entry checked, as the call it stands for would check
 * its flags; *flags receives the flags that call would use. */
static psr_status check_warm_variant(psr_context *ctx, const psr_warm_variant *w, size_t i, unsigned *flags)
{
    psr_warm_variant call = *w;
    call.flags &= ~PSR_WARM_SHARDED; /* the rest are the call's own */
    w = &call;
    char name[64];
    snprintf(name, sizeof name, "options->variants[%zu].flags", i);
    REQUIRE((unsigned)w->call <= PSR_WARM_VERIFY, PSR_ERR_INVALID_ARGUMENT,
            "options->variants[%zu].call %d is not a psr_warm_call", i, (int)w->call);
    REQUIRE((unsigned)w->dtype <= PSR_DTYPE_BF16, PSR_ERR_INVALID_ARGUMENT,
            "options->variants[%zu].dtype %d is not a psr_dtype", i, (int)w->dtype);
    REQUIRE(w->call == PSR_WARM_SAMPLE || w->flags == 0, PSR_ERR_INVALID_ARGUMENT,
            "%s is 0x%x: only sampling takes PSR_SAMPLE_* flags", name, w->flags);
    REQUIRE(w->call != PSR_WARM_LOGPROBS || w->noise == PSR_NOISE_FP32, PSR_ERR_INVALID_ARGUMENT,
            "options->variants[%zu].noise: logprobs draw no noise", i);
    REQUIRE(w->call != PSR_WARM_VERIFY || !w->filtered, PSR_ERR_INVALID_ARGUMENT,
            "options->variants[%zu].filtered: verification takes no filters", i);
    char prefix[48];
    snprintf(prefix, sizeof prefix, "options->variants[%zu].", i);
    psr_status st = psr_call_flags(ctx, w->flags, w->noise, false, prefix, flags);
    if (st == PSR_OK)
        st = psr_resolve_flags(ctx, *flags, name, flags);
    if (st != PSR_OK)
        return st;
    REQUIRE(!(*flags & PSR_SAMPLE_PROBS) || w->dtype == PSR_DTYPE_F32, PSR_ERR_INVALID_ARGUMENT,
            "options->variants[%zu].dtype must be PSR_DTYPE_F32 for probabilities (PSR_SAMPLE_PROBS)", i);
    REQUIRE(!(*flags & PSR_SAMPLE_PROBS) || !w->filtered, PSR_ERR_INVALID_ARGUMENT,
            "options->variants[%zu].filtered: top_k, top_p and min_p filter logits, not with "
            "PSR_SAMPLE_PROBS",
            i);
    return PSR_OK;
}

#define WARM_KERNELS 12

/* Appends kernel `name` of v's family to the list, unless its program is
 * there already (every kernel of a family shares one on PoCL). */
static void warm_add(const psr_context *ctx, const psr_variant *v, const char *name, psr_variant *out, size_t *n)
{
    psr_variant k = psr_variant_for_kernel(ctx, v, name);
    for (size_t i = 0; i < *n; i++)
        if (psr_variant_code(&out[i]) == psr_variant_code(&k) && (!k.kernel || strcmp(out[i].kernel, k.kernel) == 0))
            return;
    out[(*n)++] = k;
}

/* The programs of the kernels a warm variant's call launches: its
 * family's (the finishing kernel where rows are not sampled in one pass;
 * logprobs' and verification's one-launch kernels where the tuning takes
 * them) and, with filters, the filters'. Returns how many. */
static size_t warm_programs(const psr_context *ctx, const psr_warm_variant *w, unsigned flags,
                            psr_variant out[WARM_KERNELS])
{
    size_t n = 0;
    const psr_tuning *t = &ctx->tuning;
    bool sharded = w->flags & PSR_WARM_SHARDED;
    if (w->call == PSR_WARM_SAMPLE) {
        psr_variant v = psr_variant_of(PSR_KERNELS_SAMPLE, flags, w->dtype);
        v.filtered = w->filtered;
        warm_add(ctx, &v, "psr_gumbel_sample", out, &n);
        if (!psr_one_pass(ctx, 1u << 17, 2, false, v.fp64))
            warm_add(ctx, &v, "psr_gumbel_finalize", out, &n);
        psr_variant c = psr_variant_of(PSR_KERNELS_SAMPLE, 0, PSR_DTYPE_F32); /* psr_combine's */
        if (sharded)
            warm_add(ctx, &c, "psr_shard_combine", out, &n);
    } else if (w->call == PSR_WARM_LOGPROBS) {
        psr_variant v = psr_variant_of(PSR_KERNELS_LOGPROBS, 0, w->dtype);
        if (t->logprobs.one_blocks)
            warm_add(ctx, &v, "psr_logprobs_one", out, &n);
        if (t->logprobs.few_blocks > t->logprobs.one_blocks)
            warm_add(ctx, &v, "psr_logprobs_partial_few", out, &n);
        warm_add(ctx, &v, "psr_logprobs_partial", out, &n);
        warm_add(ctx, &v, "psr_logprobs_finish", out, &n);
        if (sharded)
            warm_add(ctx, &v, "psr_logprobs_token_key", out, &n);
    } else {
        psr_variant v = psr_variant_of(PSR_KERNELS_VERIFY, flags, w->dtype);
        if (t->verify.fused_groups && !t->verify.fused_broken && t->sample.work_group_size <= PSR_LANES)
            warm_add(ctx, &v, "psr_verify_fused", out, &n);
        warm_add(ctx, &v, "psr_verify_stats", out, &n);
        warm_add(ctx, &v, "psr_verify_sample", out, &n);
        if (!psr_one_pass(ctx, 1u << 17, 2, true, v.fp64))
            warm_add(ctx, &v, "psr_verify_finalize", out, &n);
        static const char *const rounds[] = {"psr_verify_shard_keys", "psr_verify_shard_stats",
                                             "psr_verify_shard_sample", "psr_verify_shard_finish"};
        for (int r = 0; r < 4 && sharded; r++)
            warm_add(ctx, &v, rounds[r], out, &n);
    }
    if (w->filtered) {
        /* logprobs' pre-pass: the target stream's deterministic fp32 filters (lib/ops/logprobs.c) */
        psr_variant f = psr_variant_of(PSR_KERNELS_FILTER, w->call == PSR_WARM_SAMPLE ? flags : 0, w->dtype);
        warm_add(ctx, &f, "psr_filter_scan", out, &n);
        warm_add(ctx, &f, "psr_filter_collect", out, &n);
        warm_add(ctx, &f, "psr_filter_masses", out, &n); /* pass 2 of calls without top-k */
        warm_add(ctx, &f, "psr_filter_collect_mass", out, &n);
        f.filtered = true; /* the rounds' variant (lib/ops/shard_filter.c) */
        if (sharded)
            warm_add(ctx, &f, "psr_shard_filter_round", out, &n);
    }
    return n;
}

bool psr_warm_ready(psr_context *ctx, const psr_warm_variant *w, unsigned flags)
{
    psr_variant v[WARM_KERNELS];
    size_t n = warm_programs(ctx, w, flags, v);
    for (size_t i = 0; i < n; i++)
        if (!psr_program_ready(ctx, &v[i]))
            return false;
    return true;
}

/* Every variant an application can reach on this device, into out (may
 * be NULL); returns the count. */
static size_t all_warm_variants(const psr_context *ctx, psr_warm_variant *out)
{
    bool fp64_ok = ctx->info.capabilities & PSR_CAP_FP64;
    static const psr_noise noises[] = {PSR_NOISE_FP32, PSR_NOISE_FP64, PSR_NOISE_WIDE};
    static const unsigned methods[] = {0, PSR_SAMPLE_RACE, PSR_SAMPLE_RACE | PSR_SAMPLE_PROBS};
    size_t n = 0;
    for (int dtype = 0; dtype <= PSR_DTYPE_BF16; dtype++)
        for (unsigned c = 0; c < 2 * 2 * 3 * 3 * 2; c++) { /* sample: filtered, drafting, method, noise, fast */
            psr_noise noise = noises[c / 2 % 3];
            unsigned method = methods[c / 6 % 3];
            bool fast = c % 2, filtered = c / 36, drafting = c / 18 % 2;
            if ((fast && (method || noise == PSR_NOISE_WIDE)) || (noise == PSR_NOISE_FP64 && !fp64_ok) ||
                ((method & PSR_SAMPLE_PROBS) && (dtype != PSR_DTYPE_F32 || filtered)))
                continue;
            if (out)
                out[n] = (psr_warm_variant){PSR_WARM_SAMPLE,
                                            method | (fast ? PSR_SAMPLE_FAST_MATH : 0) |
                                                (drafting ? PSR_SAMPLE_DRAFTING : 0),
                                            noise, (psr_dtype)dtype, filtered};
            n++;
        }
    for (int dtype = 0; dtype <= PSR_DTYPE_BF16; dtype++)
        for (unsigned c = 0; c < 2 + 3; c++) { /* logprobs: filtered or not; verify: three noises */
            if (c >= 2 && noises[c - 2] == PSR_NOISE_FP64 && !fp64_ok)
                continue;
            if (out)
                out[n] = c < 2 ? (psr_warm_variant){PSR_WARM_LOGPROBS, 0, PSR_NOISE_FP32, (psr_dtype)dtype, (int)c}
                               : (psr_warm_variant){PSR_WARM_VERIFY, 0, noises[c - 2], (psr_dtype)dtype, 0};
            n++;
        }
    return n;
}

/* One variant: its programs built or loaded, then (launch) its call run
 * on tiny inputs. */
psr_status psr_warm_one(psr_context *ctx, const psr_warm_variant *w, unsigned flags, bool launch)
{
    psr_variant v[WARM_KERNELS];
    size_t n = warm_programs(ctx, w, flags, v);
    psr_status st = PSR_OK;
    for (size_t i = 0; i < n && st == PSR_OK; i++) {
        cl_program p;
        st = psr_program_get(ctx, &v[i], &p);
    }
    if (st != PSR_OK || !launch)
        return st;
    bool sharded = w->flags & PSR_WARM_SHARDED;
    if (w->call == PSR_WARM_SAMPLE)
        return psr_warm_launch_sample(ctx, flags, w->dtype, w->filtered, sharded);
    if (w->call == PSR_WARM_LOGPROBS)
        return psr_warm_launch_logprobs(ctx, w->dtype, w->filtered, sharded);
    return psr_warm_launch_verify(ctx, flags, w->dtype, sharded);
}

/* The variant's name: its own program's ("sample f16 drafting filtered",
 * "logprobs bf16 filtered"). */
static void warm_name(const psr_context *ctx, const psr_warm_variant *w, unsigned flags, char *buf, size_t len)
{
    psr_variant v[WARM_KERNELS];
    warm_programs(ctx, w, flags, v);
    v[0].filtered = false;
    v[0].kernel = NULL;
    psr_variant_name(&v[0], buf, len);
    size_t used = strlen(buf);
    if (w->filtered && used + 10 < len)
        used += (size_t)snprintf(buf + used, len - used, " filtered");
    if ((w->flags & PSR_WARM_SHARDED) && used + 9 < len)
        snprintf(buf + used, len - used, " sharded");
}

/* The options' list (or every variant) checked, with each entry's flags. */
static psr_status warm_list(psr_context *ctx, const psr_warm_options *o, psr_warm_variant **list, size_t *n,
                            unsigned **flags)
{
    REQUIRE(o->variants || !o->variant_count, PSR_ERR_NULL_ARGUMENT,
            "options->variants is NULL but options->variant_count is %zu", o->variant_count);
    REQUIRE(!o->variants || o->variant_count, PSR_ERR_INVALID_ARGUMENT,
            "options->variant_count is 0 with options->variants set (NULL warms every variant)");
    REQUIRE((unsigned)o->launch <= PSR_WARM_LAUNCH_OFF, PSR_ERR_INVALID_ARGUMENT,
            "options->launch %d is not a psr_warm_launch", (int)o->launch);
    *n = o->variants ? o->variant_count : all_warm_variants(ctx, NULL);
    *list = malloc(*n * sizeof **list);
    *flags = malloc(*n * sizeof **flags);
    if (!*list || !*flags)
        return psr_fail(ctx, PSR_ERR_OUT_OF_HOST_MEMORY, "psr_context_warm: out of memory");
    if (o->variants)
        memcpy(*list, o->variants, *n * sizeof **list);
    else
        all_warm_variants(ctx, *list);
    for (size_t i = 0; i < *n; i++) {
        psr_status st = check_warm_variant(ctx, &(*list)[i], i, &(*flags)[i]);
        if (st != PSR_OK)
            return st;
    }
    return PSR_OK;
}

/* Every program of the list named at once: the builds run side by side,
 * ahead of the loop that takes them in order (and launches). */
static void prefetch_all(psr_context *ctx, const psr_warm_variant *list, const unsigned *flags, size_t n)
{
    psr_variant *all = malloc(n * WARM_KERNELS * sizeof *all);
    if (!all)
        return; /* built one after another */
    size_t count = 0;
    for (size_t i = 0; i < n; i++)
        count += warm_programs(ctx, &list[i], flags[i], all + count);
    psr_program_prefetch(ctx, all, count);
    free(all);
}

psr_status psr_context_warm(psr_context *ctx, const psr_warm_options *options, size_t *variants)
{
    if (!ctx)
        return psr_fail(NULL, PSR_ERR_NULL_ARGUMENT, "psr_context_warm: ctx is NULL");
    psr_warm_options o;
    psr_warm_options_init(&o, sizeof o);
    if (options) {
        psr_status read = psr_struct_read(ctx, options, &psr_warm_options_layout, "options", &o);
        if (read != PSR_OK)
            return read;
    }
    psr_warm_variant *list = NULL;
    unsigned *flags = NULL;
    size_t n = 0;
    psr_status st = warm_list(ctx, &o, &list, &n, &flags);
    /* PoCL compiles each kernel at its first launch (docs/cache.md). */
    bool launch = o.launch == PSR_WARM_LAUNCH_ON || (o.launch == PSR_WARM_LAUNCH_AUTO && ctx->tuning.driver_caches);
    bool was_warming = ctx->warming;
    ctx->warming = true; /* the optimized programs, never quick ones */
    if (st == PSR_OK)
        prefetch_all(ctx, list, flags, n);
    for (size_t i = 0; i < n && st == PSR_OK; i++) {
        double start = psr_seconds();
        st = psr_warm_one(ctx, &list[i], flags[i], launch);
        char name[96];
        warm_name(ctx, &list[i], flags[i], name, sizeof name);
        double seconds = psr_seconds() - start;
        if (st == PSR_OK)
            psr_log(ctx, PSR_LOG_INFO, "warm [%zu/%zu] %s%s: %.2f s", i + 1, n, name,
                    launch ? " (launched)" : "", seconds);
        if (st == PSR_OK && o.progress)
            o.progress(i + 1, n, name, seconds, o.progress_user_data);
    }
    ctx->warming = was_warming;
    free(list);
    free(flags);
    if (st == PSR_OK && variants)
        *variants = n;
    return st;
}

