/* Contexts: device selection or adoption of the app's OpenCL objects,
 * cache set-up, and the getters of the public API. */
#include "runtime/runtime.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

void psr_context_options_init(psr_context_options *options)
{
    if (!options)
        return;
    memset(options, 0, sizeof *options);
    options->struct_size = sizeof *options;
    options->log_level = PSR_LOG_WARNING;
    options->disk_cache = PSR_DISK_CACHE_AUTO;
}

static psr_status check_options(const psr_context_options *o)
{
    if (!o)
        return PSR_OK;
    if (o->struct_size != sizeof *o)
        return psr_fail(NULL, PSR_ERR_INVALID_ARGUMENT,
                        "options->struct_size is %zu, expected %zu: call "
                        "psr_context_options_init() first",
                        o->struct_size, sizeof *o);
    if ((unsigned)o->log_level > PSR_LOG_ERROR)
        return psr_fail(NULL, PSR_ERR_INVALID_ARGUMENT, "options->log_level %d is not a psr_log_level",
                        (int)o->log_level);
    if ((unsigned)o->fp64_policy > PSR_FP64_WIDE)
        return psr_fail(NULL, PSR_ERR_INVALID_ARGUMENT,
                        "options->fp64_policy %d is not a psr_fp64_policy", (int)o->fp64_policy);
    if ((unsigned)o->disk_cache > PSR_DISK_CACHE_OFF)
        return psr_fail(NULL, PSR_ERR_INVALID_ARGUMENT,
                        "options->disk_cache %d is not a psr_disk_cache_mode", (int)o->disk_cache);
    return PSR_OK;
}

/* PSR_CACHE as a switch: 0 for 0, off, no, false; 1 for 1, on, yes, true
 * (words in any case); -1 when unset or anything else. */
static int cache_env_switch(void)
{
    static const char *const words[2][4] = {{"0", "off", "no", "false"}, {"1", "on", "yes", "true"}};
    const char *v = getenv("PSR_CACHE");
    for (int on = 0; v && on < 2; on++)
        for (int i = 0; i < 4; i++)
            if (strcasecmp(v, words[on][i]) == 0)
                return on;
    return -1;
}

int psr_cache_env_disabled(void)
{
    return cache_env_switch() == 0;
}

int psr_cache_env_forced(void)
{
    return cache_env_switch() == 1;
}

/* Chooses the disk tier's directory; any problem only turns the tier off. */
static void setup_disk_cache(psr_context *ctx, const psr_context_options *o)
{
    psr_disk_cache_mode mode = o ? o->disk_cache : PSR_DISK_CACHE_AUTO;
    if (mode == PSR_DISK_CACHE_OFF || (mode == PSR_DISK_CACHE_AUTO && psr_cache_env_disabled())) {
        psr_log(ctx, PSR_LOG_INFO, "kernel cache: disk tier off (%s)",
                mode == PSR_DISK_CACHE_OFF ? "options->disk_cache" : "PSR_CACHE");
        return;
    }
    if (mode == PSR_DISK_CACHE_AUTO && ctx->tuning.driver_caches && !psr_cache_env_forced()) {
        psr_log(ctx, PSR_LOG_INFO,
                "kernel cache: disk tier off: the driver caches its own builds (PSR_CACHE=1 "
                "turns it on)");
        return;
    }
    if (psr_cache_resolve_dir(o ? o->cache_dir : NULL, ctx->cache_dir, sizeof ctx->cache_dir) !=
        PSR_OK) {
        psr_log(ctx, PSR_LOG_WARNING, "kernel cache: disk tier off: %s", psr_last_error(NULL));
        ctx->cache_dir[0] = '\0';
        psr_clear_thread_error();
        return;
    }
    int err = psr_mkdir_p(ctx->cache_dir);
    if (err) {
        psr_log(ctx, PSR_LOG_WARNING, "kernel cache: disk tier off: cannot create %s: %s",
                ctx->cache_dir, strerror(err));
        ctx->cache_dir[0] = '\0';
        return;
    }
    /* Binaries become device code (native code on CPU devices): use only a
     * directory that no one but its owner can write. */
    struct stat st;
    if (stat(ctx->cache_dir, &st) != 0 || (st.st_mode & (S_IWGRP | S_IWOTH))) {
        psr_log(ctx, PSR_LOG_WARNING,
                "kernel cache: disk tier off: %s is writable by group or others; use a "
                "directory only its owner can write (mode 0700 or 0755)",
                ctx->cache_dir);
        ctx->cache_dir[0] = '\0';
        return;
    }
    ctx->disk_enabled = true;
    if (access(ctx->cache_dir, W_OK) != 0) {
        ctx->disk_writable = false;
        psr_log(ctx, PSR_LOG_WARNING,
                "kernel cache: %s is read-only: cached binaries are used, new ones are not saved",
                ctx->cache_dir);
    } else {
        ctx->disk_writable = true;
    }
}

static psr_status init_common(psr_context *ctx, const psr_context_options *o)
{
    if (o) {
        ctx->info.capabilities &= ~o->hide_capabilities;
    }
    ctx->tuning = psr_tuning_for(&ctx->info);
    /* Tuning aids (docs/devices.md): override the table for experiments. */
    psr_tuning_apply_env(ctx, &ctx->info, &ctx->tuning);
    psr_context_options_changed(ctx);
    setup_disk_cache(ctx, o);
    return PSR_OK;
}

static psr_context *new_context(const psr_context_options *o)
{
    psr_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return NULL;
    ctx->log_level = PSR_LOG_WARNING;
    if (o) {
        ctx->log = o->log;
        ctx->log_user_data = o->log_user_data;
        ctx->log_level = o->log_level;
        ctx->fp64_policy = o->fp64_policy;
    }
    return ctx;
}

/* Moves a creation failure's detail to the thread and frees the context. */
static psr_status abandon(psr_context *ctx, psr_status st)
{
    if (ctx->error[0])
        psr_fail(NULL, st, "%s", ctx->error);
    psr_context_free(ctx);
    return st;
}

psr_status psr_context_create(const psr_context_options *options, psr_context **out)
{
    psr_clear_thread_error();
    if (!out)
        return psr_fail(NULL, PSR_ERR_NULL_ARGUMENT, "psr_context_create: out is NULL");
    *out = NULL;
    psr_status st = check_options(options);
    if (st != PSR_OK)
        return st;
    psr_context *ctx = new_context(options);
    if (!ctx)
        return psr_fail(NULL, PSR_ERR_OUT_OF_HOST_MEMORY, "out of memory creating a context");

    psr_found_device dev;
    st = psr_select_found(options ? options->device : NULL, &dev);
    if (st != PSR_OK) {
        psr_log(ctx, PSR_LOG_ERROR, "%s", psr_last_error(NULL));
        psr_context_free(ctx);
        return st;
    }
    ctx->platform = dev.platform;
    ctx->device = dev.device;
    ctx->info = dev.info;

    cl_int err;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)dev.platform, 0};
    ctx->cl_ctx = clCreateContext(props, 1, &dev.device, NULL, NULL, &err);
    if (err != CL_SUCCESS)
        return abandon(ctx, psr_fail(ctx, PSR_ERR_OPENCL, "clCreateContext for \"%s\" failed: %s (%d)",
                                     dev.info.name, psr_cl_error_string(err), err));
    cl_command_queue_properties qprops =
        options && options->profiling ? CL_QUEUE_PROFILING_ENABLE : 0;
    ctx->queue = clCreateCommandQueue(ctx->cl_ctx, dev.device, qprops, &err);
    if (err != CL_SUCCESS)
        return abandon(ctx, psr_fail(ctx, PSR_ERR_OPENCL,
                                     "clCreateCommandQueue for \"%s\" failed: %s (%d)",
                                     dev.info.name, psr_cl_error_string(err), err));
    init_common(ctx, options);
    *out = ctx;
    return PSR_OK;
}

/* Platform and device indices of an adopted device, as psr_device_list numbers them. */
static void find_indices(psr_context *ctx)
{
    ctx->info.platform_index = ctx->info.device_index = ~0u;
    psr_found_device *found;
    size_t n;
    if (psr_enumerate_devices(&found, &n) != PSR_OK)
        return;
    for (size_t i = 0; i < n; i++)
        if (found[i].device == ctx->device) {
            ctx->info.platform_index = found[i].info.platform_index;
            ctx->info.device_index = found[i].info.device_index;
        }
    free(found);
}

psr_status psr_context_create_from_cl(cl_context cl_ctx, cl_device_id device, cl_command_queue queue,
                                      const psr_context_options *options, psr_context **out)
{
    psr_clear_thread_error();
    if (!out)
        return psr_fail(NULL, PSR_ERR_NULL_ARGUMENT, "psr_context_create_from_cl: out is NULL");
    *out = NULL;
    if (!cl_ctx)
        return psr_fail(NULL, PSR_ERR_NULL_ARGUMENT, "psr_context_create_from_cl: cl_ctx is NULL");
    if (!device)
        return psr_fail(NULL, PSR_ERR_NULL_ARGUMENT, "psr_context_create_from_cl: device is NULL");
    if (!queue)
        return psr_fail(NULL, PSR_ERR_NULL_ARGUMENT, "psr_context_create_from_cl: queue is NULL");
    psr_status st = check_options(options);
    if (st != PSR_OK)
        return st;

    cl_context qctx = NULL;
    cl_device_id qdev = NULL;
    cl_int err = clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof qctx, &qctx, NULL);
    if (err == CL_SUCCESS)
        err = clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof qdev, &qdev, NULL);
    if (err != CL_SUCCESS)
        return psr_fail(NULL, PSR_ERR_OPENCL, "psr_context_create_from_cl: queue is not usable: %s (%d)",
                        psr_cl_error_string(err), err);
    if (qctx != cl_ctx)
        return psr_fail(NULL, PSR_ERR_INVALID_ARGUMENT,
                        "psr_context_create_from_cl: queue belongs to another cl_context");
    if (qdev != device)
        return psr_fail(NULL, PSR_ERR_INVALID_ARGUMENT,
                        "psr_context_create_from_cl: queue belongs to another device");
    cl_command_queue_properties qprops = 0;
    err = clGetCommandQueueInfo(queue, CL_QUEUE_PROPERTIES, sizeof qprops, &qprops, NULL);
    if (err == CL_SUCCESS && (qprops & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE))
        return psr_fail(NULL, PSR_ERR_INVALID_ARGUMENT,
                        "psr_context_create_from_cl: queue is out-of-order; psr needs an in-order "
                        "queue (create a second, in-order queue for psr)");
    cl_platform_id platform = NULL;
    err = clGetDeviceInfo(device, CL_DEVICE_PLATFORM, sizeof platform, &platform, NULL);
    if (err != CL_SUCCESS)
        return psr_fail(NULL, PSR_ERR_OPENCL, "psr_context_create_from_cl: device is not usable: %s (%d)",
                        psr_cl_error_string(err), err);

    psr_context *ctx = new_context(options);
    if (!ctx)
        return psr_fail(NULL, PSR_ERR_OUT_OF_HOST_MEMORY, "out of memory creating a context");
    st = psr_query_device(platform, device, 0, 0, &ctx->info);
    if (st != PSR_OK) {
        psr_context_free(ctx);
        return st;
    }
    ctx->platform = platform;
    clRetainContext(cl_ctx);
    ctx->cl_ctx = cl_ctx;
    clRetainDevice(device);
    ctx->device = device;
    ctx->device_retained = true;
    clRetainCommandQueue(queue);
    ctx->queue = queue;
    find_indices(ctx);
    init_common(ctx, options);
    *out = ctx;
    return PSR_OK;
}

void psr_context_free(psr_context *ctx)
{
    if (!ctx)
        return;
    for (size_t i = 0; i < ctx->kernel_count; i++)
        clReleaseKernel(ctx->kernels[i].kernel);
    free(ctx->kernels);
    if (ctx->part_value.buffer)
        clReleaseMemObject(ctx->part_value.buffer);
    if (ctx->part_index.buffer)
        clReleaseMemObject(ctx->part_index.buffer);
    if (ctx->best_keys.buffer)
        clReleaseMemObject(ctx->best_keys.buffer);
    if (ctx->best_count.buffer)
        clReleaseMemObject(ctx->best_count.buffer);
    psr_scratch *filter[] = {&ctx->filter_cut, &ctx->filter_state, &ctx->filter_hist,
                             &ctx->filter_cand};
    for (int i = 0; i < 4; i++)
        if (filter[i]->buffer)
            clReleaseMemObject(filter[i]->buffer);
    if (ctx->verify_state.buffer)
        clReleaseMemObject(ctx->verify_state.buffer);
    for (size_t i = 0; i < sizeof ctx->logprobs / sizeof ctx->logprobs[0]; i++)
        if (ctx->logprobs[i].buffer)
            clReleaseMemObject(ctx->logprobs[i].buffer);
    for (int i = 0; i < 3; i++)
        if (ctx->verify_layout[i])
            clReleaseMemObject(ctx->verify_layout[i]);
    free(ctx->verify_cu);
    for (size_t i = 0; i < ctx->program_count; i++) {
        clReleaseProgram(ctx->programs[i].program);
        free(ctx->programs[i].key);
    }
    free(ctx->programs);
    if (ctx->queue)
        clReleaseCommandQueue(ctx->queue);
    if (ctx->cl_ctx)
        clReleaseContext(ctx->cl_ctx);
    if (ctx->device_retained)
        clReleaseDevice(ctx->device);
    free(ctx->build_log);
    free(ctx);
}

psr_status psr_context_device_info(const psr_context *ctx, psr_device_info *out)
{
    if (!ctx)
        return psr_fail(NULL, PSR_ERR_NULL_ARGUMENT, "psr_context_device_info: ctx is NULL");
    if (!out)
        return psr_fail((psr_context *)ctx, PSR_ERR_NULL_ARGUMENT,
                        "psr_context_device_info: out is NULL");
    *out = ctx->info;
    return PSR_OK;
}

psr_status psr_context_cl(const psr_context *ctx, cl_context *cl_ctx, cl_device_id *device,
                          cl_command_queue *queue)
{
    if (!ctx)
        return psr_fail(NULL, PSR_ERR_NULL_ARGUMENT, "psr_context_cl: ctx is NULL");
    if (cl_ctx)
        *cl_ctx = ctx->cl_ctx;
    if (device)
        *device = ctx->device;
    if (queue)
        *queue = ctx->queue;
    return PSR_OK;
}

const char *psr_context_build_log(const psr_context *ctx)
{
    return ctx && ctx->build_log ? ctx->build_log : "";
}

psr_status psr_context_cache_stats(const psr_context *ctx, psr_cache_stats *out)
{
    if (!ctx)
        return psr_fail(NULL, PSR_ERR_NULL_ARGUMENT, "psr_context_cache_stats: ctx is NULL");
    if (!out)
        return psr_fail((psr_context *)ctx, PSR_ERR_NULL_ARGUMENT,
                        "psr_context_cache_stats: out is NULL");
    *out = ctx->stats;
    out->disk_enabled = ctx->disk_enabled;
    psr_strlcpy(out->cache_dir, ctx->disk_enabled ? ctx->cache_dir : "", sizeof out->cache_dir);
    return PSR_OK;
}

psr_status psr_context_last_sample_flags(const psr_context *ctx, unsigned *flags)
{
    if (!ctx)
        return psr_fail(NULL, PSR_ERR_NULL_ARGUMENT, "psr_context_last_sample_flags: ctx is NULL");
    if (!flags)
        return psr_fail((psr_context *)ctx, PSR_ERR_NULL_ARGUMENT,
                        "psr_context_last_sample_flags: flags is NULL");
    *flags = ctx->last_sample_flags;
    return PSR_OK;
}

psr_status psr_context_scratch_bytes(const psr_context *ctx, size_t *bytes)
{
    if (!ctx)
        return psr_fail(NULL, PSR_ERR_NULL_ARGUMENT, "psr_context_scratch_bytes: ctx is NULL");
    if (!bytes)
        return psr_fail((psr_context *)ctx, PSR_ERR_NULL_ARGUMENT,
                        "psr_context_scratch_bytes: bytes is NULL");
    *bytes = ctx->part_value.bytes + ctx->part_index.bytes + ctx->best_keys.bytes + ctx->best_count.bytes +
             ctx->filter_cut.bytes + ctx->filter_state.bytes + ctx->filter_hist.bytes +
             ctx->filter_cand.bytes;
    *bytes += ctx->verify_state.bytes;
    for (size_t i = 0; i < sizeof ctx->logprobs / sizeof ctx->logprobs[0]; i++)
        *bytes += ctx->logprobs[i].bytes;
    return PSR_OK;
}

/* ---- warming (psr_context_warm) ---- */

/* Is this combination one a call can ask for? (psr_sample strips fast
 * math from wide noise and the race, and reads probabilities only in
 * fp32.) */
static bool variant_used(const psr_variant *v)
{
    if (!psr_kernel_set_uses_logits(v->set))
        return v->method == 0 && !v->wide && !v->fast_math && v->dtype == PSR_DTYPE_F32;
    if (v->fast_math && (v->wide || v->method != 0))
        return false;
    return v->method != 2 || v->dtype == PSR_DTYPE_F32;
}

/* Builds v unless a variant of the same program was built before (codes
 * of those in seen[0 .. *n)). */
static psr_status warm_program_once(psr_context *ctx, const psr_variant *in, unsigned *seen, size_t *n)
{
    psr_variant v = psr_variant_normal(in);
    unsigned code = psr_variant_code(&v);
    for (size_t i = 0; i < *n; i++)
        if (seen[i] == code)
            return PSR_OK;
    cl_program p;
    psr_status st = psr_program_get(ctx, &v, &p);
    if (st == PSR_OK)
        seen[(*n)++] = code;
    return st;
}

psr_status psr_warm_sets(psr_context *ctx, unsigned set_mask, size_t *variants)
{
    unsigned seen[256];
    size_t ready = 0;
    bool fp64_ok = ctx->info.capabilities & PSR_CAP_FP64;
    for (int set = 0; set < PSR_KERNEL_SET_COUNT; set++) {
        if (!(set_mask & (1u << set)))
            continue;
        for (unsigned c = 0; c < 2 * 3 * 2 * 3 * 3; c++) { /* fast, noise, drafting, method, dtype */
            unsigned noise = c / 2 % 3; /* 0 fp32, 1 fp64, 2 wide */
            psr_variant v = {.set = (psr_kernel_set)set,
                             .drafting = c / 6 % 2,
                             .fp64 = noise == 1,
                             .wide = noise == 2,
                             .dtype = (psr_dtype)(c / 36),
                             .fast_math = c % 2,
                             .method = (int)(c / 12 % 3)};
            if (!variant_used(&v) || (v.fp64 && !fp64_ok))
                continue;
            psr_status st = warm_program_once(ctx, &v, seen, &ready);
            if (st != PSR_OK)
                return st;
        }
    }
    if (variants)
        *variants = ready;
    return PSR_OK;
}

void psr_warm_options_init(psr_warm_options *options)
{
    if (!options)
        return;
    memset(options, 0, sizeof *options);
    options->struct_size = sizeof *options;
    options->launch = PSR_WARM_LAUNCH_AUTO;
}

/* A warm variant's entry checked, as the call it stands for would check
 * its flags; *flags receives the flags that call would use. */
static psr_status check_warm_variant(psr_context *ctx, const psr_warm_variant *w, size_t i, unsigned *flags)
{
    char name[64];
    snprintf(name, sizeof name, "options->variants[%zu].flags", i);
    REQUIRE((unsigned)w->call <= PSR_WARM_VERIFY, PSR_ERR_INVALID_ARGUMENT,
            "options->variants[%zu].call %d is not a psr_warm_call", i, (int)w->call);
    REQUIRE((unsigned)w->dtype <= PSR_DTYPE_BF16, PSR_ERR_INVALID_ARGUMENT,
            "options->variants[%zu].dtype %d is not a psr_dtype", i, w->dtype);
    REQUIRE(w->call != PSR_WARM_LOGPROBS || w->flags == 0, PSR_ERR_INVALID_ARGUMENT,
            "%s is 0x%x: logprobs take no PSR_SAMPLE_* flags", name, w->flags);
    REQUIRE(w->call != PSR_WARM_VERIFY || !(w->flags & ~(PSR_SAMPLE_FP64_NOISE | PSR_SAMPLE_WIDE_NOISE)),
            PSR_ERR_INVALID_ARGUMENT,
            "%s 0x%x: verification takes only PSR_SAMPLE_FP64_NOISE or PSR_SAMPLE_WIDE_NOISE", name,
            w->flags);
    REQUIRE(w->call != PSR_WARM_VERIFY || !w->filtered, PSR_ERR_INVALID_ARGUMENT,
            "options->variants[%zu].filtered: verification takes no filters", i);
    psr_status st = psr_resolve_flags(ctx, w->flags, name, flags);
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

/* The programs a warm variant's call builds: its own family's, and the
 * filter program with filters. Returns how many (1 or 2). */
static size_t warm_programs(const psr_warm_variant *w, unsigned flags, psr_variant out[2])
{
    psr_dtype dtype = (psr_dtype)w->dtype;
    psr_kernel_set set = w->call == PSR_WARM_SAMPLE     ? PSR_KERNELS_SAMPLE
                         : w->call == PSR_WARM_LOGPROBS ? PSR_KERNELS_LOGPROBS
                                                        : PSR_KERNELS_VERIFY;
    out[0] = psr_variant_of(set, flags, dtype);
    out[0].filtered = set == PSR_KERNELS_SAMPLE && w->filtered;
    /* logprobs' pre-pass: the target stream's deterministic fp32 filters (lib/ops/logprobs.c) */
    out[1] = psr_variant_of(PSR_KERNELS_FILTER, set == PSR_KERNELS_SAMPLE ? flags : 0, dtype);
    return w->filtered ? 2 : 1;
}

/* Every variant an application can reach on this device, into out (may
 * be NULL); returns the count. */
static size_t all_warm_variants(const psr_context *ctx, psr_warm_variant *out)
{
    bool fp64_ok = ctx->info.capabilities & PSR_CAP_FP64;
    static const unsigned noises[] = {0, PSR_SAMPLE_FP64_NOISE, PSR_SAMPLE_WIDE_NOISE};
    static const unsigned methods[] = {0, PSR_SAMPLE_RACE, PSR_SAMPLE_RACE | PSR_SAMPLE_PROBS};
    size_t n = 0;
    for (int dtype = 0; dtype <= PSR_DTYPE_BF16; dtype++)
        for (unsigned c = 0; c < 2 * 2 * 3 * 3 * 2; c++) { /* sample: filtered, drafting, method, noise, fast */
            unsigned noise = noises[c / 2 % 3], method = methods[c / 6 % 3];
            bool fast = c % 2, filtered = c / 36, drafting = c / 18 % 2;
            if ((fast && (method || noise == PSR_SAMPLE_WIDE_NOISE)) || (noise == PSR_SAMPLE_FP64_NOISE && !fp64_ok) ||
                ((method & PSR_SAMPLE_PROBS) && (dtype != PSR_DTYPE_F32 || filtered)))
                continue;
            if (out)
                out[n] = (psr_warm_variant){PSR_WARM_SAMPLE,
                                            noise | method | (fast ? PSR_SAMPLE_FAST_MATH : 0) |
                                                (drafting ? PSR_SAMPLE_DRAFTING : 0),
                                            dtype, filtered};
            n++;
        }
    for (int dtype = 0; dtype <= PSR_DTYPE_BF16; dtype++)
        for (unsigned c = 0; c < 2 + 3; c++) { /* logprobs: filtered or not; verify: three noises */
            if (c >= 2 && noises[c - 2] == PSR_SAMPLE_FP64_NOISE && !fp64_ok)
                continue;
            if (out)
                out[n] = c < 2 ? (psr_warm_variant){PSR_WARM_LOGPROBS, 0, dtype, (int)c}
                               : (psr_warm_variant){PSR_WARM_VERIFY, noises[c - 2], dtype, 0};
            n++;
        }
    return n;
}

/* ---- warming's launches: each kernel once, through the calls themselves
 * on tiny inputs, as an application would, so that a driver that
 * compiles at first launch (PoCL, per work-group size) has done it. ---- */

#define WARM_BUFFERS 16

/* The device buffers of one warm launch; host data (zeros where NULL). */
typedef struct warm_inputs {
    psr_context *ctx;
    cl_mem mem[WARM_BUFFERS];
    size_t count;
    unsigned char *zeros; /* host zeros of the largest buffer */
    psr_status st;
} warm_inputs;

static cl_mem warm_buffer(warm_inputs *in, size_t bytes, const void *host)
{
    psr_context *ctx = in->ctx;
    if (in->st != PSR_OK || in->count == WARM_BUFFERS)
        return NULL;
    cl_int err;
    cl_mem m = clCreateBuffer(ctx->cl_ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes,
                              (void *)(host ? host : in->zeros), &err);
    if (err != CL_SUCCESS) {
        in->st = psr_fail(ctx, PSR_ERR_OPENCL, "warming: cannot allocate %zu bytes: %s (%d)", bytes,
                          psr_cl_error_string(err), err);
        return NULL;
    }
    return in->mem[in->count++] = m;
}

/* Waits for the launch, then releases its buffers; returns its status. */
static psr_status warm_finish(warm_inputs *in, psr_status st)
{
    if (st == PSR_OK) {
        cl_int err = clFinish(in->ctx->queue);
        if (err != CL_SUCCESS)
            st = psr_fail(in->ctx, PSR_ERR_OPENCL, "warming: clFinish failed: %s (%d)",
                          psr_cl_error_string(err), err);
    }
    for (size_t i = 0; i < in->count; i++)
        clReleaseMemObject(in->mem[i]);
    free(in->zeros);
    return st;
}

static psr_status warm_begin(psr_context *ctx, warm_inputs *in, size_t largest)
{
    memset(in, 0, sizeof *in);
    in->ctx = ctx;
    in->zeros = calloc(1, largest);
    in->st = in->zeros ? PSR_OK : psr_fail(ctx, PSR_ERR_OUT_OF_HOST_MEMORY, "warming: out of memory");
    return in->st;
}

/* The smallest vocabulary whose one row splits over two groups, so that
 * the launch takes the split rows' kernels too. */
static size_t warm_split_vocab(const psr_context *ctx, size_t resident_per_unit)
{
    for (size_t v = 256; v <= ((size_t)1 << 17); v *= 2) {
        cl_uint chunk, groups;
        psr_split_rows_for(ctx, 1, v, resident_per_unit, &chunk, &groups);
        if (groups >= 2)
            return v;
    }
    return 256;
}

/* One sampling call of one row (split over groups), with every filter
 * when `filtered`. */
static psr_status warm_launch_sample(psr_context *ctx, unsigned flags, psr_dtype dtype, bool filtered)
{
    size_t vocab = warm_split_vocab(ctx, ctx->tuning.sample.resident_per_unit);
    const float one = 1.0f, top_p = 0.5f, min_p = 0.1f;
    const int32_t top_k = 1;
    warm_inputs in;
    if (warm_begin(ctx, &in, vocab * 4) != PSR_OK)
        return in.st;
    psr_sample_args a;
    psr_sample_args_init(&a);
    a.rows = a.requests = 1;
    a.vocab = vocab;
    a.logits_dtype = dtype;
    a.flags = flags;
    a.logits = warm_buffer(&in, vocab * psr_dtype_size(dtype), NULL);
    a.seeds = warm_buffer(&in, 8, NULL);
    a.temperatures = warm_buffer(&in, 4, &one);
    a.positions = warm_buffer(&in, 8, NULL);
    a.tokens = warm_buffer(&in, 4, NULL);
    if (filtered) {
        a.top_k = warm_buffer(&in, 4, &top_k);
        a.top_p = warm_buffer(&in, 4, &top_p);
        a.min_p = warm_buffer(&in, 4, &min_p);
    }
    return warm_finish(&in, in.st == PSR_OK ? psr_sample(ctx, &a, NULL) : in.st);
}

/* A logprobs call of `rows` rows of 64 tokens (one block each). */
static psr_status warm_launch_logprobs_rows(psr_context *ctx, psr_dtype dtype, bool filtered, size_t rows)
{
    warm_inputs in;
    if (warm_begin(ctx, &in, rows * 64 * 4) != PSR_OK)
        return in.st;
    float *host = malloc(rows * 3 * sizeof *host); /* temperatures 1, top_p 0.5, min_p 0.1 */
    if (!host)
        return warm_finish(&in, psr_fail(ctx, PSR_ERR_OUT_OF_HOST_MEMORY, "warming: out of memory"));
    for (size_t r = 0; r < rows; r++)
        host[r] = 1.0f, host[rows + r] = 0.5f, host[2 * rows + r] = 0.1f;
    psr_logprobs_args a;
    psr_logprobs_args_init(&a);
    a.rows = a.requests = rows;
    a.vocab = 64;
    a.logits_dtype = dtype;
    a.top_n = 1;
    a.logits = warm_buffer(&in, rows * 64 * psr_dtype_size(dtype), NULL);
    a.temperatures = warm_buffer(&in, rows * 4, host);
    a.tokens = warm_buffer(&in, rows * 4, NULL);
    a.token_logprobs = warm_buffer(&in, rows * 4, NULL);
    a.top_ids = warm_buffer(&in, rows * 4, NULL);
    a.top_logprobs = warm_buffer(&in, rows * 4, NULL);
    if (filtered) {
        a.top_k = warm_buffer(&in, rows * 4, NULL); /* k = 0: off, but the pre-pass runs */
        a.top_p = warm_buffer(&in, rows * 4, host + rows);
        a.min_p = warm_buffer(&in, rows * 4, host + 2 * rows);
    }
    psr_status st = in.st == PSR_OK ? psr_logprobs(ctx, &a, NULL) : in.st;
    st = warm_finish(&in, st);
    free(host);
    return st;
}

/* One block, then more blocks than the tuning runs in one launch or with
 * the few-blocks kernel (where it does), so every kernel is launched. */
static psr_status warm_launch_logprobs(psr_context *ctx, psr_dtype dtype, bool filtered)
{
    size_t most = ctx->tuning.logprobs.one_blocks > ctx->tuning.logprobs.few_blocks ? ctx->tuning.logprobs.one_blocks
                                                                                     : ctx->tuning.logprobs.few_blocks;
    psr_status st = warm_launch_logprobs_rows(ctx, dtype, filtered, 1);
    if (st == PSR_OK && most > 0)
        st = warm_launch_logprobs_rows(ctx, dtype, filtered, most + 1);
    return st;
}

/* A verification call of `requests` requests of one draft and a bonus row each. */
static psr_status warm_launch_verify_shape(psr_context *ctx, unsigned flags, psr_dtype dtype, size_t requests,
                                          size_t vocab)
{
    size_t rows = 2 * requests;
    warm_inputs in;
    int32_t *cu = malloc((requests + 1) * sizeof *cu);
    float *temps = malloc(requests * sizeof *temps);
    if (warm_begin(ctx, &in, rows * vocab * 4) != PSR_OK || !cu || !temps) {
        free(cu);
        free(temps);
        return warm_finish(&in, in.st == PSR_OK ? psr_fail(ctx, PSR_ERR_OUT_OF_HOST_MEMORY, "warming: out of memory")
                                                : in.st);
    }
    for (size_t r = 0; r <= requests; r++)
        cu[r] = (int32_t)(2 * r);
    for (size_t r = 0; r < requests; r++)
        temps[r] = 1.0f;
    psr_verify_args a;
    psr_verify_args_init(&a);
    a.requests = requests;
    a.cu = cu;
    a.rows = rows;
    a.max_drafts = 1;
    a.vocab = vocab;
    a.target_dtype = dtype;
    a.flags = flags;
    a.target_logits = warm_buffer(&in, rows * vocab * psr_dtype_size(dtype), NULL);
    a.draft_tokens = warm_buffer(&in, rows * 4, NULL);
    a.seeds = warm_buffer(&in, requests * 8, NULL);
    a.temperatures = warm_buffer(&in, requests * 4, temps);
    a.positions = warm_buffer(&in, rows * 8, NULL);
    a.tokens = warm_buffer(&in, rows * 4, NULL);
    a.num_sampled = warm_buffer(&in, requests * 4, NULL);
    psr_status st = warm_finish(&in, in.st == PSR_OK ? psr_verify(ctx, &a, NULL) : in.st);
    free(cu);
    free(temps);
    return st;
}

/* One request split over groups, then (where the tuning runs small calls
 * as one launch) enough requests to take the separate kernels. */
static psr_status warm_launch_verify(psr_context *ctx, unsigned flags, psr_dtype dtype)
{
    size_t vocab = warm_split_vocab(ctx, ctx->tuning.verify.resident_per_unit);
    psr_status st = warm_launch_verify_shape(ctx, flags, dtype, 1, vocab);
    if (st == PSR_OK && ctx->tuning.verify.fused_groups > 0)
        st = warm_launch_verify_shape(ctx, flags, dtype, ctx->tuning.verify.fused_groups / 2 + 1, 64);
    return st;
}

/* One variant: its programs built or loaded, then (launch) its call run
 * on tiny inputs. */
static psr_status warm_one(psr_context *ctx, const psr_warm_variant *w, unsigned flags, bool launch)
{
    psr_variant v[2];
    size_t n = warm_programs(w, flags, v);
    psr_status st = PSR_OK;
    for (size_t i = 0; i < n && st == PSR_OK; i++) {
        cl_program p;
        st = psr_program_get(ctx, &v[i], &p);
    }
    if (st != PSR_OK || !launch)
        return st;
    psr_dtype dtype = (psr_dtype)w->dtype;
    if (w->call == PSR_WARM_SAMPLE)
        return warm_launch_sample(ctx, w->flags, dtype, w->filtered);
    if (w->call == PSR_WARM_LOGPROBS)
        return warm_launch_logprobs(ctx, dtype, w->filtered);
    return warm_launch_verify(ctx, w->flags, dtype);
}

/* The variant's name: its own program's ("sample f16 drafting filtered",
 * "logprobs bf16 filtered"). */
static void warm_name(const psr_warm_variant *w, unsigned flags, char *buf, size_t len)
{
    psr_variant v[2];
    warm_programs(w, flags, v);
    v[0].filtered = false;
    psr_variant_name(&v[0], buf, len);
    size_t used = strlen(buf);
    if (w->filtered && used + 10 < len)
        snprintf(buf + used, len - used, " filtered");
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

psr_status psr_context_warm(psr_context *ctx, const psr_warm_options *options, size_t *variants)
{
    if (!ctx)
        return psr_fail(NULL, PSR_ERR_NULL_ARGUMENT, "psr_context_warm: ctx is NULL");
    psr_warm_options o;
    psr_warm_options_init(&o);
    if (options) {
        REQUIRE(options->struct_size == sizeof *options, PSR_ERR_INVALID_ARGUMENT,
                "options->struct_size is %zu, expected %zu: call psr_warm_options_init() first",
                options->struct_size, sizeof *options);
        o = *options;
    }
    psr_warm_variant *list = NULL;
    unsigned *flags = NULL;
    size_t n = 0;
    psr_status st = warm_list(ctx, &o, &list, &n, &flags);
    /* PoCL compiles each kernel at its first launch (docs/cache.md). */
    bool launch = o.launch == PSR_WARM_LAUNCH_ON || (o.launch == PSR_WARM_LAUNCH_AUTO && ctx->tuning.driver_caches);
    for (size_t i = 0; i < n && st == PSR_OK; i++) {
        double start = psr_seconds();
        st = warm_one(ctx, &list[i], flags[i], launch);
        char name[96];
        warm_name(&list[i], flags[i], name, sizeof name);
        double seconds = psr_seconds() - start;
        if (st == PSR_OK)
            psr_log(ctx, PSR_LOG_INFO, "warm [%zu/%zu] %s%s: %.2f s", i + 1, n, name,
                    launch ? " (launched)" : "", seconds);
        if (st == PSR_OK && o.progress)
            o.progress(i + 1, n, name, seconds, o.progress_user_data);
    }
    free(list);
    free(flags);
    if (st == PSR_OK && variants)
        *variants = n;
    return st;
}

void psr_context_options_changed(psr_context *ctx)
{
    ctx->check_arg_names = strstr(ctx->tuning.extra_options, "-cl-kernel-arg-info") != NULL;
}
