/* psr info: what psr sees on this machine. */
#include "cli.h"
#include "check.h"
#include "oracle.h"
#include <psr/psr_experimental.h>
#include "json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void info_usage(FILE *out)
{
    fprintf(out,
            "usage: psr info [--json]\n"
            "\n"
            "Lists every OpenCL platform and device with the capabilities psr uses\n"
            "(type, compute units, work-group size, local memory, fp64, fp16,\n"
            "subgroups, driver), the device `auto` and PSR_DEVICE pick, and the\n"
            "kernel cache directory with its size.\n"
            "\n"
            "  --json   one JSON object instead of text\n");
}

static void json_device(json_writer *w, const psr_device_info *d)
{
    char index[32];
    snprintf(index, sizeof index, "%u:%u", d->platform_index, d->device_index);
    json_begin_object(w);
    json_key(w, "index");
    json_string(w, index);
    json_key(w, "platform");
    json_string(w, d->platform_name);
    json_key(w, "platform_vendor");
    json_string(w, d->platform_vendor);
    json_key(w, "platform_version");
    json_string(w, d->platform_version);
    json_key(w, "name");
    json_string(w, d->name);
    json_key(w, "vendor");
    json_string(w, d->vendor);
    json_key(w, "type");
    json_string(w, cli_device_type_name(d->type));
    json_key(w, "version");
    json_string(w, d->version);
    json_key(w, "driver_version");
    json_string(w, d->driver_version);
    json_key(w, "opencl_c_version");
    json_string(w, d->opencl_c_version);
    json_key(w, "compute_units");
    json_uint(w, d->compute_units);
    json_key(w, "max_clock_mhz");
    json_uint(w, d->max_clock_mhz);
    json_key(w, "max_work_group_size");
    json_uint(w, d->max_work_group_size);
    json_key(w, "local_mem_bytes");
    json_uint(w, d->local_mem_bytes);
    json_key(w, "global_mem_bytes");
    json_uint(w, d->global_mem_bytes);
    json_key(w, "max_alloc_bytes");
    json_uint(w, d->max_alloc_bytes);
    json_key(w, "fp64");
    json_bool(w, d->capabilities & PSR_CAP_FP64);
    json_key(w, "fp16");
    json_bool(w, d->capabilities & PSR_CAP_FP16);
    json_key(w, "subgroups");
    json_bool(w, d->capabilities & PSR_CAP_SUBGROUPS);
    json_key(w, "int64_atomics");
    json_bool(w, d->capabilities & PSR_CAP_INT64_ATOMICS);
    json_end_object(w);
}

static void text_device(const psr_device_info *d)
{
    char local[32], global[32];
    cli_format_bytes(d->local_mem_bytes, local, sizeof local);
    cli_format_bytes(d->global_mem_bytes, global, sizeof global);
    printf("  %u:%u  %-4s %s\n", d->platform_index, d->device_index, cli_device_type_name(d->type),
           d->name);
    printf("        vendor %s, %s, driver %s, %s\n", d->vendor, d->version, d->driver_version,
           d->opencl_c_version);
    printf("        %u compute units at %u MHz, work-group up to %zu, local memory %s, global %s\n",
           d->compute_units, d->max_clock_mhz, d->max_work_group_size, local, global);
    printf("        fp64 %s, fp16 %s, subgroups %s, 64-bit atomics %s\n",
           d->capabilities & PSR_CAP_FP64 ? "yes" : "no", d->capabilities & PSR_CAP_FP16 ? "yes" : "no",
           d->capabilities & PSR_CAP_SUBGROUPS ? "yes" : "no",
           d->capabilities & PSR_CAP_INT64_ATOMICS ? "yes" : "no");
}

/* Resolves a selector to "P:D name", or the error it gives. */
static void describe_choice(const char *selector, char *buf, size_t len, bool *ok)
{
    psr_device_info d;
    psr_status st = psr_device_select(selector, &d);
    *ok = st == PSR_OK;
    if (*ok)
        snprintf(buf, len, "%u:%u %s", d.platform_index, d.device_index, d.name);
    else
        snprintf(buf, len, "%s", psr_last_error(NULL));
}

int cmd_info(int argc, char **argv)
{
    bool as_json = false;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            info_usage(stdout);
            return CLI_OK;
        } else if (strcmp(argv[i], "--json") == 0) {
            as_json = true;
        } else {
            return cli_usage_error("info", "unknown argument \"%s\"", argv[i]);
        }
    }

    size_t n = 0;
    psr_status st = psr_device_list(NULL, 0, &n);
    if (st != PSR_OK)
        return cli_report(st, NULL);
    psr_device_info *devices = calloc(n ? n : 1, sizeof *devices);
    if (!devices)
        return cli_report(PSR_ERR_OUT_OF_HOST_MEMORY, NULL);
    size_t cap = n;
    st = psr_device_list(devices, cap, &n);
    if (st != PSR_OK) {
        free(devices);
        return cli_report(st, NULL);
    }
    if (n > cap)
        n = cap;

    char auto_choice[1024], env_choice[1024] = "";
    bool auto_ok = false, env_ok = false;
    describe_choice("auto", auto_choice, sizeof auto_choice, &auto_ok);
    const char *env = getenv("PSR_DEVICE");
    if (env && *env)
        describe_choice(NULL, env_choice, sizeof env_choice, &env_ok); /* NULL: from PSR_DEVICE */

    char dir[512] = "";
    bool dir_ok = psr_cache_directory(dir, sizeof dir) == PSR_OK;
    unsigned long long files = 0, bytes = 0;
    if (dir_ok)
        cli_cache_summary(dir, &files, &bytes);
    bool cache_off = psr_cache_env_disabled();
    /* The device psr picks may cache its own builds (PoCL): no disk tier
     * there unless PSR_CACHE=1. */
    psr_device_info picked;
    psr_tuning tuning;
    bool driver_caches = !cache_off && !psr_cache_env_forced() &&
                         psr_device_select(NULL, &picked) == PSR_OK &&
                         psr_device_tuning(&picked, &tuning) == PSR_OK && tuning.driver_caches;

    if (as_json) {
        json_writer w;
        json_init(&w, stdout);
        json_begin_object(&w);
        json_key(&w, "version");
        json_string(&w, psr_version());
        json_key(&w, "clblast");
        json_bool(&w, psr_features() & PSR_FEATURE_CLBLAST);
        json_key(&w, "devices");
        json_begin_array(&w);
        for (size_t i = 0; i < n; i++)
            json_device(&w, &devices[i]);
        json_end_array(&w);
        json_key(&w, "auto");
        json_string(&w, auto_ok ? auto_choice : "");
        json_key(&w, "psr_device");
        if (env && *env) {
            json_begin_object(&w);
            json_key(&w, "selector");
            json_string(&w, env);
            json_key(&w, env_ok ? "device" : "error");
            json_string(&w, env_choice);
            json_end_object(&w);
        } else {
            json_null(&w);
        }
        json_key(&w, "cache");
        json_begin_object(&w);
        json_key(&w, "dir");
        json_string(&w, dir);
        json_key(&w, "disk_tier");
        json_bool(&w, dir_ok && !cache_off && !driver_caches);
        json_key(&w, "files");
        json_uint(&w, files);
        json_key(&w, "bytes");
        json_uint(&w, bytes);
        json_end_object(&w);
        json_end_object(&w);
        json_finish(&w);
    } else {
        printf("psr %s%s\n", psr_version(),
               psr_features() & PSR_FEATURE_CLBLAST ? " (with CLBlast)" : "");
        if (n == 0)
            printf("no OpenCL device found (install an ICD such as pocl-opencl-icd)\n");
        unsigned last_platform = ~0u;
        for (size_t i = 0; i < n; i++) {
            if (devices[i].platform_index != last_platform) {
                last_platform = devices[i].platform_index;
                printf("platform %u: %s (%s), %s\n", last_platform, devices[i].platform_name,
                       devices[i].platform_vendor, devices[i].platform_version);
            }
            text_device(&devices[i]);
        }
        printf("auto picks: %s\n", auto_ok ? auto_choice : "nothing");
        if (env && *env)
            printf("PSR_DEVICE=%s %s: %s\n", env, env_ok ? "picks" : "fails", env_choice);
        char size[32];
        cli_format_bytes(bytes, size, sizeof size);
        if (dir_ok)
            printf("kernel cache: %s (%llu files, %s)%s\n", dir, files, size,
                   cache_off        ? ", disk tier off (PSR_CACHE)"
                   : driver_caches ? ", disk tier off: the device caches its own builds "
                                     "(PSR_CACHE=1 turns it on)"
                                   : "");
        else
            printf("kernel cache: no directory (%s)\n", psr_last_error(NULL));
    }
    free(devices);
    return CLI_OK;
}
