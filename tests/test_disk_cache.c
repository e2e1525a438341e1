/* The disk cache's file format, directory rules, listing and clearing
 * (no device needed). */
#include "common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
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
    FILE *f = fopen(file, "w");
    fclose(f);
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
    f = fopen(stale, "w");
    fclose(f);
    struct utimbuf hour_ago = {time(NULL) - 3600, time(NULL) - 3600};
    assert_int_equal(utime(stale, &hour_ago), 0);
    snprintf(fresh, sizeof fresh, "%s/.tmp-4-5-6", dir);
    f = fopen(fresh, "w");
    fclose(f);

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
 * binary is skipped by list and clear, and refused (not waited on) by reads. */
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
    assert_int_equal(psr_cache_read_file(fifo, key_a, &payload, &len, NULL, &why), PSR_CACHE_READ_INVALID);
    assert_int_equal(psr_cache_read_file(link_path, key_a, &payload, &len, NULL, &why),
                     PSR_CACHE_READ_INVALID);
    size_t removed = 0;
    assert_int_equal(psr_cache_clear(dir, &removed), PSR_OK);
    assert_int_equal(removed, 1);
    unlink(fifo);
    unlink(link_path);
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
