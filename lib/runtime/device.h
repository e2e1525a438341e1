/* Device discovery and selectors (device.c, selector.c). */
#ifndef PSR_RUNTIME_DEVICE_H
#define PSR_RUNTIME_DEVICE_H

#include <psr/psr.h>

#include <stdbool.h>

/* ---- devices (device.c, selector.c) ---- */

typedef struct psr_found_device {
    cl_platform_id platform;
    cl_device_id device;
    psr_device_info info;
} psr_found_device;

/* Every device of every platform. *devices is malloc'ed (NULL when none). */
psr_status psr_enumerate_devices(psr_found_device **devices, size_t *count);
/* Fills *out from the OpenCL queries of one device. */
psr_status psr_query_device(cl_platform_id platform, cl_device_id device, unsigned platform_index,
                            unsigned device_index, psr_device_info *out);

typedef enum psr_selector_kind {
    PSR_SELECT_AUTO,
    PSR_SELECT_TYPE,
    PSR_SELECT_VENDOR,
    PSR_SELECT_INDEX,
    PSR_SELECT_NAME
} psr_selector_kind;

typedef struct psr_selector {
    psr_selector_kind kind;
    psr_device_type type;     /* PSR_SELECT_TYPE */
    char text[128];           /* PSR_SELECT_VENDOR (canonical vendor) and PSR_SELECT_NAME */
    unsigned platform_index;  /* PSR_SELECT_INDEX */
    unsigned device_index;
} psr_selector;

/* Parses a selector; PSR_ERR_BAD_SELECTOR with a message in err otherwise. */
psr_status psr_selector_parse(const char *text, psr_selector *out, char *err, size_t err_len);
/* Resolves a selector (NULL: $PSR_DEVICE, else "auto") to one device. */
psr_status psr_select_found(const char *selector, psr_found_device *out);
/* Index into devices of the device the selector picks, or -1. */
long psr_selector_match(const psr_selector *sel, const psr_found_device *devices, size_t count);

#endif
