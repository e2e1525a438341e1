/* PoCL's worker threads, one per CPU, pinned for the tool's process.
 *
 * Unpinned, a call that splits one row over the CPUs often ran on one of
 * them, as if the thread woken for the second half waited on the CPU of
 * the thread running the first, which then took both halves (1 x 128,256
 * fp32 on two cores: 480-630 us against 250-330 pinned; from 8 rows up
 * the same either way). PoCL pins its thread i to CPU i when
 * POCL_AFFINITY is 1, and aborts when such a CPU does not exist. */
#if defined(__linux__)
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <unistd.h>
#endif

#include "cli.h"

#include <stdlib.h>

#if defined(__linux__)
/* The threads PoCL starts: POCL_MAX_PTHREAD_COUNT, else one per CPU;
 * 0 when the variable is not a count. */
static long pocl_thread_count(long cpus)
{
    const char *v = getenv("POCL_MAX_PTHREAD_COUNT");
    if (!v || !*v)
        return cpus;
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    return errno || *end || n < 1 ? 0 : n;
}

/* True when this process may run on every online CPU, numbered 0 to
 * cpus - 1, and PoCL starts no more threads than there are CPUs: pinning
 * then neither fails nor moves a thread out of a set the user chose
 * (taskset, a container's cpuset). */
static bool pinning_is_safe(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t allowed;
    if (cpus < 1 || cpus > CPU_SETSIZE || sched_getaffinity(0, sizeof allowed, &allowed) != 0)
        return false;
    if (CPU_COUNT(&allowed) != cpus)
        return false;
    for (long i = 0; i < cpus; i++)
        if (!CPU_ISSET((int)i, &allowed))
            return false;
    long threads = pocl_thread_count(cpus);
    return threads >= 1 && threads <= cpus;
}
#endif

void cli_pin_pocl_threads(void)
{
#if defined(__linux__)
    const char *set = getenv("POCL_AFFINITY");
    if ((set && *set) || !pinning_is_safe())
        return; /* the user's choice, or one pinning would override */
    if (setenv("POCL_AFFINITY", "1", 0) == 0 && cli_log_level() <= PSR_LOG_INFO)
        fprintf(stderr, "psr: info: POCL_AFFINITY=1: PoCL's threads run one per CPU "
                        "(POCL_AFFINITY=0 leaves them unpinned)\n");
#endif
}

const char *cli_pocl_threads(const psr_device_info *info)
{
    if (info->type != PSR_DEVICE_CPU || !cli_contains_nocase(info->platform_name, "portable computing language"))
        return NULL;
    const char *v = getenv("POCL_AFFINITY");
    return v && v[0] == '1' ? "pinned" : "unpinned";
}
