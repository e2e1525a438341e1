/* The .npy reader (tools/npy.c) on any bytes: it reads a file, so each
 * input is written to one private file first. */
#include "fuzz.h"
#include "npy.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char path[64];
    if (!path[0])
        snprintf(path, sizeof path, "/tmp/psr-fuzz-npy-%ld.npy", (long)getpid());
    FILE *f = fopen(path, "wb");
    if (!f)
        abort(); /* the harness itself failed: not a finding */
    if (size && fwrite(data, 1, size, f) != size)
        abort();
    fclose(f);
    npy_array a;
    char err[512];
    if (npy_read(path, &a, err, sizeof err) == 0) {
        /* a file it accepts holds every element its shape claims */
        size_t esize = a.dtype == NPY_I8 ? 8 : a.dtype == NPY_F4 ? 4 : 2;
        volatile uint8_t sink = 0;
        if (a.count)
            sink ^= ((const uint8_t *)a.data)[a.count * esize - 1];
        (void)sink;
        npy_free(&a);
    }
    return 0;
}
