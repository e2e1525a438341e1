/* psr.h first, in C89, C11 and C++ (tests/header/meson.build): the header
 * alone must declare everything this file uses. Compiled, never linked. */
#include <psr/psr.h>

#include <stdio.h>

int psr_header_sample(void);

int psr_header_sample(void)
{
    psr_context_options opt;
    psr_sample_args args;
    psr_context *ctx = NULL;
    cl_event done = NULL;
    psr_status st;

    psr_context_options_init(&opt, sizeof opt);
    opt.device = "cpu";
    opt.log_level = PSR_LOG_ERROR;
    st = psr_context_create(&opt, &ctx);
    if (st != PSR_OK) {
        fprintf(stderr, "%s: %s\n", psr_status_string(st), psr_last_error(NULL));
        return 1;
    }
    psr_sample_args_init(&args, sizeof args);
    args.rows = 1;
    args.vocab = 16;
    args.logits_dtype = PSR_DTYPE_F16;
    args.flags = PSR_SAMPLE_DRAFTING;
    args.noise = PSR_NOISE_WIDE;
    st = psr_sample(ctx, &args, &done);
    if (done)
        clReleaseEvent(done);
    psr_context_free(ctx);
    printf("psr %s, CLBlast %s\n", PSR_VERSION_STRING,
           psr_features() & PSR_FEATURE_CLBLAST ? "loaded" : "absent");
    if (st != PSR_OK)
        return (int)st;
    return psr_version_number() == PSR_VERSION_NUMBER && PSR_MAX_POSITION > 0 ? 0 : 1;
}
