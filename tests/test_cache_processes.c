/* The disk cache shared between processes: four processes warming one
 * empty directory at once, and a read-only directory. Children are forked
 * before this process touches OpenCL, so each starts its own runtime. */
/* setgroups() is a BSD extension. */
#define _DEFAULT_SOURCE
#include "common.h"

#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define WARMERS 4

/* Exit codes of a child: 0 passed; others name the failed check. */
enum { CHILD_OK = 0, CHILD_CREATE = 10, CHILD_WARM, CHILD_STATS, CHILD_LOG, CHILD_PRIVS };

static int wait_child(pid_t pid)
{
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static psr_context *child_context(const char *dir)
{
    psr_context_options o;
    psr_context_options_init(&o, sizeof o);
    o.cache_dir = dir;
    o.disk_cache = PSR_DISK_CACHE_ON;
    o.log = capture_log;
    psr_context *ctx = NULL;
    if (psr_context_create(&o, &ctx) != PSR_OK) {
        fprintf(stderr, "child: %s\n", psr_last_error(NULL));
        _exit(CHILD_CREATE);
    }
    return ctx;
}

static void test_concurrent_warm(void **state)
{
    (void)state;
    char dir[512];
    make_temp_dir(dir, sizeof dir);
    pid_t pids[WARMERS];
    for (int i = 0; i < WARMERS; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            psr_context *ctx = child_context(dir);
            if (psr_warm_sets(ctx, STREAM_ONLY, NULL) != PSR_OK) {
                fprintf(stderr, "child warm: %s\n", psr_last_error(ctx));
                _exit(CHILD_WARM);
            }
            psr_context_free(ctx);
            _exit(CHILD_OK);
        }
    }
    for (int i = 0; i < WARMERS; i++)
        assert_int_equal(wait_child(pids[i]), CHILD_OK);

    /* Only whole, valid entries and no leftovers of the race. */
    assert_int_equal(count_files(dir, ".tmp-"), 0);
    size_t n = 0;
    psr_cache_entry entries[16];
    assert_int_equal(psr_cache_list(dir, entries, 16, &n), PSR_OK);
    assert_true(n >= 2 && n <= 16);
    for (size_t i = 0; i < n; i++)
        assert_true(entries[i].valid);
    assert_int_equal(count_files(dir, ""), n);

    /* A fifth process finds every variant on disk. */
    pid_t pid = fork();
    if (pid == 0) {
        psr_context *ctx = child_context(dir);
        size_t variants = 0;
        if (psr_warm_sets(ctx, STREAM_ONLY, &variants) != PSR_OK)
            _exit(CHILD_WARM);
        psr_cache_stats s;
        psr_context_cache_stats(ctx, &s);
        if (s.disk_hits != variants || s.builds != 0 || variants != n) {
            fprintf(stderr, "child: disk hits %llu, builds %llu, variants %zu, files %zu\n",
                    (unsigned long long)s.disk_hits, (unsigned long long)s.builds, variants, n);
            _exit(CHILD_STATS);
        }
        psr_context_free(ctx);
        _exit(CHILD_OK);
    }
    assert_int_equal(wait_child(pid), CHILD_OK);
    remove_tree(dir);
}

/* root ignores permission bits: become nobody so 0555 really means read-only. */
static void drop_root(const char *scratch)
{
    if (geteuid() != 0)
        return;
    /* PoCL keeps its own cache under HOME or POCL_CACHE_DIR: make it writable for nobody. */
    setenv("POCL_CACHE_DIR", scratch, 1);
    setenv("HOME", scratch, 1);
    if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0)
        _exit(CHILD_PRIVS);
}

static void test_read_only_dir(void **state)
{
    (void)state;
    char dir[512], scratch[512];
    make_temp_dir(dir, sizeof dir);
    make_temp_dir(scratch, sizeof scratch);
    assert_int_equal(chmod(scratch, 0777), 0);

    /* First fill the directory, then make it read-only. */
    pid_t pid = fork();
    if (pid == 0) {
        psr_context *ctx = child_context(dir);
        _exit(psr_warm_sets(ctx, STREAM_ONLY, NULL) == PSR_OK ? CHILD_OK : CHILD_WARM);
    }
    assert_int_equal(wait_child(pid), CHILD_OK);
    size_t files = count_files(dir, "");
    assert_true(files >= 2);
    assert_int_equal(chmod(dir, 0555), 0);

    pid = fork();
    if (pid == 0) {
        drop_root(scratch);
        captured_log[0] = '\0';
        psr_context *ctx = child_context(dir);
        if (!strstr(captured_log, "read-only")) {
            fprintf(stderr, "child: log did not say read-only: %s\n", captured_log);
            _exit(CHILD_LOG);
        }
        size_t variants = 0;
        if (psr_warm_sets(ctx, STREAM_ONLY, &variants) != PSR_OK) {
            fprintf(stderr, "child warm: %s\n", psr_last_error(ctx));
            _exit(CHILD_WARM);
        }
        psr_cache_stats s;
        psr_context_cache_stats(ctx, &s);
        /* Reads still work; nothing is written. */
        if (s.disk_hits != variants || s.disk_writes != 0 || !s.disk_enabled) {
            fprintf(stderr, "child: disk hits %llu, writes %llu, variants %zu\n",
                    (unsigned long long)s.disk_hits, (unsigned long long)s.disk_writes, variants);
            _exit(CHILD_STATS);
        }
        psr_context_free(ctx);
        _exit(CHILD_OK);
    }
    assert_int_equal(wait_child(pid), CHILD_OK);

    /* An empty read-only directory: everything builds, nothing is written. */
    char empty[600];
    snprintf(empty, sizeof empty, "%s/empty", scratch);
    assert_int_equal(mkdir(empty, 0555), 0);
    assert_int_equal(chmod(empty, 0555), 0);
    pid = fork();
    if (pid == 0) {
        drop_root(scratch);
        psr_context *ctx = child_context(empty);
        size_t variants = 0;
        if (psr_warm_sets(ctx, STREAM_ONLY, &variants) != PSR_OK)
            _exit(CHILD_WARM);
        psr_cache_stats s;
        psr_context_cache_stats(ctx, &s);
        if (s.builds != variants || s.disk_writes != 0) {
            fprintf(stderr, "child: builds %llu, writes %llu, variants %zu\n",
                    (unsigned long long)s.builds, (unsigned long long)s.disk_writes, variants);
            _exit(CHILD_STATS);
        }
        psr_context_free(ctx);
        _exit(CHILD_OK);
    }
    assert_int_equal(wait_child(pid), CHILD_OK);
    assert_int_equal(count_files(empty, ""), 0);
    assert_int_equal(count_files(dir, ""), files);

    chmod(dir, 0700);
    chmod(empty, 0700);
    remove_tree(dir);
    remove_tree(scratch);
}

int main(void)
{
    /* Probe for a device in a child, so this process stays OpenCL-free. */
    pid_t pid = fork();
    if (pid == 0)
        _exit(have_device() ? 0 : 1);
    if (wait_child(pid) != 0) {
        fprintf(stderr, "no OpenCL device: skipping\n");
        return TEST_SKIP;
    }
    umask(022); /* the read-only test shares files written by root with nobody */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_warm),
        cmocka_unit_test(test_read_only_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
