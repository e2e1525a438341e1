/* Device discovery: every platform and device, with what sampling needs. */
#include "runtime/runtime.h"

#include <stdlib.h>
#include <string.h>

/* clGetPlatformInfo and clGetDeviceInfo under one signature. */
typedef cl_int (*info_getter)(const void *obj, cl_uint what, size_t size, void *value, size_t *size_ret);

static cl_int platform_info(const void *obj, cl_uint what, size_t size, void *value, size_t *size_ret)
{
    return clGetPlatformInfo((cl_platform_id)obj, what, size, value, size_ret);
}

static cl_int device_info(const void *obj, cl_uint what, size_t size, void *value, size_t *size_ret)
{
    return clGetDeviceInfo((cl_device_id)obj, what, size, value, size_ret);
}

/* An info string whole (NULL when empty or on failure): OpenCL refuses a
 * buffer that is too small, so ask for the size first. */
static char *fetch_string(info_getter get, const void *obj, cl_uint what)
{
    size_t size = 0;
    if (get(obj, what, 0, NULL, &size) != CL_SUCCESS || size == 0)
        return NULL;
    char *s = malloc(size + 1);
    if (s && get(obj, what, size, s, NULL) != CL_SUCCESS) {
        free(s);
        return NULL;
    }
    if (s)
        s[size] = '\0';
    return s;
}

/* Copies an info string into a fixed field, cut to fit. */
static void fit_string(info_getter get, const void *obj, cl_uint what, char *buf, size_t len)
{
    buf[0] = '\0';
    char *full = fetch_string(get, obj, what);
    if (full) {
        psr_strlcpy(buf, full, len);
        free(full);
    }
}

static void get_platform_string(cl_platform_id p, cl_platform_info what, char *buf, size_t len)
{
    fit_string(platform_info, p, what, buf, len);
}

static void get_device_string(cl_device_id d, cl_device_info what, char *buf, size_t len)
{
    fit_string(device_info, d, what, buf, len);
}

/* The extension string can be long; fetch it whole to look for names. */
static char *get_extensions(cl_device_id d)
{
    return fetch_string(device_info, d, CL_DEVICE_EXTENSIONS);
}

/* A number the driver may not give (the field keeps its 0 then), of the
 * field's own size: cl_uint, size_t or cl_ulong as the query returns. */
static void get_number(cl_device_id d, cl_device_info what, void *field, size_t size)
{
    cl_ulong value = 0; /* the widest of them */
    if (size <= sizeof value && clGetDeviceInfo(d, what, size, &value, NULL) == CL_SUCCESS)
        memcpy(field, &value, size);
}

static bool has_extension(const char *extensions, const char *name)
{
    if (!extensions)
        return false;
    size_t n = strlen(name);
    for (const char *p = strstr(extensions, name); p; p = strstr(p + 1, name)) {
        bool starts = p == extensions || p[-1] == ' ';
        bool ends = p[n] == '\0' || p[n] == ' ';
        if (starts && ends)
            return true;
    }
    return false;
}

psr_status psr_query_device(cl_platform_id platform, cl_device_id device, unsigned platform_index,
                            unsigned device_index, psr_device_info *out)
{
    memset(out, 0, sizeof *out);
    out->platform_index = platform_index;
    out->device_index = device_index;
    get_platform_string(platform, CL_PLATFORM_NAME, out->platform_name, sizeof out->platform_name);
    get_platform_string(platform, CL_PLATFORM_VENDOR, out->platform_vendor,
                        sizeof out->platform_vendor);
    get_platform_string(platform, CL_PLATFORM_VERSION, out->platform_version,
                        sizeof out->platform_version);
    get_device_string(device, CL_DEVICE_NAME, out->name, sizeof out->name);
    get_device_string(device, CL_DEVICE_VENDOR, out->vendor, sizeof out->vendor);
    get_device_string(device, CL_DEVICE_VERSION, out->version, sizeof out->version);
    get_device_string(device, CL_DRIVER_VERSION, out->driver_version, sizeof out->driver_version);
    get_device_string(device, CL_DEVICE_OPENCL_C_VERSION, out->opencl_c_version,
                      sizeof out->opencl_c_version);

    out->platform = platform;
    out->device = device;
    cl_device_type type = 0;
    cl_int err = clGetDeviceInfo(device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    if (err != CL_SUCCESS)
        return psr_fail_cl(NULL, err, "clGetDeviceInfo(CL_DEVICE_TYPE) failed");
    out->type = (type & CL_DEVICE_TYPE_GPU)           ? PSR_DEVICE_GPU
                : (type & CL_DEVICE_TYPE_CPU)         ? PSR_DEVICE_CPU
                : (type & CL_DEVICE_TYPE_ACCELERATOR) ? PSR_DEVICE_ACCELERATOR
                                                      : PSR_DEVICE_OTHER;

    get_number(device, CL_DEVICE_VENDOR_ID, &out->vendor_id, sizeof out->vendor_id);
    get_number(device, CL_DEVICE_MAX_COMPUTE_UNITS, &out->compute_units, sizeof out->compute_units);
    get_number(device, CL_DEVICE_MAX_CLOCK_FREQUENCY, &out->max_clock_mhz, sizeof out->max_clock_mhz);
    get_number(device, CL_DEVICE_MAX_WORK_GROUP_SIZE, &out->max_work_group_size,
               sizeof out->max_work_group_size);
    get_number(device, CL_DEVICE_LOCAL_MEM_SIZE, &out->local_mem_bytes, sizeof out->local_mem_bytes);
    get_number(device, CL_DEVICE_GLOBAL_MEM_SIZE, &out->global_mem_bytes, sizeof out->global_mem_bytes);
    get_number(device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, &out->max_alloc_bytes, sizeof out->max_alloc_bytes);

    char *ext = get_extensions(device);
    cl_device_fp_config fp64_config = 0;
    /* CL_DEVICE_DOUBLE_FP_CONFIG is core since 1.2; a driver may still reject it. */
    if (clGetDeviceInfo(device, CL_DEVICE_DOUBLE_FP_CONFIG, sizeof fp64_config, &fp64_config,
                        NULL) != CL_SUCCESS)
        fp64_config = 0;
    if (has_extension(ext, "cl_khr_fp64") || fp64_config != 0)
        out->capabilities |= PSR_CAP_FP64;
    if (has_extension(ext, "cl_khr_fp16"))
        out->capabilities |= PSR_CAP_FP16;
    if (has_extension(ext, "cl_khr_subgroups") || has_extension(ext, "cl_intel_subgroups"))
        out->capabilities |= PSR_CAP_SUBGROUPS;
    if (has_extension(ext, "cl_khr_int64_base_atomics"))
        out->capabilities |= PSR_CAP_INT64_ATOMICS;
    free(ext);
    return PSR_OK;
}

psr_status psr_enumerate_devices(psr_found_device **devices, size_t *count)
{
    *devices = NULL;
    *count = 0;
    cl_uint nplat = 0;
    cl_int err = clGetPlatformIDs(0, NULL, &nplat);
    if (err == -1001 /* CL_PLATFORM_NOT_FOUND_KHR: no ICD registered */ || nplat == 0)
        return PSR_OK;
    if (err != CL_SUCCESS)
        return psr_fail_cl(NULL, err, "clGetPlatformIDs failed");
    cl_platform_id *plats = calloc(nplat, sizeof *plats);
    if (!plats)
        return psr_fail(NULL, PSR_ERR_OUT_OF_HOST_MEMORY, "out of memory listing platforms");
    err = clGetPlatformIDs(nplat, plats, NULL);
    if (err != CL_SUCCESS) {
        free(plats);
        return psr_fail_cl(NULL, err, "clGetPlatformIDs failed");
    }

    psr_status st = PSR_OK;
    psr_found_device *list = NULL;
    size_t n = 0;
    for (cl_uint p = 0; p < nplat && st == PSR_OK; p++) {
        cl_uint ndev = 0;
        /* A platform without devices answers CL_DEVICE_NOT_FOUND: skip it. */
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 0, NULL, &ndev) != CL_SUCCESS || ndev == 0)
            continue;
        cl_device_id *ids = calloc(ndev, sizeof *ids);
        psr_found_device *grown = realloc(list, (n + ndev) * sizeof *list);
        if (!ids || !grown) {
            free(ids);
            if (grown)
                list = grown;
            st = psr_fail(NULL, PSR_ERR_OUT_OF_HOST_MEMORY, "out of memory listing devices");
            break;
        }
        list = grown;
        err = clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, ndev, ids, NULL);
        for (cl_uint d = 0; err == CL_SUCCESS && d < ndev && st == PSR_OK; d++) {
            list[n].platform = plats[p];
            list[n].device = ids[d];
            st = psr_query_device(plats[p], ids[d], p, d, &list[n].info);
            if (st == PSR_OK)
                n++;
        }
        free(ids);
    }
    free(plats);
    if (st != PSR_OK) {
        free(list);
        return st;
    }
    *devices = list;
    *count = n;
    return PSR_OK;
}

psr_status psr_device_list(psr_device_info *devices, size_t capacity, size_t *count)
{
    psr_clear_thread_error();
    if (!count)
        return psr_fail(NULL, PSR_ERR_NULL_ARGUMENT, "psr_device_list: count is NULL");
    if (!devices && capacity > 0)
        return psr_fail(NULL, PSR_ERR_NULL_ARGUMENT,
                        "psr_device_list: devices is NULL but capacity is %zu", capacity);
    psr_found_device *found;
    size_t n;
    psr_status st = psr_enumerate_devices(&found, &n);
    if (st != PSR_OK)
        return st;
    for (size_t i = 0; i < n && i < capacity; i++)
        devices[i] = found[i].info;
    *count = n;
    free(found);
    return PSR_OK;
}
