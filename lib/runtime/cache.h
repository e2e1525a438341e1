/* The disk tier of the kernel cache and its hash (disk_cache.c, sha256.c). */
#ifndef PSR_RUNTIME_CACHE_H
#define PSR_RUNTIME_CACHE_H

#include <psr/psr.h>

#include <stdbool.h>
#include <stdint.h>

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
    PSR_CACHE_READ_INVALID,   /* truncated, corrupt or foreign: discard it */
    PSR_CACHE_READ_UNREADABLE /* exists but cannot be read (permissions): build, don't discard */
} psr_cache_read;

/* Resolves the cache directory from options (NULL) and the environment. */
psr_status psr_cache_resolve_dir(const char *option_dir, char *buf, size_t len);
/* Creates dir and its parents (mode 0700 for new ones). 0 or an errno. */
int psr_mkdir_p(const char *dir);
/* The file of a key inside dir. */
void psr_cache_path(const char *dir, const uint8_t key[32], char *buf, size_t len);
/* Reads a binary; checks magic, format, sizes, key and checksum.
 * *payload is malloc'ed on PSR_CACHE_READ_OK. why says what was wrong. */
psr_cache_read psr_cache_read_file(const char *path, const uint8_t key[32], unsigned char **payload,
                                   size_t *payload_len, psr_cache_meta *meta, const char **why);
/* Writes a binary atomically (temporary file, then rename). 0 or an errno. */
int psr_cache_write_file(const char *dir, const uint8_t key[32], const psr_cache_meta *meta,
                         const unsigned char *payload, size_t payload_len);

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
