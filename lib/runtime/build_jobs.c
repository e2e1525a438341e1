/* Programs built on threads ahead of the calls that need them: a call or
 * a warm that will need several programs names them first, and the
 * driver compiles them side by side instead of one after another. The
 * threads touch only the OpenCL context and their own job; the calling
 * thread takes each result when its lookup gets there (program.c), and
 * does all the logging, caching and error reporting itself. */
#include "runtime/runtime.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct build_job {
    psr_kernel_set set;
    char *options;
    cl_program program; /* built, or kept for its log when the build failed */
    cl_int err;
    double seconds;
    bool done, taken;
} build_job;

struct psr_build_batch {
    psr_build_batch *live; /* the process's batches with workers, under live_lock */
    cl_context cl_ctx;
    cl_device_id device;
    pthread_mutex_t lock;
    pthread_cond_t finished; /* a job is done */
    build_job *jobs;
    size_t count, next, untaken;
    pthread_t *workers;
    size_t worker_count;
    psr_build_batch *older;
};

static void build_one(const psr_build_batch *b, build_job *j)
{
    double start = psr_seconds();
    char *source = psr_kernel_source(j->set);
    cl_program p = NULL;
    cl_int err = source ? psr_cl_build(b->cl_ctx, b->device, source, j->options, &p) : CL_OUT_OF_HOST_MEMORY;
    free(source);
    j->program = p;
    j->err = err;
    j->seconds = psr_seconds() - start;
}

static void *worker(void *arg)
{
    psr_build_batch *b = arg;
    for (;;) {
        pthread_mutex_lock(&b->lock);
        size_t i = b->next < b->count ? b->next++ : b->count;
        bool skip = i < b->count && b->jobs[i].taken; /* the calling thread builds it */
        pthread_mutex_unlock(&b->lock);
        if (i == b->count)
            return NULL;
        if (skip)
            continue;
        build_job *j = &b->jobs[i];
        build_one(b, j);
        pthread_mutex_lock(&b->lock);
        j->done = true;
        pthread_cond_broadcast(&b->finished);
        pthread_mutex_unlock(&b->lock);
    }
}

/* Every batch whose workers may still run: a process that exits without
 * freeing its contexts stops them first (atexit), as the upgrader does,
 * so that no compile runs while the driver's libraries unload. */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static psr_build_batch *live;

/* Stops handing out jobs and waits for the running ones. Under live_lock. */
static void stop_workers(psr_build_batch *b)
{
    pthread_mutex_lock(&b->lock);
    b->next = b->count;
    pthread_mutex_unlock(&b->lock);
    for (size_t i = 0; i < b->worker_count; i++)
        pthread_join(b->workers[i], NULL);
    b->worker_count = 0;
}

static void stop_all_at_exit(void)
{
    pthread_mutex_lock(&live_lock);
    for (psr_build_batch *b = live; b; b = b->live)
        stop_workers(b);
    pthread_mutex_unlock(&live_lock);
}

/* Stops the workers and frees the batch with the programs nobody took. */
static void batch_free(psr_build_batch *b)
{
    pthread_mutex_lock(&live_lock);
    stop_workers(b);
    for (psr_build_batch **at = &live; *at; at = &(*at)->live)
        if (*at == b) {
            *at = b->live;
            break;
        }
    pthread_mutex_unlock(&live_lock);
    for (size_t i = 0; i < b->count; i++) {
        if (!b->jobs[i].taken && b->jobs[i].program)
            clReleaseProgram(b->jobs[i].program);
        free(b->jobs[i].options);
    }
    pthread_cond_destroy(&b->finished);
    pthread_mutex_destroy(&b->lock);
    free(b->workers);
    free(b->jobs);
    free(b);
}

bool psr_build_jobs_pending(const psr_context *ctx, psr_kernel_set set, const char *options)
{
    for (const psr_build_batch *b = ctx->builds; b; b = b->older)
        for (size_t i = 0; i < b->count; i++)
            if (!b->jobs[i].taken && b->jobs[i].set == set && strcmp(b->jobs[i].options, options) == 0)
                return true;
    return false;
}

static void register_exit_hook(void)
{
    atexit(stop_all_at_exit);
}

bool psr_build_jobs_start(psr_context *ctx, const psr_build_request *requests, size_t count)
{
    size_t threads = ctx->tuning.build_threads ? (size_t)ctx->tuning.build_threads : 1;
    if (threads > count)
        threads = count;
    psr_build_batch *b = calloc(1, sizeof *b);
    if (b) {
        b->jobs = calloc(count, sizeof *b->jobs);
        b->workers = calloc(threads, sizeof *b->workers);
    }
    if (!b || !b->jobs || !b->workers) {
        if (b) {
            free(b->jobs);
            free(b->workers);
        }
        free(b);
        return false;
    }
    b->cl_ctx = ctx->cl_ctx;
    b->device = ctx->device;
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->finished, NULL);
    for (size_t i = 0; i < count; i++) {
        b->jobs[i].set = requests[i].set;
        b->jobs[i].options = strdup(requests[i].options);
        if (!b->jobs[i].options)
            b->jobs[i].taken = true, b->jobs[i].done = true; /* never looked for */
        b->count++;
        b->untaken += !b->jobs[i].taken;
    }
    static pthread_once_t hooked = PTHREAD_ONCE_INIT;
    pthread_once(&hooked, register_exit_hook);
    /* Too few threads is no failure: the calling thread builds what no
     * worker took (psr_build_jobs_take). None: nothing started. */
    pthread_mutex_lock(&live_lock);
    for (size_t i = 0; i < threads; i++) {
        if (pthread_create(&b->workers[b->worker_count], NULL, worker, b) != 0)
            break;
        b->worker_count++;
    }
    b->live = live;
    live = b;
    pthread_mutex_unlock(&live_lock);
    if (b->worker_count == 0) {
        batch_free(b);
        return false;
    }
    b->older = ctx->builds;
    ctx->builds = b;
    return true;
}

bool psr_build_jobs_take(psr_context *ctx, psr_kernel_set set, const char *options, psr_build_result *out)
{
    psr_build_batch **link = &ctx->builds;
    for (psr_build_batch *b = ctx->builds; b; link = &b->older, b = b->older) {
        for (size_t i = 0; i < b->count; i++) {
            build_job *j = &b->jobs[i];
            if (j->taken || j->set != set || strcmp(j->options, options) != 0)
                continue;
            /* Not started yet: built here rather than after a worker's
             * other jobs (a worker that reaches it skips it). */
            pthread_mutex_lock(&b->lock);
            bool here = b->next <= i;
            j->taken = true;
            while (!here && !j->done)
                pthread_cond_wait(&b->finished, &b->lock);
            pthread_mutex_unlock(&b->lock);
            if (here)
                build_one(b, j);
            *out = (psr_build_result){j->program, j->err, j->seconds};
            j->program = NULL;
            if (--b->untaken == 0) {
                *link = b->older;
                batch_free(b);
            }
            return true;
        }
    }
    return false;
}

void psr_build_jobs_free(psr_context *ctx)
{
    while (ctx->builds) {
        psr_build_batch *b = ctx->builds;
        ctx->builds = b->older;
        batch_free(b);
    }
}
