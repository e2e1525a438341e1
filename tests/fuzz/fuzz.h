/* The entry point every fuzz target defines, as libFuzzer calls it; the
 * replay driver (replay.c) calls it on files for builds without libFuzzer. */
#ifndef PSR_FUZZ_H
#define PSR_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
