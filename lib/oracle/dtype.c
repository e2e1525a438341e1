/* Logits of 16-bit types as the kernels read them (cl/tokens.cl's loads:
 * vload_half and the bf16 shift), exact in fp32. */
#include "oracle.h"

#include <math.h>
#include <string.h>

float psr_oracle_f16(uint16_t h)
{
    int exponent = (h >> 10) & 0x1f;
    unsigned mantissa = h & 0x3ffu;
    float sign = (h & 0x8000u) ? -1.0f : 1.0f;
    if (exponent == 0x1f) { /* infinity, or NaN with its payload kept */
        uint32_t bits = (uint32_t)(h & 0x8000u) << 16 | 0x7f800000u | (uint32_t)mantissa << 13;
        float f;
        memcpy(&f, &bits, sizeof f);
        return f;
    }
    if (exponent == 0) /* subnormal: mantissa x 2^-24 */
        return sign * ldexpf((float)mantissa, -24);
    return sign * ldexpf((float)(mantissa | 0x400u), exponent - 25);
}

float psr_oracle_bf16(uint16_t b)
{
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}
