/* The disk tier of the kernel cache and its hash (disk_cache.c, sha256.c). */
#ifndef PSR_RUNTIME_CACHE_H
#define PSR_RUNTIME_CACHE_H

#include <psr/psr.h>

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#define PSR_PATH_MAX 512

/* ---- disk cache (disk_cache.c) ---- */

typedef struct psr_cache_meta {
    char kernels[32];
    char platform[128];
    char device[128];
    char driver_version[128];
    char options[512];
    char library[32];
} psr_cache_meta;

typedef enum psr_cache_read {
    PSR_CACHE_READ_OK,
    PSR_CACHE_READ_MISSING,
    PSR_CACHE_READ_INVALID,    /* truncated, corrupt or foreign: discard it */
    PSR_CACHE_READ_UNREADABLE, /* exists but cannot be read (permissions): build, don't discard */
    PSR_CACHE_READ_UNTRUSTED   /* not a regular file of this user that only it can write: ignore it */
} psr_cache_read;

/* Resolves the cache directory from options (NULL) and the environment. */
psr_status psr_cache_resolve_dir(const char *option_dir, char *buf, size_t len);
/* Creates dir and its parents (mode 0700 for new ones). 0 or an errno. */
int psr_mkdir_p(const char *dir);
/* Opens a directory psr may load binaries from: one the effective user
 * owns and group and others cannot write. The descriptor, or -1 with the
 * reason in why. */
int psr_cache_dir_open(const char *dir, char *why, size_t len);
/* The file of a key inside dir. */
void psr_cache_path(const char *dir, const uint8_t key[32], char *buf, size_t len);
/* The file name of a key, "<64 hex digits>.psrbin" (at least 72 bytes). */
void psr_cache_name(const uint8_t key[32], char *buf, size_t len);
/* Reads the binary `name` of directory dir_fd (AT_FDCWD: a path). Only a
 * regular file of the effective user that group and others cannot write,
 * never through a symbolic link (else UNTRUSTED); then checks magic,
 * format, sizes, key and checksum. *payload is malloc'ed on
 * PSR_CACHE_READ_OK; *st (may be NULL) gets the file's fstat; why says
 * what was wrong. */
psr_cache_read psr_cache_read_at(int dir_fd, const char *name, const uint8_t key[32],
                                 unsigned char **payload, size_t *payload_len, psr_cache_meta *meta,
                                 struct stat *st, const char **why);
/* psr_cache_read_at of a path. */
psr_cache_read psr_cache_read_file(const char *path, const uint8_t key[32], unsigned char **payload,
                                   size_t *payload_len, psr_cache_meta *meta, const char **why);
/* Removes `name` of dir_fd only if it is still the file `was` describes
 * (dev and inode): another process may have put a fresh one in its place.
 * 0 (also when another file has the name now), or an errno. */
int psr_cache_unlink_same(int dir_fd, const char *name, const struct stat *was);
/* Writes a binary atomically (temporary file, then rename). 0 or an errno. */
int psr_cache_write_file(const char *dir, const uint8_t key[32], const psr_cache_meta *meta,
                         const unsigned char *payload, size_t payload_len);

/* ---- the trial mark (disk_cache.c) ----
 * A driver may crash on a binary that passes psr's checks. So before a
 * binary goes to the driver its entry gets a mark, "<hex>.trial", locked
 * (flock) by the process that made it and durable (the directory is
 * fsynced); the mark goes when the driver's build returns. A mark found
 * unlocked whose entry is the one it names outlived its process: that
 * process died in the driver, and the entry is discarded. */

typedef enum psr_trial {
    PSR_TRIAL_MARKED,    /* on trial: *mark_fd holds the mark; psr_cache_trial_end after the build */
    PSR_TRIAL_READ_ONLY, /* the directory cannot be written: loaded without a mark */
    PSR_TRIAL_BUSY,      /* another process or context has it on trial now: leave it alone */
    PSR_TRIAL_DIED,      /* a process died with it on trial: discard it, then psr_cache_trial_end */
    PSR_TRIAL_FAILED     /* no mark could be made (errno in *err): do not load it */
} psr_trial;

/* Marks the entry `name` of dir_fd, whose fstat is entry, on trial. On
 * PSR_TRIAL_DIED, *pid is the process that died (0 when unknown). */
psr_trial psr_cache_trial_begin(int dir_fd, const char *name, const struct stat *entry,
                                int *mark_fd, long *pid, int *err);
/* Removes the mark that mark_fd holds (if it is still the mark of name). */
void psr_cache_trial_end(int dir_fd, const char *name, int mark_fd);
/* Tests only: called with the entry's name once it is on trial, just
 * before the driver sees it (a test kills its process there). */
extern void (*psr_cache_trial_hook)(const char *name);

/* ---- sha256.c ---- */

typedef struct psr_sha256 {
    uint32_t state[8];
    uint64_t length;
    unsigned char block[64];
    size_t used;
} psr_sha256;

void psr_sha256_init(psr_sha256 *h);
void psr_sha256_update(psr_sha256 *h, const void *data, size_t len);
void psr_sha256_final(psr_sha256 *h, uint8_t digest[32]);
void psr_hex(const uint8_t *bytes, size_t n, char *out /* 2n+1 */);

#endif
