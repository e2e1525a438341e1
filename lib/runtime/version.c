/* Run-time version and feature queries. */
#include "runtime/runtime.h"

const char *psr_version(void)
{
    return PSR_VERSION_STRING;
}

unsigned psr_version_number(void)
{
    return PSR_VERSION_NUMBER;
}

unsigned psr_features(void)
{
    unsigned f = 0;
#ifdef PSR_HAVE_CLBLAST
    f |= PSR_FEATURE_CLBLAST;
#endif
    return f;
}
