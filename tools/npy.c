#include "npy.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* Opens a regular file and gives its size; NULL after the message. A
 * directory or a device has no size to check a shape against. */
static FILE *open_regular(const char *path, long long *size, char *err, size_t len)
{
    /* O_NONBLOCK: opening a FIFO must not wait for a writer before the check */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    FILE *fp = NULL;
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(err, len, "%s: %s", path, strerror(errno));
    } else if (S_ISDIR(st.st_mode)) {
        fail(err, len, path, "is a directory, not a .npy file");
    } else if (!S_ISREG(st.st_mode)) {
        fail(err, len, path, "is not a regular file (psr reads .npy files, whose size it checks first)");
    } else if (fcntl(fd, F_SETFL, 0) != 0 || !(fp = fdopen(fd, "rb"))) {
        snprintf(err, len, "%s: %s", path, strerror(errno));
    } else {
        *size = (long long)st.st_size;
        return fp;
    }
    if (fd >= 0)
        close(fd);
    return NULL;
}

/* Reads the header after the magic into out's dtype and shape. */
static int read_header(FILE *fp, const char *path, npy_array *out, char *err, size_t len)
{
    unsigned char pre[12];
    if (fread(pre, 1, 10, fp) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0)
        return fail(err, len, path, "not a .npy file (bad magic)");
    size_t hlen;
    if (pre[6] == 1) {
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8;
    } else if (pre[6] == 2 || pre[6] == 3) {
        if (fread(pre + 10, 1, 2, fp) != 2)
            return fail(err, len, path, "truncated header");
        hlen = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
    } else {
        return fail(err, len, path, "unknown .npy format version");
    }
    if (hlen > (1u << 20))
        return fail(err, len, path, "header is implausibly long");
    char *header = malloc(hlen + 1);
    int rc = 0;
    if (!header || fread(header, 1, hlen, fp) != hlen)
        rc = fail(err, len, path, "truncated header");
    if (rc == 0) {
        header[hlen] = '\0';
        rc = parse_header(header, out, err, len, path);
    }
    free(header);
    return rc;
}

/* Whether the file holds the data its shape says, before any allocation:
 * a shape in a short file would otherwise ask for memory it cannot fill. */
static int check_data_size(const npy_array *a, size_t esize, long long data_bytes, const char *path, char *err,
                           size_t len)
{
    if (a->count > SIZE_MAX / esize)
        return fail(err, len, path, "array is too large");
    unsigned long long need = (unsigned long long)a->count * esize;
    if (data_bytes >= 0 && need <= (unsigned long long)data_bytes)
        return 0;
    char shape[64] = "()";
    if (a->ndim == 1)
        snprintf(shape, sizeof shape, "(%zu,)", a->shape[0]);
    else if (a->ndim == 2)
        snprintf(shape, sizeof shape, "(%zu, %zu)", a->shape[0], a->shape[1]);
    snprintf(err, len, "%s: file is shorter than its shape says (truncated data): shape %s needs %llu bytes of data, "
             "the file holds %lld", path, shape, need, data_bytes < 0 ? 0 : data_bytes);
    return 1;
}

static size_t element_size(npy_dtype dtype)
{
    return dtype == NPY_F2 ? 2 : dtype == NPY_F4 ? 4 : 8;
}

/* The file open at its data, its header in out (data NULL) and its size
 * checked against the shape; NULL after the message. */
static FILE *open_data(const char *path, npy_array *out, char *err, size_t len)
{
    memset(out, 0, sizeof *out);
    long long size = 0;
    FILE *fp = open_regular(path, &size, err, len);
    if (!fp)
        return NULL;
    int rc = read_header(fp, path, out, err, len);
    long pos = rc ? 0 : ftell(fp);
    if (rc == 0)
        rc = pos < 0 ? fail(err, len, path, strerror(errno))
                     : check_data_size(out, element_size(out->dtype), size - (long long)pos, path, err, len);
    if (rc == 0)
        return fp;
    fclose(fp);
    return NULL;
}

int npy_read_header(const char *path, npy_array *out, char *err, size_t len)
{
    FILE *fp = open_data(path, out, err, len);
    if (!fp)
        return 1;
    fclose(fp);
    return 0;
}

int npy_read(const char *path, npy_array *out, char *err, size_t len)
{
    FILE *fp = open_data(path, out, err, len);
    if (!fp)
        return 1;
    size_t esize = element_size(out->dtype);
    int rc = 0;
    if (!(out->data = malloc(out->count * esize + 1)))
        rc = fail(err, len, path, "out of memory");
    if (rc == 0 && fread(out->data, esize, out->count, fp) != out->count)
        rc = fail(err, len, path, "file is shorter than its shape says (truncated data)");
    fclose(fp);
    if (rc)
        npy_free(out);
    return rc;
}

/* Columns [lo, hi) of every row of the open file's [rows, cols] data. */
static int read_rows(FILE *fp, const char *path, size_t cols, size_t lo, npy_array *out, char *err, size_t len)
{
    size_t esize = element_size(out->dtype), width = out->shape[1], rows = out->shape[0];
    off_t data = ftello(fp);
    for (size_t r = 0; r < rows; r++) {
        off_t at = data + (off_t)((r * cols + lo) * esize);
        if (fseeko(fp, at, SEEK_SET) != 0 || fread((char *)out->data + r * width * esize, esize, width, fp) != width)
            return fail(err, len, path, "file is shorter than its shape says (truncated data)");
    }
    return 0;
}

int npy_read_columns(const char *path, size_t lo, size_t hi, npy_array *out, char *err, size_t len)
{
    FILE *fp = open_data(path, out, err, len);
    if (!fp)
        return 1;
    if (out->ndim == 1) /* one row */
        out->ndim = 2, out->shape[1] = out->shape[0], out->shape[0] = 1;
    size_t cols = out->shape[1];
    int rc = 0;
    if (out->ndim != 2)
        rc = fail(err, len, path, "expected a 1-D or 2-D array to read columns of");
    else if (lo >= hi || hi > cols)
        rc = fail(err, len, path, "columns out of the array's range");
    out->shape[1] = hi - lo;
    out->count = out->shape[0] * out->shape[1];
    if (rc == 0 && !(out->data = malloc(out->count * element_size(out->dtype) + 1)))
        rc = fail(err, len, path, "out of memory");
    if (rc == 0)
        rc = read_rows(fp, path, cols, lo, out, err, len);
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
