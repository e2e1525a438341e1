/* The disk cache shared between processes: four processes warming one
 * empty directory at once, and a read-only directory. Children are forked
 * before this process touches OpenCL, so each starts its own runtime. */
/* setgroups() is a BSD extension. */
#define _DEFAULT_SOURCE
#include "common.h"

#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <signal.h>
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

/* root ignores permission bits: become nobody so 0555 really means read-only,
 * and a directory of root's is another user's. */
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

/* As root, makes dir and its files nobody's, whose they must be for
 * nobody to use them. */
static void give_to_nobody(const char *dir)
{
    if (geteuid() != 0)
        return;
    DIR *d = opendir(dir);
    assert_non_null(d);
    char path[1024];
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            assert_int_equal(chown(path, 65534, 65534), 0);
        }
    closedir(d);
    assert_int_equal(chown(dir, 65534, 65534), 0);
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
    give_to_nobody(dir);
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
    give_to_nobody(empty);
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

static const psr_variant plain = {.set = PSR_KERNELS_STREAM};

/* The only entry of dir, its payload cut in half with its length and
 * checksum rewritten to match: psr's checks pass, and PoCL reads past the
 * end of it (a segmentation fault, a heap overflow under ASan). */
static void cut_payload_in_half(const char *dir)
{
    psr_cache_entry e;
    size_t n = 0;
    assert_int_equal(psr_cache_list(dir, &e, 1, &n), PSR_OK);
    assert_int_equal(n, 1);
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, e.file);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static unsigned char data[1 << 24];
    size_t len = fread(data, 1, sizeof data, f);
    fclose(f);
    uint32_t meta_len = data[12] | data[13] << 8 | (uint32_t)data[14] << 16 | (uint32_t)data[15] << 24;
    psr_cache_meta meta;
    memset(&meta, 0, sizeof meta);
    psr_strlcpy(meta.kernels, "stream", sizeof meta.kernels);
    size_t payload = len - 88 - meta_len;
    assert_int_equal(psr_cache_write_file(dir, data + 24, &meta, data + 88 + meta_len, payload / 2), 0);
}

/* What a child's lookup must have done: its counts, and words its log
 * must have and must not have (NULL: any). */
typedef struct lookup_expect {
    unsigned long long disk_hits, builds, rebuilds;
    const char *logged, *not_logged;
} lookup_expect;

/* A child that looks up the stream program in dir with the trial hook
 * set (NULL: none) and checks what it did against want. */
static pid_t lookup_in_child(const char *dir, void (*hook)(const char *), const lookup_expect *want)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid != 0)
        return pid;
    psr_cache_trial_hook = hook;
    captured_log[0] = '\0';
    psr_context *ctx = child_context(dir);
    cl_program p;
    if (psr_program_get(ctx, &plain, &p) != PSR_OK) {
        fprintf(stderr, "child: %s\n", psr_last_error(ctx));
        _exit(CHILD_WARM);
    }
    psr_cache_stats s;
    psr_context_cache_stats(ctx, &s);
    if (s.disk_hits != want->disk_hits || s.builds != want->builds || s.rebuilds != want->rebuilds) {
        fprintf(stderr, "child: disk hits %llu, builds %llu, rebuilds %llu\n",
                (unsigned long long)s.disk_hits, (unsigned long long)s.builds,
                (unsigned long long)s.rebuilds);
        _exit(CHILD_STATS);
    }
    if ((want->logged && !strstr(captured_log, want->logged)) ||
        (want->not_logged && strstr(captured_log, want->not_logged))) {
        fprintf(stderr, "child: log: %s\n", captured_log);
        _exit(CHILD_LOG);
    }
    psr_context_free(ctx);
    _exit(CHILD_OK);
}

static const lookup_expect built = {0, 1, 0, NULL, "discarding"};
static const lookup_expect loaded = {1, 0, 0, NULL, "discarding"};

/* A driver that crashes on the binary, as PoCL does on a cut payload: the
 * hook runs where the driver would, the entry already on trial. */
static void crash_in_driver(const char *name)
{
    (void)name;
    raise(SIGKILL);
}

/* The state psr_cache_entry_check gives the only entry of dir. */
static psr_cache_entry_state only_entry_state(const char *dir)
{
    psr_cache_entry e;
    size_t n = 0;
    assert_int_equal(psr_cache_list(dir, &e, 1, &n), PSR_OK);
    assert_int_equal(n, 1);
    psr_cache_entry_state state;
    char reason[256];
    assert_int_equal(psr_cache_entry_check(dir, e.file, &state, reason, sizeof reason), PSR_OK);
    return state;
}

/* An entry that crashes the driver crashes one process: the next finds
 * it still on trial, discards it without handing it to the driver, and
 * rebuilds. */
static void test_crash_on_trial_discarded(void **state)
{
    (void)state;
    char dir[512];
    make_temp_dir(dir, sizeof dir);
    assert_int_equal(wait_child(lookup_in_child(dir, NULL, &built)), CHILD_OK);
    cut_payload_in_half(dir);
    assert_int_equal(only_entry_state(dir), PSR_CACHE_ENTRY_LOADS); /* as far as psr can tell */

    assert_int_equal(wait_child(lookup_in_child(dir, crash_in_driver, &built)), 128 + SIGKILL);
    assert_int_equal(count_files(dir, ""), 2); /* the entry and its mark */
    assert_int_equal(only_entry_state(dir), PSR_CACHE_ENTRY_ON_TRIAL);

    const lookup_expect discarded = {0, 1, 1, "died while the driver loaded it", NULL};
    assert_int_equal(wait_child(lookup_in_child(dir, NULL, &discarded)), CHILD_OK);
    assert_int_equal(count_files(dir, ""), 1);
    assert_int_equal(only_entry_state(dir), PSR_CACHE_ENTRY_LOADS);
    assert_int_equal(wait_child(lookup_in_child(dir, NULL, &loaded)), CHILD_OK);
    remove_tree(dir);
}

static int trial_pipe[2];

/* Holds the entry on trial until killed, having told the parent. */
static void hold_trial(const char *name)
{
    (void)name;
    if (write(trial_pipe[1], "x", 1) != 1)
        _exit(CHILD_LOG);
    for (;;)
        pause();
}

/* An entry on trial in a live process is left to it: another process
 * builds from source and discards nothing. Once that process is gone, its
 * mark names a file that is no longer there and says nothing. */
static void test_live_trial_left_alone(void **state)
{
    (void)state;
    char dir[512];
    make_temp_dir(dir, sizeof dir);
    assert_int_equal(wait_child(lookup_in_child(dir, NULL, &built)), CHILD_OK);
    assert_int_equal(pipe(trial_pipe), 0);
    pid_t holder = lookup_in_child(dir, hold_trial, &built);
    char byte;
    assert_int_equal(read(trial_pipe[0], &byte, 1), 1);

    assert_int_equal(wait_child(lookup_in_child(dir, NULL, &built)), CHILD_OK);
    assert_int_equal(kill(holder, SIGKILL), 0);
    assert_int_equal(wait_child(holder), 128 + SIGKILL);
    assert_int_equal(only_entry_state(dir), PSR_CACHE_ENTRY_LOADS);
    assert_int_equal(wait_child(lookup_in_child(dir, NULL, &loaded)), CHILD_OK);
    assert_int_equal(count_files(dir, ""), 1); /* the stale mark went */
    close(trial_pipe[0]);
    close(trial_pipe[1]);
    remove_tree(dir);
}

/* Another user's directory is not used, even one only that user can
 * write: here nobody meets root's. */
static void test_other_users_dir_refused(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip(); /* two users take root */
    char dir[512], scratch[512];
    make_temp_dir(dir, sizeof dir);
    make_temp_dir(scratch, sizeof scratch);
    assert_int_equal(chmod(scratch, 0777), 0);
    assert_int_equal(wait_child(lookup_in_child(dir, NULL, &built)), CHILD_OK);
    assert_int_equal(chmod(dir, 0755), 0);
    pid_t pid = fork();
    if (pid == 0) {
        drop_root(scratch);
        captured_log[0] = '\0';
        psr_context *ctx = child_context(dir);
        psr_cache_stats s;
        psr_context_cache_stats(ctx, &s);
        if (!strstr(captured_log, "owned by uid 0") || s.disk_enabled) {
            fprintf(stderr, "child: log: %s\n", captured_log);
            _exit(CHILD_LOG);
        }
        cl_program p;
        _exit(psr_program_get(ctx, &plain, &p) == PSR_OK ? CHILD_OK : CHILD_WARM);
    }
    assert_int_equal(wait_child(pid), CHILD_OK);
    assert_int_equal(count_files(dir, ""), 1);
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
    umask(022); /* nothing the tests make is writable by group or others */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_warm),
        cmocka_unit_test(test_read_only_dir),
        cmocka_unit_test(test_crash_on_trial_discarded),
        cmocka_unit_test(test_live_trial_left_alone),
        cmocka_unit_test(test_other_users_dir_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
