// Tensor (TMA) copies (sm_90, inline PTX) through a CUtensorMap passed by value as a
// `const __grid_constant__` kernel parameter: a 2D tile from global to shared memory with
// `cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes`, completed
// on an mbarrier, and back from shared to global memory with
// `cp.async.bulk.tensor.2d.global.shared::cta.bulk_group` (then `cp.async.bulk.commit_group`,
// `cp.async.bulk.wait_group.read 0`). The tensor map operand is the parameter's generic address.
// The bytes a tensor copy moves are its box's (set by the host in the map, cuTensorMapEncodeTiled;
// elements of the box outside the tensor are not read, and are zero filled in shared memory, or
// not written): here the maps must have a box of 64 × 32 f32 (8192 bytes), the byte count that
// the mbarrier expects.
//
// tensor_copy: `src` and `dst` map W × H f32 matrices (W a multiple of 64 and H of 32; no
// swizzle, no interleave), with boxes of 64 columns × 32 rows. One block of 128 threads per box
// (grid = (W / 64, H / 32)): thread 0 loads box (x = 64 blockIdx.x, y = 32 blockIdx.y) of src
// into shared memory with one tensor copy; every thread waits for it and doubles 16 of its
// floats; thread 0 stores the box to the same place in dst with one tensor copy.
//   cp.async.bulk.tensor (global to shared) W H / 2048 copies of 8192 bytes: 4 W H bytes read
//   cp.async.bulk.tensor (shared to global) W H / 2048 copies of 8192 bytes: 4 W H bytes written
//   no ld.global or st.global.
#include <cuda.h>
#include <stdint.h>

#define BOX_W 64
#define BOX_H 32
#define BYTES (BOX_W * BOX_H * 4)

__device__ __forceinline__ uint32_t smem(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

extern "C" __global__ void tensor_copy(const __grid_constant__ CUtensorMap src,
                                       const __grid_constant__ CUtensorMap dst) {
    __shared__ alignas(128) float box[BOX_H][BOX_W];
    __shared__ alignas(8) uint64_t bar;
    int t = threadIdx.x;
    int x = blockIdx.x * BOX_W, y = blockIdx.y * BOX_H;
    if (t == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem(&bar)) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (t == 0) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                     ::"r"(smem(&bar)), "r"(BYTES) : "memory");
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile"
                     ".mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                     ::"r"(smem(box)), "l"((uint64_t)&src), "r"(x), "r"(y), "r"(smem(&bar))
                     : "memory");
    }
    uint32_t done;
    do {
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done) : "r"(smem(&bar)) : "memory");
    } while (!done);
    for (int j = t; j < BOX_W * BOX_H; j += blockDim.x) box[j / BOX_W][j % BOX_W] *= 2.0f;
    // The generic proxy's writes to shared memory, made visible to the async proxy's reads.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (t == 0) {
        asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group"
                     " [%0, {%1, %2}], [%3];"
                     ::"l"((uint64_t)&dst), "r"(x), "r"(y), "r"(smem(box)) : "memory");
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    }
}
