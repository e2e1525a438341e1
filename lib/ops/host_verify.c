/* Cold calls on the host (docs/cache.md): psr_verify computed by the host
 * oracle while its programs build. The device-held inputs are checked as
 * cl/verify.cl checks them: any bad one leaves tokens and num_sampled
 * untouched and shows in status; otherwise every request's accepted
 * drafts and its last token come from the oracle. */
#include "ops/ops.h"
#include "oracle/oracle.h"

#include <math.h>
#include <stdlib.h>

/* The call's inputs on the host. */
typedef struct verify_inputs {
    float *target, *cache, *temperatures;
    int32_t *draft_tokens;
    int64_t *seeds, *positions;
} verify_inputs;

static psr_status read_inputs(psr_context *ctx, const psr_verify_args *a, verify_inputs *in)
{
    psr_host_reads r = {ctx, "psr_verify", a->num_events_in_wait_list, a->event_wait_list, NULL, PSR_OK};
    size_t stride = a->target_row_stride ? a->target_row_stride : a->vocab;
    in->target = psr_host_read_logits(&r, a->target_logits, a->target_dtype, a->target_offset, a->rows, stride,
                                      a->vocab);
    in->cache = psr_host_read(&r, a->draft_cache, 0, a->requests * a->draft_cache_k * a->vocab * 4,
                              "args->draft_cache");
    in->draft_tokens = psr_host_read(&r, a->draft_tokens, 0, a->rows * 4, "args->draft_tokens");
    in->seeds = psr_host_read(&r, a->seeds, 0, a->requests * 8, "args->seeds");
    in->temperatures = psr_host_read(&r, a->temperatures, 0, a->requests * 4, "args->temperatures");
    in->positions = psr_host_read(&r, a->positions, 0, a->rows * 8, "args->positions");
    return r.st;
}

/* psr_verify_check of cl/verify.cl: the PSR_VERIFY_* bits of the inputs. */
static uint32_t input_status(const psr_verify_args *a, const verify_inputs *in)
{
    uint32_t status = 0;
    for (size_t req = 0; req < a->requests; req++) {
        for (int32_t row = a->cu[req]; row < a->cu[req + 1]; row++) {
            int64_t pos = in->positions[row];
            if (pos < 0 || pos >= PSR_MAX_POSITION)
                status |= PSR_VERIFY_BAD_POSITION;
            int32_t d = in->draft_tokens[row];
            if (row + 1 < a->cu[req + 1] && (d < -1 || d >= (int32_t)a->vocab))
                status |= PSR_VERIFY_BAD_TOKEN;
        }
        if (!psr_temperature_ok(in->temperatures[req]))
            status |= PSR_VERIFY_BAD_TEMPERATURE;
    }
    return status;
}

static psr_status write_outputs(psr_context *ctx, const psr_verify_args *a, uint32_t status, const int32_t *tokens,
                                const int32_t *num_sampled, cl_event *event)
{
    size_t cells = a->requests * (a->max_drafts + 1);
    psr_status st = PSR_OK;
    bool last_is_status = status || !cells;
    if (a->status)
        st = psr_host_write(ctx, "psr_verify", a->status, 0, 4, &status, "args->status",
                            last_is_status ? event : NULL);
    if (st != PSR_OK || status)
        return st;
    st = psr_host_write(ctx, "psr_verify", a->num_sampled, 0, a->requests * 4, num_sampled, "args->num_sampled",
                        NULL);
    if (st != PSR_OK)
        return st;
    if (a->tokens_dtype != PSR_TOKENS_I64)
        return psr_host_write(ctx, "psr_verify", a->tokens, 0, cells * 4, tokens, "args->tokens", event);
    int64_t *wide = malloc(cells * sizeof *wide);
    if (!wide)
        return psr_fail(ctx, PSR_ERR_OUT_OF_HOST_MEMORY, "psr_verify: out of host memory");
    for (size_t i = 0; i < cells; i++)
        wide[i] = tokens[i];
    st = psr_host_write(ctx, "psr_verify", a->tokens, 0, cells * 8, wide, "args->tokens", event);
    free(wide);
    return st;
}

psr_status psr_host_verify(psr_context *ctx, const psr_verify_args *a, unsigned flags, cl_event *event)
{
    verify_inputs in = {0};
    psr_status st = read_inputs(ctx, a, &in);
    size_t cells = a->requests * (a->max_drafts + 1);
    int32_t *tokens = malloc((cells ? cells : 1) * sizeof *tokens), *num = malloc(a->requests * sizeof *num);
    if (st == PSR_OK && (!tokens || !num))
        st = psr_fail(ctx, PSR_ERR_OUT_OF_HOST_MEMORY, "psr_verify: out of host memory");
    uint32_t status = st == PSR_OK ? input_status(a, &in) : 0;
    if (st == PSR_OK && !status) {
        psr_variant v = psr_variant_of(PSR_KERNELS_VERIFY, flags, a->target_dtype);
        psr_oracle_verify_in o = {a->requests, a->rows, a->vocab, a->max_drafts, a->cu, in.target, in.cache,
                                  a->draft_cache_k, in.draft_tokens, in.seeds, in.temperatures, in.positions,
                                  a->method == PSR_VERIFY_GREEDY,
                                  v.fp64 ? PSR_ORACLE_FP64 : v.wide ? PSR_ORACLE_WIDE : PSR_ORACLE_FP32};
        psr_oracle_verify(&o, tokens, num);
    }
    if (st == PSR_OK)
        st = write_outputs(ctx, a, status, tokens, num, event);
    if (st == PSR_OK)
        st = psr_host_event(ctx, "psr_verify", event);
    free(tokens), free(num);
    free(in.target), free(in.cache), free(in.temperatures), free(in.draft_tokens), free(in.seeds),
        free(in.positions);
    return st;
}
