/* Program lookup through the two cache tiers, and builds from source. */
#include "runtime/runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double psr_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Keeps the build log of a failed build on the context. */
static void keep_build_log(psr_context *ctx, cl_program program)
{
    size_t n = 0;
    free(ctx->build_log);
    ctx->build_log = NULL;
    if (clGetProgramBuildInfo(program, ctx->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &n) !=
            CL_SUCCESS ||
        n == 0)
        return;
    ctx->build_log = malloc(n + 1);
    if (!ctx->build_log)
        return;
    if (clGetProgramBuildInfo(program, ctx->device, CL_PROGRAM_BUILD_LOG, n, ctx->build_log,
                              NULL) != CL_SUCCESS)
        n = 0;
    ctx->build_log[n] = '\0';
}

/* Reports a build from source (err, p) the way every build is: a failed
 * one with its log (p released), a good one's log at DEBUG. */
static psr_status finish_source_build(psr_context *ctx, const char *label, const char *options, cl_int err,
                                      cl_program p, cl_program *out)
{
    if (err != CL_SUCCESS && !p)
        return psr_fail_cl(ctx, err, "clCreateProgramWithSource(%s) failed", label);
    if (err != CL_SUCCESS) {
        keep_build_log(ctx, p);
        clReleaseProgram(p);
        return psr_fail(ctx, PSR_ERR_BUILD_FAILED,
                        "building kernels '%s' for %s failed: %s (%d); options: %s; build log:\n%.600s",
                        label, ctx->info.name, psr_cl_error_string(err), err, options,
                        ctx->build_log ? ctx->build_log : "(none)");
    }
    /* Compilers report resource use in the log (NVIDIA: -cl-nv-verbose). */
    size_t n = 0;
    if (ctx->log && ctx->log_level <= PSR_LOG_DEBUG &&
        clGetProgramBuildInfo(p, ctx->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &n) == CL_SUCCESS &&
        n > 1) {
        char *text = malloc(n + 1);
        if (text && clGetProgramBuildInfo(p, ctx->device, CL_PROGRAM_BUILD_LOG, n, text, NULL) ==
                        CL_SUCCESS) {
            text[n] = '\0';
            /* Line by line: a whole log would not fit one message. */
            psr_log(ctx, PSR_LOG_DEBUG, "build log of '%s' (%s):", label, options);
            for (char *line = text; *line;) {
                size_t len = strcspn(line, "\n");
                if (len > 0)
                    psr_log(ctx, PSR_LOG_DEBUG, "  %.*s", (int)len, line);
                line += len + (line[len] == '\n');
            }
        }
        free(text);
    }
    *out = p;
    return PSR_OK;
}

cl_int psr_cl_build(cl_context cl_ctx, cl_device_id device, const char *source, const char *options,
                    cl_program *out)
{
    cl_int err;
    *out = clCreateProgramWithSource(cl_ctx, 1, &source, NULL, &err);
    if (err == CL_SUCCESS)
        err = clBuildProgram(*out, 1, &device, options, NULL, NULL);
    return err;
}

psr_status psr_program_build_source(psr_context *ctx, const char *label, const char *source,
                                    const char *options, cl_program *out)
{
    cl_program p;
    cl_int err = psr_cl_build(ctx->cl_ctx, ctx->device, source, options, &p);
    return finish_source_build(ctx, label, options, err, p, out);
}

/* SHA-256 over everything that decides what binary a build produces. */
static void cache_key(const psr_context *ctx, const char *set_name, const char *source,
                      const char *options, uint8_t key[32])
{
    const char *fields[] = {
        "psr-kernel-cache-1", PSR_VERSION_STRING,      set_name,
        source,               options,                 ctx->info.platform_name,
        ctx->info.platform_version, ctx->info.name,    ctx->info.version,
        ctx->info.driver_version,
    };
    psr_sha256 h;
    psr_sha256_init(&h);
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        psr_sha256_update(&h, fields[i], strlen(fields[i]) + 1); /* NUL separates fields */
    psr_sha256_final(&h, key);
}

/* Tries to make a program from a cached binary. */
static cl_program program_from_binary(psr_context *ctx, const unsigned char *bin, size_t len,
                                      const char *options, const char **why)
{
    cl_int status = CL_SUCCESS, err;
    cl_program p = clCreateProgramWithBinary(ctx->cl_ctx, 1, &ctx->device, &len, &bin, &status, &err);
    if (err != CL_SUCCESS || status != CL_SUCCESS) {
        *why = "the driver refused the binary";
        if (p)
            clReleaseProgram(p);
        return NULL;
    }
    if (clBuildProgram(p, 1, &ctx->device, options, NULL, NULL) != CL_SUCCESS) {
        *why = "the driver could not build the binary";
        clReleaseProgram(p);
        return NULL;
    }
    return p;
}

static void store_binary(psr_context *ctx, cl_program p, const uint8_t key[32],
                         const char *set_name, const char *options)
{
    size_t len = 0;
    if (clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof len, &len, NULL) != CL_SUCCESS ||
        len == 0) {
        psr_log(ctx, PSR_LOG_INFO, "the driver gives no binary for '%s'; nothing cached", set_name);
        return;
    }
    unsigned char *bin = malloc(len);
    if (!bin)
        return;
    if (clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL) != CL_SUCCESS) {
        free(bin);
        return;
    }
    psr_cache_meta meta;
    memset(&meta, 0, sizeof meta);
    psr_strlcpy(meta.kernels, set_name, sizeof meta.kernels);
    psr_strlcpy(meta.platform, ctx->info.platform_name, sizeof meta.platform);
    psr_strlcpy(meta.device, ctx->info.name, sizeof meta.device);
    psr_strlcpy(meta.driver_version, ctx->info.driver_version, sizeof meta.driver_version);
    psr_strlcpy(meta.options, options, sizeof meta.options);
    psr_strlcpy(meta.library, PSR_VERSION_STRING, sizeof meta.library);
    int err = psr_cache_write_file(ctx->cache_dir, key, &meta, bin, len);
    free(bin);
    if (err) {
        ctx->stats.disk_write_failures++;
        psr_log(ctx, PSR_LOG_WARNING,
                "kernel cache: cannot write to %s (%s); new binaries are not saved",
                ctx->cache_dir, strerror(err));
        ctx->disk_writable = false;
        return;
    }
    ctx->stats.disk_writes++;
}

/* What a look in the disk tier did besides loading. */
typedef struct disk_look {
    bool discarded; /* a file was discarded: the build is a rebuild */
    bool foreign;   /* another user's file has the name: left alone, nothing written */
} disk_look;

/* Removes an entry psr will not load again (the file st describes, not a
 * fresh one another process put in its place since), saying why. */
static void discard(psr_context *ctx, int dir_fd, const char *name, const struct stat *st, const char *why,
                    disk_look *look)
{
    look->discarded = true;
    psr_log(ctx, PSR_LOG_WARNING, "kernel cache: discarding %s/%s: %s; rebuilding from source",
            ctx->cache_dir, name, why);
    int err = psr_cache_unlink_same(dir_fd, name, st);
    if (err && err != ENOENT)
        psr_log(ctx, PSR_LOG_WARNING, "kernel cache: cannot remove %s/%s: %s", ctx->cache_dir,
                name, strerror(err));
}

/* Hands a binary that passed psr's checks to the driver, on trial: a
 * driver that crashes on it crashes this process once, and the next one
 * discards it. NULL when it was not loaded. */
static cl_program load_on_trial(psr_context *ctx, int dir_fd, const char *name,
                                const struct stat *st, const unsigned char *bin, size_t len,
                                const char *options, disk_look *look)
{
    int mark = -1, err = 0;
    long pid = 0;
    psr_trial t = psr_cache_trial_begin(dir_fd, name, st, &mark, &pid, &err);
    if (t == PSR_TRIAL_BUSY) {
        psr_log(ctx, PSR_LOG_DEBUG, "kernel cache: %s/%s is on trial in another process; building "
                "from source", ctx->cache_dir, name);
        return NULL;
    }
    if (t == PSR_TRIAL_FAILED) {
        psr_log(ctx, PSR_LOG_WARNING, "kernel cache: disk tier off: cannot mark %s/%s on trial "
                "(%s); building from source", ctx->cache_dir, name, strerror(err));
        ctx->disk_enabled = false;
        return NULL;
    }
    if (t == PSR_TRIAL_DIED) {
        char why[96];
        snprintf(why, sizeof why, "process %ld died while the driver loaded it", pid);
        discard(ctx, dir_fd, name, st, why, look);
        psr_cache_trial_end(dir_fd, name, mark);
        return NULL;
    }
    if (psr_cache_trial_hook)
        psr_cache_trial_hook(name);
    const char *why = NULL;
    cl_program p = program_from_binary(ctx, bin, len, options, &why);
    if (!p)
        discard(ctx, dir_fd, name, st, why, look);
    if (t == PSR_TRIAL_MARKED)
        psr_cache_trial_end(dir_fd, name, mark);
    return p;
}

/* Looks in the disk tier: the program, or NULL (look says why). */
static cl_program look_in_dir(psr_context *ctx, int dir_fd, const uint8_t key[32],
                              const char *options, disk_look *look)
{
    char name[80];
    psr_cache_name(key, name, sizeof name);
    unsigned char *bin = NULL;
    size_t len = 0;
    const char *why = NULL;
    struct stat st;
    psr_cache_read r = psr_cache_read_at(dir_fd, name, key, &bin, &len, NULL, &st, &why);
    if (r == PSR_CACHE_READ_OK) {
        cl_program p = load_on_trial(ctx, dir_fd, name, &st, bin, len, options, look);
        free(bin);
        return p;
    }
    if (r == PSR_CACHE_READ_INVALID) {
        discard(ctx, dir_fd, name, &st, why, look);
    } else if (r == PSR_CACHE_READ_UNREADABLE) {
        psr_log(ctx, PSR_LOG_WARNING, "kernel cache: cannot read %s/%s: %s; building from source",
                ctx->cache_dir, name, why);
    } else if (r == PSR_CACHE_READ_UNTRUSTED) {
        /* Never loaded; never removed unless it is this user's own. */
        look->foreign = st.st_uid != geteuid();
        psr_log(ctx, PSR_LOG_INFO, "kernel cache: ignoring %s/%s: %s; building from source%s",
                ctx->cache_dir, name, why, look->foreign ? " (the file is left alone)" : "");
    }
    return NULL;
}

/* The disk tier's program for a key, or NULL. The directory is checked
 * again, through the descriptor every file is then opened from. */
static cl_program load_from_disk(psr_context *ctx, const uint8_t key[32], const char *options,
                                 disk_look *look)
{
    char why[PSR_PATH_MAX + 100];
    int dir_fd = psr_cache_dir_open(ctx->cache_dir, why, sizeof why);
    if (dir_fd < 0) {
        psr_log(ctx, PSR_LOG_WARNING, "kernel cache: disk tier off: %s", why);
        ctx->disk_enabled = false;
        return NULL;
    }
    cl_program p = look_in_dir(ctx, dir_fd, key, options, look);
    close(dir_fd);
    return p;
}

static psr_status remember(psr_context *ctx, const char *mem_key, cl_program p)
{
    if (ctx->program_count == ctx->program_capacity) {
        size_t cap = ctx->program_capacity ? ctx->program_capacity * 2 : 8;
        psr_program_entry *grown = realloc(ctx->programs, cap * sizeof *grown);
        if (!grown)
            return PSR_ERR_OUT_OF_HOST_MEMORY;
        ctx->programs = grown;
        ctx->program_capacity = cap;
    }
    char *k = strdup(mem_key);
    if (!k)
        return PSR_ERR_OUT_OF_HOST_MEMORY;
    ctx->programs[ctx->program_count].key = k;
    ctx->programs[ctx->program_count].program = p;
    ctx->program_count++;
    return PSR_OK;
}

static cl_program remembered(const psr_context *ctx, const char *mem_key)
{
    for (size_t i = 0; i < ctx->program_count; i++)
        if (strcmp(ctx->programs[i].key, mem_key) == 0)
            return ctx->programs[i].program;
    return NULL;
}

psr_status psr_program_remember(psr_context *ctx, const char *mem_key, cl_program p)
{
    if (remembered(ctx, mem_key)) {
        clReleaseProgram(p);
        return PSR_OK;
    }
    psr_status st = remember(ctx, mem_key, p);
    if (st != PSR_OK)
        clReleaseProgram(p);
    return st;
}

/* The program of a variant from the disk tier or a build from source,
 * counted in the stats and logged with its time (INFO). With disk_only,
 * *out is NULL where the disk tier has none, and nothing is built. */
static psr_status program_load_or_build(psr_context *ctx, const psr_variant *v, const char *options,
                                        bool quick, bool disk_only, cl_program *out)
{
    const char *set_name = psr_kernel_set_name(v->set);
    char *source = psr_kernel_source(v->set);
    if (!source)
        return psr_fail(ctx, PSR_ERR_OUT_OF_HOST_MEMORY, "out of memory assembling kernels '%s'",
                        set_name);
    uint8_t key[32];
    cache_key(ctx, set_name, source, options, key);
    double start = psr_seconds();
    cl_program p = NULL;
    disk_look look = {false, false};
    if (ctx->disk_enabled)
        p = load_from_disk(ctx, key, options, &look);
    psr_status st = PSR_OK;
    bool loaded = p != NULL;
    if (loaded) {
        ctx->stats.disk_hits++;
    } else if (disk_only) {
        free(source);
        *out = NULL;
        return PSR_OK;
    } else {
        psr_build_result built;
        if (psr_build_jobs_take(ctx, v->set, options, &built)) { /* built on a thread (prefetch) */
            st = finish_source_build(ctx, set_name, options, built.err, built.program, &p);
            start = psr_seconds() - built.seconds; /* the log gives the build's own time */
        } else {
            st = psr_program_build_source(ctx, set_name, source, options, &p);
        }
        if (st == PSR_OK) {
            ctx->stats.builds++;
            if (look.discarded)
                ctx->stats.rebuilds++;
            if (ctx->disk_enabled && ctx->disk_writable && !look.foreign)
                store_binary(ctx, p, key, set_name, options);
        }
    }
    free(source);
    if (st == PSR_OK) {
        char name[96];
        psr_variant_name(v, name, sizeof name);
        psr_log(ctx, PSR_LOG_INFO, "program '%s'%s %s in %.2f s", name, quick ? " (quick)" : "",
                loaded ? "loaded from the disk tier" : "built", psr_seconds() - start);
        psr_log(ctx, PSR_LOG_DEBUG, "program '%s' options: %s", name, options);
        *out = p;
    }
    return st;
}

/* What a quick build adds to the options. -Dinline=: an inline definition
 * is not inlined at -O0, and NVIDIA's compiler then looks for an external
 * one. */
static const char quick_options[] = " -cl-opt-disable -Dinline=";

static void mem_key_of(psr_kernel_set set, const char *options, char *buf, size_t len)
{
    snprintf(buf, len, "%s|%s", psr_kernel_set_name(set), options);
}

/* Options and memory-tier key turned into the quick build's. */
static void make_quick(psr_kernel_set set, char *options, size_t options_len, char *mem_key, size_t key_len)
{
    size_t used = strlen(options);
    snprintf(options + used, options_len - used, "%s", quick_options);
    mem_key_of(set, options, mem_key, key_len);
}

/* Quick builds: where the tuning has them, for any variant but fast
 * math ones (whose unoptimized code could round differently), outside
 * psr_context_warm, which builds what the calls will keep. */
static bool quick_allowed(const psr_context *ctx, const psr_variant *v)
{
    return ctx->tuning.quick_builds && !ctx->warming && !v->fast_math;
}

psr_status psr_program_get_tier(psr_context *ctx, const psr_variant *in, cl_program *out, bool *quick)
{
    if ((unsigned)in->set >= PSR_KERNEL_SET_COUNT)
        return psr_fail(ctx, PSR_ERR_INVALID_ARGUMENT, "unknown kernel set %d", (int)in->set);
    psr_variant n = psr_variant_normal(in);
    const psr_variant *v = &n;
    if (v->fp64 && !(ctx->info.capabilities & PSR_CAP_FP64))
        return psr_fail(ctx, PSR_ERR_FP64_UNSUPPORTED,
                        "fp64 noise was requested but device \"%s\" (%s) has no fp64 "
                        "(cl_khr_fp64); use fp32 noise, or a device with fp64",
                        ctx->info.name, ctx->info.platform_name);
    if (ctx->adopt)
        ctx->adopt(ctx);
    char options[1024];
    psr_build_options(ctx, v, options, sizeof options);
    char mem_key[1100];
    mem_key_of(v->set, options, mem_key, sizeof mem_key);
    bool q = false, loaded = false;
    cl_program p = remembered(ctx, mem_key);
    if (!p && quick_allowed(ctx, v)) {
        /* the optimized program from the disk tier where it has it, else
         * a quick one */
        psr_status st = ctx->disk_enabled ? program_load_or_build(ctx, v, options, false, true, &p) : PSR_OK;
        if (st != PSR_OK)
            return st;
        loaded = p != NULL;
        if (!loaded) {
            q = true;
            make_quick(v->set, options, sizeof options, mem_key, sizeof mem_key);
            p = remembered(ctx, mem_key);
        }
    }
    if (quick)
        *quick = q;
    if (p && !loaded) {
        ctx->stats.memory_hits++;
        *out = p;
        return PSR_OK;
    }
    psr_status st = loaded ? PSR_OK : program_load_or_build(ctx, v, options, q, false, &p);
    if (st != PSR_OK)
        return st;
    if (remember(ctx, mem_key, p) != PSR_OK) {
        clReleaseProgram(p);
        return psr_fail(ctx, PSR_ERR_OUT_OF_HOST_MEMORY, "out of memory caching a program");
    }
    *out = p;
    return PSR_OK;
}

psr_status psr_program_get(psr_context *ctx, const psr_variant *in, cl_program *out)
{
    return psr_program_get_tier(ctx, in, out, NULL);
}

/* Has the disk tier a file under this program's key? (Whether it loads
 * is for the lookup to find out.) */
static bool on_disk(const psr_context *ctx, const psr_variant *v, const char *options)
{
    if (!ctx->disk_enabled)
        return false;
    char *source = psr_kernel_source(v->set);
    if (!source)
        return false;
    uint8_t key[32];
    cache_key(ctx, psr_kernel_set_name(v->set), source, options, key);
    free(source);
    char path[PSR_PATH_MAX + 80];
    psr_cache_path(ctx->cache_dir, key, path, sizeof path);
    return access(path, F_OK) == 0;
}

bool psr_program_ready(psr_context *ctx, const psr_variant *in)
{
    psr_variant v = psr_variant_normal(in);
    if (ctx->adopt)
        ctx->adopt(ctx);
    char options[1024];
    psr_build_options(ctx, &v, options, sizeof options);
    char mem_key[1100];
    mem_key_of(v.set, options, mem_key, sizeof mem_key);
    if (remembered(ctx, mem_key) || on_disk(ctx, &v, options))
        return true;
    if (!quick_allowed(ctx, &v))
        return false;
    make_quick(v.set, options, sizeof options, mem_key, sizeof mem_key);
    return remembered(ctx, mem_key) != NULL;
}

void psr_program_prefetch(psr_context *ctx, const psr_variant *in, size_t n)
{
    if (ctx->tuning.build_threads < 2 || n < 2)
        return;
    if (ctx->adopt)
        ctx->adopt(ctx);
    psr_build_request *requests = malloc(n * sizeof *requests);
    char(*options)[1024] = malloc(n * sizeof *options);
    size_t count = 0;
    for (size_t i = 0; requests && options && i < n; i++) {
        /* the options and key psr_program_get_tier will look under */
        psr_variant v = psr_variant_normal(&in[i]);
        if (v.fp64 && !(ctx->info.capabilities & PSR_CAP_FP64))
            continue; /* the lookup reports it */
        char *o = options[count], key[1100];
        psr_build_options(ctx, &v, o, sizeof options[0]);
        mem_key_of(v.set, o, key, sizeof key);
        if (remembered(ctx, key) || on_disk(ctx, &v, o))
            continue;
        if (quick_allowed(ctx, &v)) {
            make_quick(v.set, o, sizeof options[0], key, sizeof key);
            if (remembered(ctx, key) || on_disk(ctx, &v, o))
                continue;
        }
        bool again = psr_build_jobs_pending(ctx, v.set, o);
        for (size_t j = 0; j < count && !again; j++)
            again = requests[j].set == v.set && strcmp(requests[j].options, o) == 0;
        if (!again)
            requests[count++] = (psr_build_request){v.set, o};
    }
    if (count >= 2 && psr_build_jobs_start(ctx, requests, count))
        psr_log(ctx, PSR_LOG_DEBUG, "building %zu programs side by side (at most %u at once)", count,
                ctx->tuning.build_threads);
    free(requests);
    free(options);
}

void psr_kernels_prefetch(psr_context *ctx, const psr_variant *v, const char *const *names, size_t n)
{
    if (n < 2 || ctx->tuning.build_threads < 2)
        return;
    psr_variant first = psr_variant_for_kernel(ctx, &v[0], names[0]);
    unsigned code = psr_variant_code(&first);
    for (size_t i = 0; i < ctx->kernel_count; i++)
        if (ctx->kernels[i].variant == code && strcmp(ctx->kernels[i].name, names[0]) == 0)
            return;
    psr_variant programs[8];
    size_t count = 0;
    for (size_t i = 0; i < n && count < 8; i++)
        programs[count++] = psr_variant_for_kernel(ctx, &v[i], names[i]);
    psr_program_prefetch(ctx, programs, count);
}

/* A driver that compiles each kernel at its first launch (PoCL) compiles
 * only what it launches: there a program per family costs one front end
 * for its kernels. Other drivers compile every kernel of a program at its
 * build, so there a program holds one kernel (docs/cache.md). */
psr_variant psr_variant_for_kernel(const psr_context *ctx, const psr_variant *in, const char *name)
{
    psr_variant v = psr_variant_normal(in);
    v.kernel = ctx->tuning.one_kernel_programs ? name : NULL;
    return v;
}

/* Keeps a replaced kernel until the context is freed: the call that
 * looked it up may still be binding and enqueueing it. */
static psr_status retire(psr_context *ctx, cl_kernel k)
{
    cl_kernel *grown = realloc(ctx->retired, (ctx->retired_count + 1) * sizeof *grown);
    if (!grown)
        return psr_fail(ctx, PSR_ERR_OUT_OF_HOST_MEMORY, "out of memory caching a kernel");
    ctx->retired = grown;
    ctx->retired[ctx->retired_count++] = k;
    return PSR_OK;
}

psr_status psr_kernel_get(psr_context *ctx, const psr_variant *in, const char *name, cl_kernel *out)
{
    psr_variant n = psr_variant_for_kernel(ctx, in, name);
    const psr_variant *v = &n;
    unsigned code = psr_variant_code(v);
    if (ctx->adopt)
        ctx->adopt(ctx);
    psr_kernel_entry *e = NULL;
    for (size_t i = 0; i < ctx->kernel_count && !e; i++)
        if (ctx->kernels[i].variant == code && strcmp(ctx->kernels[i].name, name) == 0)
            e = &ctx->kernels[i];
    /* A quick kernel is looked up again once optimized programs came in. */
    if (e && (!e->quick || e->adopted == ctx->adopted)) {
        ctx->quick_used |= e->quick;
        *out = e->kernel;
        return PSR_OK;
    }
    cl_program p;
    bool quick;
    psr_status st = psr_program_get_tier(ctx, v, &p, &quick);
    if (st != PSR_OK)
        return st;
    ctx->quick_used |= quick;
    if (e && quick) {
        e->adopted = ctx->adopted;
        *out = e->kernel;
        return PSR_OK;
    }
    if (!e && ctx->kernel_count == ctx->kernel_capacity) {
        size_t cap = ctx->kernel_capacity ? ctx->kernel_capacity * 2 : 16;
        psr_kernel_entry *grown = realloc(ctx->kernels, cap * sizeof *grown);
        if (!grown)
            return psr_fail(ctx, PSR_ERR_OUT_OF_HOST_MEMORY, "out of memory caching a kernel");
        ctx->kernels = grown;
        ctx->kernel_capacity = cap;
    }
    cl_int err;
    cl_kernel k = clCreateKernel(p, name, &err);
    if (err != CL_SUCCESS)
        return psr_fail_cl(ctx, err, "clCreateKernel(%s) failed", name);
    if (e) {
        st = retire(ctx, e->kernel);
        if (st != PSR_OK) {
            clReleaseKernel(k);
            return st;
        }
    } else {
        e = &ctx->kernels[ctx->kernel_count++];
    }
    *e = (psr_kernel_entry){code, name, k, quick, ctx->adopted};
    *out = k;
    return PSR_OK;
}

