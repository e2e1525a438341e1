/* The two cache tiers on a real device: memory hits, disk hits across
 * contexts, damaged files rebuilt, and the ways the disk tier turns off. */
#include "common.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const psr_variant plain = {.set = PSR_KERNELS_STREAM};
static const psr_variant drafting = {.set = PSR_KERNELS_STREAM, .drafting = true};

static psr_cache_stats stats_of(psr_context *ctx)
{
    psr_cache_stats s;
    assert_int_equal(psr_context_cache_stats(ctx, &s), PSR_OK);
    return s;
}

/* Path of the only .psrbin in dir. */
static void only_binary(const char *dir, char *path, size_t len)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int found = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, ".psrbin")) {
            snprintf(path, len, "%s/%s", dir, e->d_name);
            found++;
        }
    closedir(d);
    assert_int_equal(found, 1);
}

static void test_second_context_hits_disk(void **state)
{
    (void)state;
    char dir[512];
    make_temp_dir(dir, sizeof dir);
    psr_context *a = open_context(dir);
    size_t variants = 0;
    assert_int_equal(psr_warm_sets(a, STREAM_ONLY, &variants), PSR_OK);
    psr_cache_stats s = stats_of(a);
    assert_int_equal(s.builds, variants);
    assert_int_equal(s.disk_writes, variants);
    assert_int_equal(s.disk_hits, 0);
    assert_true(s.disk_enabled);
    assert_string_equal(s.cache_dir, dir);
    /* The same context asks again: memory tier. */
    cl_program p1, p2;
    assert_int_equal(psr_program_get(a, &plain, &p1), PSR_OK);
    assert_int_equal(stats_of(a).memory_hits, 1);
    psr_context_free(a);

    psr_context *b = open_context(dir);
    assert_int_equal(psr_warm_sets(b, STREAM_ONLY, &variants), PSR_OK);
    s = stats_of(b);
    assert_int_equal(s.disk_hits, variants);
    assert_int_equal(s.builds, 0);
    assert_int_equal(s.disk_writes, 0);
    assert_int_equal(psr_program_get(b, &plain, &p2), PSR_OK);
    check_philox_vectors(b, p2); /* a binary from disk computes the right answers */
    psr_context_free(b);
    remove_tree(dir);
}

typedef enum damage { TRUNCATE, CORRUPT, FOREIGN, REFUSED } damage;

static void damage_file(const char *dir, const char *path, int how)
{
    if (how == TRUNCATE) {
        assert_int_equal(truncate(path, 150), 0);
    } else if (how == CORRUPT) {
        FILE *f = fopen(path, "r+b");
        assert_non_null(f);
        fseek(f, -100, SEEK_END);
        int c = fgetc(f);
        fseek(f, -100, SEEK_END);
        fputc(c ^ 0xff, f);
        fclose(f);
    } else if (how == FOREIGN) {
        /* Another variant's valid binary under this variant's name. */
        char other_dir[512], other[700];
        make_temp_dir(other_dir, sizeof other_dir);
        psr_context *ctx = open_context(other_dir);
        cl_program p;
        assert_int_equal(psr_program_get(ctx, &drafting, &p), PSR_OK);
        psr_context_free(ctx);
        only_binary(other_dir, other, sizeof other);
        assert_int_equal(rename(other, path), 0);
        remove_tree(other_dir);
    } else {
        /* Intact header and checksum, but a payload no driver accepts. */
        FILE *f = fopen(path, "rb");
        unsigned char header[88];
        assert_int_equal(fread(header, 1, sizeof header, f), sizeof header);
        fclose(f);
        psr_cache_meta meta;
        memset(&meta, 0, sizeof meta);
        psr_strlcpy(meta.kernels, "stream", sizeof meta.kernels);
        const unsigned char junk[] = "definitely not a program binary";
        assert_int_equal(psr_cache_write_file(dir, header + 24, &meta, junk, sizeof junk), 0);
    }
}

/* A fresh directory (dir, 512 bytes) holding the stream program's entry
 * (path, 700 bytes). */
static void cache_plain(char *dir, char *path)
{
    make_temp_dir(dir, 512);
    psr_context *a = open_context(dir);
    cl_program p;
    assert_int_equal(psr_program_get(a, &plain, &p), PSR_OK);
    psr_context_free(a);
    only_binary(dir, path, 700);
}

/* A fresh directory (dir, 512 bytes) whose stream program's entry (path,
 * 700 bytes) spoil(dir, path, how) changed, and a new context on it that
 * has looked up that program (*p), its log captured from the start. */
static psr_context *look_up_spoiled(char *dir, char *path,
                                    void (*spoil)(const char *, const char *, int), int how,
                                    cl_program *p)
{
    cache_plain(dir, path);
    spoil(dir, path, how);
    captured_log[0] = '\0';
    psr_context *ctx = open_context(dir);
    assert_int_equal(psr_program_get(ctx, &plain, p), PSR_OK);
    return ctx;
}

/* The context's disk hits, builds and rebuilds. */
static void assert_counts(psr_context *ctx, uint64_t disk_hits, uint64_t builds, uint64_t rebuilds)
{
    psr_cache_stats s = stats_of(ctx);
    assert_int_equal(s.disk_hits, disk_hits);
    assert_int_equal(s.builds, builds);
    assert_int_equal(s.rebuilds, rebuilds);
}

static void check_rebuild_after(damage how)
{
    char dir[512], path[700];
    cl_program p;
    psr_context *b = look_up_spoiled(dir, path, damage_file, how, &p);
    assert_counts(b, 0, 1, 1);
    assert_int_equal(stats_of(b).disk_writes, 1);
    assert_non_null(strstr(captured_log, "discarding"));
    check_philox_vectors(b, p);
    psr_context_free(b);

    /* The rewritten file is good again. */
    psr_context *c = open_context(dir);
    assert_int_equal(psr_program_get(c, &plain, &p), PSR_OK);
    assert_int_equal(stats_of(c).disk_hits, 1);
    psr_context_free(c);
    remove_tree(dir);
}

static void test_truncated_rebuilt(void **state) { (void)state; check_rebuild_after(TRUNCATE); }
static void test_corrupt_rebuilt(void **state) { (void)state; check_rebuild_after(CORRUPT); }
static void test_foreign_rebuilt(void **state) { (void)state; check_rebuild_after(FOREIGN); }
static void test_refused_rebuilt(void **state) { (void)state; check_rebuild_after(REFUSED); }

static void test_psr_cache_0(void **state)
{
    (void)state;
    char dir[512];
    make_temp_dir(dir, sizeof dir);
    setenv("PSR_CACHE", "0", 1);
    psr_context_options o;
    psr_context_options_init(&o, sizeof o);
    o.cache_dir = dir; /* disk_cache stays AUTO: the environment decides */
    psr_context *ctx;
    assert_int_equal(psr_context_create(&o, &ctx), PSR_OK);
    cl_program p;
    assert_int_equal(psr_program_get(ctx, &plain, &p), PSR_OK);
    psr_cache_stats s = stats_of(ctx);
    assert_false(s.disk_enabled);
    assert_int_equal(s.builds, 1);
    assert_int_equal(s.disk_writes, 0);
    assert_int_equal(count_files(dir, ""), 0);
    psr_context_free(ctx);

    /* An explicit PSR_DISK_CACHE_ON overrides the environment. */
    o.disk_cache = PSR_DISK_CACHE_ON;
    assert_int_equal(psr_context_create(&o, &ctx), PSR_OK);
    assert_int_equal(psr_program_get(ctx, &plain, &p), PSR_OK);
    assert_int_equal(stats_of(ctx).disk_writes, 1);
    psr_context_free(ctx);
    unsetenv("PSR_CACHE");
    remove_tree(dir);
}

/* PSR_DISK_CACHE_AUTO follows the device: on, except where the driver
 * caches its own builds (PoCL), which PSR_CACHE=1 overrides; the log says
 * why the tier is off. */
static void test_auto_follows_driver(void **state)
{
    (void)state;
    char dir[512];
    make_temp_dir(dir, sizeof dir);
    psr_context_options o;
    psr_context_options_init(&o, sizeof o);
    o.cache_dir = dir;
    o.log = capture_log;
    o.log_level = PSR_LOG_INFO;
    for (int forced = 0; forced < 2; forced++) {
        if (forced)
            setenv("PSR_CACHE", "1", 1);
        else
            unsetenv("PSR_CACHE"); /* whatever the caller's environment says */
        captured_log[0] = '\0';
        psr_context *ctx;
        assert_int_equal(psr_context_create(&o, &ctx), PSR_OK);
        bool driver_caches = tuning_of(ctx).driver_caches;
        psr_device_info info;
        psr_context_device_info(ctx, &info);
        assert_int_equal(driver_caches, strstr(info.version, "PoCL") != NULL ||
                                            strstr(info.platform_name, "Portable Computing") != NULL);
        cl_program p;
        assert_int_equal(psr_program_get(ctx, &plain, &p), PSR_OK);
        bool want = forced || !driver_caches;
        psr_cache_stats s = stats_of(ctx);
        assert_int_equal(s.disk_enabled, want);
        assert_int_equal(s.disk_writes, want ? 1 : 0);
        assert_int_equal(count_files(dir, ""), want ? 1 : 0);
        assert_int_equal(strstr(captured_log, "the driver caches its own builds") != NULL, !want);
        psr_context_free(ctx);
        size_t removed;
        assert_int_equal(psr_cache_clear(dir, &removed), PSR_OK);
    }
    unsetenv("PSR_CACHE");
    remove_tree(dir);
}

static void test_uncreatable_dir_only_loses_disk_tier(void **state)
{
    (void)state;
    char dir[512], blocked[700];
    make_temp_dir(dir, sizeof dir);
    char file[600];
    snprintf(file, sizeof file, "%s/a-file", dir);
    FILE *f = fopen(file, "w");
    fclose(f);
    snprintf(blocked, sizeof blocked, "%s/cache", file); /* a directory under a file */
    captured_log[0] = '\0';
    psr_context *ctx = open_context(blocked);
    assert_non_null(strstr(captured_log, "cannot create"));
    cl_program p;
    assert_int_equal(psr_program_get(ctx, &plain, &p), PSR_OK);
    check_philox_vectors(ctx, p);
    psr_cache_stats s = stats_of(ctx);
    assert_false(s.disk_enabled);
    assert_int_equal(s.builds, 1);
    psr_context_free(ctx);
    remove_tree(dir);
}

/* Cached binaries become device code: a directory others can write is not used. */
static void test_shared_writable_dir_refused(void **state)
{
    (void)state;
    char dir[512];
    make_temp_dir(dir, sizeof dir);
    assert_int_equal(chmod(dir, 0777), 0);
    captured_log[0] = '\0';
    psr_context *ctx = open_context(dir);
    assert_non_null(strstr(captured_log, "writable by group or others"));
    assert_false(stats_of(ctx).disk_enabled);
    cl_program p;
    assert_int_equal(psr_program_get(ctx, &plain, &p), PSR_OK);
    assert_int_equal(count_files(dir, ""), 0);
    psr_context_free(ctx);
    chmod(dir, 0700);
    remove_tree(dir);
}

/* The user nobody: another user's directory and files. */
#define OTHER_UID 65534

/* Cached binaries become native code: a directory another user owns is
 * not used, even one only that user can write. */
static void test_other_users_dir_refused(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip(); /* making a directory another user's takes root */
    char dir[512], path[700];
    cache_plain(dir, path);
    assert_int_equal(chown(path, OTHER_UID, OTHER_UID), 0);
    assert_int_equal(chown(dir, OTHER_UID, OTHER_UID), 0);
    assert_int_equal(chmod(dir, 0755), 0);
    captured_log[0] = '\0';
    psr_context *b = open_context(dir);
    cl_program p;
    assert_non_null(strstr(captured_log, "owned by uid 65534"));
    assert_false(stats_of(b).disk_enabled);
    assert_int_equal(psr_program_get(b, &plain, &p), PSR_OK);
    assert_counts(b, 0, 1, 0);
    psr_context_free(b);
    remove_tree(dir);
}

typedef enum untrusted { OTHER_OWNER, GROUP_WRITABLE, SYMLINK } untrusted;

/* Makes the only entry of dir one psr must not load. */
static void make_untrusted(const char *dir, const char *path, int how)
{
    if (how == OTHER_OWNER) {
        assert_int_equal(chown(path, OTHER_UID, OTHER_UID), 0);
    } else if (how == GROUP_WRITABLE) {
        assert_int_equal(chmod(path, 0664), 0);
    } else {
        char target[700];
        snprintf(target, sizeof target, "%s/elsewhere", dir);
        assert_int_equal(rename(path, target), 0);
        assert_int_equal(symlink(target, path), 0);
    }
}

/* Entries psr did not write as this user are never loaded nor deleted:
 * another user's, one group or others can write, a symbolic link. */
static void check_untrusted_entry(untrusted how)
{
    if (how == OTHER_OWNER && geteuid() != 0)
        skip();
    char dir[512], path[700];
    cl_program p;
    psr_context *b = look_up_spoiled(dir, path, make_untrusted, how, &p);
    assert_counts(b, 0, 1, 0);
    assert_non_null(strstr(captured_log, "ignoring"));
    assert_null(strstr(captured_log, "discarding"));
    check_philox_vectors(b, p);
    psr_context_free(b);
    struct stat st;
    assert_int_equal(lstat(path, &st), 0);
    if (how == OTHER_OWNER) /* not ours: left as it was */
        assert_int_equal(st.st_uid, OTHER_UID);
    else /* ours: the fresh binary replaced it */
        assert_true(S_ISREG(st.st_mode) && !(st.st_mode & (S_IWGRP | S_IWOTH)));
    remove_tree(dir);
}

static void test_other_users_entry_ignored(void **state) { (void)state; check_untrusted_entry(OTHER_OWNER); }
static void test_group_writable_entry_ignored(void **state) { (void)state; check_untrusted_entry(GROUP_WRITABLE); }
static void test_symlinked_entry_ignored(void **state) { (void)state; check_untrusted_entry(SYMLINK); }

int main(void)
{
    if (!have_device()) {
        fprintf(stderr, "no OpenCL device: skipping\n");
        return TEST_SKIP;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_second_context_hits_disk),
        cmocka_unit_test(test_truncated_rebuilt),
        cmocka_unit_test(test_corrupt_rebuilt),
        cmocka_unit_test(test_foreign_rebuilt),
        cmocka_unit_test(test_refused_rebuilt),
        cmocka_unit_test(test_psr_cache_0),
        cmocka_unit_test(test_auto_follows_driver),
        cmocka_unit_test(test_uncreatable_dir_only_loses_disk_tier),
        cmocka_unit_test(test_shared_writable_dir_refused),
        cmocka_unit_test(test_other_users_dir_refused),
        cmocka_unit_test(test_other_users_entry_ignored),
        cmocka_unit_test(test_group_writable_entry_ignored),
        cmocka_unit_test(test_symlinked_entry_ignored),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
