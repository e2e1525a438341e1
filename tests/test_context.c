/* Discovery, selection, contexts and kernel builds on a real device (PoCL in CI). */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void test_discovery(void **state)
{
    (void)state;
    size_t n = 0;
    assert_int_equal(psr_device_list(NULL, 0, &n), PSR_OK);
    assert_true(n >= 1);
    psr_device_info *d = calloc(n, sizeof *d);
    assert_int_equal(psr_device_list(d, n, &n), PSR_OK);
    for (size_t i = 0; i < n; i++) {
        assert_true(strlen(d[i].name) > 0);
        assert_true(strlen(d[i].platform_name) > 0);
        assert_true(strlen(d[i].driver_version) > 0);
        assert_true(strlen(d[i].version) > 0);
        assert_true(d[i].compute_units > 0);
        assert_true(d[i].max_work_group_size > 0);
        assert_true(d[i].local_mem_bytes > 0);
        assert_true(d[i].global_mem_bytes > 0);
        /* Each device answers to its own index. */
        char sel[32];
        psr_device_info again;
        snprintf(sel, sizeof sel, "%u:%u", d[i].platform_index, d[i].device_index);
        assert_int_equal(psr_device_select(sel, &again), PSR_OK);
        assert_string_equal(again.name, d[i].name);
        /* The OpenCL handles, for an app that builds its own context. */
        assert_true(again.device == d[i].device && again.platform == d[i].platform);
        cl_platform_id owner = NULL;
        assert_int_equal(clGetDeviceInfo(d[i].device, CL_DEVICE_PLATFORM, sizeof owner, &owner, NULL), CL_SUCCESS);
        assert_true(owner == d[i].platform);
    }
    free(d);
    psr_device_info pick;
    assert_int_equal(psr_device_select("99:0", &pick), PSR_ERR_DEVICE_NOT_FOUND);
    assert_non_null(strstr(psr_last_error(NULL), "99:0"));
}

static void test_pocl_selectable(void **state)
{
    (void)state;
    psr_device_info any;
    if (psr_device_select("pocl", &any) != PSR_OK)
        skip(); /* a machine whose OpenCL is not PoCL */
    assert_true(psr_contains_nocase(any.platform_name, "portable computing language") ||
                psr_contains_nocase(any.platform_vendor, "pocl"));
    psr_device_info cpu;
    assert_int_equal(psr_device_select("cpu", &cpu), PSR_OK);
    assert_int_equal(cpu.type, PSR_DEVICE_CPU);
}

static void test_psr_device_environment(void **state)
{
    (void)state;
    psr_context *ctx = NULL;
    setenv("PSR_DEVICE", "0:0", 1);
    assert_int_equal(psr_context_create(NULL, &ctx), PSR_OK);
    psr_device_info info;
    assert_int_equal(psr_context_device_info(ctx, &info), PSR_OK);
    assert_int_equal(info.platform_index, 0);
    assert_int_equal(info.device_index, 0);
    psr_context_free(ctx);

    setenv("PSR_DEVICE", "0:", 1);
    assert_int_equal(psr_context_create(NULL, &ctx), PSR_ERR_BAD_SELECTOR);
    assert_non_null(strstr(psr_last_error(NULL), "PSR_DEVICE"));
    setenv("PSR_DEVICE", "no-such-device-anywhere", 1);
    assert_int_equal(psr_context_create(NULL, &ctx), PSR_ERR_DEVICE_NOT_FOUND);
    assert_null(ctx);
    unsetenv("PSR_DEVICE");
}

static cl_uint reference_count(cl_context c)
{
    cl_uint n = 0;
    assert_int_equal(clGetContextInfo(c, CL_CONTEXT_REFERENCE_COUNT, sizeof n, &n, NULL), CL_SUCCESS);
    return n;
}

/* The context's reference count once the driver has let go of finished
 * commands. PoCL frees a finished command, and the references it holds on
 * its buffers (and through them on the context), on its own thread a little
 * after the command completes; so the count is polled for up to 5 s. A real
 * leak never reaches `want`, and the caller's assert then fails. */
static cl_uint settled_reference_count(cl_context c, cl_command_queue q, cl_uint want)
{
    assert_int_equal(clFinish(q), CL_SUCCESS);
    cl_uint n = reference_count(c);
    for (int i = 0; i < 500 && n != want; i++) {
        struct timespec wait = {0, 10 * 1000 * 1000};
        nanosleep(&wait, NULL);
        n = reference_count(c);
    }
    return n;
}

static void test_create_from_cl(void **state)
{
    (void)state;
    psr_device_info want;
    assert_int_equal(psr_device_select("auto", &want), PSR_OK);
    cl_uint np = 0;
    assert_int_equal(clGetPlatformIDs(0, NULL, &np), CL_SUCCESS);
    cl_platform_id *plats = calloc(np, sizeof *plats);
    clGetPlatformIDs(np, plats, NULL);
    cl_device_id devs[16];
    cl_uint nd = 0;
    assert_int_equal(clGetDeviceIDs(plats[want.platform_index], CL_DEVICE_TYPE_ALL, 16, devs, &nd),
                     CL_SUCCESS);
    cl_device_id dev = devs[want.device_index];
    free(plats);

    /* The application's own context and queue. */
    cl_int err;
    cl_context app = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    cl_command_queue queue = clCreateCommandQueue(app, dev, 0, &err);
    assert_int_equal(err, CL_SUCCESS);
    cl_context other = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);

    psr_context *ctx = NULL;
    assert_int_equal(psr_context_create_from_cl(other, dev, queue, NULL, &ctx),
                     PSR_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(psr_last_error(NULL), "another cl_context"));
    assert_null(ctx);

    /* psr shares scratch between launches and relies on queue order. */
    cl_command_queue ooo = clCreateCommandQueue(app, dev, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &err);
    if (err == CL_SUCCESS) {
        assert_int_equal(psr_context_create_from_cl(app, dev, ooo, NULL, &ctx), PSR_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(psr_last_error(NULL), "out-of-order"));
        assert_null(ctx);
        clReleaseCommandQueue(ooo);
    } else {
        print_message("this device has no out-of-order queues; that check is skipped\n");
    }

    cl_uint before = reference_count(app);
    psr_context_options o;
    psr_context_options_init(&o, sizeof o);
    o.disk_cache = PSR_DISK_CACHE_OFF;
    assert_int_equal(psr_context_create_from_cl(app, dev, queue, &o, &ctx), PSR_OK);
    assert_int_equal(reference_count(app), before + 1);
    cl_context got_ctx;
    cl_device_id got_dev;
    cl_command_queue got_queue;
    assert_int_equal(psr_context_cl(ctx, &got_ctx, &got_dev, &got_queue), PSR_OK);
    assert_ptr_equal(got_ctx, app);
    assert_ptr_equal(got_dev, dev);
    assert_ptr_equal(got_queue, queue);
    psr_device_info info;
    assert_int_equal(psr_context_device_info(ctx, &info), PSR_OK);
    assert_string_equal(info.name, want.name);
    assert_int_equal(info.platform_index, want.platform_index);

    /* Kernels run on the application's queue. */
    psr_variant v = {.set = PSR_KERNELS_STREAM};
    cl_program p;
    assert_int_equal(psr_program_get(ctx, &v, &p), PSR_OK);
    check_philox_vectors(ctx, p);

    psr_context_free(ctx);
    assert_int_equal(settled_reference_count(app, queue, before), before);
    clReleaseCommandQueue(queue);
    clReleaseContext(app);
    clReleaseContext(other);
}

/* Runs psr_token_uniforms of a program over the rows of gumbel_uniform.tsv
 * whose drafting flag is `drafting`; compares the row key, the fp32 uniform
 * and, with fp64, the fp64 uniform bit for bit. Returns how many rows
 * differ in any of them (*checked: how many were run). */
static size_t token_uniform_mismatches(psr_context *ctx, cl_program p, int drafting, bool fp64,
                                       size_t *checked)
{
    tsv_table *t = tsv_load("gumbel_uniform.tsv");
    size_t n = 0;
    cl_long *seeds = calloc(t->rows, sizeof *seeds), *pos = calloc(t->rows, sizeof *pos);
    cl_uint *tokens = calloc(t->rows, sizeof *tokens);
    size_t *rows = calloc(t->rows, sizeof *rows);
    for (size_t r = 0; r < t->rows; r++) {
        if (tsv_int(t, r, "drafting") != drafting)
            continue;
        seeds[n] = tsv_int(t, r, "seed");
        pos[n] = tsv_int(t, r, "pos");
        tokens[n] = (cl_uint)tsv_int(t, r, "token");
        rows[n++] = r;
    }
    assert_true(n > 0);
    cl_int err;
    cl_mem ds = upload(ctx, seeds, n * 8), dp = upload(ctx, pos, n * 8), dt = upload(ctx, tokens, n * 4);
    cl_mem dk = device_buffer(ctx, n * 4), du = device_buffer(ctx, n * 4), dd = device_buffer(ctx, n * 8);
    cl_kernel k = clCreateKernel(p, "psr_token_uniforms", &err);
    assert_int_equal(err, CL_SUCCESS);
    cl_uint count = (cl_uint)n;
    clSetKernelArg(k, 0, sizeof ds, &ds);
    clSetKernelArg(k, 1, sizeof dp, &dp);
    clSetKernelArg(k, 2, sizeof dt, &dt);
    clSetKernelArg(k, 3, sizeof count, &count);
    clSetKernelArg(k, 4, sizeof dk, &dk);
    clSetKernelArg(k, 5, sizeof du, &du);
    assert_int_equal(clSetKernelArg(k, 6, sizeof dd, &dd), CL_SUCCESS);
    assert_int_equal(clEnqueueNDRangeKernel(queue_of(ctx), k, 1, NULL, &n, NULL, 0, NULL, NULL), CL_SUCCESS);
    cl_uint *keys = calloc(n, 4), *u32 = calloc(n, 4);
    cl_ulong *u64 = calloc(n, 8);
    download(ctx, dk, keys, n * 4);
    download(ctx, du, u32, n * 4);
    download(ctx, dd, u64, n * 8);
    size_t mismatches = 0;
    for (size_t i = 0; i < n; i++) {
        size_t r = rows[i];
        bool same = keys[i] == (cl_uint)tsv_hex(t, r, "gseed") &&
                    u32[i] == (cl_uint)tsv_hex(t, r, "u32_bits") &&
                    (fp64 ? u64[i] == tsv_hex(t, r, "u64_bits") : u64[i] == 0);
        if (!same && mismatches++ == 0)
            print_message("first mismatch, vector row %zu: key %08x u32 %08x u64 %016llx\n", r,
                          keys[i], u32[i], (unsigned long long)u64[i]);
    }
    *checked = n;
    clReleaseKernel(k);
    release_buffers((cl_mem[]){ds, dp, dt, dk, du, dd}, 6);
    free(seeds), free(pos), free(tokens), free(rows), free(keys), free(u32), free(u64);
    tsv_free(t);
    return mismatches;
}

/* draw(seed, pos) words and u32 of word 0 for every row of stream.tsv. */
static void check_stream_vectors(psr_context *ctx, cl_program p)
{
    tsv_table *t = tsv_load("stream.tsv");
    size_t n = t->rows;
    cl_long *seeds = calloc(n, 8), *pos = calloc(n, 8);
    for (size_t r = 0; r < n; r++) {
        seeds[r] = tsv_int(t, r, "seed");
        pos[r] = tsv_int(t, r, "pos");
    }
    cl_int err;
    cl_mem ds = upload(ctx, seeds, n * 8), dp = upload(ctx, pos, n * 8);
    cl_mem dw = device_buffer(ctx, n * 16), du = device_buffer(ctx, n * 4);
    cl_kernel k = clCreateKernel(p, "psr_stream_words", &err);
    assert_int_equal(err, CL_SUCCESS);
    cl_uint count = (cl_uint)n;
    clSetKernelArg(k, 0, sizeof ds, &ds);
    clSetKernelArg(k, 1, sizeof dp, &dp);
    clSetKernelArg(k, 2, sizeof count, &count);
    clSetKernelArg(k, 3, sizeof dw, &dw);
    assert_int_equal(clSetKernelArg(k, 4, sizeof du, &du), CL_SUCCESS);
    assert_int_equal(clEnqueueNDRangeKernel(queue_of(ctx), k, 1, NULL, &n, NULL, 0, NULL, NULL), CL_SUCCESS);
    cl_uint *words = calloc(n, 16), *u32 = calloc(n, 4);
    download(ctx, dw, words, n * 16);
    download(ctx, du, u32, n * 4);
    static const char *cols[] = {"w0", "w1", "w2", "w3"};
    for (size_t r = 0; r < n; r++) {
        for (int c = 0; c < 4; c++)
            assert_int_equal(words[4 * r + c], (cl_uint)tsv_hex(t, r, cols[c]));
        assert_int_equal(u32[r], (cl_uint)tsv_hex(t, r, "u32_bits"));
    }
    clReleaseKernel(k);
    release_buffers((cl_mem[]){ds, dp, dw, du}, 4);
    free(seeds), free(pos), free(words), free(u32);
    tsv_free(t);
}

static void test_builds_with_defines(void **state)
{
    (void)state;
    psr_context *ctx = open_context(NULL);
    psr_device_info info;
    psr_context_device_info(ctx, &info);
    bool has_fp64 = info.capabilities & PSR_CAP_FP64;
    for (int drafting = 0; drafting <= 1; drafting++)
        for (int fp64 = 0; fp64 <= (has_fp64 ? 1 : 0); fp64++) {
            psr_variant v = {.set = PSR_KERNELS_STREAM, .drafting = drafting, .fp64 = fp64};
            cl_program p;
            assert_int_equal(psr_program_get(ctx, &v, &p), PSR_OK);
            check_philox_vectors(ctx, p);
            check_stream_vectors(ctx, p);
            size_t n = 0;
            assert_int_equal(token_uniform_mismatches(ctx, p, drafting, fp64, &n), 0);
            assert_true(n > 0);
            /* The other stream's rows do not match: IS_DRAFTING took effect. */
            assert_int_equal(token_uniform_mismatches(ctx, p, !drafting, fp64, &n), n);
            char options[512];
            psr_build_options(ctx, &v, options, sizeof options);
            assert_non_null(strstr(options, drafting ? "-DIS_DRAFTING=1" : "-DIS_DRAFTING=0"));
            assert_non_null(strstr(options, fp64 ? "-DUSE_FP64=1" : "-DUSE_FP64=0"));
            assert_non_null(strstr(options, "-DPSR_WG_SIZE="));
        }
    psr_cache_stats s;
    psr_context_cache_stats(ctx, &s);
    assert_int_equal(s.builds, has_fp64 ? 4 : 2);
    assert_int_equal(s.disk_enabled, 0);
    psr_context_free(ctx);
}

/* Warp shuffles are inline PTX: asked for on a device outside the NVIDIA
 * rule, they stay off, and the verify set builds without them; on NVIDIA
 * it builds with them. */
static void test_shuffle_only_on_nvidia(void **state)
{
    (void)state;
    setenv("PSR_TUNE_SHUFFLE", "1", 1);
    psr_context *ctx = open_context(NULL);
    unsetenv("PSR_TUNE_SHUFFLE");
    psr_tuning t = tuning_of(ctx);
    bool nvidia = strcmp(t.sample.rule, "nvidia-gpu") == 0;
    assert_int_equal(t.verify.warp_shuffle, nvidia);
    psr_variant v = {.set = PSR_KERNELS_VERIFY};
    char options[512];
    psr_build_options(ctx, &v, options, sizeof options);
    assert_int_equal(strstr(options, "-DPSR_NV_SHUFFLE=1") != NULL, nvidia);
    cl_program p; /* on NVIDIA with the inline PTX, elsewhere without */
    assert_int_equal(psr_program_get(ctx, &v, &p), PSR_OK);
    psr_context_free(ctx);
}

static void test_fp64_unsupported(void **state)
{
    (void)state;
    psr_context_options o;
    psr_context_options_init(&o, sizeof o);
    o.disk_cache = PSR_DISK_CACHE_OFF;
    o.hide_capabilities = PSR_CAP_FP64;
    psr_context *ctx;
    assert_int_equal(psr_context_create(&o, &ctx), PSR_OK);
    psr_device_info info;
    psr_context_device_info(ctx, &info);
    assert_false(info.capabilities & PSR_CAP_FP64);
    psr_variant v = {.set = PSR_KERNELS_STREAM, .fp64 = true};
    cl_program p = NULL;
    assert_int_equal(psr_program_get(ctx, &v, &p), PSR_ERR_FP64_UNSUPPORTED);
    assert_null(p);
    assert_non_null(strstr(psr_last_error(ctx), info.name));
    /* Warming skips the fp64 variants instead of failing, and the context
     * stays usable. */
    size_t variants = 0;
    assert_int_equal(psr_warm_sets(ctx, STREAM_ONLY, &variants), PSR_OK);
    assert_int_equal(variants, 2);
    psr_context_free(ctx);
}

static void test_build_failure_keeps_log(void **state)
{
    (void)state;
    psr_context *ctx = open_context(NULL);
    cl_program p = NULL;
    const char *broken = "__kernel void k(__global int *x) { x[0] = undefined_name_psr; }\n";
    assert_int_equal(psr_program_build_source(ctx, "broken", broken, "", &p), PSR_ERR_BUILD_FAILED);
    assert_null(p);
    assert_non_null(strstr(psr_context_build_log(ctx), "undefined_name_psr"));
    assert_non_null(strstr(psr_last_error(ctx), "broken"));
    assert_non_null(strstr(captured_log, "undefined_name_psr")); /* the log callback saw it */
    /* Still usable. */
    psr_variant v = {.set = PSR_KERNELS_STREAM};
    assert_int_equal(psr_program_get(ctx, &v, &p), PSR_OK);
    check_philox_vectors(ctx, p);
    psr_context_free(ctx);
}

/* Random123 is embedded: the assembled source has no include directive
 * left to resolve, and it builds and runs with no include path at all. */
static void test_no_headers_needed(void **state)
{
    (void)state;
    char *src = psr_kernel_source(PSR_KERNELS_STREAM);
    assert_non_null(src);
    assert_non_null(strstr(src, "philox4x32_R"));
    for (char *line = src; line; line = strchr(line, '\n')) {
        while (*line == '\n' || *line == ' ' || *line == '\t')
            line++;
        if (strncmp(line, "#include \"", 10) == 0) {
            char *end = strchr(line, '\n');
            fail_msg("embedded source still includes a file: %.*s", (int)(end ? end - line : 40), line);
        }
    }
    unsetenv("CPATH");
    unsetenv("C_INCLUDE_PATH");
    psr_context *ctx = open_context(NULL);
    cl_program p;
    assert_int_equal(psr_program_build_source(ctx, "stream", src, "-DIS_DRAFTING=0 -DUSE_FP64=0", &p),
                     PSR_OK);
    check_philox_vectors(ctx, p);
    clReleaseProgram(p);
    /* Control: the device compiler really has no Random123 on its path, so
     * the build above worked because the header is embedded. */
    const char *needs_header = "#include <Random123/philox.h>\n"
                               "__kernel void k(__global uint *o) { o[0] = 0; }\n";
    assert_int_equal(psr_program_build_source(ctx, "control", needs_header, "", &p),
                     PSR_ERR_BUILD_FAILED);
    assert_non_null(strstr(psr_context_build_log(ctx), "Random123"));
    psr_context_free(ctx);
    free(src);
}

/* ---- the tuning of a context (psr_experimental.h) ---- */

/* psr_context_set_tuning refuses values no kernel can run with and, once
 * the context has built, values that change how kernels build; it takes
 * launch values at any time. A refused call changes nothing. */
static bool same_tuning(const psr_tuning *a, const psr_tuning *b)
{
    return a->sample.work_group_size == b->sample.work_group_size &&
           a->sample.resident_per_unit == b->sample.resident_per_unit &&
           a->sample.vector_width == b->sample.vector_width && a->sample.min_steps == b->sample.min_steps &&
           a->sample.two_pass == b->sample.two_pass && a->sample.mulhi == b->sample.mulhi &&
           a->verify.resident_per_unit == b->verify.resident_per_unit &&
           a->verify.skip_groups == b->verify.skip_groups && a->verify.fused_groups == b->verify.fused_groups &&
           a->verify.warp_shuffle == b->verify.warp_shuffle &&
           a->logprobs.segment_tau == b->logprobs.segment_tau && a->logprobs.one_blocks == b->logprobs.one_blocks &&
           a->logprobs.few_blocks == b->logprobs.few_blocks && a->filter.direct_max == b->filter.direct_max &&
           a->build_threads == b->build_threads && a->host_cold_elements == b->host_cold_elements &&
           strcmp(a->extra_options, b->extra_options) == 0;
}

/* Regions of one scratch buffer (psr_regions_reserve): aligned offsets
 * that never shrink, a zero buffer whenever one grows, and a refusal of
 * a region that would start past what 32-bit offsets reach. */
static void test_scratch_regions(void **state)
{
    (void)state;
    psr_context *ctx = open_context(NULL);
    psr_scratch s = {NULL, 0};
    psr_regions r = {{0}, {0}};
    const size_t first[3] = {4, 100, 0};
    assert_int_equal(psr_regions_reserve(ctx, &s, &r, first, 3, 4, "the test"), PSR_OK);
    for (size_t i = 0; i < 3; i++) {
        assert_true(r.capacity[i] >= first[i]);
        assert_int_equal(r.at[i] % 16, 0);
        assert_true(i == 0 ? r.at[i] == 0 : r.at[i] >= r.at[i - 1] + r.capacity[i - 1]);
    }
    cl_mem kept = s.buffer;
    cl_uint junk = 0x5a5a5a5au;
    assert_int_equal(clEnqueueFillBuffer(ctx->queue, s.buffer, &junk, 4, 0, s.bytes / 4 * 4, 0, NULL, NULL),
                     CL_SUCCESS);
    const size_t smaller[3] = {1, 50, 0};
    assert_int_equal(psr_regions_reserve(ctx, &s, &r, smaller, 3, 4, "the test"), PSR_OK);
    assert_ptr_equal(s.buffer, kept); /* it fits: no new buffer */
    size_t second_at = r.at[1];
    const size_t grown[3] = {4000, 10, 8};
    assert_int_equal(psr_regions_reserve(ctx, &s, &r, grown, 3, 4, "the test"), PSR_OK);
    assert_true(r.capacity[0] >= 4000 && r.capacity[1] >= 100 && r.capacity[2] >= 8);
    assert_true(r.at[1] > second_at);
    unsigned char *back = malloc(s.bytes);
    assert_int_equal(clEnqueueReadBuffer(ctx->queue, s.buffer, CL_TRUE, 0, s.bytes, back, 0, NULL, NULL),
                     CL_SUCCESS);
    size_t nonzero = 0;
    for (size_t i = 0; i < s.bytes; i++)
        nonzero += back[i] != 0;
    assert_int_equal(nonzero, 0);
    free(back);
    /* The second region would start 2^32 units of 4 bytes in: refused before any allocation. */
    const size_t huge[2] = {(size_t)UINT32_MAX * 4, 16};
    expect_status(ctx, psr_regions_reserve(ctx, &s, &r, huge, 2, 4, "the test"), PSR_ERR_INVALID_ARGUMENT,
                  "the test: the batch's scratch is too large (a region starts past 2^32 units of 4 bytes)");
    clReleaseMemObject(s.buffer);
    psr_context_free(ctx);
}

static void test_set_tuning(void **state)
{
    (void)state;
    psr_context *ctx = open_context(NULL);
    psr_device_info info;
    assert_int_equal(psr_context_device_info(ctx, &info), PSR_OK);
    const psr_tuning before = tuning_of(ctx);
    bool nvidia = strcmp(before.sample.rule, "nvidia-gpu") == 0;
    psr_tuning bad[12];
    for (size_t i = 0; i < 12; i++)
        bad[i] = before;
    bad[0].sample.work_group_size = 0;
    bad[1].sample.work_group_size = 48; /* not a power of two */
    bad[2].sample.work_group_size = info.max_work_group_size * 2; /* past the device */
    bad[3].sample.resident_per_unit = 0;
    bad[4].verify.resident_per_unit = 0;
    bad[5].sample.min_steps = 0;
    bad[6].sample.work_group_size = 8; /* below 16, as PSR_TUNE_WG */
    bad[7].sample.vector_width = 8;    /* the vector path is 16 lanes or off */
    bad[8].build_threads = 0;          /* 1 .. 16, as PSR_TUNE_BUILD_THREADS */
    bad[9].build_threads = 17;
    bad[10].sample.mulhi = 3;             /* 0, 1 or 2 */
    bad[11].sample.mulhi = nvidia ? -1 : 2; /* 2 is inline PTX */
    for (size_t i = 0; i < 12; i++)
        if (psr_context_set_tuning(ctx, &bad[i]) != PSR_ERR_INVALID_ARGUMENT)
            fail_msg("bad tuning %zu was taken", i);
    assert_int_equal(psr_context_set_tuning(ctx, &bad[9]), PSR_ERR_INVALID_ARGUMENT);
    if (!strstr(psr_last_error(ctx), "build_threads"))
        fail_msg("\"%s\" does not name build_threads", psr_last_error(ctx));
    assert_int_equal(psr_context_set_tuning(ctx, &bad[11]), PSR_ERR_INVALID_ARGUMENT);
    if (!strstr(psr_last_error(ctx), "mulhi"))
        fail_msg("\"%s\" does not name mulhi", psr_last_error(ctx));
    assert_int_equal(psr_context_set_tuning(NULL, &before), PSR_ERR_NULL_ARGUMENT);
    assert_int_equal(psr_context_set_tuning(ctx, NULL), PSR_ERR_NULL_ARGUMENT);
    psr_tuning now = tuning_of(ctx);
    assert_true(same_tuning(&now, &before));
    psr_tuning t;

    /* Before the first build, build values may change (and change back). */
    t = before;
    t.sample.work_group_size = before.sample.work_group_size / 2;
    t.sample.mulhi = !before.sample.mulhi;
    assert_int_equal(psr_context_set_tuning(ctx, &t), PSR_OK);
    assert_int_equal(tuning_of(ctx).sample.work_group_size, before.sample.work_group_size / 2);
    assert_int_equal(psr_context_set_tuning(ctx, &before), PSR_OK);

    /* After it, each build value is refused on its own... */
    psr_variant v = {.set = PSR_KERNELS_STREAM};
    cl_program p;
    assert_int_equal(psr_program_get(ctx, &v, &p), PSR_OK);
    for (int field = 0; field < 6; field++) {
        t = before;
        switch (field) {
        case 0: t.sample.work_group_size = before.sample.work_group_size / 2; break;
        case 1: t.sample.vector_width = before.sample.vector_width ? 0 : 16; break;
        case 2: t.sample.mulhi = !before.sample.mulhi; break;
        case 3: t.logprobs.segment_tau = !before.logprobs.segment_tau; break;
        case 4: t.verify.warp_shuffle = !before.verify.warp_shuffle; break;
        default: psr_strlcpy(t.extra_options, "-DPSR_TEST_NOTHING=1", sizeof t.extra_options); break;
        }
        if (psr_context_set_tuning(ctx, &t) != PSR_ERR_INVALID_ARGUMENT)
            fail_msg("build value %d changed after the first build", field);
        assert_non_null(strstr(psr_last_error(ctx), "first build"));
    }
    now = tuning_of(ctx);
    assert_true(same_tuning(&now, &before));
    /* ... and launch values are taken. */
    t = before;
    t.verify.skip_groups = before.verify.skip_groups + 7;
    t.sample.two_pass = !before.sample.two_pass;
    t.sample.resident_per_unit = 3;
    t.filter.direct_max = 0;
    assert_int_equal(psr_context_set_tuning(ctx, &t), PSR_OK);
    now = tuning_of(ctx);
    assert_int_equal(now.verify.skip_groups, before.verify.skip_groups + 7);
    assert_int_equal(now.sample.two_pass, !before.sample.two_pass);
    assert_int_equal(now.sample.resident_per_unit, 3);
    assert_int_equal(now.filter.direct_max, 0);
    /* The build values are still the ones it built with: no rebuild. */
    psr_cache_stats s;
    assert_int_equal(psr_context_cache_stats(ctx, &s), PSR_OK);
    assert_int_equal(psr_program_get(ctx, &v, &p), PSR_OK);
    psr_cache_stats s2;
    assert_int_equal(psr_context_cache_stats(ctx, &s2), PSR_OK);
    assert_int_equal(s2.builds, s.builds);
    psr_context_free(ctx);
}

/* A context created with `name` set to `value` in the environment; the
 * log it wrote while opening is in captured_log. */
static psr_context *open_with_env(const char *name, const char *value)
{
    setenv(name, value, 1);
    captured_log[0] = '\0';
    psr_context *ctx = open_context(NULL);
    unsetenv(name);
    return ctx;
}

/* PSR_TUNE_* values out of their range are ignored with a warning through
 * the log callback; good ones apply and say so. */
static void test_tune_environment(void **state)
{
    (void)state;
    psr_device_info info;
    assert_int_equal(psr_device_select("auto", &info), PSR_OK);
    psr_tuning table;
    assert_int_equal(psr_device_tuning(&info, &table), PSR_OK);
    const char *bad_wg[] = {"abc", "100", "0", "-64", "64x", ""};
    for (size_t i = 0; i < sizeof bad_wg / sizeof bad_wg[0]; i++) {
        psr_context *ctx = open_with_env("PSR_TUNE_WG", bad_wg[i]);
        assert_int_equal(tuning_of(ctx).sample.work_group_size, table.sample.work_group_size);
        char said[64];
        snprintf(said, sizeof said, "PSR_TUNE_WG=%s ", bad_wg[i]);
        if (*bad_wg[i] && (!strstr(captured_log, said) || !strstr(captured_log, "ignored")))
            fail_msg("PSR_TUNE_WG=%s: the log does not say it was ignored: %s", bad_wg[i], captured_log);
        if (!*bad_wg[i]) /* empty: unset, nothing said */
            assert_null(strstr(captured_log, "PSR_TUNE_WG"));
        psr_context_free(ctx);
    }
    if (info.max_work_group_size >= 128) {
        psr_context *ctx = open_with_env("PSR_TUNE_WG", "128");
        assert_int_equal(tuning_of(ctx).sample.work_group_size, 128);
        assert_non_null(strstr(captured_log, "PSR_TUNE_WG=128 sets sample.work_group_size"));
        psr_context_free(ctx);
    }
    /* Past the device's largest work-group: ignored. */
    char big[32];
    snprintf(big, sizeof big, "%zu", info.max_work_group_size * 2);
    psr_context *ctx = open_with_env("PSR_TUNE_WG", big);
    assert_int_equal(tuning_of(ctx).sample.work_group_size, table.sample.work_group_size);
    assert_non_null(strstr(captured_log, "ignored"));
    psr_context_free(ctx);

    /* Warp shuffles are inline PTX: outside NVIDIA GPUs the variable is ignored. */
    bool nvidia = strcmp(table.sample.rule, "nvidia-gpu") == 0;
    ctx = open_with_env("PSR_TUNE_SHUFFLE", "1");
    assert_int_equal(tuning_of(ctx).verify.warp_shuffle, nvidia);
    if (!nvidia)
        assert_non_null(strstr(captured_log, "PSR_TUNE_SHUFFLE=1 needs an NVIDIA GPU"));
    psr_context_free(ctx);
    ctx = open_with_env("PSR_TUNE_MULHI", "2"); /* so is PTX's mul.wide */
    assert_int_equal(tuning_of(ctx).sample.mulhi, nvidia ? 2 : table.sample.mulhi);
    if (!nvidia)
        assert_non_null(strstr(captured_log, "PSR_TUNE_MULHI=2 needs an NVIDIA GPU"));
    psr_context_free(ctx);

    /* A launch value and a two-field one. */
    ctx = open_with_env("PSR_TUNE_VERIFY_SKIP", "12345");
    assert_int_equal(tuning_of(ctx).verify.skip_groups, 12345);
    psr_context_free(ctx);
    ctx = open_with_env("PSR_TUNE_RESIDENT", "5");
    assert_int_equal(tuning_of(ctx).sample.resident_per_unit, 5);
    assert_int_equal(tuning_of(ctx).verify.resident_per_unit, 5);
    psr_context_free(ctx);
    ctx = open_with_env("PSR_TUNE_RESIDENT", "1025"); /* past 1024 */
    assert_int_equal(tuning_of(ctx).sample.resident_per_unit, table.sample.resident_per_unit);
    assert_non_null(strstr(captured_log, "PSR_TUNE_RESIDENT=1025 is out of range"));
    psr_context_free(ctx);
    ctx = open_with_env("PSR_TUNE_VECTOR", "8"); /* 0 or 16 only */
    assert_int_equal(tuning_of(ctx).sample.vector_width, table.sample.vector_width);
    assert_non_null(strstr(captured_log, "PSR_TUNE_VECTOR=8"));
    psr_context_free(ctx);
}

int main(void)
{
    if (!have_device()) {
        fprintf(stderr, "no OpenCL device: skipping\n");
        return TEST_SKIP;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_discovery),
        cmocka_unit_test(test_pocl_selectable),
        cmocka_unit_test(test_psr_device_environment),
        cmocka_unit_test(test_create_from_cl),
        cmocka_unit_test(test_builds_with_defines),
        cmocka_unit_test(test_shuffle_only_on_nvidia),
        cmocka_unit_test(test_fp64_unsupported),
        cmocka_unit_test(test_build_failure_keeps_log),
        cmocka_unit_test(test_no_headers_needed),
        cmocka_unit_test(test_scratch_regions),
        cmocka_unit_test(test_set_tuning),
        cmocka_unit_test(test_tune_environment),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
