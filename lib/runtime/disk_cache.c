/* The disk tier of the kernel cache: one file per program binary, named by
 * the SHA-256 of everything that makes the binary what it is, written to a
 * temporary file and renamed into place so readers never see half a file.
 *
 * File layout (little-endian):
 *   0  magic "PSRCACHE"      8 bytes
 *   8  format version        u32
 *   12 metadata length       u32   (text: "key=value\n" lines)
 *   16 payload length        u64
 *   24 key                   32 bytes (SHA-256 of the key material)
 *   56 payload checksum      32 bytes (SHA-256 of the payload)
 *   88 metadata, then the payload; the file ends exactly there.
 */
/* flock() is a BSD extension. */
#define _DEFAULT_SOURCE
#include "runtime/runtime.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAGIC "PSRCACHE"
#define FORMAT_VERSION 1u
#define HEADER_BYTES 88u
#define MAX_META_BYTES 4096u
#define SUFFIX ".psrbin"
#define TMP_PREFIX ".tmp-"
#define MARK_SUFFIX ".trial"

psr_status psr_cache_resolve_dir(const char *option_dir, char *buf, size_t len)
{
    const char *env;
    int n;
    if (option_dir && *option_dir)
        n = snprintf(buf, len, "%s", option_dir);
    else if ((env = getenv("PSR_CACHE_DIR")) && *env)
        n = snprintf(buf, len, "%s", env);
    else if ((env = getenv("XDG_CACHE_HOME")) && *env)
        n = snprintf(buf, len, "%s/psr", env);
    else if ((env = getenv("HOME")) && *env)
        n = snprintf(buf, len, "%s/.cache/psr", env);
    else
        return psr_fail(NULL, PSR_ERR_CACHE_IO,
                        "no cache directory: set PSR_CACHE_DIR, XDG_CACHE_HOME or HOME");
    /* Leave room for "/<64 hex digits>.psrbin" and temporary names. */
    if (n < 0 || (size_t)n + 100 >= len)
        return psr_fail(NULL, PSR_ERR_CACHE_IO,
                        "cache directory path is %d bytes long; the limit is %zu", n, len - 101);
    return PSR_OK;
}

int psr_mkdir_p(const char *dir)
{
    char path[PSR_PATH_MAX];
    if (psr_strlcpy(path, dir, sizeof path) >= sizeof path)
        return ENAMETOOLONG;
    for (char *p = path + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char saved = *p;
            *p = '\0';
            if (mkdir(path, 0700) != 0 && errno != EEXIST)
                return errno;
            *p = saved;
            if (saved == '\0')
                break;
        }
    }
    struct stat st;
    if (stat(path, &st) != 0)
        return errno;
    return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}

int psr_cache_dir_open(const char *dir, char *why, size_t len)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int err = errno;
        snprintf(why, len, "cannot open %s: %s", dir, strerror(err));
        if (fd >= 0)
            close(fd);
        errno = err;
        return -1;
    }
    /* Its binaries become device code (native code on a CPU device): only
     * this user may have put them there. */
    if (st.st_uid != geteuid())
        snprintf(why, len, "%s is owned by uid %u, not by this user (uid %u)", dir,
                 (unsigned)st.st_uid, (unsigned)geteuid());
    else if (st.st_mode & (S_IWGRP | S_IWOTH))
        snprintf(why, len, "%s is writable by group or others", dir);
    else
        return fd;
    close(fd);
    errno = EPERM;
    return -1;
}

void psr_cache_name(const uint8_t key[32], char *buf, size_t len)
{
    char hex[65];
    psr_hex(key, 32, hex);
    snprintf(buf, len, "%s" SUFFIX, hex);
}

void psr_cache_path(const char *dir, const uint8_t key[32], char *buf, size_t len)
{
    char name[80];
    psr_cache_name(key, name, sizeof name);
    snprintf(buf, len, "%s/%s", dir, name);
}

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_u32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static size_t format_meta(const psr_cache_meta *m, char *buf, size_t len)
{
    int n = snprintf(buf, len, "kernels=%s\nplatform=%s\ndevice=%s\ndriver=%s\noptions=%s\nlibrary=%s\n",
                     m->kernels, m->platform, m->device, m->driver_version, m->options, m->library);
    return n < 0 ? 0 : (size_t)n < len ? (size_t)n : len - 1;
}

static void parse_meta(const char *text, size_t len, psr_cache_meta *m)
{
    memset(m, 0, sizeof *m);
    const char *end = text + len;
    while (text < end) {
        const char *nl = memchr(text, '\n', (size_t)(end - text));
        if (!nl)
            nl = end;
        const char *eq = memchr(text, '=', (size_t)(nl - text));
        if (eq) {
            size_t klen = (size_t)(eq - text), vlen = (size_t)(nl - eq - 1);
            struct {
                const char *key;
                char *dst;
                size_t size;
            } fields[] = {
                {"kernels", m->kernels, sizeof m->kernels},
                {"platform", m->platform, sizeof m->platform},
                {"device", m->device, sizeof m->device},
                {"driver", m->driver_version, sizeof m->driver_version},
                {"options", m->options, sizeof m->options},
                {"library", m->library, sizeof m->library},
            };
            for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
                if (strlen(fields[i].key) == klen && memcmp(fields[i].key, text, klen) == 0) {
                    size_t k = vlen < fields[i].size - 1 ? vlen : fields[i].size - 1;
                    memcpy(fields[i].dst, eq + 1, k);
                    fields[i].dst[k] = '\0';
                }
        }
        text = nl + 1;
    }
}

/* Largest binary psr reads: anything bigger is not one of its programs. */
#define MAX_FILE_BYTES ((size_t)256 << 20)

/* Reads size bytes of fd; NULL with errno set when out of memory. A
 * shorter read returns what there was: the checks call it truncated. */
static unsigned char *read_fd(int fd, size_t size, size_t *len)
{
    unsigned char *data = malloc(size ? size : 1);
    if (!data) {
        errno = ENOMEM;
        return NULL;
    }
    size_t n = 0;
    while (n < size) {
        ssize_t got = read(fd, data + n, size - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        n += (size_t)got;
    }
    *len = n;
    return data;
}

/* Reads a whole regular file for a listing; NULL with errno set on
 * failure. Symbolic links, FIFOs and devices are refused (EINVAL) and
 * never block. */
static unsigned char *read_all(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    struct stat st;
    unsigned char *data = NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > MAX_FILE_BYTES)
        errno = EINVAL;
    else
        data = read_fd(fd, (size_t)st.st_size, len);
    int err = errno;
    close(fd);
    errno = err;
    return data;
}

/* Why psr does not load a file of this fstat: NULL when it may. */
static const char *untrusted(const struct stat *st)
{
    if (!S_ISREG(st->st_mode))
        return "not a regular file";
    if (st->st_uid != geteuid())
        return "owned by another user";
    if (st->st_mode & (S_IWGRP | S_IWOTH))
        return "writable by group or others";
    return NULL;
}

/* Opens an entry without following a symbolic link or blocking (a FIFO),
 * and checks the file it opened (fstat: nothing can swap it after the
 * check). *st gets what is known of it, a link's own lstat included. */
static psr_cache_read open_entry(int dir_fd, const char *name, int *fd, struct stat *st,
                                 const char **why)
{
    memset(st, 0, sizeof *st);
    st->st_uid = (uid_t)-1; /* unknown: not this user's */
    *fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (*fd < 0 && errno == ELOOP) {
        fstatat(dir_fd, name, st, AT_SYMLINK_NOFOLLOW);
        return *why = "a symbolic link", PSR_CACHE_READ_UNTRUSTED;
    }
    if (*fd < 0 && errno == ENOENT)
        return *why = "missing", PSR_CACHE_READ_MISSING;
    if (*fd < 0 || fstat(*fd, st) != 0) {
        *why = strerror(errno);
        if (*fd >= 0)
            close(*fd);
        return PSR_CACHE_READ_UNREADABLE;
    }
    psr_cache_read r = PSR_CACHE_READ_OK;
    if ((*why = untrusted(st)))
        r = PSR_CACHE_READ_UNTRUSTED;
    else if ((uint64_t)st->st_size > MAX_FILE_BYTES)
        *why = "too large to be a psr binary", r = PSR_CACHE_READ_INVALID;
    if (r != PSR_CACHE_READ_OK)
        close(*fd);
    return r;
}

/* Checks a file's structure. key may be NULL (listing: any key). */
static const char *check_file(const unsigned char *data, size_t len, const uint8_t *key,
                              psr_cache_meta *meta, size_t *payload_at, size_t *payload_len)
{
    if (len < 8 || memcmp(data, MAGIC, 8) != 0)
        return len < 8 ? "truncated (no header)" : "not a psr binary (bad magic)";
    if (len < HEADER_BYTES)
        return "truncated header";
    if (get_u32(data + 8) != FORMAT_VERSION)
        return "unknown format version";
    uint32_t meta_len = get_u32(data + 12);
    uint64_t plen = get_u64(data + 16);
    if (meta_len > MAX_META_BYTES)
        return "corrupt header (metadata length)";
    if (plen > len) /* also keeps the sum below from wrapping */
        return "truncated";
    if ((uint64_t)len < HEADER_BYTES + (uint64_t)meta_len + plen)
        return "truncated";
    if ((uint64_t)len != HEADER_BYTES + (uint64_t)meta_len + plen)
        return "trailing bytes after the payload";
    if (key && memcmp(data + 24, key, 32) != 0)
        return "foreign (its key is not this file's name)";
    uint8_t sum[32];
    psr_sha256 h;
    psr_sha256_init(&h);
    psr_sha256_update(&h, data + HEADER_BYTES + meta_len, (size_t)plen);
    psr_sha256_final(&h, sum);
    if (memcmp(sum, data + 56, 32) != 0)
        return "corrupt (payload checksum mismatch)";
    if (meta)
        parse_meta((const char *)data + HEADER_BYTES, meta_len, meta);
    *payload_at = HEADER_BYTES + meta_len;
    *payload_len = (size_t)plen;
    return NULL;
}

psr_cache_read psr_cache_read_at(int dir_fd, const char *name, const uint8_t key[32],
                                 unsigned char **payload, size_t *payload_len, psr_cache_meta *meta,
                                 struct stat *st, const char **why)
{
    int fd;
    struct stat own;
    psr_cache_read r = open_entry(dir_fd, name, &fd, &own, why);
    if (st)
        *st = own;
    if (r != PSR_CACHE_READ_OK)
        return r;
    size_t len = 0;
    unsigned char *data = read_fd(fd, (size_t)own.st_size, &len);
    close(fd);
    if (!data)
        return *why = strerror(ENOMEM), PSR_CACHE_READ_UNREADABLE;
    size_t at = 0, plen = 0;
    *why = check_file(data, len, key, meta, &at, &plen);
    if (*why) {
        free(data);
        return PSR_CACHE_READ_INVALID;
    }
    memmove(data, data + at, plen);
    *payload = data;
    *payload_len = plen;
    return PSR_CACHE_READ_OK;
}

psr_cache_read psr_cache_read_file(const char *path, const uint8_t key[32], unsigned char **payload,
                                   size_t *payload_len, psr_cache_meta *meta, const char **why)
{
    return psr_cache_read_at(AT_FDCWD, path, key, payload, payload_len, meta, NULL, why);
}

static int write_fully(int fd, const void *buf, size_t len)
{
    const unsigned char *p = buf;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* A temporary name no other writer uses at once: process id, a
 * per-process counter and the clock's nanoseconds. */
static void tmp_name(char *buf, size_t len)
{
    static atomic_uint counter;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    snprintf(buf, len, TMP_PREFIX "%ld-%u-%ld", (long)getpid(), atomic_fetch_add(&counter, 1),
             (long)now.tv_nsec);
}

int psr_cache_write_file(const char *dir, const uint8_t key[32], const psr_cache_meta *meta,
                         const unsigned char *payload, size_t payload_len)
{
    char final_path[PSR_PATH_MAX], tmp_path[PSR_PATH_MAX], tmp[64];
    if (strlen(dir) + 100 >= sizeof final_path)
        return ENAMETOOLONG;
    psr_cache_path(dir, key, final_path, sizeof final_path);
    tmp_name(tmp, sizeof tmp);
    snprintf(tmp_path, sizeof tmp_path, "%s/%s", dir, tmp);

    char meta_text[MAX_META_BYTES];
    size_t meta_len = format_meta(meta, meta_text, sizeof meta_text);
    unsigned char header[HEADER_BYTES];
    memcpy(header, MAGIC, 8);
    put_u32(header + 8, FORMAT_VERSION);
    put_u32(header + 12, (uint32_t)meta_len);
    put_u64(header + 16, payload_len);
    memcpy(header + 24, key, 32);
    psr_sha256 h;
    psr_sha256_init(&h);
    psr_sha256_update(&h, payload, payload_len);
    psr_sha256_final(&h, header + 56);

    /* Private: psr loads only its user's binaries. */
    int fd = open(tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return errno;
    int err = write_fully(fd, header, sizeof header);
    if (!err)
        err = write_fully(fd, meta_text, meta_len);
    if (!err)
        err = write_fully(fd, payload, payload_len);
    /* Flush before the rename so a crash cannot leave a named, empty file. */
    if (!err && fsync(fd) != 0)
        err = errno;
    if (close(fd) != 0 && !err)
        err = errno;
    if (!err && rename(tmp_path, final_path) != 0)
        err = errno;
    if (err)
        unlink(tmp_path);
    return err;
}

/* ---- the trial mark ---- */

void (*psr_cache_trial_hook)(const char *name);

/* The mark of an entry: "<hex>.psrbin" becomes "<hex>.trial". */
static bool mark_name(const char *name, char *buf, size_t len)
{
    size_t n = strlen(name), s = strlen(SUFFIX);
    if (n < s || strcmp(name + n - s, SUFFIX) != 0 || n - s + sizeof MARK_SUFFIX > len)
        return false;
    memcpy(buf, name, n - s);
    memcpy(buf + n - s, MARK_SUFFIX, sizeof MARK_SUFFIX);
    return true;
}

/* Does a mark's text name this entry? A mark cut short does: its
 * writer got as far as making it. *pid: the writer, 0 when unknown. */
static bool names_entry(const char *text, const struct stat *e, long *pid)
{
    unsigned long long dev, ino;
    long long size, sec;
    long nsec;
    if (sscanf(text, "pid %ld dev %llu ino %llu size %lld mtime %lld.%ld", pid, &dev, &ino, &size,
               &sec, &nsec) != 6)
        return true;
    return dev == (unsigned long long)e->st_dev && ino == (unsigned long long)e->st_ino &&
           size == (long long)e->st_size && sec == (long long)e->st_mtim.tv_sec &&
           nsec == e->st_mtim.tv_nsec;
}

/* What a mark in place says of its entry. */
typedef enum mark_state {
    MARK_NONE,  /* none, or its owner removed it as we looked */
    MARK_LIVE,  /* its owner holds its lock: on trial now */
    MARK_DIED,  /* no one holds it and it names this entry: its owner died in the driver */
    MARK_STALE  /* no one holds it and it names a file no longer there */
} mark_state;

/* Looks at the mark of an entry whose fstat is entry. On MARK_DIED and
 * MARK_STALE, *fd holds it locked (-1: a mark psr cannot open). */
static mark_state look_at_mark(int dir_fd, const char *mark, const struct stat *entry, int *fd,
                               long *pid)
{
    *fd = -1;
    *pid = 0;
    /* Open for writing where possible: where flock is emulated by fcntl
     * locks (NFS), an exclusive lock needs a descriptor that can write. */
    int m = openat(dir_fd, mark, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (m < 0 && (errno == EACCES || errno == EROFS))
        m = openat(dir_fd, mark, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (m < 0)
        return errno == ENOENT ? MARK_NONE : MARK_DIED;
    /* A filesystem without locks refuses otherwise: then any mark condemns. */
    if (flock(m, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
        close(m);
        return MARK_LIVE;
    }
    struct stat ms;
    if (fstat(m, &ms) == 0 && ms.st_nlink == 0) { /* removed by its owner before it unlocked */
        close(m);
        return MARK_NONE;
    }
    char text[256];
    ssize_t n = pread(m, text, sizeof text - 1, 0);
    text[n > 0 ? n : 0] = '\0';
    bool named = names_entry(text, entry, pid);
    if (*pid == (long)getpid()) { /* another context of this process: fcntl-emulated locks see no conflict */
        close(m);
        return MARK_LIVE;
    }
    *fd = m;
    return named ? MARK_DIED : MARK_STALE;
}

/* Makes the mark, locked and naming entry: written under a temporary
 * name and linked into place, so no one sees it unlocked or empty. Its
 * descriptor, or -1 with errno (EEXIST: there is one). */
static int publish_mark(int dir_fd, const char *mark, const struct stat *entry)
{
    char tmp[64], text[256];
    tmp_name(tmp, sizeof tmp);
    int fd = openat(dir_fd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    flock(fd, LOCK_EX | LOCK_NB); /* a new file: only a filesystem without locks refuses */
    int n = snprintf(text, sizeof text, "pid %ld\ndev %llu\nino %llu\nsize %lld\nmtime %lld.%09ld\n",
                     (long)getpid(), (unsigned long long)entry->st_dev,
                     (unsigned long long)entry->st_ino, (long long)entry->st_size,
                     (long long)entry->st_mtim.tv_sec, (long)entry->st_mtim.tv_nsec);
    int err = write_fully(fd, text, (size_t)n);
    if (!err && linkat(dir_fd, tmp, dir_fd, mark, 0) != 0)
        err = errno;
    unlinkat(dir_fd, tmp, 0);
    if (err) {
        close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

psr_trial psr_cache_trial_begin(int dir_fd, const char *name, const struct stat *entry,
                                int *mark_fd, long *pid, int *err)
{
    char mark[PSR_PATH_MAX];
    *mark_fd = -1;
    *pid = 0;
    if (!mark_name(name, mark, sizeof mark))
        return *err = ENAMETOOLONG, PSR_TRIAL_FAILED;
    for (int attempt = 0; attempt < 3; attempt++) {
        int fd = publish_mark(dir_fd, mark, entry);
        if (fd >= 0) {
            /* Durable before the driver runs: a driver can take the machine down. */
            fsync(dir_fd);
            *mark_fd = fd;
            return PSR_TRIAL_MARKED;
        }
        int e = errno;
        if (e != EEXIST && e != EACCES && e != EROFS)
            return *err = e, PSR_TRIAL_FAILED;
        mark_state s = look_at_mark(dir_fd, mark, entry, mark_fd, pid);
        if (s == MARK_LIVE)
            return PSR_TRIAL_BUSY;
        if (s == MARK_DIED)
            return PSR_TRIAL_DIED;
        struct stat held;
        if (s == MARK_STALE && e == EEXIST && *mark_fd >= 0 && fstat(*mark_fd, &held) == 0)
            psr_cache_unlink_same(dir_fd, mark, &held); /* under its lock: no one else judges it */
        if (*mark_fd >= 0)
            close(*mark_fd);
        *mark_fd = -1;
        if (e != EEXIST) /* the directory cannot be written, and no mark condemns the entry */
            return PSR_TRIAL_READ_ONLY;
    }
    return PSR_TRIAL_BUSY; /* marks come and go as fast as we look: others are at it */
}

int psr_cache_unlink_same(int dir_fd, const char *name, const struct stat *was)
{
    struct stat now;
    if (fstatat(dir_fd, name, &now, AT_SYMLINK_NOFOLLOW) != 0)
        return errno;
    if (now.st_dev != was->st_dev || now.st_ino != was->st_ino)
        return 0; /* another file took the name since: not the one judged */
    return unlinkat(dir_fd, name, 0) == 0 ? 0 : errno;
}

void psr_cache_trial_end(int dir_fd, const char *name, int mark_fd)
{
    char mark[PSR_PATH_MAX];
    struct stat held;
    /* Only the mark held: `psr cache clear` may have let another take its place. */
    if (mark_name(name, mark, sizeof mark)) {
        if (mark_fd < 0)
            unlinkat(dir_fd, mark, 0);
        else if (fstat(mark_fd, &held) == 0)
            psr_cache_unlink_same(dir_fd, mark, &held);
    }
    if (mark_fd >= 0)
        close(mark_fd);
}

static bool has_suffix(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* A temporary file this old belongs to a writer that died: a live one
 * renames its file within the time of one write. */
#define STALE_TMP_SECONDS 600

static bool is_ours(const char *dir, const char *name)
{
    if (has_suffix(name, SUFFIX) || has_suffix(name, MARK_SUFFIX))
        return true;
    if (strncmp(name, TMP_PREFIX, strlen(TMP_PREFIX)) != 0)
        return false;
    char path[PSR_PATH_MAX * 2];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    return lstat(path, &st) == 0 && time(NULL) - st.st_mtime > STALE_TMP_SECONDS;
}

static bool is_binary(const char *dir, const char *name)
{
    (void)dir;
    return has_suffix(name, SUFFIX);
}

/* A call of walk_cache for each file it finds: its name in the
 * directory, its path and its lstat. */
typedef void (*file_visit)(void *state, const char *name, const char *file, const struct stat *st);

/* Resolves dir (into resolved) and calls visit for each entry that
 * `wanted` names and that is a regular file (psr only ever writes those);
 * a directory that does not exist has none. */
static psr_status walk_cache(const char *dir, bool (*wanted)(const char *dir, const char *name),
                             file_visit visit, void *state, char *resolved, size_t len)
{
    psr_clear_thread_error();
    psr_status st = psr_cache_resolve_dir(dir, resolved, len);
    if (st != PSR_OK)
        return st;
    DIR *d = opendir(resolved);
    if (!d && errno != ENOENT)
        return psr_fail(NULL, PSR_ERR_CACHE_IO, "cannot open cache directory %s: %s", resolved,
                        strerror(errno));
    char file[PSR_PATH_MAX * 2];
    struct stat lst;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!wanted(resolved, e->d_name))
            continue;
        snprintf(file, sizeof file, "%s/%s", resolved, e->d_name);
        if (lstat(file, &lst) == 0 && S_ISREG(lst.st_mode))
            visit(state, e->d_name, file, &lst);
    }
    if (d)
        closedir(d);
    return PSR_OK;
}

psr_status psr_cache_directory(char *buf, size_t capacity)
{
    psr_clear_thread_error();
    if (!buf)
        return psr_fail(NULL, PSR_ERR_NULL_ARGUMENT, "psr_cache_directory: buf is NULL");
    if (capacity == 0)
        return psr_fail(NULL, PSR_ERR_BUFFER_TOO_SMALL, "psr_cache_directory: capacity is 0");
    char path[PSR_PATH_MAX];
    psr_status st = psr_cache_resolve_dir(NULL, path, sizeof path);
    if (st != PSR_OK)
        return st;
    if (strlen(path) >= capacity)
        return psr_fail(NULL, PSR_ERR_BUFFER_TOO_SMALL,
                        "psr_cache_directory: capacity %zu is too small for %zu bytes", capacity,
                        strlen(path) + 1);
    psr_strlcpy(buf, path, capacity);
    return PSR_OK;
}

/* psr_cache_list's walk: entries[0 .. capacity) filled, n counted. */
typedef struct list_walk {
    psr_cache_entry *entries;
    size_t capacity, n;
} list_walk;

static void list_one(void *state, const char *name, const char *file, const struct stat *st)
{
    list_walk *w = state;
    if (w->n++ >= w->capacity)
        return; /* counted only */
    psr_cache_entry *out = &w->entries[w->n - 1];
    memset(out, 0, sizeof *out);
    psr_strlcpy(out->file, name, sizeof out->file);
    out->bytes = (uint64_t)st->st_size;
    out->mtime = (int64_t)st->st_mtime;
    size_t len = 0, at, plen;
    unsigned char *data = read_all(file, &len);
    psr_cache_meta meta;
    if (data && !check_file(data, len, NULL, &meta, &at, &plen)) {
        out->valid = 1;
        psr_strlcpy(out->kernels, meta.kernels, sizeof out->kernels);
        psr_strlcpy(out->platform, meta.platform, sizeof out->platform);
        psr_strlcpy(out->device, meta.device, sizeof out->device);
        psr_strlcpy(out->driver_version, meta.driver_version, sizeof out->driver_version);
        psr_strlcpy(out->options, meta.options, sizeof out->options);
    }
    free(data);
}

psr_status psr_cache_list(const char *dir, psr_cache_entry *entries, size_t capacity, size_t *count)
{
    if (!count)
        return psr_fail(NULL, PSR_ERR_NULL_ARGUMENT, "psr_cache_list: count is NULL");
    if (!entries && capacity > 0)
        return psr_fail(NULL, PSR_ERR_NULL_ARGUMENT,
                        "psr_cache_list: entries is NULL but capacity is %zu", capacity);
    list_walk w = {entries, capacity, 0};
    char path[PSR_PATH_MAX];
    psr_status st = walk_cache(dir, is_binary, list_one, &w, path, sizeof path);
    if (st == PSR_OK)
        *count = w.n;
    return st;
}

/* psr_cache_clear's walk: the files removed, and the first failure. */
typedef struct clear_walk {
    size_t removed;
    int failure;
    char failed_name[256];
} clear_walk;

static void remove_one(void *state, const char *name, const char *file, const struct stat *st)
{
    clear_walk *w = state;
    if (st->st_uid != geteuid())
        return; /* another user's, in a directory shared by mistake: not ours to remove */
    if (unlink(file) == 0) {
        w->removed++;
    } else if (errno != ENOENT && !w->failure) {
        w->failure = errno;
        psr_strlcpy(w->failed_name, name, sizeof w->failed_name);
    }
}

psr_status psr_cache_clear(const char *dir, size_t *removed)
{
    clear_walk w = {0, 0, ""};
    char path[PSR_PATH_MAX];
    psr_status st = walk_cache(dir, is_ours, remove_one, &w, path, sizeof path);
    if (st != PSR_OK)
        return st;
    if (removed)
        *removed = w.removed;
    if (w.failure)
        return psr_fail(NULL, PSR_ERR_CACHE_IO, "cannot remove %s/%s: %s", path, w.failed_name,
                        strerror(w.failure));
    return PSR_OK;
}

/* The key a binary's name spells, "<64 hex digits>.psrbin". */
static bool key_of_name(const char *name, uint8_t key[32])
{
    if (strlen(name) != 64 + strlen(SUFFIX) || !has_suffix(name, SUFFIX))
        return false;
    memset(key, 0, 32);
    for (int i = 0; i < 64; i++) {
        const char *digits = "0123456789abcdef", *d = strchr(digits, name[i]);
        if (!d)
            return false;
        key[i / 2] = (uint8_t)(key[i / 2] << 4 | (d - digits));
    }
    return true;
}

/* What a lookup would make of the entry `name` of the trusted directory
 * dir_fd; the reason in why. */
static psr_cache_entry_state judge_entry(int dir_fd, const char *name, char *why, size_t len)
{
    uint8_t key[32];
    if (!key_of_name(name, key))
        return snprintf(why, len, "its name is no key psr looks up"), PSR_CACHE_ENTRY_INVALID;
    unsigned char *payload = NULL;
    size_t plen = 0;
    struct stat st;
    const char *what = NULL;
    psr_cache_read r = psr_cache_read_at(dir_fd, name, key, &payload, &plen, NULL, &st, &what);
    free(payload);
    snprintf(why, len, "%s", r == PSR_CACHE_READ_OK ? "" : what);
    if (r == PSR_CACHE_READ_UNTRUSTED && st.st_uid != geteuid() && st.st_uid != (uid_t)-1)
        snprintf(why, len, "owned by uid %u, not by this user (uid %u)", (unsigned)st.st_uid,
                 (unsigned)geteuid());
    if (r != PSR_CACHE_READ_OK)
        return r == PSR_CACHE_READ_MISSING      ? PSR_CACHE_ENTRY_MISSING
               : r == PSR_CACHE_READ_INVALID    ? PSR_CACHE_ENTRY_INVALID
               : r == PSR_CACHE_READ_UNTRUSTED  ? PSR_CACHE_ENTRY_IGNORED
                                                : PSR_CACHE_ENTRY_UNREADABLE;
    char mark[PSR_PATH_MAX];
    int fd = -1;
    long pid = 0;
    mark_state m = mark_name(name, mark, sizeof mark) ? look_at_mark(dir_fd, mark, &st, &fd, &pid)
                                                      : MARK_NONE;
    if (fd >= 0)
        close(fd);
    if (m != MARK_DIED)
        return PSR_CACHE_ENTRY_LOADS;
    snprintf(why, len, "process %ld died while the driver loaded it", pid);
    return PSR_CACHE_ENTRY_ON_TRIAL;
}

psr_status psr_cache_entry_check(const char *dir, const char *file, psr_cache_entry_state *state,
                                 char *reason, size_t capacity)
{
    psr_clear_thread_error();
    if (!file || !state)
        return psr_fail(NULL, PSR_ERR_NULL_ARGUMENT, "psr_cache_entry_check: %s is NULL",
                        file ? "state" : "file");
    if (!reason && capacity > 0)
        return psr_fail(NULL, PSR_ERR_NULL_ARGUMENT,
                        "psr_cache_entry_check: reason is NULL but capacity is %zu", capacity);
    if (strchr(file, '/') || !has_suffix(file, SUFFIX))
        return psr_fail(NULL, PSR_ERR_INVALID_ARGUMENT,
                        "psr_cache_entry_check: file \"%.200s\" is not a binary's name in the "
                        "directory (\"<key>" SUFFIX "\", as psr_cache_list gives)",
                        file);
    char path[PSR_PATH_MAX], why[PSR_PATH_MAX + 100];
    psr_status st = psr_cache_resolve_dir(dir, path, sizeof path);
    if (st != PSR_OK)
        return st;
    int dir_fd = psr_cache_dir_open(path, why, sizeof why);
    if (dir_fd >= 0) {
        *state = judge_entry(dir_fd, file, why, sizeof why);
        close(dir_fd);
    } else {
        *state = errno == ENOENT ? PSR_CACHE_ENTRY_MISSING : PSR_CACHE_ENTRY_DIRECTORY;
    }
    if (capacity > 0)
        psr_strlcpy(reason, why, capacity);
    return PSR_OK;
}
