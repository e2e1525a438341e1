/* psr sample: sample tokens from logits in .npy files, or from hidden
 * states through the LM head; psr demo. */
#include "cli.h"
#include "check.h"
#include "oracle.h"
#include <psr/psr_experimental.h>
#include "json.h"
#include "npy.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void sample_usage(FILE *out)
{
    fprintf(out,
            "usage: psr sample (--logits FILE.npy | --hidden FILE.npy --weights FILE.npy)\n"
            "                  [--temperature T] [--seed S | --seeds FILE.npy]\n"
            "                  [--pos P | --positions FILE.npy] [--drafting]\n"
            "                  [--top-k K] [--top-p P] [--min-p M] [--logprobs N] [--raw-logprobs]\n"
            "                  [--method gumbel|race] [--noise fp32|fp64|wide] [--fp64] [--fast]\n"
            "                  [--device SEL] [--json]\n"
            "\n"
            "Gumbel-max sampling with vLLM's random stream: one token per row of logits.\n"
            "\n"
            "  --logits       2-D .npy of float32 or float16, C order: [rows, vocab]\n"
            "  --hidden       instead of --logits: hidden states [rows, hidden] (.npy, float32\n"
            "                 or float16), with\n"
            "  --weights      the LM head [vocab, hidden] of the same dtype: the device computes\n"
            "                 logits = hidden x weights^T (CLBlast) and samples them there\n"
            "  --temperature  for every row (default 1; 0 is greedy argmax)\n"
            "  --seed S       int64 seed of every row (default 0), or\n"
            "  --seeds        int64 .npy with one seed per row (or one for all)\n"
            "  --pos P        position of every row (default 0), or\n"
            "  --positions    int64 .npy with one position per row (or one for all);\n"
            "                 positions are in [0, 2^30)\n"
            "  --drafting     the draft stream (positions salted by 2^30)\n"
            "  --top-k K      keep the K most likely tokens and their ties (default 0: off)\n"
            "  --top-p P      keep the fewest most likely tokens holding P, in (0, 1] (default 1: off)\n"
            "  --min-p M      drop tokens below M x the top probability, in [0, 1] (default 0: off);\n"
            "                 filters apply as min-p, top-k, top-p, after the temperature\n"
            "  --logprobs N   also the sampled token's logprob and rank, and the top N (0..20)\n"
            "                 tokens with their logprobs, of logits / T after the filters\n"
            "                 (--logits only)\n"
            "  --raw-logprobs logprobs of the logits as given instead of logits / T\n"
            "  --method       gumbel (default) or race: the exponential race over\n"
            "                 softmax(logits / T), computed inside psr; the same token up\n"
            "                 to rounding\n"
            "  --noise        fp32 (default), fp64 (needs a device with fp64) or wide\n"
            "                 (fp64-grade tail in fp32 arithmetic; docs/statistics.md)\n"
            "  --fp64         short for --noise fp64\n"
            "  --fast         native logs instead of the deterministic ones\n"
            "  --json         {\"tokens\": [...], \"device\": ..., ...} instead of one token a line\n"
            "                 (with --logprobs: \"logprobs\", \"ranks\" and \"top\": [[[id, logprob],\n"
            "                 ...], ...]; without --json each line is token, logprob, rank)\n");
}

/* One int64 per row from a .npy (1 value for all rows, or rows values). */
static int per_row_int64(const char *path, size_t rows, int64_t *out, char *err, size_t len)
{
    npy_array a;
    if (npy_read(path, &a, err, len))
        return 1;
    int rc = 0;
    if (a.dtype != NPY_I8 || a.ndim > 1) {
        snprintf(err, len, "%s: expected a 1-D int64 array (or a scalar)", path);
        rc = 1;
    } else if (a.count != 1 && a.count != rows) {
        snprintf(err, len, "%s: has %zu values; the logits have %zu rows (give 1 or %zu)", path,
                 a.count, rows, rows);
        rc = 1;
    } else {
        for (size_t r = 0; r < rows; r++)
            out[r] = ((const int64_t *)a.data)[a.count == 1 ? 0 : r];
    }
    npy_free(&a);
    return rc;
}

static bool parse_int64(const char *s, int64_t *out)
{
    char *end;
    long long v = strtoll(s, &end, 10);
    *out = v;
    return end != s && *end == '\0';
}

/* A 2-D float .npy (float32 or float16), or a message in err. */
static int read_matrix(const char *path, const char *what, npy_array *a, char *err, size_t len)
{
    if (npy_read(path, a, err, len))
        return 1;
    if (a->ndim != 2 || a->dtype == NPY_I8 || a->shape[0] == 0 || a->shape[1] == 0) {
        snprintf(err, len, "%s: expected a non-empty 2-D float32 or float16 array %s", path, what);
        npy_free(a);
        return 1;
    }
    return 0;
}

static bool temperature_ok(float t)
{
    return t == 0.0f || (isnormal(t) && t > 0.0f);
}

/* Logprobs of the sampled tokens for host logits (psr_logprobs). */
static psr_status host_logprobs(psr_context *ctx, const npy_array *logits, size_t rows, size_t vocab,
                                const float *temps, const int32_t *tokens, const int32_t *top_k,
                                const float *top_p, const float *min_p, int top_n, bool raw, float *lps,
                                int32_t *ranks, int32_t *top_ids, float *top_lps)
{
    psr_dtype dtype = logits->dtype == NPY_F2 ? PSR_DTYPE_F16 : PSR_DTYPE_F32;
    size_t tn = top_n > 0 ? (size_t)top_n : 1;
    const cl_mem_flags in = CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR;
    cl_int err = CL_SUCCESS;
    cl_mem b[10] = {NULL};
    const size_t bytes[10] = {rows * vocab * psr_dtype_size(dtype), rows * 4, rows * 4, rows * 4, rows * 4,
                              rows * tn * 4, rows * tn * 4, rows * 4, rows * 4, rows * 4};
    const void *host[10] = {logits->data, temps, tokens, NULL, NULL, NULL, NULL, top_k, top_p, min_p};
    for (int i = 0; i < 10 && err == CL_SUCCESS; i++)
        if (i < 7 || (!raw && host[i])) /* the filters shape processed logprobs only */
            b[i] = clCreateBuffer(cli_cl_context(ctx), host[i] ? in : CL_MEM_WRITE_ONLY, bytes[i], (void *)host[i],
                                  &err);
    psr_status st = PSR_OK;
    if (err != CL_SUCCESS)
        st = cli_fail(PSR_ERR_OPENCL, "allocating logprob buffers failed: %s (%d)",
                      psr_cl_error_string(err), err);
    if (st == PSR_OK) {
        psr_logprobs_args a;
        psr_logprobs_args_init(&a);
        a.rows = rows;
        a.vocab = vocab;
        a.logits = b[0];
        a.logits_dtype = dtype;
        a.requests = rows;
        a.temperatures = b[1];
        a.tokens = b[2];
        a.top_n = top_n;
        a.flags = raw ? PSR_LOGPROBS_RAW : 0;
        a.token_logprobs = b[3];
        a.token_ranks = b[4];
        a.top_ids = top_n ? b[5] : NULL;
        a.top_logprobs = top_n ? b[6] : NULL;
        a.top_k = b[7];
        a.top_p = b[8];
        a.min_p = b[9];
        st = psr_logprobs(ctx, &a, NULL);
    }
    void *out[4] = {lps, ranks, top_ids, top_lps};
    for (int i = 0; i < 4 && st == PSR_OK && err == CL_SUCCESS; i++)
        err = clEnqueueReadBuffer(cli_queue(ctx), b[3 + i], CL_TRUE, 0, bytes[3 + i], out[i], 0, NULL, NULL);
    if (st == PSR_OK && err != CL_SUCCESS)
        st = cli_fail(PSR_ERR_OPENCL, "reading logprobs failed: %s (%d)", psr_cl_error_string(err), err);
    clFinish(cli_queue(ctx));
    for (int i = 0; i < 10; i++)
        if (b[i])
            clReleaseMemObject(b[i]);
    return st;
}

/* The LM head path: logits = hidden x weights^T on the device, sampled
 * there without a trip through the host. Fails like psr_sample_host on a
 * bad position or temperature. */
static psr_status sample_hidden(psr_context *ctx, const npy_array *hidden, const npy_array *weights,
                                const int64_t *seeds, const int64_t *positions, const float *temps,
                                const int32_t *top_k, const float *top_p, const float *min_p,
                                unsigned flags, int32_t *tokens, uint32_t *row_flags)
{
    size_t rows = hidden->shape[0], hsize = hidden->shape[1], vocab = weights->shape[0];
    for (size_t r = 0; r < rows; r++) {
        if (positions[r] < 0 || positions[r] >= PSR_MAX_POSITION)
            return cli_fail(PSR_ERR_POSITION_RANGE, "positions[%zu] = %lld is outside [0, 2^30)",
                            r, (long long)positions[r]);
        if (!temperature_ok(temps[r]))
            return cli_fail(PSR_ERR_TEMPERATURE,
                            "temperatures[%zu] = %g is not 0 or a positive normal number", r,
                            (double)temps[r]);
        if (top_p && !(top_p[r] > 0.0f && top_p[r] <= 1.0f))
            return cli_fail(PSR_ERR_FILTER_RANGE, "psr sample: top_p[%zu] = %g is outside (0, 1]", r,
                            (double)top_p[r]);
        if (min_p && !(min_p[r] >= 0.0f && min_p[r] <= 1.0f))
            return cli_fail(PSR_ERR_FILTER_RANGE, "psr sample: min_p[%zu] = %g is outside [0, 1]", r,
                            (double)min_p[r]);
    }
    psr_dtype dtype = hidden->dtype == NPY_F2 ? PSR_DTYPE_F16 : PSR_DTYPE_F32;
    size_t es = psr_dtype_size(dtype);
    if (vocab > SIZE_MAX / es / rows)
        return cli_fail(PSR_ERR_INVALID_ARGUMENT, "%zu rows x %zu tokens of logits overflow a size_t",
                        rows, vocab);
    const cl_mem_flags in = CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR;
    cl_int err = CL_SUCCESS;
    cl_mem bufs[11] = {NULL};
    bufs[0] = clCreateBuffer(cli_cl_context(ctx), in, rows * hsize * es, hidden->data, &err);
    if (err == CL_SUCCESS)
        bufs[1] = clCreateBuffer(cli_cl_context(ctx), in, vocab * hsize * es, weights->data, &err);
    if (err == CL_SUCCESS)
        bufs[2] = clCreateBuffer(cli_cl_context(ctx), CL_MEM_READ_WRITE, rows * vocab * es, NULL, &err);
    if (err == CL_SUCCESS)
        bufs[3] = clCreateBuffer(cli_cl_context(ctx), in, rows * 8, (void *)seeds, &err);
    if (err == CL_SUCCESS)
        bufs[4] = clCreateBuffer(cli_cl_context(ctx), in, rows * 8, (void *)positions, &err);
    if (err == CL_SUCCESS)
        bufs[5] = clCreateBuffer(cli_cl_context(ctx), in, rows * 4, (void *)temps, &err);
    if (err == CL_SUCCESS)
        bufs[6] = clCreateBuffer(cli_cl_context(ctx), CL_MEM_WRITE_ONLY, rows * 4, NULL, &err);
    if (err == CL_SUCCESS)
        bufs[7] = clCreateBuffer(cli_cl_context(ctx), CL_MEM_WRITE_ONLY, rows * 4, NULL, &err);
    const void *filters[3] = {top_k, top_p, min_p};
    for (int f = 0; f < 3; f++)
        if (err == CL_SUCCESS && filters[f])
            bufs[8 + f] = clCreateBuffer(cli_cl_context(ctx), in, rows * 4, (void *)filters[f], &err);
    psr_status st = PSR_OK;
    if (err != CL_SUCCESS)
        st = cli_fail(PSR_ERR_OPENCL, "allocating device buffers failed: %s (%d)",
                      psr_cl_error_string(err), err);

    cl_event gemm = NULL;
    if (st == PSR_OK) {
        psr_lm_head_args la;
        psr_lm_head_args_init(&la);
        la.batch = rows;
        la.hidden_size = hsize;
        la.vocab = vocab;
        la.dtype = dtype;
        la.hidden = bufs[0];
        la.weights = bufs[1];
        la.logits = bufs[2];
        st = psr_logits_from_hidden(ctx, &la, &gemm);
    }
    if (st == PSR_OK) {
        psr_sample_args a;
        psr_sample_args_init(&a);
        a.rows = rows;
        a.vocab = vocab;
        a.logits = bufs[2];
        a.logits_dtype = dtype;
        a.requests = rows;
        a.seeds = bufs[3];
        a.positions = bufs[4];
        a.temperatures = bufs[5];
        a.tokens = bufs[6];
        a.row_flags = bufs[7];
        a.top_k = bufs[8];
        a.top_p = bufs[9];
        a.min_p = bufs[10];
        a.flags = flags;
        a.num_events_in_wait_list = 1;
        a.event_wait_list = &gemm;
        st = psr_sample(ctx, &a, NULL);
    }
    if (st == PSR_OK) {
        err = clEnqueueReadBuffer(cli_queue(ctx), bufs[6], CL_TRUE, 0, rows * 4, tokens, 0, NULL, NULL);
        if (err == CL_SUCCESS)
            err = clEnqueueReadBuffer(cli_queue(ctx), bufs[7], CL_TRUE, 0, rows * 4, row_flags, 0, NULL,
                                      NULL);
        if (err != CL_SUCCESS)
            st = cli_fail(PSR_ERR_OPENCL, "reading the tokens failed: %s (%d)",
                          psr_cl_error_string(err), err);
    }
    if (gemm)
        clReleaseEvent(gemm);
    clFinish(cli_queue(ctx)); /* nothing may still use the buffers below */
    for (int i = 0; i < 11; i++)
        if (bufs[i])
            clReleaseMemObject(bufs[i]);
    return st;
}

int cmd_sample(int argc, char **argv)
{
    const char *logits_path = NULL, *seeds_path = NULL, *pos_path = NULL, *device = NULL;
    const char *hidden_path = NULL, *weights_path = NULL;
    int64_t seed = 0, pos = 0, top_k = 0;
    float temp = 1.0f, top_p = 1.0f, min_p = 0.0f;
    bool filtered = false;
    unsigned flags = 0;
    bool as_json = false;
    int logprobs_n = -1; /* -1: no logprobs */
    bool raw_logprobs = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (cli_is_help(arg)) {
            sample_usage(stdout);
            return CLI_OK;
        } else if (strcmp(arg, "--json") == 0) {
            as_json = true;
        } else if (strcmp(arg, "--drafting") == 0) {
            flags |= PSR_SAMPLE_DRAFTING;
        } else if (strcmp(arg, "--fp64") == 0) {
            flags |= PSR_SAMPLE_FP64_NOISE;
        } else if (strcmp(arg, "--fast") == 0) {
            flags |= PSR_SAMPLE_FAST_MATH;
        } else if (strcmp(arg, "--raw-logprobs") == 0) {
            raw_logprobs = true;
        } else if (!val) {
            return cli_usage_error("sample", "%s needs a value", arg);
        } else if (strcmp(arg, "--method") == 0) {
            if (strcmp(val, "race") == 0)
                flags |= PSR_SAMPLE_RACE;
            else if (strcmp(val, "gumbel") == 0)
                flags &= ~PSR_SAMPLE_RACE;
            else
                return cli_usage_error("sample", "--method is gumbel or race, not \"%s\"", val);
            i++;
        } else if (strcmp(arg, "--noise") == 0) {
            flags &= ~(PSR_SAMPLE_FP64_NOISE | PSR_SAMPLE_WIDE_NOISE);
            if (strcmp(val, "fp64") == 0)
                flags |= PSR_SAMPLE_FP64_NOISE;
            else if (strcmp(val, "wide") == 0)
                flags |= PSR_SAMPLE_WIDE_NOISE;
            else if (strcmp(val, "fp32") != 0)
                return cli_usage_error("sample", "--noise is fp32, fp64 or wide, not \"%s\"", val);
            i++;
        } else if (strcmp(arg, "--logits") == 0) {
            logits_path = val, i++;
        } else if (strcmp(arg, "--hidden") == 0) {
            hidden_path = val, i++;
        } else if (strcmp(arg, "--weights") == 0) {
            weights_path = val, i++;
        } else if (strcmp(arg, "--seeds") == 0) {
            seeds_path = val, i++;
        } else if (strcmp(arg, "--positions") == 0) {
            pos_path = val, i++;
        } else if (strcmp(arg, "--device") == 0) {
            device = val, i++;
        } else if (strcmp(arg, "--seed") == 0) {
            if (!parse_int64(val, &seed))
                return cli_usage_error("sample", "--seed \"%s\" is not an integer", val);
            i++;
        } else if (strcmp(arg, "--pos") == 0) {
            if (!parse_int64(val, &pos))
                return cli_usage_error("sample", "--pos \"%s\" is not an integer", val);
            i++;
        } else if (strcmp(arg, "--top-k") == 0) {
            if (!parse_int64(val, &top_k) || top_k < INT32_MIN || top_k > INT32_MAX)
                return cli_usage_error("sample", "--top-k \"%s\" is not a 32-bit integer", val);
            filtered = true, i++;
        } else if (strcmp(arg, "--top-p") == 0 || strcmp(arg, "--min-p") == 0) {
            char *end;
            float v = strtof(val, &end);
            if (end == val || *end)
                return cli_usage_error("sample", "%s \"%s\" is not a number", arg, val);
            *(arg[2] == 't' ? &top_p : &min_p) = v;
            filtered = true, i++;
        } else if (strcmp(arg, "--logprobs") == 0) {
            int64_t n;
            if (!parse_int64(val, &n) || n < 0 || n > PSR_LOGPROBS_MAX_TOP_N)
                return cli_usage_error("sample", "--logprobs \"%s\" is not 0..%d", val, PSR_LOGPROBS_MAX_TOP_N);
            logprobs_n = (int)n, i++;
        } else if (strcmp(arg, "--temperature") == 0) {
            char *end;
            temp = strtof(val, &end);
            if (end == val || *end)
                return cli_usage_error("sample", "--temperature \"%s\" is not a number", val);
            i++;
        } else {
            return cli_usage_error("sample", "unknown argument \"%s\"", arg);
        }
    }
    if (raw_logprobs && logprobs_n < 0)
        return cli_usage_error("sample", "--raw-logprobs goes with --logprobs N");
    if (logprobs_n >= 0 && !logits_path)
        return cli_usage_error("sample", "--logprobs works with --logits");
    if (logits_path && (hidden_path || weights_path))
        return cli_usage_error("sample", "give --logits, or --hidden with --weights, not both");
    if (!logits_path && !(hidden_path && weights_path))
        return cli_usage_error("sample", hidden_path || weights_path
                                             ? "--hidden and --weights go together"
                                             : "--logits FILE.npy (or --hidden and --weights) is required");

    char err[512];
    npy_array logits = {0}, hidden = {0}, weights = {0};
    int bad;
    if (logits_path)
        bad = read_matrix(logits_path, "[rows, vocab]", &logits, err, sizeof err);
    else
        bad = read_matrix(hidden_path, "[rows, hidden]", &hidden, err, sizeof err) ||
              read_matrix(weights_path, "[vocab, hidden]", &weights, err, sizeof err);
    if (bad) {
        fprintf(stderr, "psr sample: %s\n", err);
        npy_free(&hidden);
        return CLI_FAILED;
    }
    if (hidden_path && (hidden.shape[1] != weights.shape[1] || hidden.dtype != weights.dtype)) {
        fprintf(stderr, "psr sample: --hidden %s is [%zu, %zu] %s but --weights %s is [%zu, %zu] %s: "
                "they need the same hidden size and dtype\n",
                hidden_path, hidden.shape[0], hidden.shape[1], hidden.dtype == NPY_F2 ? "float16" : "float32",
                weights_path, weights.shape[0], weights.shape[1],
                weights.dtype == NPY_F2 ? "float16" : "float32");
        npy_free(&hidden), npy_free(&weights);
        return CLI_FAILED;
    }
    size_t rows = logits_path ? logits.shape[0] : hidden.shape[0];
    size_t vocab = logits_path ? logits.shape[1] : weights.shape[0];
    int64_t *seeds = malloc(rows * 8), *positions = malloc(rows * 8);
    float *temps = malloc(rows * 4);
    int32_t *tokens = malloc(rows * 4);
    uint32_t *row_flags = malloc(rows * 4);
    int32_t *ks = filtered ? malloc(rows * 4) : NULL;
    float *ps = filtered ? malloc(rows * 4) : NULL, *mps = filtered ? malloc(rows * 4) : NULL;
    int rc = CLI_OK;
    if (!seeds || !positions || !temps || !tokens || !row_flags ||
        (filtered && (!ks || !ps || !mps))) {
        rc = cli_report(PSR_ERR_OUT_OF_HOST_MEMORY, NULL);
        goto out;
    }
    for (size_t r = 0; r < rows; r++) {
        seeds[r] = seed;
        positions[r] = pos;
        temps[r] = temp;
        if (filtered)
            ks[r] = (int32_t)top_k, ps[r] = top_p, mps[r] = min_p;
    }
    if ((seeds_path && per_row_int64(seeds_path, rows, seeds, err, sizeof err)) ||
        (pos_path && per_row_int64(pos_path, rows, positions, err, sizeof err))) {
        fprintf(stderr, "psr sample: %s\n", err);
        rc = CLI_FAILED;
        goto out;
    }

    psr_context *ctx = cli_open_context(device, false);
    if (!ctx) {
        rc = CLI_FAILED;
        goto out;
    }
    size_t no_finite = 0;
    psr_status st;
    if (hidden_path) {
        st = sample_hidden(ctx, &hidden, &weights, seeds, positions, temps, ks, ps, mps, flags,
                           tokens, row_flags);
        for (size_t r = 0; st == PSR_OK && r < rows; r++)
            no_finite += (row_flags[r] & PSR_ROW_NO_FINITE) != 0;
    } else {
        st = psr_sample_host_filtered(ctx, logits.data,
                                      logits.dtype == NPY_F2 ? PSR_DTYPE_F16 : PSR_DTYPE_F32, rows,
                                      vocab, 0, seeds, positions, temps, ks, ps, mps, flags, tokens,
                                      row_flags, &no_finite);
    }
    size_t tn = logprobs_n > 0 ? (size_t)logprobs_n : 1;
    float *lps = NULL, *top_lps = NULL;
    int32_t *ranks = NULL, *top_ids = NULL;
    if (st == PSR_OK && logprobs_n >= 0) {
        lps = malloc(rows * 4), ranks = malloc(rows * 4);
        top_lps = malloc(rows * tn * 4), top_ids = malloc(rows * tn * 4);
        st = lps && ranks && top_lps && top_ids
                 ? host_logprobs(ctx, &logits, rows, vocab, temps, tokens, ks, ps, mps, logprobs_n,
                                 raw_logprobs, lps, ranks, top_ids, top_lps)
                 : PSR_ERR_OUT_OF_HOST_MEMORY;
    }
    if (st != PSR_OK) {
        rc = cli_report(st, ctx);
    } else if (as_json) {
        psr_device_info info;
        psr_context_device_info(ctx, &info);
        json_writer w;
        json_init(&w, stdout);
        json_begin_object(&w);
        json_key(&w, "tokens");
        json_begin_array(&w);
        for (size_t r = 0; r < rows; r++)
            json_int(&w, tokens[r]);
        json_end_array(&w);
        json_key(&w, "device");
        json_string(&w, info.name);
        json_key(&w, "platform");
        json_string(&w, info.platform_name);
        json_key(&w, "rows");
        json_uint(&w, rows);
        json_key(&w, "vocab");
        json_uint(&w, vocab);
        if (hidden_path) {
            json_key(&w, "hidden_size");
            json_uint(&w, hidden.shape[1]);
        }
        json_key(&w, "noise");
        unsigned used = flags;
        psr_context_last_sample_flags(ctx, &used);
        json_string(&w, used & PSR_SAMPLE_FP64_NOISE   ? "fp64"
                        : used & PSR_SAMPLE_WIDE_NOISE ? "wide"
                                                       : "fp32");
        json_key(&w, "method");
        json_string(&w, used & PSR_SAMPLE_RACE ? "race" : "gumbel");
        json_key(&w, "deterministic");
        json_bool(&w, !(used & PSR_SAMPLE_FAST_MATH));
        json_key(&w, "drafting");
        json_bool(&w, flags & PSR_SAMPLE_DRAFTING);
        json_key(&w, "no_finite_rows");
        json_uint(&w, no_finite);
        if (logprobs_n >= 0) {
            json_key(&w, "logprobs_raw");
            json_bool(&w, raw_logprobs);
            json_key(&w, "logprobs");
            json_begin_array(&w);
            for (size_t r = 0; r < rows; r++)
                json_double(&w, lps[r]);
            json_end_array(&w);
            json_key(&w, "ranks");
            json_begin_array(&w);
            for (size_t r = 0; r < rows; r++)
                json_int(&w, ranks[r]);
            json_end_array(&w);
            json_key(&w, "top");
            json_begin_array(&w);
            for (size_t r = 0; r < rows; r++) {
                json_begin_array(&w);
                for (int k = 0; k < logprobs_n; k++) {
                    json_begin_array(&w);
                    json_int(&w, top_ids[r * tn + (size_t)k]);
                    json_double(&w, top_lps[r * tn + (size_t)k]);
                    json_end_array(&w);
                }
                json_end_array(&w);
            }
            json_end_array(&w);
        }
        json_end_object(&w);
        json_finish(&w);
    } else {
        for (size_t r = 0; r < rows; r++)
            if (logprobs_n >= 0)
                printf("%d\t%.9g\t%d\n", tokens[r], (double)lps[r], ranks[r]);
            else
                printf("%d\n", tokens[r]);
        if (no_finite)
            fprintf(stderr, "psr sample: %zu rows had no finite logit (their token is still in range)\n",
                    no_finite);
    }
    free(lps), free(ranks), free(top_lps), free(top_ids);
    psr_context_free(ctx);
out:
    npy_free(&logits), npy_free(&hidden), npy_free(&weights);
    free(seeds), free(positions), free(temps), free(tokens), free(row_flags);
    free(ks), free(ps), free(mps);
    return rc;
}

/* psr demo: the main job on the default device, checked against the host. */
int cmd_demo(int argc, char **argv)
{
    if (argc > 1) {
        if (cli_is_help(argv[1])) {
            printf("usage: psr demo [--device SEL]\n\n"
                   "Samples 8 rows of random logits over a 32,000-token vocabulary on the chosen\n"
                   "device (target stream, draft stream, greedy), and checks every token\n"
                   "against psr's host oracle, which computes the same bits on the CPU.\n");
            return CLI_OK;
        }
        if (strcmp(argv[1], "--device") != 0 || argc != 3)
            return cli_usage_error("demo", "unknown arguments");
    }
    enum { ROWS = 8, VOCAB = 32000 };
    psr_context *ctx = cli_open_context(argc == 3 ? argv[2] : NULL, false);
    if (!ctx)
        return CLI_FAILED;
    psr_status st = PSR_OK;
    psr_device_info info;
    psr_context_device_info(ctx, &info);
    printf("psr %s on %u:%u %s (%s)\n", psr_version(), info.platform_index, info.device_index,
           info.name, info.platform_name);

    float *logits = malloc((size_t)ROWS * VOCAB * sizeof *logits);
    uint64_t s = 2024;
    for (size_t i = 0; i < (size_t)ROWS * VOCAB; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        logits[i] = (float)((double)(s >> 40) / 16777216.0 * 12.0 - 6.0);
    }
    int64_t seeds[ROWS], pos[ROWS];
    float temps[ROWS];
    for (int r = 0; r < ROWS; r++) {
        seeds[r] = 1000 + r;
        pos[r] = 17 + r;
        temps[r] = 0.8f;
    }
    const struct {
        const char *name;
        unsigned flags;
        float temp;
    } runs[] = {{"target stream, T=0.8", 0, 0.8f}, {"draft stream,  T=0.8", PSR_SAMPLE_DRAFTING, 0.8f},
                {"greedy,        T=0  ", 0, 0.0f}};
    int rc = CLI_OK;
    for (size_t k = 0; k < 3 && rc == CLI_OK; k++) {
        int32_t tokens[ROWS];
        for (int r = 0; r < ROWS; r++)
            temps[r] = runs[k].temp;
        /* The first call builds (or loads) the kernels; time the second. */
        struct timespec t0, t1;
        st = psr_sample_host(ctx, logits, PSR_DTYPE_F32, ROWS, VOCAB, 0, seeds, pos, temps,
                             runs[k].flags, tokens, NULL, NULL);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (st == PSR_OK)
            st = psr_sample_host(ctx, logits, PSR_DTYPE_F32, ROWS, VOCAB, 0, seeds, pos, temps,
                                 runs[k].flags, tokens, NULL, NULL);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (st != PSR_OK) {
            rc = cli_report(st, ctx);
            break;
        }
        int agree = 0;
        printf("%s:", runs[k].name);
        for (int r = 0; r < ROWS; r++) {
            printf(" %5d", tokens[r]);
            agree += tokens[r] == psr_oracle_sample_row(logits + (size_t)r * VOCAB, VOCAB, runs[k].temp,
                                                        seeds[r], pos[r],
                                                        runs[k].flags & PSR_SAMPLE_DRAFTING, PSR_NOISE_FP32,
                                                        NULL);
        }
        double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
        printf("   oracle agrees %d/%d (%.2f ms, copies included)\n", agree, ROWS, ms);
        if (agree != ROWS)
            rc = CLI_FAILED;
    }
    free(logits);
    psr_context_free(ctx);
    if (rc == CLI_OK)
        printf("every token matches the host oracle bit for bit\n");
    return rc;
}
