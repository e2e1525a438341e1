#include "npy.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(char *err, size_t len, const char *path, const char *what)
{
    snprintf(err, len, "%s: %s", path, what);
    return 1;
}

/* The value text after 'key': in the header dict, or NULL. */
static const char *find_key(const char *header, const char *key)
{
    char quoted[32];
    snprintf(quoted, sizeof quoted, "'%s'", key);
    const char *p = strstr(header, quoted);
    if (!p)
        return NULL;
    p += strlen(quoted);
    while (*p == ' ' || *p == ':')
        p++;
    return p;
}

static int parse_header(const char *h, npy_array *a, char *err, size_t len, const char *path)
{
    const char *d = find_key(h, "descr");
    if (!d)
        return fail(err, len, path, "header has no 'descr'");
    if (strncmp(d, "'<f4'", 5) == 0)
        a->dtype = NPY_F4;
    else if (strncmp(d, "'<f2'", 5) == 0)
        a->dtype = NPY_F2;
    else if (strncmp(d, "'<i8'", 5) == 0)
        a->dtype = NPY_I8;
    else
        return fail(err, len, path,
                    "unsupported dtype (psr reads little-endian float32 '<f4', float16 '<f2' and "
                    "int64 '<i8')");
    const char *f = find_key(h, "fortran_order");
    if (!f)
        return fail(err, len, path, "header has no 'fortran_order'");
    if (strncmp(f, "False", 5) != 0)
        return fail(err, len, path, "array is in Fortran order; save it in C order");
    const char *s = find_key(h, "shape");
    if (!s || *s != '(')
        return fail(err, len, path, "header has no 'shape' tuple");
    s++;
    a->ndim = 0;
    a->count = 1;
    while (*s && *s != ')') {
        while (*s == ' ' || *s == ',')
            s++;
        if (*s == ')')
            break;
        char *end;
        unsigned long long v = strtoull(s, &end, 10);
        if (end == s)
            return fail(err, len, path, "shape is not a tuple of integers");
        if (a->ndim == 2)
            return fail(err, len, path, "arrays of more than 2 dimensions are not supported");
        a->shape[a->ndim++] = (size_t)v;
        if (v != 0 && a->count > SIZE_MAX / v)
            return fail(err, len, path, "shape is too large");
        a->count *= (size_t)v;
        s = end;
    }
    if (*s != ')')
        return fail(err, len, path, "shape tuple is not closed");
    return 0;
}

int npy_read(const char *path, npy_array *out, char *err, size_t len)
{
    memset(out, 0, sizeof *out);
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        snprintf(err, len, "%s: %s", path, strerror(errno));
        return 1;
    }
    unsigned char pre[12];
    int rc = 0;
    char *header = NULL;
    if (fread(pre, 1, 10, fp) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        rc = fail(err, len, path, "not a .npy file (bad magic)");
        goto done;
    }
    size_t hlen;
    if (pre[6] == 1) {
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
    } else if (pre[6] == 2 || pre[6] == 3) {
        if (fread(pre + 10, 1, 2, fp) != 2) {
            rc = fail(err, len, path, "truncated header");
            goto done;
        }
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
    } else {
        rc = fail(err, len, path, "unknown .npy format version");
        goto done;
    }
    if (hlen > (1u << 20)) {
        rc = fail(err, len, path, "header is implausibly long");
        goto done;
    }
    header = malloc(hlen + 1);
    if (!header || fread(header, 1, hlen, fp) != hlen) {
        rc = fail(err, len, path, "truncated header");
        goto done;
    }
    header[hlen] = '\0';
    rc = parse_header(header, out, err, len, path);
    if (rc)
        goto done;
    size_t esize = out->dtype == NPY_F2 ? 2 : out->dtype == NPY_F4 ? 4 : 8;
    if (out->count > SIZE_MAX / esize) {
        rc = fail(err, len, path, "array is too large");
        goto done;
    }
    out->data = malloc(out->count * esize + 1);
    if (!out->data) {
        rc = fail(err, len, path, "out of memory");
        goto done;
    }
    if (fread(out->data, esize, out->count, fp) != out->count) {
        rc = fail(err, len, path, "file is shorter than its shape says (truncated data)");
        goto done;
    }
done:
    free(header);
    fclose(fp);
    if (rc)
        npy_free(out);
    return rc;
}

void npy_free(npy_array *a)
{
    free(a->data);
    a->data = NULL;
}
