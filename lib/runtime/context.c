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

PSR_ARGS_STRUCT(psr_context_options, sizeof(psr_context_options), .log_level = PSR_LOG_WARNING,
                .disk_cache = PSR_DISK_CACHE_AUTO, .fp64_policy = PSR_FP64_ERROR)

/* The call's copy of the caller's options (all defaults for NULL). */
static psr_status read_options(const psr_context_options *caller, psr_context_options *o)
{
    if (!caller) {
        *o = psr_context_options_defaults;
        o->struct_size = sizeof *o;
        return PSR_OK;
    }
    psr_status st = psr_struct_read(NULL, caller, &psr_context_options_layout, "options", o);
    if (st != PSR_OK)
        return st;
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
     * directory that is this user's alone. */
    char why[PSR_PATH_MAX + 100];
    int dir_fd = psr_cache_dir_open(ctx->cache_dir, why, sizeof why);
    if (dir_fd < 0) {
        psr_log(ctx, PSR_LOG_WARNING,
                "kernel cache: disk tier off: %s; use a directory of your own that only you can "
                "write (mode 0700 or 0755)",
                why);
        ctx->cache_dir[0] = '\0';
        return;
    }
    close(dir_fd);
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
    cl_bool little = CL_TRUE;
    const uint16_t one = 1;
    clGetDeviceInfo(ctx->device, CL_DEVICE_ENDIAN_LITTLE, sizeof little, &little, NULL);
    ctx->host_byte_order = (little == CL_TRUE) == (*(const uint8_t *)&one == 1);
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

/* The start of both creations: out (then set to NULL) and the `n` OpenCL
 * handles a call adopts must not be NULL, in that order; then the
 * caller's options are read into o. */
static psr_status begin_create(const char *call, psr_context **out, const void *const *handles,
                               const char *const *names, size_t n, const psr_context_options *options,
                               psr_context_options *o)
{
    psr_clear_thread_error();
    if (!out)
        return psr_fail(NULL, PSR_ERR_NULL_ARGUMENT, "%s: out is NULL", call);
    *out = NULL;
    for (size_t i = 0; i < n; i++)
        if (!handles[i])
            return psr_fail(NULL, PSR_ERR_NULL_ARGUMENT, "%s: %s is NULL", call, names[i]);
    return read_options(options, o);
}

psr_status psr_context_create(const psr_context_options *options, psr_context **out)
{
    psr_context_options opts;
    psr_status st = begin_create("psr_context_create", out, NULL, NULL, 0, options, &opts);
    if (st != PSR_OK)
        return st;
    options = &opts;
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
        return abandon(ctx, psr_fail_cl(ctx, err, "clCreateContext for \"%s\" failed", dev.info.name));
    cl_command_queue_properties qprops =
        options && options->profiling ? CL_QUEUE_PROFILING_ENABLE : 0;
    ctx->queue = clCreateCommandQueue(ctx->cl_ctx, dev.device, qprops, &err);
    if (err != CL_SUCCESS)
        return abandon(ctx, psr_fail_cl(ctx, err, "clCreateCommandQueue for \"%s\" failed",
                                        dev.info.name));
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
    const void *handles[] = {cl_ctx, device, queue};
    static const char *const names[] = {"cl_ctx", "device", "queue"};
    psr_context_options opts;
    psr_status st = begin_create("psr_context_create_from_cl", out, handles, names, 3, options, &opts);
    if (st != PSR_OK)
        return st;
    options = &opts;

    cl_context qctx = NULL;
    cl_device_id qdev = NULL;
    cl_int err = clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof qctx, &qctx, NULL);
    if (err == CL_SUCCESS)
        err = clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof qdev, &qdev, NULL);
    if (err != CL_SUCCESS)
        return psr_fail_cl(NULL, err, "psr_context_create_from_cl: queue is not usable");
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
        return psr_fail_cl(NULL, err, "psr_context_create_from_cl: device is not usable");

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

/* Every scratch buffer the context holds, for psr_context_free to release
 * and psr_context_scratch_bytes to count: one list for both. */
#define CONTEXT_SCRATCH_MAX (6 + PSR_STAGE_SLOTS)
static size_t context_scratch(const psr_context *ctx, const psr_scratch **out)
{
    size_t n = 0;
    out[n++] = &ctx->part_value;
    out[n++] = &ctx->part_index;
    out[n++] = &ctx->best_scratch;
    out[n++] = &ctx->filter;
    out[n++] = &ctx->verify_state;
    out[n++] = &ctx->logprobs;
    for (int i = 0; i < PSR_STAGE_SLOTS; i++)
        out[n++] = &ctx->stage[i];
    return n;
}

void psr_context_free(psr_context *ctx)
{
    if (!ctx)
        return;
    if (ctx->upgrader_free)
        ctx->upgrader_free(ctx);
    psr_build_jobs_free(ctx);
    for (size_t i = 0; i < ctx->kernel_count; i++)
        clReleaseKernel(ctx->kernels[i].kernel);
    free(ctx->kernels);
    for (size_t i = 0; i < ctx->retired_count; i++)
        clReleaseKernel(ctx->retired[i]);
    free(ctx->retired);
    const psr_scratch *scratch[CONTEXT_SCRATCH_MAX];
    for (size_t i = 0, n = context_scratch(ctx, scratch); i < n; i++)
        if (scratch[i]->buffer)
            clReleaseMemObject(scratch[i]->buffer);
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

psr_status psr_context_check_call(const psr_context *ctx, const void *arg, const char *call,
                                  const char *name)
{
    if (!ctx)
        return psr_fail(NULL, PSR_ERR_NULL_ARGUMENT, "%s: ctx is NULL", call);
    if (!arg)
        return psr_fail((psr_context *)ctx, PSR_ERR_NULL_ARGUMENT, "%s: %s is NULL", call, name);
    return PSR_OK;
}

psr_status psr_context_device_info(const psr_context *ctx, psr_device_info *out)
{
    psr_status st = psr_context_check_call(ctx, out, "psr_context_device_info", "out");
    if (st == PSR_OK)
        *out = ctx->info;
    return st;
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
    psr_status st = psr_context_check_call(ctx, out, "psr_context_cache_stats", "out");
    if (st != PSR_OK)
        return st;
    *out = ctx->stats;
    out->disk_enabled = ctx->disk_enabled;
    psr_strlcpy(out->cache_dir, ctx->disk_enabled ? ctx->cache_dir : "", sizeof out->cache_dir);
    return PSR_OK;
}

psr_status psr_context_last_noise(const psr_context *ctx, psr_noise *noise)
{
    psr_status st = psr_context_check_call(ctx, noise, "psr_context_last_noise", "noise");
    if (st == PSR_OK)
        *noise = psr_noise_of(ctx->last_sample_flags);
    return st;
}

psr_status psr_context_recover(psr_context *ctx)
{
    if (!ctx)
        return psr_fail(NULL, PSR_ERR_NULL_ARGUMENT, "psr_context_recover: ctx is NULL");
    ctx->sample_dirty = ctx->logprobs_dirty = ctx->filter_dirty = true;
    if (ctx->verify_epoch) /* its next launch clears the count and rejection words */
        ctx->verify_epoch = PSR_VERIFY_EPOCHS - 1;
    return PSR_OK;
}

psr_status psr_context_scratch_bytes(const psr_context *ctx, size_t *bytes)
{
    psr_status st = psr_context_check_call(ctx, bytes, "psr_context_scratch_bytes", "bytes");
    if (st != PSR_OK)
        return st;
    const psr_scratch *scratch[CONTEXT_SCRATCH_MAX];
    *bytes = 0;
    for (size_t i = 0, n = context_scratch(ctx, scratch); i < n; i++)
        *bytes += scratch[i]->bytes;
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

void psr_context_options_changed(psr_context *ctx)
{
    ctx->check_arg_names = strstr(ctx->tuning.extra_options, "-cl-kernel-arg-info") != NULL;
    memset(ctx->splits, 0, sizeof ctx->splits);
}
