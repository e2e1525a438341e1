/* The disk cache's file format, directory rules, trust rules, trial
 * marks, listing and clearing (no device needed). */
#include "common.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <utime.h>

static const uint8_t key_a[32] = {1, 2, 3};
static const uint8_t key_b[32] = {9, 9, 9};

static psr_cache_meta sample_meta(void)
{
    psr_cache_meta m;
    memset(&m, 0, sizeof m);
    psr_strlcpy(m.kernels, "stream", sizeof m.kernels);
    psr_strlcpy(m.platform, "Test Platform", sizeof m.platform);
    psr_strlcpy(m.device, "Test Device", sizeof m.device);
    psr_strlcpy(m.driver_version, "1.2.3", sizeof m.driver_version);
    psr_strlcpy(m.options, "-DIS_DRAFTING=0", sizeof m.options);
    psr_strlcpy(m.library, "0.1.0", sizeof m.library);
    return m;
}

static void write_sample(const char *dir, const uint8_t key[32])
{
    unsigned char payload[1000];
    for (size_t i = 0; i < sizeof payload; i++)
        payload[i] = (unsigned char)(i * 7);
    psr_cache_meta m = sample_meta();
    assert_int_equal(psr_cache_write_file(dir, key, &m, payload, sizeof payload), 0);
}

static psr_cache_read read_back(const char *path, const uint8_t key[32], const char **why)
{
    unsigned char *payload = NULL;
    size_t len = 0;
    psr_cache_meta meta;
    psr_cache_read r = psr_cache_read_file(path, key, &payload, &len, &meta, why);
    if (r == PSR_CACHE_READ_OK) {
        assert_int_equal(len, 1000);
        for (size_t i = 0; i < len; i++)
            assert_int_equal(payload[i], (unsigned char)(i * 7));
        assert_string_equal(meta.device, "Test Device");
        assert_string_equal(meta.options, "-DIS_DRAFTING=0");
    }
    free(payload);
    return r;
}

/* A fresh directory (dir, 512 bytes) holding key_a's sample entry
 * (path, 700 bytes). */
static void sample_dir(char *dir, char *path)
{
    make_temp_dir(dir, 512);
    write_sample(dir, key_a);
    psr_cache_path(dir, key_a, path, 700);
}

static long file_size(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return (long)st.st_size;
}

static void test_round_trip_is_atomic(void **state)
{
    (void)state;
    char dir[512], path[700];
    make_temp_dir(dir, sizeof dir);
    write_sample(dir, key_a);
    psr_cache_path(dir, key_a, path, sizeof path);
    const char *why = NULL;
    assert_int_equal(read_back(path, key_a, &why), PSR_CACHE_READ_OK);
    /* Only the final file remains: no temporary file is left behind. */
    assert_int_equal(count_files(dir, ".tmp-"), 0);
    assert_int_equal(count_files(dir, ""), 1);
    remove_tree(dir);
}

static void test_damaged_files_are_invalid(void **state)
{
    (void)state;
    char dir[512], path[700];
    make_temp_dir(dir, sizeof dir);
    write_sample(dir, key_a);
    psr_cache_path(dir, key_a, path, sizeof path);
    long size = file_size(path);
    const char *why = NULL;

    /* Truncated at several points: inside the header, the metadata, the payload. */
    long cuts[] = {0, 7, 40, 100, size - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        write_sample(dir, key_a);
        assert_int_equal(truncate(path, cuts[i]), 0);
        assert_int_equal(read_back(path, key_a, &why), PSR_CACHE_READ_INVALID);
        assert_non_null(why);
    }

    /* One flipped payload byte. */
    write_sample(dir, key_a);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, size - 10, SEEK_SET);
    fputc(0x5a, f);
    fclose(f);
    assert_int_equal(read_back(path, key_a, &why), PSR_CACHE_READ_INVALID);
    assert_non_null(strstr(why, "checksum"));

    /* Trailing garbage. */
    write_sample(dir, key_a);
    f = fopen(path, "ab");
    fputs("extra", f);
    fclose(f);
    assert_int_equal(read_back(path, key_a, &why), PSR_CACHE_READ_INVALID);

    /* Foreign: a valid file of another key under this key's name. */
    write_sample(dir, key_b);
    char path_b[700];
    psr_cache_path(dir, key_b, path_b, sizeof path_b);
    assert_int_equal(rename(path_b, path), 0);
    assert_int_equal(read_back(path, key_a, &why), PSR_CACHE_READ_INVALID);
    assert_non_null(strstr(why, "foreign"));

    /* Not ours at all. */
    f = fopen(path, "wb");
    fputs("this is not a psr binary, just some text that is long enough for a header.........",
          f);
    fclose(f);
    assert_int_equal(read_back(path, key_a, &why), PSR_CACHE_READ_INVALID);
    assert_non_null(strstr(why, "magic"));

    assert_int_equal(unlink(path), 0);
    assert_int_equal(read_back(path, key_a, &why), PSR_CACHE_READ_MISSING);
    remove_tree(dir);
}

static void test_write_into_missing_dir_fails_cleanly(void **state)
{
    (void)state;
    char dir[512], missing[600];
    make_temp_dir(dir, sizeof dir);
    snprintf(missing, sizeof missing, "%s/does/not/exist", dir);
    unsigned char byte = 1;
    psr_cache_meta m = sample_meta();
    assert_int_equal(psr_cache_write_file(missing, key_a, &m, &byte, 1), ENOENT);
    remove_tree(dir);
}

/* Creates an empty file at path. */
static void touch_file(const char *path)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fclose(f), 0);
}

static void test_mkdir_p(void **state)
{
    (void)state;
    char dir[512], nested[600], blocked[700];
    make_temp_dir(dir, sizeof dir);
    snprintf(nested, sizeof nested, "%s/a/b/c", dir);
    assert_int_equal(psr_mkdir_p(nested), 0);
    assert_int_equal(psr_mkdir_p(nested), 0); /* existing is fine */
    char file[600];
    snprintf(file, sizeof file, "%s/file", dir);
    touch_file(file);
    snprintf(blocked, sizeof blocked, "%s/sub", file);
    assert_int_equal(psr_mkdir_p(blocked), ENOTDIR);
    remove_tree(dir);
}

static void test_directory_resolution(void **state)
{
    (void)state;
    char buf[PSR_PATH_MAX];
    setenv("PSR_CACHE_DIR", "/a/psr-dir", 1);
    setenv("XDG_CACHE_HOME", "/b/xdg", 1);
    setenv("HOME", "/c/home", 1);
    assert_int_equal(psr_cache_resolve_dir("/explicit", buf, sizeof buf), PSR_OK);
    assert_string_equal(buf, "/explicit");
    assert_int_equal(psr_cache_resolve_dir(NULL, buf, sizeof buf), PSR_OK);
    assert_string_equal(buf, "/a/psr-dir");
    unsetenv("PSR_CACHE_DIR");
    assert_int_equal(psr_cache_resolve_dir(NULL, buf, sizeof buf), PSR_OK);
    assert_string_equal(buf, "/b/xdg/psr");
    unsetenv("XDG_CACHE_HOME");
    assert_int_equal(psr_cache_resolve_dir(NULL, buf, sizeof buf), PSR_OK);
    assert_string_equal(buf, "/c/home/.cache/psr");
    assert_int_equal(psr_cache_directory(buf, sizeof buf), PSR_OK);
    assert_string_equal(buf, "/c/home/.cache/psr");
    assert_int_equal(psr_cache_directory(buf, 5), PSR_ERR_BUFFER_TOO_SMALL);
    unsetenv("HOME");
    assert_int_equal(psr_cache_resolve_dir(NULL, buf, sizeof buf), PSR_ERR_CACHE_IO);
    assert_non_null(strstr(psr_last_error(NULL), "PSR_CACHE_DIR"));
}

static void test_list_and_clear(void **state)
{
    (void)state;
    char dir[512], other[600], damaged[700];
    make_temp_dir(dir, sizeof dir);
    write_sample(dir, key_a);
    write_sample(dir, key_b);
    psr_cache_path(dir, key_b, damaged, sizeof damaged);
    assert_int_equal(truncate(damaged, 50), 0);
    snprintf(other, sizeof other, "%s/notes.txt", dir);
    FILE *f = fopen(other, "w");
    fputs("not psr's\n", f);
    fclose(f);
    /* A temporary file of a writer that died an hour ago, and one being written now. */
    char stale[600], fresh[600];
    snprintf(stale, sizeof stale, "%s/.tmp-1-2-3", dir);
    touch_file(stale);
    struct utimbuf hour_ago = {time(NULL) - 3600, time(NULL) - 3600};
    assert_int_equal(utime(stale, &hour_ago), 0);
    snprintf(fresh, sizeof fresh, "%s/.tmp-4-5-6", dir);
    touch_file(fresh);

    size_t n = 0;
    assert_int_equal(psr_cache_list(dir, NULL, 0, &n), PSR_OK);
    assert_int_equal(n, 2);
    psr_cache_entry e[2];
    size_t valid = 0;
    assert_int_equal(psr_cache_list(dir, e, 2, &n), PSR_OK);
    for (size_t i = 0; i < n; i++) {
        if (e[i].valid) {
            valid++;
            assert_string_equal(e[i].device, "Test Device");
            assert_string_equal(e[i].driver_version, "1.2.3");
            assert_string_equal(e[i].kernels, "stream");
        }
        assert_true(e[i].bytes > 0);
    }
    assert_int_equal(valid, 1);
    /* Capacity 1 still reports the total. */
    assert_int_equal(psr_cache_list(dir, e, 1, &n), PSR_OK);
    assert_int_equal(n, 2);

    size_t removed = 0;
    assert_int_equal(psr_cache_clear(dir, &removed), PSR_OK);
    assert_int_equal(removed, 3); /* two binaries and the stale temporary file */
    assert_int_equal(access(other, F_OK), 0);
    assert_int_equal(access(fresh, F_OK), 0);
    assert_int_equal(psr_cache_list(dir, NULL, 0, &n), PSR_OK);
    assert_int_equal(n, 0);

    /* A directory that does not exist lists as empty and clears as a no-op. */
    char missing[600];
    snprintf(missing, sizeof missing, "%s/missing", dir);
    assert_int_equal(psr_cache_list(missing, NULL, 0, &n), PSR_OK);
    assert_int_equal(n, 0);
    assert_int_equal(psr_cache_clear(missing, &removed), PSR_OK);
    assert_int_equal(removed, 0);
    remove_tree(dir);
}

/* Only regular files are psr's: a FIFO or a symbolic link named like a
 * binary is skipped by list and clear, and ignored (not waited on, not
 * followed) by reads. */
static void test_special_files_refused(void **state)
{
    (void)state;
    char dir[512], fifo[700], link_path[700], path[700];
    make_temp_dir(dir, sizeof dir);
    write_sample(dir, key_a);
    psr_cache_path(dir, key_a, path, sizeof path);
    snprintf(fifo, sizeof fifo, "%s/fifo.psrbin", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    snprintf(link_path, sizeof link_path, "%s/link.psrbin", dir);
    assert_int_equal(symlink(path, link_path), 0);
    size_t n = 0;
    assert_int_equal(psr_cache_list(dir, NULL, 0, &n), PSR_OK);
    assert_int_equal(n, 1);
    const char *why = NULL;
    unsigned char *payload = NULL;
    size_t len = 0;
    assert_int_equal(psr_cache_read_file(fifo, key_a, &payload, &len, NULL, &why), PSR_CACHE_READ_UNTRUSTED);
    assert_int_equal(psr_cache_read_file(link_path, key_a, &payload, &len, NULL, &why),
                     PSR_CACHE_READ_UNTRUSTED);
    assert_non_null(strstr(why, "symbolic link"));
    size_t removed = 0;
    assert_int_equal(psr_cache_clear(dir, &removed), PSR_OK);
    assert_int_equal(removed, 1);
    unlink(fifo);
    unlink(link_path);
    remove_tree(dir);
}

/* nobody: the other user of the tests that run as root. */
#define OTHER_UID 65534

static int wait_child(pid_t pid)
{
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Loads use a directory only when it is this user's alone. */
static void test_directory_trust(void **state)
{
    (void)state;
    char dir[512], why[700];
    make_temp_dir(dir, sizeof dir);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(chmod(dir, i ? 0755 : 0700), 0);
        int fd = psr_cache_dir_open(dir, why, sizeof why);
        assert_true(fd >= 0);
        close(fd);
    }
    assert_int_equal(chmod(dir, 0775), 0);
    assert_int_equal(psr_cache_dir_open(dir, why, sizeof why), -1);
    assert_non_null(strstr(why, "writable by group or others"));
    assert_int_equal(chmod(dir, 0755), 0);
    if (geteuid() == 0) {
        assert_int_equal(chown(dir, OTHER_UID, OTHER_UID), 0);
        assert_int_equal(psr_cache_dir_open(dir, why, sizeof why), -1);
        assert_non_null(strstr(why, "owned by uid 65534"));
        assert_int_equal(chown(dir, 0, 0), 0);
    }
    remove_tree(dir);
}

/* An entry is read only when it is a regular file of this user that
 * group and others cannot write; what the check sees is the file opened. */
static void test_untrusted_entries(void **state)
{
    (void)state;
    char dir[512], path[700];
    sample_dir(dir, path);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600); /* written private */
    const char *why = NULL;
    assert_int_equal(chmod(path, 0664), 0);
    assert_int_equal(read_back(path, key_a, &why), PSR_CACHE_READ_UNTRUSTED);
    assert_non_null(strstr(why, "writable by group or others"));
    assert_int_equal(chmod(path, 0644), 0);
    assert_int_equal(read_back(path, key_a, &why), PSR_CACHE_READ_OK);
    if (geteuid() == 0) {
        assert_int_equal(chown(path, OTHER_UID, OTHER_UID), 0);
        assert_int_equal(read_back(path, key_a, &why), PSR_CACHE_READ_UNTRUSTED);
        assert_non_null(strstr(why, "another user"));
        size_t removed = 9;
        assert_int_equal(psr_cache_clear(dir, &removed), PSR_OK);
        assert_int_equal(removed, 0); /* another user's file is not psr_cache_clear's to remove */
        assert_int_equal(stat(path, &st), 0);
    }
    remove_tree(dir);
}

/* Marks the entry of key_a in dir on trial; the trial's result, *mark_fd
 * and *pid as psr_cache_trial_begin leaves them. */
static psr_trial mark_a(int dir_fd, int *mark_fd, long *pid)
{
    char name[80];
    psr_cache_name(key_a, name, sizeof name);
    struct stat st;
    assert_int_equal(fstatat(dir_fd, name, &st, 0), 0);
    int err = 0;
    return psr_cache_trial_begin(dir_fd, name, &st, mark_fd, pid, &err);
}

/* A child that marks the entry of key_a and exits with the result, the
 * mark left as its process leaves it (hold: until killed). */
static pid_t mark_in_child(int dir_fd, bool hold, int ready)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd;
        long owner;
        psr_trial t = mark_a(dir_fd, &fd, &owner);
        if (ready >= 0 && write(ready, "x", 1) != 1)
            _exit(100);
        while (hold)
            pause();
        _exit((int)t);
    }
    return pid;
}

/* The mark: made, seen by others as live while its process holds it,
 * gone when the trial ends; left by a process that died, it condemns
 * its entry, unless the entry was replaced since. */
static void test_trial_marks(void **state)
{
    (void)state;
    char dir[512], why[700], name[80];
    make_temp_dir(dir, sizeof dir);
    write_sample(dir, key_a);
    psr_cache_name(key_a, name, sizeof name);
    int dir_fd = psr_cache_dir_open(dir, why, sizeof why);
    assert_true(dir_fd >= 0);
    int mark = -1;
    long pid = 0;
    assert_int_equal(mark_a(dir_fd, &mark, &pid), PSR_TRIAL_MARKED);
    assert_int_equal(count_files(dir, ""), 2);
    int again = -1;
    assert_int_equal(mark_a(dir_fd, &again, &pid), PSR_TRIAL_BUSY); /* another context */
    assert_int_equal(wait_child(mark_in_child(dir_fd, false, -1)), PSR_TRIAL_BUSY);
    psr_cache_trial_end(dir_fd, name, mark);
    assert_int_equal(count_files(dir, ""), 1);

    pid_t died = mark_in_child(dir_fd, false, -1);
    assert_int_equal(wait_child(died), PSR_TRIAL_MARKED);
    assert_int_equal(mark_a(dir_fd, &mark, &pid), PSR_TRIAL_DIED);
    assert_int_equal(pid, died);
    psr_cache_trial_end(dir_fd, name, mark);
    assert_int_equal(count_files(dir, ""), 1);

    /* A mark that names a file no longer there says nothing. */
    assert_int_equal(wait_child(mark_in_child(dir_fd, false, -1)), PSR_TRIAL_MARKED);
    write_sample(dir, key_a);
    assert_int_equal(mark_a(dir_fd, &mark, &pid), PSR_TRIAL_MARKED);
    psr_cache_trial_end(dir_fd, name, mark);
    assert_int_equal(count_files(dir, ""), 1);

    /* Held by a live process: busy until it dies, then condemned. */
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t holder = mark_in_child(dir_fd, true, ready[1]);
    char byte;
    assert_int_equal(read(ready[0], &byte, 1), 1);
    assert_int_equal(mark_a(dir_fd, &mark, &pid), PSR_TRIAL_BUSY);
    kill(holder, SIGKILL);
    wait_child(holder);
    close(ready[0]);
    close(ready[1]);
    assert_int_equal(mark_a(dir_fd, &mark, &pid), PSR_TRIAL_DIED);
    psr_cache_trial_end(dir_fd, name, mark);
    close(dir_fd);
    remove_tree(dir);
}

/* Nobody's own directory that nobody cannot write: no mark can be made,
 * so entries load unmarked; one whose mark condemns it does not load. */
static void test_trial_read_only(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip(); /* root writes anywhere: the test becomes nobody */
    char dir[512], path[700];
    sample_dir(dir, path);
    assert_int_equal(chown(path, OTHER_UID, OTHER_UID), 0);
    assert_int_equal(chown(dir, OTHER_UID, OTHER_UID), 0);
    assert_int_equal(chmod(dir, 0555), 0);
    for (int condemned = 0; condemned < 2; condemned++) {
        pid_t pid = fork();
        if (pid == 0) {
            if (setgid(OTHER_UID) != 0 || setuid(OTHER_UID) != 0)
                _exit(100);
            char why[700];
            int dir_fd = psr_cache_dir_open(dir, why, sizeof why), mark;
            long owner;
            _exit(dir_fd < 0 ? 101 : (int)mark_a(dir_fd, &mark, &owner));
        }
        assert_int_equal(wait_child(pid), condemned ? PSR_TRIAL_DIED : PSR_TRIAL_READ_ONLY);
        if (!condemned) { /* a mark left from when the directory could be written */
            assert_int_equal(chmod(dir, 0755), 0);
            int dir_fd = open(dir, O_RDONLY | O_DIRECTORY), mark;
            long owner;
            assert_int_equal(mark_a(dir_fd, &mark, &owner), PSR_TRIAL_MARKED);
            close(mark); /* as a process that died */
            close(dir_fd);
            char mark_path[700];
            snprintf(mark_path, sizeof mark_path, "%.*s.trial", (int)(strlen(path) - 7), path);
            assert_int_equal(chown(mark_path, OTHER_UID, OTHER_UID), 0);
            assert_int_equal(chmod(dir, 0555), 0);
        }
    }
    assert_int_equal(chmod(dir, 0700), 0);
    remove_tree(dir);
}

/* psr_cache_entry_check: what a lookup would make of each entry, and the
 * arguments it refuses. */
static void test_entry_check(void **state)
{
    (void)state;
    char dir[512], path[700], name[80], reason[300];
    sample_dir(dir, path);
    psr_cache_name(key_a, name, sizeof name);
    psr_cache_entry_state st;
    assert_int_equal(psr_cache_entry_check(dir, name, &st, reason, sizeof reason), PSR_OK);
    assert_int_equal(st, PSR_CACHE_ENTRY_LOADS);
    assert_string_equal(reason, "");
    assert_int_equal(chmod(path, 0666), 0);
    assert_int_equal(psr_cache_entry_check(dir, name, &st, reason, sizeof reason), PSR_OK);
    assert_int_equal(st, PSR_CACHE_ENTRY_IGNORED);
    assert_non_null(strstr(reason, "writable by group or others"));
    if (geteuid() == 0) {
        assert_int_equal(chmod(path, 0600), 0);
        assert_int_equal(chown(path, OTHER_UID, OTHER_UID), 0);
        assert_int_equal(psr_cache_entry_check(dir, name, &st, reason, sizeof reason), PSR_OK);
        assert_int_equal(st, PSR_CACHE_ENTRY_IGNORED);
        assert_non_null(strstr(reason, "owned by uid 65534"));
    }
    write_sample(dir, key_a);
    assert_int_equal(truncate(path, 100), 0);
    assert_int_equal(psr_cache_entry_check(dir, name, &st, NULL, 0), PSR_OK);
    assert_int_equal(st, PSR_CACHE_ENTRY_INVALID);
    write_sample(dir, key_a);
    int dir_fd = open(dir, O_RDONLY | O_DIRECTORY), mark;
    long pid;
    assert_int_equal(wait_child(mark_in_child(dir_fd, false, -1)), PSR_TRIAL_MARKED);
    assert_int_equal(psr_cache_entry_check(dir, name, &st, reason, sizeof reason), PSR_OK);
    assert_int_equal(st, PSR_CACHE_ENTRY_ON_TRIAL);
    assert_non_null(strstr(reason, "died while the driver loaded it"));
    assert_int_equal(mark_a(dir_fd, &mark, &pid), PSR_TRIAL_DIED); /* looking left it there */
    psr_cache_trial_end(dir_fd, name, mark);
    close(dir_fd);
    assert_int_equal(chmod(dir, 0770), 0);
    assert_int_equal(psr_cache_entry_check(dir, name, &st, reason, sizeof reason), PSR_OK);
    assert_int_equal(st, PSR_CACHE_ENTRY_DIRECTORY);
    assert_int_equal(chmod(dir, 0700), 0);
    unlink(path);
    assert_int_equal(psr_cache_entry_check(dir, name, &st, reason, sizeof reason), PSR_OK);
    assert_int_equal(st, PSR_CACHE_ENTRY_MISSING);

    assert_int_equal(psr_cache_entry_check(dir, NULL, &st, NULL, 0), PSR_ERR_NULL_ARGUMENT);
    assert_non_null(strstr(psr_last_error(NULL), "file is NULL"));
    assert_int_equal(psr_cache_entry_check(dir, name, NULL, NULL, 0), PSR_ERR_NULL_ARGUMENT);
    assert_non_null(strstr(psr_last_error(NULL), "state is NULL"));
    assert_int_equal(psr_cache_entry_check(dir, name, &st, NULL, 5), PSR_ERR_NULL_ARGUMENT);
    assert_non_null(strstr(psr_last_error(NULL), "reason is NULL"));
    assert_int_equal(psr_cache_entry_check(dir, "../x.psrbin", &st, NULL, 0), PSR_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(psr_last_error(NULL), "file \"../x.psrbin\""));
    remove_tree(dir);
}

/* A file judged and then replaced by another process's fresh one: only
 * the judged file is removed. */
static void test_unlink_only_the_file_judged(void **state)
{
    (void)state;
    char dir[512], a[700], b[700];
    make_temp_dir(dir, sizeof dir);
    snprintf(a, sizeof a, "%s/entry.psrbin", dir);
    snprintf(b, sizeof b, "%s/fresh.tmp", dir);
    touch_file(a);
    struct stat judged, fresh;
    assert_int_equal(stat(a, &judged), 0);
    touch_file(b);
    assert_int_equal(rename(b, a), 0); /* the fresh file takes the name */
    int dir_fd = open(dir, O_RDONLY | O_DIRECTORY);
    assert_true(dir_fd >= 0);
    assert_int_equal(psr_cache_unlink_same(dir_fd, "entry.psrbin", &judged), 0);
    assert_int_equal(stat(a, &fresh), 0); /* still there */
    assert_int_equal(psr_cache_unlink_same(dir_fd, "entry.psrbin", &fresh), 0);
    assert_int_not_equal(stat(a, &fresh), 0);
    assert_int_equal(psr_cache_unlink_same(dir_fd, "entry.psrbin", &fresh), ENOENT);
    close(dir_fd);
    remove_tree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_is_atomic),
        cmocka_unit_test(test_damaged_files_are_invalid),
        cmocka_unit_test(test_write_into_missing_dir_fails_cleanly),
        cmocka_unit_test(test_mkdir_p),
        cmocka_unit_test(test_directory_resolution),
        cmocka_unit_test(test_list_and_clear),
        cmocka_unit_test(test_special_files_refused),
        cmocka_unit_test(test_directory_trust),
        cmocka_unit_test(test_untrusted_entries),
        cmocka_unit_test(test_trial_marks),
        cmocka_unit_test(test_trial_read_only),
        cmocka_unit_test(test_entry_check),
        cmocka_unit_test(test_unlink_only_the_file_judged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
