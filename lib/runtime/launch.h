/* Launch helpers every operation shares (launch.c). */
#ifndef PSR_RUNTIME_LAUNCH_H
#define PSR_RUNTIME_LAUNCH_H

#include <psr/psr_experimental.h>

#include "psr_shared.h"
#include "runtime/program.h"

#include <stdbool.h>

/* Bytes of logits a shape reads, or 0 when that overflows a size_t. */
size_t psr_logits_bytes(size_t offset, size_t rows, size_t stride, size_t vocab, size_t esize);
/* Inside the library a call's noise travels as two bits beside the
 * public PSR_SAMPLE_* flags: the bits that chose it in the 0.1 layout. */
#define PSR_FLAG_FP64_NOISE (1u << 1)
#define PSR_FLAG_WIDE_NOISE (1u << 3)
/* A call's public flags and noise as internal flags. `legacy`: the
 * caller's struct is the 0.1 layout, whose flags carry the noise bits
 * (and which has no noise field); otherwise those bits are reserved.
 * `name` prefixes the fields' names ("args->"). */
psr_status psr_call_flags(psr_context *ctx, unsigned flags, psr_noise noise, bool legacy, const char *name,
                          unsigned *out);
/* Checks internal flags and applies the fp64 policy: the flags to use. */
psr_status psr_resolve_flags(psr_context *ctx, unsigned flags, const char *name, unsigned *out);
psr_noise psr_noise_of(unsigned flags);
/* Writes the noise a call used to the caller's effective_noise (NULL:
 * nothing); a 0.1-layout caller gets the resolved flags there. */
void psr_report_noise(void *effective, bool legacy, unsigned flags);
/* One buffer of a call, the bytes its shape needs, and whether the call
 * writes it; NULL buffers are skipped (required ones are checked for
 * NULL before). */
typedef struct psr_buffer_need {
    cl_mem buffer;
    size_t bytes;
    const char *name;
    bool output;
} psr_buffer_need;
#define PSR_MAX_CALL_BUFFERS 24
/* One buffer alone: usable, of the context's cl_context
 * (PSR_ERR_FOREIGN_BUFFER), and holding `need` bytes
 * (PSR_ERR_BUFFER_TOO_SMALL). */
psr_status psr_check_buffer(psr_context *ctx, cl_mem buf, size_t need, const char *name);
/* PSR_ERR_NULL_ARGUMENT naming the first NULL buffer of a list of
 * required ones (their bytes unread). */
psr_status psr_check_required(psr_context *ctx, const psr_buffer_need *needs, size_t count);
/* psr_check_buffer over a call's whole list, stopping at the first that
 * fails; then no output may overlap another buffer of the list
 * (PSR_ERR_BUFFER_OVERLAP; sub-buffers compare by their range). */
psr_status psr_check_buffers(psr_context *ctx, const psr_buffer_need *needs, size_t count);
/* How a row is split over work-groups: `groups` chunks of `chunk` tokens
 * (a multiple of 4). */
void psr_split_rows(psr_context *ctx, size_t rows, size_t vocab, cl_uint *chunk, cl_uint *groups);
/* The same for a kernel of which `resident_per_unit` groups fit a compute
 * unit, in chunks of `min_steps` steps or more. */
void psr_split_rows_for(psr_context *ctx, size_t rows, size_t vocab, size_t resident_per_unit,
                        size_t min_steps, cl_uint *chunk, cl_uint *groups);
/* Verification's sampling groups: each costs more than the sampler's (its
 * request's statistics, the residual), so chunks are two steps or more
 * (on the H200 one-step chunks lost up to 14% at 16 x 5 x 32,000). */
void psr_split_verify(psr_context *ctx, size_t requests, size_t vocab, cl_uint *chunk, cl_uint *groups);
/* The argument builder: binds a kernel's arguments in order, by name.
 * Calls chain without checks; the first failure is kept and reported by
 * psr_kernel_args_end, which also (on a context built with
 * -cl-kernel-arg-info, as tests/test_kernel_args.c builds) compares every name and the
 * count with what the driver reports, so host and kernel cannot drift. */
#define PSR_KERNEL_MAX_ARGS 16
typedef struct psr_kernel_args {
    psr_context *ctx;
    cl_kernel kernel;
    const char *kernel_name;
    const char *names[PSR_KERNEL_MAX_ARGS];
    cl_uint count;
    cl_int err;         /* the first clSetKernelArg failure */
    cl_uint failed_at;  /* and its index */
} psr_kernel_args;
psr_kernel_args psr_kernel_args_begin(psr_context *ctx, cl_kernel kernel, const char *kernel_name);
void psr_arg_mem(psr_kernel_args *a, const char *name, cl_mem buffer);
void psr_arg_value(psr_kernel_args *a, const char *name, const void *value, size_t size);
/* __local scratch of `bytes` bytes. */
void psr_arg_local(psr_kernel_args *a, const char *name, size_t bytes);
psr_status psr_kernel_args_end(psr_kernel_args *a);
/* Can split rows finish in one kernel (a slot per group and a count per
 * row, cl/gumbel.cl)? It needs 64-bit atomics, indices that fit the key's
 * 20 bits and counts that fit 12. keys_only: the kernel gathers fp32 keys
 * only (verification's), so fp64 scores cannot. */
bool psr_one_pass(const psr_context *ctx, size_t vocab, cl_uint groups_per_row, bool keys_only, bool fp64);
/* Split rows without one pass: the finishing kernel `name` of variant v
 * and room for each group's partial (ctx->part_value, ctx->part_index). */
psr_status psr_reserve_partials(psr_context *ctx, const psr_variant *v, const char *name, size_t parts,
                                cl_kernel *finalize);
/* The rows' part of a sampling or filter kernel's parameters; a
 * row_stride of 0 means vocab. */
psr_rows_params psr_rows_params_of(size_t logits_offset, size_t row_stride, size_t vocab, size_t requests,
                                   cl_uint groups_per_row, cl_uint chunk);
/* Enqueues `groups` work-groups of `local` work-items. */
/* Clears a scratch buffer whose counters a cut-short launch may have left
 * (*dirty, set by psr_context_recover) before the kernels that count in it:
 * the fill waits for the caller's events, which are then spent (*nwait 0;
 * the kernels follow by queue order). Nothing is enqueued when !*dirty. */
psr_status psr_clear_if_dirty(psr_context *ctx, bool *dirty, const psr_scratch *buf, cl_uint *nwait,
                              const cl_event **wait, const char *what);
psr_status psr_enqueue_groups(psr_context *ctx, cl_kernel k, const char *name, size_t groups,
                              size_t local, cl_uint nwait, const cl_event *wait, cl_event *event);

#endif
