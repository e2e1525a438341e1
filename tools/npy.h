/* Reading NumPy .npy files (format versions 1.0, 2.0 and 3.0). */
#ifndef PSR_CLI_NPY_H
#define PSR_CLI_NPY_H

#include <stddef.h>

typedef enum npy_dtype { NPY_F4, NPY_F2, NPY_I8 } npy_dtype;

typedef struct npy_array {
    npy_dtype dtype;
    size_t ndim;        /* 0, 1 or 2 */
    size_t shape[2];
    size_t count;       /* elements */
    void *data;         /* little-endian, C order */
} npy_array;

/* Reads a whole .npy file. On failure returns non-zero and writes a message
 * naming the file and the problem into err. */
int npy_read(const char *path, npy_array *out, char *err, size_t err_len);
/* Reads the header alone (data stays NULL), with the file's size checked
 * against the shape. */
int npy_read_header(const char *path, npy_array *out, char *err, size_t err_len);
/* Columns [lo, hi) of a 2-D array (a 1-D one is one row), read row by row
 * without the rest of the file: out is [rows, hi - lo], 2-D. */
int npy_read_columns(const char *path, size_t lo, size_t hi, npy_array *out, char *err, size_t err_len);
void npy_free(npy_array *a);

#endif
