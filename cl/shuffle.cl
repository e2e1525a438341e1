/* Exchanges between the work-items of one warp on NVIDIA GPUs, through
 * inline PTX: NVIDIA's OpenCL offers no sub-group functions, and a round
 * through local memory costs a barrier of the whole group. Compiled only
 * where the host passes -DPSR_NV_SHUFFLE=1 (the tuning table's
 * warp_shuffle, docs/devices.md), for groups of whole warps: 32
 * consecutive work-items. Every work-item of the warp must take part. */
#ifndef PSR_NV_SHUFFLE
#define PSR_NV_SHUFFLE 0
#endif
#if PSR_NV_SHUFFLE
#define PSR_WARP 32u

/* v of the work-item `delta` lanes up (this one's own past the warp). */
inline uint psr_shfl_down(uint v, uint delta)
{
    uint r;
    asm volatile("shfl.sync.down.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(r) : "r"(v), "r"(delta));
    return r;
}

inline float psr_shfl_down_f(float v, uint delta)
{
    return as_float(psr_shfl_down(as_uint(v), delta));
}

inline ulong psr_shfl_down_ul(ulong v, uint delta)
{
    return upsample(psr_shfl_down((uint)(v >> 32), delta), psr_shfl_down((uint)v, delta));
}
#endif
