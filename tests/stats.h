/* Goodness-of-fit helpers for the statistical tests; they
 * live in the check layer (lib/check/chi2.c) so `psr verify` shares them. */
#ifndef PSR_TEST_STATS_H
#define PSR_TEST_STATS_H

#include "check/check.h"

typedef psr_chi2_result chi2_result;
#define chi2_test psr_chi2_test
#define softmax psr_softmax

#endif
