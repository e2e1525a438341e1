/* The runtime layer's internal interface, for the operations above it. */
#ifndef PSR_RUNTIME_H
#define PSR_RUNTIME_H

#include "runtime/abi.h"
#include "runtime/cache.h"
#include "runtime/context.h"
#include "runtime/device.h"
#include "runtime/launch.h"
#include "runtime/program.h"
#include "runtime/status.h"
#include "runtime/tuning.h"

#endif
