/* Quick builds, optimized in the background, and the cold calls served
 * on the host meanwhile (docs/cache.md).
 *
 * Where the tuning has quick builds (opt-in), a variant's first calls run
 * programs built with -cl-opt-disable: the kernels' arithmetic is fixed
 * by the source (no contraction, no fast math), so they give the same
 * bits, and the driver compiles them in a third of the time. From the
 * second call of a variant that ran quick programs, a thread of the
 * context warms that variant on a context of its own (the same cl_context
 * and device, its own queue): the optimized programs are built and each
 * kernel launched once, which is when PoCL compiles it. The calling
 * thread adopts the finished programs at its next kernel lookup. A
 * one-call process (the CLI) never starts the thread. Cold calls on the
 * host (host_serve.c) count toward the same second call, and go to the
 * device once the variant's programs are at hand. */
#include "ops/ops.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define UPGRADE_VARIANTS 64 /* variants one context tracks; past them calls stay quick */

typedef struct upgrade_variant {
    psr_warm_variant w;
    unsigned flags; /* the call's, resolved */
    unsigned calls; /* calls that ran quick programs or on the host; the second schedules the job */
    bool finished;  /* its job ended (built, or failed: then calls build in the foreground) */
    bool ready;     /* cold calls: its programs are at hand, so calls go to the device */
} upgrade_variant;

typedef struct upgrade_job {
    size_t variant; /* index into variants */
    cl_event after; /* the call's end on the caller's queue: PoCL's compiler is free then */
} upgrade_job;

struct psr_upgrader {
    /* the calling thread's alone */
    upgrade_variant variants[UPGRADE_VARIANTS];
    size_t variant_count;
    bool started;
    bool unavailable; /* the context or thread could not be made: no more tries */
    pthread_t thread;
    /* the thread's alone once started */
    psr_context *shadow;
    size_t handed; /* shadow programs already handed over */
    /* shared, under lock */
    pthread_mutex_t lock;
    pthread_cond_t wake;
    upgrade_job jobs[UPGRADE_VARIANTS];
    size_t job_count;
    psr_program_entry *done; /* optimized programs for the caller to adopt */
    size_t done_count;
    double done_seconds;
    char failure[PSR_ERROR_MAX];
    bool finished[UPGRADE_VARIANTS]; /* jobs ended, for adopt to pass on */
    atomic_bool stop;
    atomic_bool ready; /* done_count > 0 or a failure to report */
    /* the process's list of started threads, under registry_lock */
    psr_upgrader *next;
    bool joined;
};

/* Threads still building when the process exits are stopped and joined
 * first: the driver's compiler (LLVM in PoCL) must not be torn down by
 * its static destructors under a thread that is using it. */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static psr_upgrader *registry;
static bool exit_hook;

static void signal_stop(psr_upgrader *u)
{
    pthread_mutex_lock(&u->lock);
    atomic_store(&u->stop, true);
    pthread_cond_signal(&u->wake);
    pthread_mutex_unlock(&u->lock);
}

/* Under registry_lock. */
static void join_once(psr_upgrader *u)
{
    if (u->started && !u->joined)
        pthread_join(u->thread, NULL);
    u->joined = true;
}

static void stop_all_at_exit(void)
{
    pthread_mutex_lock(&registry_lock);
    for (psr_upgrader *u = registry; u; u = u->next)
        signal_stop(u);
    for (psr_upgrader *u = registry; u; u = u->next)
        join_once(u);
    pthread_mutex_unlock(&registry_lock);
}

/* Hands the shadow's programs built since the last hand-over to the
 * caller (under the lock). */
static void hand_over(psr_upgrader *u, double seconds)
{
    psr_context *s = u->shadow;
    size_t n = s->program_count - u->handed;
    u->done_seconds += seconds;
    /* A variant whose programs an earlier one built brings none; realloc
     * to zero bytes would free the list. */
    if (u->done_count + n == 0)
        return;
    psr_program_entry *grown = realloc(u->done, (u->done_count + n) * sizeof *grown);
    if (!grown) {
        psr_strlcpy(u->failure, "out of memory handing programs over", sizeof u->failure);
        return;
    }
    u->done = grown;
    for (size_t i = u->handed; i < s->program_count; i++) {
        char *key = strdup(s->programs[i].key);
        if (!key)
            continue;
        clRetainProgram(s->programs[i].program);
        u->done[u->done_count++] = (psr_program_entry){key, s->programs[i].program};
    }
    u->handed = s->program_count;
}

static void *upgrade_thread(void *arg)
{
    psr_upgrader *u = arg;
    for (;;) {
        pthread_mutex_lock(&u->lock);
        while (!atomic_load(&u->stop) && u->job_count == 0)
            pthread_cond_wait(&u->wake, &u->lock);
        if (atomic_load(&u->stop)) {
            pthread_mutex_unlock(&u->lock);
            return NULL;
        }
        upgrade_job job = u->jobs[0];
        memmove(u->jobs, u->jobs + 1, --u->job_count * sizeof u->jobs[0]);
        upgrade_variant *v = &u->variants[job.variant]; /* its fields are fixed once scheduled */
        pthread_mutex_unlock(&u->lock);

        clWaitForEvents(1, &job.after);
        clReleaseEvent(job.after);
        if (atomic_load(&u->stop))
            return NULL;
        double start = psr_seconds();
        psr_status st = psr_warm_one(u->shadow, &v->w, v->flags, true);
        pthread_mutex_lock(&u->lock);
        if (st == PSR_OK)
            hand_over(u, psr_seconds() - start);
        else
            psr_strlcpy(u->failure, psr_last_error(u->shadow), sizeof u->failure);
        u->finished[job.variant] = true;
        atomic_store(&u->ready, true);
        pthread_mutex_unlock(&u->lock);
    }
}

/* The calling thread: the finished programs into the memory tier, where
 * every later lookup finds them before the quick ones. */
static void adopt(psr_context *ctx)
{
    psr_upgrader *u = ctx->upgrader;
    if (!atomic_load(&u->ready))
        return;
    pthread_mutex_lock(&u->lock);
    for (size_t i = 0; i < u->done_count; i++) {
        if (psr_program_remember(ctx, u->done[i].key, u->done[i].program) != PSR_OK)
            psr_log(ctx, PSR_LOG_WARNING, "out of memory adopting an optimized program; calls keep the quick one");
        free(u->done[i].key);
    }
    if (u->done_count) {
        ctx->adopted++;
        psr_log(ctx, PSR_LOG_INFO, "%zu optimized program%s built and launched in the background in %.2f s",
                u->done_count, u->done_count == 1 ? "" : "s", u->done_seconds);
    }
    if (u->failure[0])
        psr_log(ctx, PSR_LOG_WARNING, "background build failed; calls build in the foreground or keep the quick "
                "programs: %s", u->failure);
    for (size_t i = 0; i < u->variant_count; i++)
        u->variants[i].finished = u->variants[i].finished || u->finished[i];
    u->done_count = 0;
    u->done_seconds = 0;
    u->failure[0] = '\0';
    atomic_store(&u->ready, false);
    pthread_mutex_unlock(&u->lock);
}

static void upgrader_free(psr_context *ctx)
{
    psr_upgrader *u = ctx->upgrader;
    signal_stop(u);
    /* A build or launch in progress runs to its end (seconds on PoCL). */
    pthread_mutex_lock(&registry_lock);
    join_once(u);
    for (psr_upgrader **at = &registry; *at; at = &(*at)->next)
        if (*at == u) {
            *at = u->next;
            break;
        }
    pthread_mutex_unlock(&registry_lock);
    for (size_t i = 0; i < u->job_count; i++)
        clReleaseEvent(u->jobs[i].after);
    for (size_t i = 0; i < u->done_count; i++) {
        clReleaseProgram(u->done[i].program);
        free(u->done[i].key);
    }
    free(u->done);
    psr_context_free(u->shadow);
    pthread_cond_destroy(&u->wake);
    pthread_mutex_destroy(&u->lock);
    free(u);
    ctx->upgrader = NULL;
    ctx->adopt = NULL;
    ctx->upgrader_free = NULL;
}

/* The context the thread warms on: the caller's cl_context and device,
 * a queue of its own, the caller's tuning without quick builds, and the
 * caller's device view and disk tier, so that its programs have the keys
 * the caller looks up. */
static psr_status make_shadow(psr_context *ctx, psr_context **out)
{
    cl_int err;
    cl_command_queue q = clCreateCommandQueue(ctx->cl_ctx, ctx->device, 0, &err);
    if (err != CL_SUCCESS)
        return psr_fail_cl(ctx, err, "background builds: cannot create a queue");
    psr_context_options o;
    psr_context_options_init(&o, sizeof o);
    o.disk_cache = PSR_DISK_CACHE_OFF;
    psr_status st = psr_context_create_from_cl(ctx->cl_ctx, ctx->device, q, &o, out);
    clReleaseCommandQueue(q);
    if (st != PSR_OK)
        return psr_fail(ctx, st, "background builds: %s", psr_last_error(NULL));
    psr_context *s = *out;
    s->tuning = ctx->tuning;
    s->tuning.quick_builds = 0;
    s->tuning.host_cold_elements = 0; /* its launches are the warm's: on the device */
    s->info = ctx->info;
    psr_context_options_changed(s);
    s->fp64_policy = ctx->fp64_policy;
    s->disk_enabled = ctx->disk_enabled;
    s->disk_writable = ctx->disk_writable;
    psr_strlcpy(s->cache_dir, ctx->cache_dir, sizeof s->cache_dir);
    return PSR_OK;
}

static psr_status upgrader_start(psr_context *ctx)
{
    psr_upgrader *u = calloc(1, sizeof *u);
    if (!u)
        return PSR_ERR_OUT_OF_HOST_MEMORY;
    pthread_mutex_init(&u->lock, NULL);
    pthread_cond_init(&u->wake, NULL);
    atomic_init(&u->stop, false);
    atomic_init(&u->ready, false);
    ctx->upgrader = u;
    ctx->adopt = adopt;
    ctx->upgrader_free = upgrader_free;
    return PSR_OK;
}

/* Queues the variant's warm behind a marker of the caller's queue; the
 * first starts the thread and its context. */
static void schedule(psr_context *ctx, size_t index)
{
    psr_upgrader *u = ctx->upgrader;
    cl_event after = NULL;
    cl_int err = clEnqueueMarkerWithWaitList(ctx->queue, 0, NULL, &after);
    if (err == CL_SUCCESS)
        err = clFlush(ctx->queue); /* the marker must complete without the caller's help */
    if (err != CL_SUCCESS) {
        if (after)
            clReleaseEvent(after);
        psr_log(ctx, PSR_LOG_WARNING, "background builds: cannot mark the queue (%s); calls keep the quick programs",
                psr_cl_error_string(err));
        return;
    }
    if (!u->started) {
        pthread_mutex_lock(&registry_lock);
        if (!exit_hook)
            exit_hook = atexit(stop_all_at_exit) == 0;
        bool hooked = exit_hook;
        pthread_mutex_unlock(&registry_lock);
        if (!hooked || make_shadow(ctx, &u->shadow) != PSR_OK ||
            pthread_create(&u->thread, NULL, upgrade_thread, u) != 0) {
            clReleaseEvent(after);
            psr_log(ctx, PSR_LOG_WARNING, "background builds unavailable; calls keep the quick programs: %s",
                    !hooked ? "cannot register an exit handler"
                    : u->shadow ? "cannot start a thread" : psr_last_error(ctx));
            ctx->tuning.quick_builds = 0; /* no more quick programs either */
            u->unavailable = true;
            return;
        }
        pthread_mutex_lock(&registry_lock);
        u->started = true;
        u->next = registry;
        registry = u;
        pthread_mutex_unlock(&registry_lock);
    }
    pthread_mutex_lock(&u->lock);
    u->jobs[u->job_count++] = (upgrade_job){index, after};
    pthread_cond_signal(&u->wake);
    pthread_mutex_unlock(&u->lock);
}

/* The variant's entry (added when new); UPGRADE_VARIANTS when the table
 * is full. */
static size_t variant_index(psr_upgrader *u, psr_warm_call call, unsigned flags, psr_dtype dtype, bool filtered)
{
    size_t i = 0;
    while (i < u->variant_count &&
           !(u->variants[i].w.call == call && u->variants[i].flags == flags && u->variants[i].w.dtype == dtype &&
             u->variants[i].w.filtered == filtered))
        i++;
    if (i == u->variant_count && i < UPGRADE_VARIANTS)
        u->variants[u->variant_count++] = (upgrade_variant){{call, 0, PSR_NOISE_FP32, dtype, filtered}, flags, 0,
                                                            false, false};
    return i;
}

/* The upgrader of the context, made on first use; NULL where it cannot
 * run (out of memory, or no thread or context could be started). */
static psr_upgrader *upgrader_of(psr_context *ctx)
{
    if (!ctx->upgrader && upgrader_start(ctx) != PSR_OK)
        return NULL;
    return ctx->upgrader->unavailable ? NULL : ctx->upgrader;
}

void psr_upgrade_after_call(psr_context *ctx, psr_warm_call call, unsigned flags, psr_dtype dtype, bool filtered)
{
    if (!ctx->quick_used)
        return;
    ctx->quick_used = false;
    psr_upgrader *u = upgrader_of(ctx);
    if (!u)
        return; /* calls keep the quick programs */
    size_t i = variant_index(u, call, flags, dtype, filtered);
    if (i < UPGRADE_VARIANTS && ++u->variants[i].calls == 2)
        schedule(ctx, i);
}

bool psr_cold_call_on_host(psr_context *ctx, psr_warm_call call, unsigned flags, psr_dtype dtype, bool filtered,
                           size_t rows, size_t stride, size_t extra)
{
    size_t limit = ctx->tuning.host_cold_elements;
    if (!limit || ctx->warming || rows > limit / stride || rows * stride > limit - (extra < limit ? extra : limit))
        return false;
    psr_upgrader *u = upgrader_of(ctx);
    size_t i = u ? variant_index(u, call, flags, dtype, filtered) : UPGRADE_VARIANTS;
    if (i == UPGRADE_VARIANTS)
        return false;
    upgrade_variant *v = &u->variants[i];
    if (v->ready)
        return false; /* the common case: one look at the table */
    adopt(ctx);
    if (v->finished || psr_warm_ready(ctx, &v->w, flags)) {
        v->ready = true;
        return false;
    }
    if (++v->calls == 1) {
        psr_kernel_set set = call == PSR_WARM_LOGPROBS ? PSR_KERNELS_LOGPROBS
                             : call == PSR_WARM_VERIFY ? PSR_KERNELS_VERIFY
                                                       : PSR_KERNELS_SAMPLE;
        psr_variant pv = psr_variant_of(set, flags, dtype);
        char name[80];
        psr_variant_name(&pv, name, sizeof name);
        psr_log(ctx, PSR_LOG_INFO, "'%s%s' runs on the host until its programs are built (in the background, "
                "from its next call)", name, filtered ? " filtered" : "");
    }
    if (v->calls == 2)
        schedule(ctx, i);
    return !u->unavailable;
}
