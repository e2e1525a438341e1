#include "common.h"

#include <dirent.h>
#include <math.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef PSR_TEST_DATA
#error "PSR_TEST_DATA must name tests/data"
#endif

char captured_log[8192];

static char *dup_range(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    assert_non_null(d);
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

static char **split_tabs(char *line, size_t *count)
{
    size_t n = 1;
    for (char *p = line; *p; p++)
        n += *p == '\t';
    char **fields = calloc(n, sizeof *fields);
    assert_non_null(fields);
    size_t i = 0;
    for (char *start = line;; start++) {
        char *end = start;
        while (*end && *end != '\t' && *end != '\n' && *end != '\r')
            end++;
        fields[i++] = dup_range(start, (size_t)(end - start));
        if (*end != '\t')
            break;
        start = end;
    }
    *count = i;
    return fields;
}

tsv_table *tsv_load(const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", PSR_TEST_DATA, name);
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("cannot open %s: %s", path, strerror(errno));
    tsv_table *t = calloc(1, sizeof *t);
    assert_non_null(t);
    char line[4096];
    size_t cap = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n')
            continue;
        size_t n;
        char **fields = split_tabs(line, &n);
        if (!t->header) {
            t->header = fields;
            t->cols = n;
            continue;
        }
        assert_int_equal(n, t->cols);
        if (t->rows == cap) {
            cap = cap ? cap * 2 : 64;
            t->cells = realloc(t->cells, cap * sizeof *t->cells);
            assert_non_null(t->cells);
        }
        t->cells[t->rows++] = fields;
    }
    fclose(f);
    assert_non_null(t->header);
    return t;
}

void tsv_free(tsv_table *t)
{
    if (!t)
        return;
    for (size_t r = 0; r < t->rows; r++) {
        for (size_t c = 0; c < t->cols; c++)
            free(t->cells[r][c]);
        free(t->cells[r]);
    }
    for (size_t c = 0; c < t->cols; c++)
        free(t->header[c]);
    free(t->header);
    free(t->cells);
    free(t);
}

size_t tsv_col(const tsv_table *t, const char *name)
{
    for (size_t c = 0; c < t->cols; c++)
        if (strcmp(t->header[c], name) == 0)
            return c;
    fail_msg("no column %s", name);
    return 0;
}

uint64_t tsv_hex(const tsv_table *t, size_t row, const char *col)
{
    return strtoull(t->cells[row][tsv_col(t, col)], NULL, 16);
}

int64_t tsv_int(const tsv_table *t, size_t row, const char *col)
{
    return strtoll(t->cells[row][tsv_col(t, col)], NULL, 10);
}

void make_temp_dir(char *buf, size_t len)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(buf, len, "%s/psr-test-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    assert_non_null(mkdtemp(buf));
}

void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        for (struct dirent *e; (e = readdir(d));) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            char path[2048];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            struct stat st;
            if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
                remove_tree(path);
            else
                unlink(path);
        }
        closedir(d);
    }
    rmdir(dir);
}

size_t count_files(const char *dir, const char *prefix)
{
    size_t n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0 && strcmp(e->d_name, ".") != 0 &&
            strcmp(e->d_name, "..") != 0)
            n++;
    closedir(d);
    return n;
}

bool have_device(void)
{
    size_t n = 0;
    return psr_device_list(NULL, 0, &n) == PSR_OK && n > 0;
}

bool test_long(void)
{
    const char *v = getenv("PSR_TEST_LONG");
    return v && strcmp(v, "1") == 0;
}

/* ---- the fixture ---- */

static const device_fixture *fixture;

static int fixture_setup(void **state)
{
    (void)state;
    test_seed(fixture->seed);
    psr_context *ctx = open_suite_context();
    *fixture->ctx = ctx;
    if (fixture->has_fp64) {
        psr_device_info info;
        assert_int_equal(psr_context_device_info(ctx, &info), PSR_OK);
        *fixture->has_fp64 = info.capabilities & PSR_CAP_FP64;
    }
    if (fixture->prepare)
        fixture->prepare(ctx);
    return 0;
}

static int fixture_teardown(void **state)
{
    (void)state;
    psr_context_free(*fixture->ctx);
    *fixture->ctx = NULL;
    return 0;
}

int run_device_group(const char *name, const struct CMUnitTest *tests, size_t count,
                     const device_fixture *f)
{
    if (!have_device()) {
        fprintf(stderr, "no OpenCL device: skipping\n");
        return TEST_SKIP;
    }
    if (test_long())
        print_message("the long suite: every variant, full-size statistics\n");
    /* The tests check the kernels, and some read their scratch: every call
     * on the device, as `meson test` sets it, also when a test runs alone
     * (test_cold_host turns the host's cold calls on for its own contexts). */
    setenv("PSR_TUNE_HOST_COLD", "0", 0);
    fixture = f;
    return _cmocka_run_group_tests(name, tests, count, fixture_setup, fixture_teardown);
}

void capture_log(psr_log_level level, const char *message, void *user_data)
{
    (void)level;
    (void)user_data;
    size_t used = strlen(captured_log);
    snprintf(captured_log + used, sizeof captured_log - used, "%s\n", message);
}

static psr_context *open_with(const char *cache_dir, psr_disk_cache_mode mode)
{
    psr_context_options o;
    psr_context_options_init(&o, sizeof o);
    o.log = capture_log;
    o.log_level = PSR_LOG_DEBUG;
    o.cache_dir = cache_dir;
    o.disk_cache = mode;
    psr_context *ctx = NULL;
    psr_status st = psr_context_create(&o, &ctx);
    if (st != PSR_OK)
        fail_msg("psr_context_create: %s: %s", psr_status_string(st), psr_last_error(NULL));
    return ctx;
}

psr_context *open_context(const char *cache_dir)
{
    return open_with(cache_dir, cache_dir ? PSR_DISK_CACHE_ON : PSR_DISK_CACHE_OFF);
}

psr_context *open_suite_context(void)
{
    const char *dir = getenv("PSR_CACHE_DIR");
    return open_with(dir, dir ? PSR_DISK_CACHE_AUTO : PSR_DISK_CACHE_OFF);
}

psr_context *open_scalar_context(void)
{
    setenv("PSR_TUNE_VECTOR", "0", 1);
    psr_context *ctx = open_context(NULL);
    unsetenv("PSR_TUNE_VECTOR");
    assert_int_equal(tuning_of(ctx).sample.vector_width, 0);
    return ctx;
}

psr_context *open_shuffles_flipped(void)
{
    psr_context *ctx = open_suite_context();
    psr_tuning t = tuning_of(ctx);
    if (strcmp(t.sample.rule, "nvidia-gpu") != 0) {
        psr_context_free(ctx);
        return NULL;
    }
    t.verify.warp_shuffle = !t.verify.warp_shuffle; /* a build option: before the first build */
    set_tuning(ctx, &t);
    return ctx;
}

psr_tuning tuning_of(const psr_context *ctx)
{
    psr_tuning t;
    assert_int_equal(psr_context_tuning(ctx, &t), PSR_OK);
    return t;
}

void set_tuning(psr_context *ctx, const psr_tuning *t)
{
    psr_status st = psr_context_set_tuning(ctx, t);
    if (st != PSR_OK)
        fail_msg("psr_context_set_tuning: %s: %s", psr_status_string(st), psr_last_error(ctx));
}

psr_last_paths last_paths(const psr_context *ctx)
{
    psr_last_paths p;
    assert_int_equal(psr_context_last_paths(ctx, &p), PSR_OK);
    return p;
}

void check_philox_vectors(psr_context *ctx, cl_program program)
{
    tsv_table *t = tsv_load("philox4x32_10.tsv");
    cl_uint n = (cl_uint)t->rows;
    cl_uint *in = calloc(6 * n, sizeof *in), *out = calloc(4 * n, sizeof *out);
    assert_non_null(in);
    assert_non_null(out);
    static const char *in_cols[] = {"ctr0", "ctr1", "ctr2", "ctr3", "key0", "key1"};
    for (cl_uint r = 0; r < n; r++)
        for (int c = 0; c < 6; c++)
            in[6 * r + c] = (cl_uint)tsv_hex(t, r, in_cols[c]);

    cl_int err;
    cl_mem din = upload(ctx, in, 6 * n * sizeof *in), dout = device_buffer(ctx, 4 * n * sizeof *out);
    cl_kernel k = clCreateKernel(program, "psr_philox_kat", &err);
    assert_int_equal(err, CL_SUCCESS);
    assert_int_equal(clSetKernelArg(k, 0, sizeof din, &din), CL_SUCCESS);
    assert_int_equal(clSetKernelArg(k, 1, sizeof dout, &dout), CL_SUCCESS);
    assert_int_equal(clSetKernelArg(k, 2, sizeof n, &n), CL_SUCCESS);
    size_t global = n;
    assert_int_equal(clEnqueueNDRangeKernel(queue_of(ctx), k, 1, NULL, &global, NULL, 0, NULL, NULL),
                     CL_SUCCESS);
    download(ctx, dout, out, 4 * n * sizeof *out);
    static const char *out_cols[] = {"out0", "out1", "out2", "out3"};
    for (cl_uint r = 0; r < n; r++)
        for (int c = 0; c < 4; c++)
            if (out[4 * r + c] != (cl_uint)tsv_hex(t, r, out_cols[c]))
                fail_msg("philox row %u word %d: got %08x, want %08x", r, c, out[4 * r + c],
                         (unsigned)tsv_hex(t, r, out_cols[c]));
    clReleaseKernel(k);
    clReleaseMemObject(din);
    clReleaseMemObject(dout);
    free(in);
    free(out);
    tsv_free(t);
}

psr_noise_kind noise_of(unsigned flags)
{
    return flags & PSR_FLAG_FP64_NOISE   ? PSR_ORACLE_FP64
           : flags & PSR_FLAG_WIDE_NOISE ? PSR_ORACLE_WIDE
                                           : PSR_ORACLE_FP32;
}

void vector_logits(uint32_t vcase, uint32_t row, size_t vocab, float *out)
{
    for (uint32_t i = 0; i < vocab; i++) {
        uint32_t h = (i * 2654435761u) ^ (row * 2246822519u) ^ (vcase * 3266489917u);
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        out[i] = (float)(h >> 8) * 0x1p-20f - 8.0f;
    }
}

static uint64_t test_rng = 12345;

void test_seed(uint64_t seed)
{
    test_rng = seed;
}

uint32_t rnd(void)
{
    test_rng = test_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(test_rng >> 32);
}

int64_t random_seed(void)
{
    uint64_t high = rnd();
    return (int64_t)(high << 32 | rnd());
}

bool same_float(float a, float b)
{
    return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0;
}

double uniform(void)
{
    uint64_t hi = rnd(), lo = rnd();
    return ((double)((hi << 21) ^ lo) + 0.5) * 0x1p-53;
}

float normal(void)
{
    return (float)(sqrt(-2.0 * log(uniform())) * cos(6.283185307179586 * uniform()));
}

#define NOISE_BITS (PSR_FLAG_FP64_NOISE | PSR_FLAG_WIDE_NOISE)

void set_sample_flags(psr_sample_args *a, unsigned flags)
{
    a->flags = flags & ~NOISE_BITS;
    a->noise = psr_noise_of(flags);
}

void set_verify_flags(psr_verify_args *a, unsigned flags)
{
    a->flags = flags & ~NOISE_BITS;
    a->noise = psr_noise_of(flags);
}

psr_status sample_host_filtered(psr_context *ctx, const void *logits, psr_dtype dtype, size_t rows,
                                size_t vocab, size_t row_stride, const int64_t *seeds,
                                const int64_t *positions, const float *temperatures, const int32_t *top_k,
                                const float *top_p, const float *min_p, unsigned flags, int32_t *tokens,
                                uint32_t *row_flags, size_t *no_finite_rows)
{
    psr_sample_host_args a;
    psr_sample_host_args_init(&a, sizeof a);
    a.logits = logits, a.logits_dtype = dtype;
    a.rows = rows, a.vocab = vocab, a.row_stride = row_stride;
    a.seeds = seeds, a.positions = positions, a.temperatures = temperatures;
    a.top_k = top_k, a.top_p = top_p, a.min_p = min_p;
    a.flags = flags & ~NOISE_BITS, a.noise = psr_noise_of(flags);
    a.tokens = tokens, a.row_flags = row_flags, a.no_finite_rows = no_finite_rows;
    return psr_sample_host(ctx, &a);
}

psr_status sample_host(psr_context *ctx, const void *logits, psr_dtype dtype, size_t rows, size_t vocab,
                       size_t row_stride, const int64_t *seeds, const int64_t *positions,
                       const float *temperatures, unsigned flags, int32_t *tokens, uint32_t *row_flags,
                       size_t *no_finite_rows)
{
    return sample_host_filtered(ctx, logits, dtype, rows, vocab, row_stride, seeds, positions, temperatures,
                                NULL, NULL, NULL, flags, tokens, row_flags, no_finite_rows);
}

psr_status sample_rows_f32(psr_context *ctx, const float *logits, size_t rows, size_t vocab,
                           const int64_t *seeds, const int64_t *positions, const float *temperatures,
                           unsigned flags, int32_t *tokens)
{
    for (size_t at = 0; at < rows; at += SAMPLE_CHUNK) {
        size_t n = rows - at < SAMPLE_CHUNK ? rows - at : SAMPLE_CHUNK;
        psr_status st = sample_host(ctx, logits + at * vocab, PSR_DTYPE_F32, n, vocab, 0, seeds + at,
                                    positions + at, temperatures + at, flags, tokens + at, NULL, NULL);
        if (st != PSR_OK)
            return st;
    }
    return PSR_OK;
}

cl_context cl_context_of(const psr_context *ctx)
{
    cl_context c;
    assert_int_equal(psr_context_cl(ctx, &c, NULL, NULL), PSR_OK);
    return c;
}

cl_command_queue queue_of(const psr_context *ctx)
{
    cl_command_queue q;
    assert_int_equal(psr_context_cl(ctx, NULL, NULL, &q), PSR_OK);
    return q;
}

cl_mem upload(const psr_context *ctx, const void *host, size_t bytes)
{
    cl_int err;
    cl_mem m = clCreateBuffer(cl_context_of(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes,
                              (void *)host, &err);
    assert_int_equal(err, CL_SUCCESS);
    return m;
}

cl_mem device_buffer(const psr_context *ctx, size_t bytes)
{
    cl_int err;
    cl_mem m = clCreateBuffer(cl_context_of(ctx), CL_MEM_READ_WRITE, bytes, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    return m;
}

void download(const psr_context *ctx, cl_mem m, void *host, size_t bytes)
{
    assert_int_equal(clEnqueueReadBuffer(queue_of(ctx), m, CL_TRUE, 0, bytes, host, 0, NULL, NULL),
                     CL_SUCCESS);
}

void release_buffers(cl_mem *mems, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (mems[i])
            clReleaseMemObject(mems[i]);
}

/* ---- vocabulary shards ---- */

void expect_status(const psr_context *ctx, psr_status st, psr_status want, const char *words)
{
    if (st != want)
        fail_msg("status %s, wanted %s (%s)", psr_status_string(st), psr_status_string(want), psr_last_error(ctx));
    if (!strstr(psr_last_error(ctx), words))
        fail_msg("message \"%s\" does not name \"%s\"", psr_last_error(ctx), words);
}

void random_bounds(size_t vocab, size_t shards, size_t *bounds)
{
    bounds[0] = 0;
    bounds[shards] = vocab;
    for (size_t s = 1; s < shards; s++) {
        size_t left = vocab - bounds[s - 1] - (shards - s); /* tokens this shard may take */
        size_t even = (vocab - bounds[s - 1]) / (shards - s + 1);
        size_t take = rnd() % 4 == 0 ? 1 : 1 + rnd() % (2 * even > 1 ? 2 * even - 1 : 1);
        bounds[s] = bounds[s - 1] + (take < left ? take : left);
    }
}

void run_filter_rounds(psr_context *ctx, const psr_sample_args *args, size_t shards, const cl_mem *partial,
                       cl_mem reduced, size_t rows, bool forget_last_shard)
{
    size_t rounds = 0, words = rows * PSR_SHARD_FILTER_WORDS;
    assert_int_equal(psr_shard_filter_rounds(ctx, &args[0], &rounds), PSR_OK);
    uint64_t *sum = malloc(words * 8), *part = malloc(words * 8);
    for (size_t r = 0; r <= rounds; r++) {
        for (size_t s = 0; s < shards; s++) {
            psr_shard_filter_args fa;
            psr_shard_filter_args_init(&fa, sizeof fa);
            fa.sample = &args[s], fa.round = r, fa.reduced = reduced, fa.partial = partial[s];
            if (psr_shard_filter_round(ctx, &fa, NULL) != PSR_OK)
                fail_msg("filter round %zu, shard %zu: %s", r, s, psr_last_error(ctx));
        }
        if (r == rounds)
            break;
        memset(sum, 0, words * 8);
        for (size_t s = 0; s < shards - (forget_last_shard ? 1 : 0); s++) {
            download(ctx, partial[s], part, words * 8);
            for (size_t w = 0; w < words; w++)
                sum[w] = r == 0 ? (part[w] > sum[w] ? part[w] : sum[w]) : sum[w] + part[w];
        }
        assert_int_equal(clEnqueueWriteBuffer(queue_of(ctx), reduced, CL_TRUE, 0, words * 8, sum, 0, NULL, NULL),
                         CL_SUCCESS);
    }
    free(sum), free(part);
}

/* ---- internal state that has no call ----
 *
 * A few tests must reach state the library keeps to itself: the filter
 * pass's scratch (to fill it with garbage, or read the thresholds it
 * computed), the mark a filter launch cut short leaves (to simulate that
 * abort), and psr_verify's launch number (to reach its wrap without a
 * million launches). No call exposes these, nor should one; so the tests
 * touch psr_context's fields here and nowhere else. Everything the
 * experimental interface covers (tuning, last paths) goes through it. */

cl_mem filter_scratch(psr_context *ctx, filter_scratch_kind which, size_t *offset, size_t *bytes)
{
    /* the regions of ctx->filter in lib/ops/filter.c's order: cut, state, histograms */
    int region = which == FILTER_CUT ? 0 : which == FILTER_STATE ? 1 : 2;
    if (offset)
        *offset = ctx->filter_regions.at[region];
    if (bytes)
        *bytes = ctx->filter_regions.capacity[region];
    return ctx->filter.buffer;
}

void poison_counters(psr_context *ctx)
{
    /* the sampler's and psr_logprobs' scratch, their row counts among the rest (ops/sample.c,
     * ops/logprobs.c) */
    const psr_scratch *s[] = {&ctx->best_scratch, &ctx->logprobs};
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
        if (!s[i]->buffer)
            fail_msg("poison_counters: scratch %zu is not allocated yet", i);
        cl_uint junk = 0x5a5a5a5au;
        assert_int_equal(clEnqueueFillBuffer(ctx->queue, s[i]->buffer, &junk, sizeof junk, 0, s[i]->bytes / 4 * 4,
                                             0, NULL, NULL),
                         CL_SUCCESS);
    }
    assert_int_equal(clFinish(ctx->queue), CL_SUCCESS);
}

void set_filter_dirty(psr_context *ctx, bool dirty)
{
    ctx->filter_dirty = dirty;
}

/* The index of the first nonzero word of bytes at offset in m, or SIZE_MAX. */
static size_t first_nonzero(const psr_context *ctx, cl_mem m, size_t offset, size_t bytes, uint32_t *value)
{
    uint32_t *w = malloc(bytes);
    assert_non_null(w);
    assert_int_equal(clEnqueueReadBuffer(ctx->queue, m, CL_TRUE, offset, bytes, w, 0, NULL, NULL), CL_SUCCESS);
    size_t at = SIZE_MAX;
    for (size_t i = 0; i < bytes / 4 && at == SIZE_MAX; i++)
        if (w[i])
            at = i, *value = w[i];
    free(w);
    return at;
}

const char *nonzero_scratch_word(psr_context *ctx, size_t *word, uint32_t *value)
{
    /* region 0 of the sampler's (ops/sample.c), the filters' regions 1 and 2
     * (filter_scratch's FILTER_STATE and FILTER_HIST), psr_logprobs' ROW_DONE
     * region (ops/logprobs.c) */
    const struct {
        const char *name;
        const psr_scratch *scratch;
        const psr_regions *regions;
        int region;
    } zero[] = {
        {"the sampler's row counts and floors", &ctx->best_scratch, &ctx->best_scratch_regions, 0},
        {"the filters' state", &ctx->filter, &ctx->filter_regions, 1},
        {"the filters' histograms", &ctx->filter, &ctx->filter_regions, 2},
        {"psr_logprobs' row counts", &ctx->logprobs, &ctx->logprobs_regions, 4},
    };
    for (size_t i = 0; i < sizeof zero / sizeof zero[0]; i++) {
        size_t bytes = zero[i].regions->capacity[zero[i].region];
        if (!zero[i].scratch->buffer || !bytes)
            continue; /* not used yet */
        *word = first_nonzero(ctx, zero[i].scratch->buffer, zero[i].regions->at[zero[i].region], bytes, value);
        if (*word != SIZE_MAX)
            return zero[i].name;
    }
    return NULL;
}

uint32_t verify_epoch(const psr_context *ctx)
{
    return ctx->verify_epoch;
}

void set_verify_epoch(psr_context *ctx, uint32_t epoch)
{
    ctx->verify_epoch = epoch;
}
