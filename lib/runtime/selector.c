/* Device selectors: "auto", a type, a vendor, "P:D" or a name substring. */
#include "runtime/runtime.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Vendor selectors and the text their platform (or GPU) vendor contains. */
static const struct {
    const char *selector;
    const char *match[2];
} vendors[] = {
    {"nvidia", {"nvidia", NULL}},
    {"amd", {"advanced micro devices", "amd"}},
    {"intel", {"intel", NULL}},
    {"pocl", {"pocl", "portable computing language"}},
};

static const struct {
    const char *selector;
    psr_device_type type;
} types[] = {
    {"gpu", PSR_DEVICE_GPU},
    {"cpu", PSR_DEVICE_CPU},
    {"accelerator", PSR_DEVICE_ACCELERATOR},
};

static bool parse_index(const char *s, size_t len, unsigned *out)
{
    if (len == 0 || len > 6)
        return false;
    unsigned v = 0;
    for (size_t i = 0; i < len; i++) {
        if (!isdigit((unsigned char)s[i]))
            return false;
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    *out = v;
    return true;
}

psr_status psr_selector_parse(const char *text, psr_selector *out, char *err, size_t err_len)
{
    memset(out, 0, sizeof *out);
    while (isspace((unsigned char)*text))
        text++;
    size_t len = strlen(text);
    while (len && isspace((unsigned char)text[len - 1]))
        len--;
    if (len == 0) {
        snprintf(err, err_len, "device selector is empty (try \"auto\", \"gpu\", \"cpu\" or \"0:0\")");
        return PSR_ERR_BAD_SELECTOR;
    }
    if (len >= sizeof out->text) {
        snprintf(err, err_len, "device selector is %zu characters long; the limit is %zu", len,
                 sizeof out->text - 1);
        return PSR_ERR_BAD_SELECTOR;
    }
    char s[sizeof out->text];
    memcpy(s, text, len);
    s[len] = '\0';

    if (strcasecmp(s, "auto") == 0) {
        out->kind = PSR_SELECT_AUTO;
        return PSR_OK;
    }
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strcasecmp(s, types[i].selector) == 0) {
            out->kind = PSR_SELECT_TYPE;
            out->type = types[i].type;
            return PSR_OK;
        }
    for (size_t i = 0; i < sizeof vendors / sizeof vendors[0]; i++)
        if (strcasecmp(s, vendors[i].selector) == 0) {
            out->kind = PSR_SELECT_VENDOR;
            psr_strlcpy(out->text, vendors[i].selector, sizeof out->text);
            return PSR_OK;
        }
    const char *colon = strchr(s, ':');
    if (colon) {
        if (!parse_index(s, (size_t)(colon - s), &out->platform_index) ||
            !parse_index(colon + 1, strlen(colon + 1), &out->device_index)) {
            snprintf(err, err_len,
                     "device selector \"%s\" is not a valid \"P:D\" index (two decimal numbers, "
                     "e.g. \"0:1\")",
                     s);
            return PSR_ERR_BAD_SELECTOR;
        }
        out->kind = PSR_SELECT_INDEX;
        return PSR_OK;
    }
    out->kind = PSR_SELECT_NAME;
    psr_strlcpy(out->text, s, sizeof out->text);
    return PSR_OK;
}

static bool vendor_matches(const char *selector, const psr_device_info *info)
{
    for (size_t i = 0; i < sizeof vendors / sizeof vendors[0]; i++) {
        if (strcmp(vendors[i].selector, selector) != 0)
            continue;
        for (int k = 0; k < 2 && vendors[i].match[k]; k++) {
            const char *m = vendors[i].match[k];
            if (psr_contains_nocase(info->platform_vendor, m) ||
                psr_contains_nocase(info->platform_name, m) ||
                (info->type == PSR_DEVICE_GPU && psr_contains_nocase(info->vendor, m)))
                return true;
        }
    }
    return false;
}

static long first_of_type(const psr_found_device *d, size_t n, psr_device_type type)
{
    for (size_t i = 0; i < n; i++)
        if (d[i].info.type == type)
            return (long)i;
    return -1;
}

long psr_selector_match(const psr_selector *sel, const psr_found_device *d, size_t n)
{
    switch (sel->kind) {
    case PSR_SELECT_AUTO: {
        long i = first_of_type(d, n, PSR_DEVICE_GPU);
        if (i < 0)
            i = first_of_type(d, n, PSR_DEVICE_CPU);
        return i >= 0 ? i : (n ? 0 : -1);
    }
    case PSR_SELECT_TYPE:
        return first_of_type(d, n, sel->type);
    case PSR_SELECT_VENDOR: {
        long any = -1;
        for (size_t i = 0; i < n; i++) {
            if (!vendor_matches(sel->text, &d[i].info))
                continue;
            if (d[i].info.type == PSR_DEVICE_GPU)
                return (long)i;
            if (any < 0)
                any = (long)i;
        }
        return any;
    }
    case PSR_SELECT_INDEX:
        for (size_t i = 0; i < n; i++)
            if (d[i].info.platform_index == sel->platform_index &&
                d[i].info.device_index == sel->device_index)
                return (long)i;
        return -1;
    case PSR_SELECT_NAME:
        for (size_t i = 0; i < n; i++)
            if (psr_contains_nocase(d[i].info.name, sel->text) ||
                psr_contains_nocase(d[i].info.vendor, sel->text) ||
                psr_contains_nocase(d[i].info.platform_name, sel->text))
                return (long)i;
        return -1;
    }
    return -1;
}

psr_status psr_select_found(const char *selector, psr_found_device *out)
{
    const char *origin = "argument";
    if (!selector) {
        const char *env = getenv("PSR_DEVICE");
        if (env && *env) {
            selector = env;
            origin = "PSR_DEVICE";
        } else {
            selector = "auto";
        }
    }
    psr_selector sel;
    char err[256];
    if (psr_selector_parse(selector, &sel, err, sizeof err) != PSR_OK)
        return psr_fail(NULL, PSR_ERR_BAD_SELECTOR, "%s%s", err,
                        strcmp(origin, "PSR_DEVICE") == 0 ? " (from PSR_DEVICE)" : "");

    psr_found_device *found;
    size_t n;
    psr_status st = psr_enumerate_devices(&found, &n);
    if (st != PSR_OK)
        return st;
    if (n == 0)
        return psr_fail(NULL, PSR_ERR_NO_DEVICE,
                        "no OpenCL device found: is an ICD installed (e.g. pocl-opencl-icd) and "
                        "registered under /etc/OpenCL/vendors?");
    long i = psr_selector_match(&sel, found, n);
    if (i < 0) {
        free(found);
        return psr_fail(NULL, PSR_ERR_DEVICE_NOT_FOUND,
                        "device selector \"%s\" (%s) matches none of the %zu devices; "
                        "`psr info` lists them",
                        selector, origin, n);
    }
    *out = found[i];
    free(found);
    return PSR_OK;
}

psr_status psr_device_select(const char *selector, psr_device_info *out)
{
    psr_clear_thread_error();
    if (!out)
        return psr_fail(NULL, PSR_ERR_NULL_ARGUMENT, "psr_device_select: out is NULL");
    psr_found_device dev;
    psr_status st = psr_select_found(selector, &dev);
    if (st == PSR_OK)
        *out = dev.info;
    return st;
}
