/* The disk cache's file reader (lib/runtime/disk_cache.c) on any bytes.
 * A checksum would stop nearly every input before the metadata parser, so
 * an input that claims a payload inside itself gets the right SHA-256
 * written into its header first; the rest go as they are. */
#include "fuzz.h"
#include "runtime/cache.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { HEADER = 88, META_LEN_AT = 12, PAYLOAD_LEN_AT = 16, SUM_AT = 56 };

static uint64_t get_le(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* Writes the payload's SHA-256 into the header when the sizes fit. */
static void fix_checksum(uint8_t *d, size_t size)
{
    if (size < HEADER)
        return;
    uint64_t meta = get_le(d + META_LEN_AT, 4), plen = get_le(d + PAYLOAD_LEN_AT, 8);
    if (meta > size || plen > size || HEADER + meta + plen > size)
        return;
    psr_sha256 h;
    psr_sha256_init(&h);
    psr_sha256_update(&h, d + HEADER + meta, (size_t)plen);
    psr_sha256_final(&h, d + SUM_AT);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char path[64];
    if (!path[0])
        snprintf(path, sizeof path, "/tmp/psr-fuzz-cache-%ld.psrbin", (long)getpid());
    uint8_t *d = malloc(size ? size : 1);
    if (!d)
        return 0;
    memcpy(d, data, size);
    fix_checksum(d, size);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || (size && write(fd, d, size) != (ssize_t)size))
        abort(); /* the harness itself failed: not a finding */
    close(fd);
    free(d);
    unsigned char *payload = NULL;
    size_t plen = 0;
    psr_cache_meta meta;
    const char *why = NULL;
    if (psr_cache_read_file(path, NULL, &payload, &plen, &meta, &why) == PSR_CACHE_READ_OK) {
        /* the metadata fields are terminated strings, the payload inside the file */
        if (!memchr(meta.options, '\0', sizeof meta.options) || !memchr(meta.device, '\0', sizeof meta.device) ||
            plen > size)
            abort();
        free(payload);
    } else if (!why) {
        abort(); /* every refusal says why */
    }
    return 0;
}
