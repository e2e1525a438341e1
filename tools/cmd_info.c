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
            "subgroups, driver) and the tuning psr's table picks for it (the rule of\n"
            "each kernel family and its values), the device `auto` and PSR_DEVICE\n"
            "pick, and the kernel cache directory with its size.\n"
            "\n"
            "  --json   one JSON object instead of text\n"
            "\n"
            "A context changes its device's tuning by these variables (docs/devices.md):\n");
    for (size_t i = 0; psr_tuning_variable_at(i); i++) {
        const psr_tuning_variable *v = psr_tuning_variable_at(i);
        fprintf(out, "  %-23s %s: %s\n", v->name, v->field, v->range);
    }
}

/* One kernel family's tuning as named values, for the text and the JSON. */
typedef struct tuning_family {
    const char *name, *rule;
    size_t count;
    struct {
        const char *field;
        unsigned long long value;
    } values[6];
} tuning_family;

enum { TUNING_FAMILIES = 4 };

static void tuning_families(const psr_tuning *t, tuning_family *f)
{
    const psr_tuning_sample *s = &t->sample;
    const psr_tuning_verify *v = &t->verify;
    const psr_tuning_logprobs *l = &t->logprobs;
    f[0] = (tuning_family){"sample", s->rule, 6,
                           {{"work_group_size", s->work_group_size}, {"resident_per_unit", s->resident_per_unit},
                            {"vector_width", s->vector_width}, {"min_steps", s->min_steps},
                            {"two_pass", (unsigned long long)s->two_pass}, {"mulhi", (unsigned long long)s->mulhi}}};
    f[1] = (tuning_family){"verify", v->rule, 5,
                           {{"resident_per_unit", v->resident_per_unit}, {"skip_groups", v->skip_groups},
                            {"fused_groups", v->fused_groups}, {"fused_broken", (unsigned long long)v->fused_broken},
                            {"warp_shuffle", (unsigned long long)v->warp_shuffle}}};
    f[2] = (tuning_family){"logprobs", l->rule, 3,
                           {{"segment_tau", (unsigned long long)l->segment_tau}, {"one_blocks", l->one_blocks},
                            {"few_blocks", l->few_blocks}}};
    f[3] = (tuning_family){"filter", t->filter.rule, 1, {{"direct_max", t->filter.direct_max}}};
}

/* "tuning": {"sample": {"rule": ..., ...}, ..., "driver_caches": ...}. */
static void json_tuning(json_writer *w, const psr_tuning *t)
{
    tuning_family f[TUNING_FAMILIES];
    tuning_families(t, f);
    json_key(w, "tuning");
    json_begin_object(w);
    for (size_t i = 0; i < TUNING_FAMILIES; i++) {
        json_key(w, f[i].name);
        json_begin_object(w);
        json_key_string(w, "rule", f[i].rule);
        for (size_t k = 0; k < f[i].count; k++)
            json_key_uint(w, f[i].values[k].field, f[i].values[k].value);
        json_end_object(w);
    }
    json_key_bool(w, "driver_caches", t->driver_caches);
    json_key_bool(w, "one_kernel_programs", t->one_kernel_programs);
    json_key_bool(w, "quick_builds", t->quick_builds);
    json_key_uint(w, "build_threads", t->build_threads);
    json_key_uint(w, "host_cold_elements", t->host_cold_elements);
    json_key_string(w, "extra_options", t->extra_options);
    json_end_object(w);
}

/* One line per kernel family: its rule and values. */
static void text_tuning(const psr_tuning *t)
{
    tuning_family f[TUNING_FAMILIES];
    tuning_families(t, f);
    for (size_t i = 0; i < TUNING_FAMILIES; i++) {
        printf("        tuning %-8s (rule %s):", f[i].name, f[i].rule);
        for (size_t k = 0; k < f[i].count; k++)
            printf("%s %s %llu", k ? "," : "", f[i].values[k].field, f[i].values[k].value);
        printf("\n");
    }
    printf("        driver caches its own builds: %s\n", t->driver_caches ? "yes" : "no");
    printf("        a program per kernel: %s\n", t->one_kernel_programs ? "yes" : "no (per kernel family)");
    printf("        quick first builds: %s\n", t->quick_builds ? "yes (optimized in the background)" : "no");
    printf("        builds at once: %u\n", t->build_threads);
    if (t->host_cold_elements)
        printf("        cold calls on the host: up to %zu rows x row_stride\n", t->host_cold_elements);
    else
        printf("        cold calls on the host: no\n");
}

static void json_device(json_writer *w, const psr_device_info *d)
{
    char index[32];
    snprintf(index, sizeof index, "%u:%u", d->platform_index, d->device_index);
    const json_text names[] = {
        {"index", index},
        {"platform", d->platform_name},
        {"platform_vendor", d->platform_vendor},
        {"platform_version", d->platform_version},
        {"name", d->name},
        {"vendor", d->vendor},
        {"type", cli_device_type_name(d->type)},
        {"version", d->version},
        {"driver_version", d->driver_version},
        {"opencl_c_version", d->opencl_c_version},
    };
    const json_number sizes[] = {
        {"compute_units", d->compute_units},
        {"max_clock_mhz", d->max_clock_mhz},
        {"max_work_group_size", (double)d->max_work_group_size},
        {"local_mem_bytes", (double)d->local_mem_bytes},
        {"global_mem_bytes", (double)d->global_mem_bytes},
        {"max_alloc_bytes", (double)d->max_alloc_bytes},
    };
    json_begin_object(w);
    json_key_texts(w, names, JSON_COUNT(names));
    json_key_numbers(w, sizes, JSON_COUNT(sizes));
    json_key_bool(w, "fp64", d->capabilities & PSR_CAP_FP64);
    json_key_bool(w, "fp16", d->capabilities & PSR_CAP_FP16);
    json_key_bool(w, "subgroups", d->capabilities & PSR_CAP_SUBGROUPS);
    json_key_bool(w, "int64_atomics", d->capabilities & PSR_CAP_INT64_ATOMICS);
    psr_tuning t;
    if (psr_device_tuning(d, &t) == PSR_OK)
        json_tuning(w, &t);
    json_end_object(w);
}

static const char *yes_no(bool v)
{
    return v ? "yes" : "no";
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
    printf("        fp64 %s, fp16 %s, subgroups %s, 64-bit atomics %s\n", yes_no(d->capabilities & PSR_CAP_FP64),
           yes_no(d->capabilities & PSR_CAP_FP16), yes_no(d->capabilities & PSR_CAP_SUBGROUPS),
           yes_no(d->capabilities & PSR_CAP_INT64_ATOMICS));
    psr_tuning t;
    if (psr_device_tuning(d, &t) == PSR_OK)
        text_tuning(&t);
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

/* Everything psr info reports. */
typedef struct info_report {
    psr_device_info *devices;
    size_t n;
    char auto_choice[1024], env_choice[1024];
    bool auto_ok, env_ok;
    const char *env; /* PSR_DEVICE, or NULL when unset or empty */
    char dir[512];
    bool dir_ok, cache_off, driver_caches;
    unsigned long long files, bytes;
} info_report;

/* Every device, read in two calls (how many, then which). */
static psr_status list_devices(info_report *r)
{
    size_t n = 0;
    psr_status st = psr_device_list(NULL, 0, &n);
    r->devices = st == PSR_OK ? calloc(n ? n : 1, sizeof *r->devices) : NULL;
    if (st == PSR_OK && !r->devices)
        st = PSR_ERR_OUT_OF_HOST_MEMORY;
    r->n = n;
    if (st == PSR_OK)
        st = psr_device_list(r->devices, n, &r->n);
    if (r->n > n)
        r->n = n; /* devices that appeared while we listed */
    return st;
}

/* The devices auto and PSR_DEVICE pick, and the kernel cache. */
static void gather_choices(info_report *r)
{
    describe_choice("auto", r->auto_choice, sizeof r->auto_choice, &r->auto_ok);
    r->env = getenv("PSR_DEVICE");
    if (r->env && !*r->env)
        r->env = NULL;
    if (r->env)
        describe_choice(NULL, r->env_choice, sizeof r->env_choice, &r->env_ok); /* NULL: from PSR_DEVICE */
    r->dir_ok = psr_cache_directory(r->dir, sizeof r->dir) == PSR_OK;
    if (r->dir_ok)
        cli_cache_summary(r->dir, &r->files, &r->bytes);
    r->cache_off = psr_cache_env_disabled();
    /* The device psr picks may cache its own builds (PoCL): no disk tier
     * there unless PSR_CACHE=1. */
    psr_device_info picked;
    psr_tuning tuning;
    r->driver_caches = !r->cache_off && !psr_cache_env_forced() && psr_device_select(NULL, &picked) == PSR_OK &&
                       psr_device_tuning(&picked, &tuning) == PSR_OK && tuning.driver_caches;
}

/* "tune_env": the PSR_TUNE_* variables set here, by name. */
static void json_tune_env(json_writer *w)
{
    json_key(w, "tune_env");
    json_begin_object(w);
    for (size_t i = 0; psr_tuning_variable_at(i); i++) {
        const char *name = psr_tuning_variable_at(i)->name, *value = getenv(name);
        if (value)
            json_key_string(w, name, value);
    }
    json_end_object(w);
}

static void print_json(const info_report *r)
{
    json_writer w;
    json_init(&w, stdout);
    json_begin_object(&w);
    json_key_string(&w, "version", psr_version());
    json_key_bool(&w, "clblast", psr_features() & PSR_FEATURE_CLBLAST);
    json_key(&w, "devices");
    json_begin_array(&w);
    for (size_t i = 0; i < r->n; i++)
        json_device(&w, &r->devices[i]);
    json_end_array(&w);
    json_tune_env(&w);
    json_key_string(&w, "auto", r->auto_ok ? r->auto_choice : "");
    json_key(&w, "psr_device");
    if (r->env) {
        json_begin_object(&w);
        json_key_string(&w, "selector", r->env);
        json_key_string(&w, r->env_ok ? "device" : "error", r->env_choice);
        json_end_object(&w);
    } else {
        json_null(&w);
    }
    json_key(&w, "cache");
    json_begin_object(&w);
    json_key_string(&w, "dir", r->dir);
    json_key_bool(&w, "disk_tier", r->dir_ok && !r->cache_off && !r->driver_caches);
    json_key_uint(&w, "files", r->files);
    json_key_uint(&w, "bytes", r->bytes);
    json_end_object(&w);
    json_end_object(&w);
    json_finish(&w);
}

/* Which PSR_TUNE_* variables are set, on one line. */
static void text_tune_env(void)
{
    printf("tuning: psr's table for each device;");
    int set = 0;
    for (size_t i = 0; psr_tuning_variable_at(i); i++) {
        const char *name = psr_tuning_variable_at(i)->name, *value = getenv(name);
        if (value)
            printf("%s %s=%s", set++ ? "," : " a context applies", name, value);
    }
    printf("%s (psr info --help lists them)\n", set ? " over it" : " no PSR_TUNE_* variable is set");
}

static void print_text(const info_report *r)
{
    printf("psr %s%s\n", psr_version(), psr_features() & PSR_FEATURE_CLBLAST ? " (with CLBlast)" : "");
    if (r->n == 0)
        printf("no OpenCL device found (install an ICD such as pocl-opencl-icd)\n");
    unsigned last_platform = ~0u;
    for (size_t i = 0; i < r->n; i++) {
        const psr_device_info *d = &r->devices[i];
        if (d->platform_index != last_platform) {
            last_platform = d->platform_index;
            printf("platform %u: %s (%s), %s\n", last_platform, d->platform_name, d->platform_vendor,
                   d->platform_version);
        }
        text_device(d);
    }
    text_tune_env();
    printf("auto picks: %s\n", r->auto_ok ? r->auto_choice : "nothing");
    if (r->env)
        printf("PSR_DEVICE=%s %s: %s\n", r->env, r->env_ok ? "picks" : "fails", r->env_choice);
    char size[32];
    cli_format_bytes(r->bytes, size, sizeof size);
    if (r->dir_ok)
        printf("kernel cache: %s (%llu files, %s)%s\n", r->dir, r->files, size,
               r->cache_off       ? ", disk tier off (PSR_CACHE)"
               : r->driver_caches ? ", disk tier off: the device caches its own builds "
                                    "(PSR_CACHE=1 turns it on)"
                                  : "");
    else
        printf("kernel cache: no directory (%s)\n", psr_last_error(NULL));
}

int cmd_info(int argc, char **argv)
{
    static const cli_options options = {"info", info_usage, NULL, NULL};
    bool as_json = false;
    int parsed = cli_parse_values(&options, "", argc, argv, 1, NULL, &as_json);
    if (parsed >= 0)
        return parsed;
    info_report r = {0};
    psr_status st = list_devices(&r);
    if (st != PSR_OK) {
        free(r.devices);
        return cli_report(st, NULL);
    }
    gather_choices(&r);
    if (as_json)
        print_json(&r);
    else
        print_text(&r);
    free(r.devices);
    return CLI_OK;
}
