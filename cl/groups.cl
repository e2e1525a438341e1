/* Work-groups that hand work to each other within one launch.
 *
 * OpenCL 1.2 orders nothing between work-groups except through atomics, so
 * data one group leaves for another is stored with atomics (psr_publish),
 * which go to the device-wide level of the memory, and read through
 * volatile pointers, which go past any per-unit cache; a group fences its
 * stores before it counts itself done.
 */

/* A store for another group to read. */
inline void psr_publish(__global uint *at, uint v)
{
    atomic_xchg(at, v);
}

/* Counts one group into the word at `done`, by the one work-item that
 * published the group's results, after its stores: the word holds the
 * launch's number `launch` above a count of `bits` bits. The first group
 * of a launch to get here raises an older launch's word to this launch's
 * with a count of 0, so nothing is reset; the two atomics are on one
 * word, so they take effect in order without waiting for each other.
 * Returns the count with this group. */
inline uint psr_count_arrival(__global uint *done, uint launch, uint bits)
{
    mem_fence(CLK_GLOBAL_MEM_FENCE);
    atomic_max(done, launch << bits);
    return (atomic_inc(done) & ((1u << bits) - 1)) + 1;
}

/* psr_last_group for one work-item per group, for counts some groups may
 * never join: true in the last of `groups` to get here. */
inline bool psr_last_arrival(__global uint *done, uint groups, uint launch, uint bits)
{
    if (psr_count_arrival(done, launch, bits) != groups)
        return false;
    mem_fence(CLK_GLOBAL_MEM_FENCE);
    return true;
}

/* Called by every work-item once the group's stores are issued: true in
 * the last of `groups` groups to get here for the count `done`, which
 * that group resets to 0 for the next launch. Groups without `join` go
 * through the barriers without counting, and are never last (so every
 * group can reach the barriers, PSR_FLAT_BARRIERS in tokens.cl). */
inline bool psr_last_group_if(bool join, __global uint *done, uint groups, __local uint *flag)
{
    mem_fence(CLK_GLOBAL_MEM_FENCE);
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    if (get_local_id(0) == 0) {
        uint before = join ? atomic_inc(done) : 0;
        flag[0] = join && before == groups - 1;
        if (flag[0])
            atomic_xchg(done, 0);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    bool last = flag[0] != 0;
    if (last)
        mem_fence(CLK_GLOBAL_MEM_FENCE);
    return last;
}

inline bool psr_last_group(__global uint *done, uint groups, __local uint *flag)
{
    return psr_last_group_if(true, done, groups, flag);
}
