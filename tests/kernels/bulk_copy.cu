// Bulk asynchronous copies (sm_90, inline PTX): global to shared with
// `cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes`, completed on an mbarrier
// (`mbarrier.init`, `mbarrier.arrive.expect_tx`, a `mbarrier.try_wait.parity` loop); shared to
// global with `cp.async.bulk.global.shared::cta.bulk_group` and a reduction into global memory
// with `cp.reduce.async.bulk.global.shared::cta.bulk_group.add.u32`, both completed with
// `cp.async.bulk.commit_group` and `cp.async.bulk.wait_group 0`. Also `ldu.global` (a load of
// a value the same for the whole warp) and `prefetch.global.L2` (a hint: it moves no data to
// the thread). The bytes a bulk copy moves are its size operand (a multiple of 16; both
// addresses 16-byte aligned).
//
// bulk_copy: n u32 (n a multiple of 1024), one block of 256 threads per tile of 1024 u32 (4096
// bytes; grid = n / 1024). Thread 0 loads the block's tile of `in` into shared memory with one
// bulk copy; every thread waits for it, then multiplies its 4 words by *scale (read with
// ldu.global) and adds 1; thread 0 stores the tile to `out` with one bulk copy, adds it
// word by word into sums[0..1024) with one bulk reduction (sums[j] gets the sum over blocks of
// their tile's word j), and prefetches the next block's tile of `in` into L2.
//   cp.async.bulk (global to shared) n / 1024 copies of 4096 bytes: 4n bytes read
//   cp.async.bulk (shared to global) n / 1024 copies of 4096 bytes: 4n bytes written
//   cp.reduce.async.bulk .add.u32   n / 1024 reductions of 4096 bytes: 4n bytes
//   ldu.global.u32 4 bytes per thread: n / 4 loads, n bytes
//   prefetch.global.L2 one per block but the last: n / 1024 - 1 prefetches (no data moved)
//   no ld.global or st.global.
#include <stdint.h>

#define TILE 1024 // u32 words of a block's tile
#define BYTES (TILE * 4)

__device__ __forceinline__ uint32_t smem(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

extern "C" __global__ void bulk_copy(const unsigned *in, unsigned *out, unsigned *sums,
                                     const unsigned *scale, int n) {
    __shared__ alignas(128) unsigned tile[TILE];
    __shared__ alignas(8) uint64_t bar;
    int t = threadIdx.x;
    size_t first = (size_t)blockIdx.x * TILE;
    if (t == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem(&bar)) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (t == 0) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                     ::"r"(smem(&bar)), "r"(BYTES) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                     " [%0], [%1], %2, [%3];"
                     ::"r"(smem(tile)), "l"(in + first), "r"(BYTES), "r"(smem(&bar))
                     : "memory");
    }
    unsigned k;
    asm volatile("ldu.global.u32 %0, [%1];" : "=r"(k) : "l"(scale));
    uint32_t done;
    do {
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done) : "r"(smem(&bar)) : "memory");
    } while (!done);
    for (int j = t; j < TILE; j += blockDim.x) tile[j] = tile[j] * k + 1;
    // The generic proxy's writes to shared memory, made visible to the async proxy's reads.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (t == 0) {
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                     ::"l"(out + first), "r"(smem(tile)), "r"(BYTES) : "memory");
        asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.u32"
                     " [%0], [%1], %2;" ::"l"(sums), "r"(smem(tile)), "r"(BYTES) : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
        if (first + TILE < (size_t)n) {
            asm volatile("prefetch.global.L2 [%0];" ::"l"(in + first + TILE) : "memory");
        }
    }
}
