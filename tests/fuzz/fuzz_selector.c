/* Device selectors: the parser, then the match against a fixed list of
 * devices (no OpenCL call is made). */
#include "fuzz.h"
#include "runtime/device.h"

#include <stdlib.h>
#include <string.h>

static void fake(psr_found_device *d, psr_device_type type, const char *vendor, const char *name,
                 unsigned platform, unsigned device)
{
    memset(d, 0, sizeof *d);
    d->info.type = type;
    d->info.platform_index = platform;
    d->info.device_index = device;
    strcpy(d->info.platform_vendor, vendor);
    strcpy(d->info.vendor, vendor);
    strcpy(d->info.platform_name, vendor);
    strcpy(d->info.name, name);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    psr_found_device devices[3];
    fake(&devices[0], PSR_DEVICE_CPU, "The pocl project", "pthread-cpu", 0, 0);
    fake(&devices[1], PSR_DEVICE_GPU, "NVIDIA Corporation", "NVIDIA H200", 1, 0);
    fake(&devices[2], PSR_DEVICE_ACCELERATOR, "Intel(R) Corporation", "FPGA", 2, 0);
    psr_selector sel;
    char err[256];
    if (psr_selector_parse(text, &sel, err, sizeof err) == PSR_OK) {
        long i = psr_selector_match(&sel, devices, 3);
        if (i < -1 || i >= 3)
            abort(); /* an index outside the list */
    } else if (!memchr(err, '\0', sizeof err)) {
        abort(); /* the message must be a terminated string */
    }
    free(text);
    return 0;
}
