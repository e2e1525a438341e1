/* Run-time version queries. psr_features() is in lib/ops/lm_head.c: the
 * one optional part, CLBlast, is known only once it is loaded there. */
#include "runtime/runtime.h"

const char *psr_version(void)
{
    return PSR_VERSION_STRING;
}

unsigned psr_version_number(void)
{
    return PSR_VERSION_NUMBER;
}
