/* The tuning database (tuning.c): per kernel family, per device. */
#ifndef PSR_RUNTIME_TUNING_H
#define PSR_RUNTIME_TUNING_H

#include <psr/psr_experimental.h>

#include <stdbool.h>

/* The table's tuning of a device, before the environment. */
psr_tuning psr_tuning_for(const psr_device_info *info);
/* Applies every PSR_TUNE_* variable that is set to *t, checking each
 * against its bounds; a value out of bounds is ignored with a warning.
 * Logs what it changed through ctx. */
void psr_tuning_apply_env(psr_context *ctx, const psr_device_info *info, psr_tuning *t);
/* Do two tunings build the same kernels? */
bool psr_tuning_same_build(const psr_tuning *a, const psr_tuning *b);

/* Whether the device is an NVIDIA GPU (inline PTX builds there). */
bool psr_device_is_nvidia_gpu(const psr_device_info *info);

#endif
