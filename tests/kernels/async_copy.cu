// Asynchronous copies from global to shared memory (`cp.async`, sm_80+) with the __pipeline_*
// functions of cuda_pipeline.h:
// 4- and 8-byte copies are `cp.async.ca.shared.global`, 16-byte ones `cp.async.cg.shared.global`
// (the header writes every copy with its src-size operand: `cp.async.cg... [d], [s], 16, 16;`).
// A zero-filling copy (`__pipeline_memcpy_async(dst, src, size, zfill)`) reads size - zfill
// bytes from global memory and writes `size` bytes of shared memory; with zfill == size it
// reads nothing. The bytes a cp.async moves from global memory are its src-size operand.
//
// Those functions are in cuda_pipeline_primitives.h (cuda_pipeline.h adds C++ classes that need
// cuda_awbarrier.h). It includes cuda_awbarrier_primitives.h, only for __pipeline_arrive_on
// (unused here), and that includes <nv/target>, a CCCL header that the PyPI wheels of
// scripts/cuda-tools do not have. So its include guard is defined beforehand, to skip it, and
// the one type the pipeline header takes from it is declared as it declares it; the copies are
// the header's own.
#include <stdint.h>
#define _CUDA_AWBARRIER_PRIMITIVES_H_
typedef uint64_t __mbarrier_t;
#include <cuda_pipeline_primitives.h>

// async_copy: n threads, blocks of 256 (grid = n / 256, n a multiple of 256). Thread i copies
// a[i] (4 bytes, .ca), b[i] (8 bytes, .ca), c[i] (16 bytes, .cg), the first 12 bytes of d[i]
// (16 bytes, .cg, src-size 12: the last float is zero filled) and none of e[i] (8 bytes, .ca,
// src-size 0: zero filled) into shared memory, commits them as one group, waits for it, and
// stores the sum of the 12 floats copied in out[i] (plus the zeros).
//   cp.async (global to shared) 5n copies: 4n + 8n + 16n + 12n + 0 = 40n bytes read from global
//     (.ca: 4n + 8n + 0 bytes in 3n copies; .cg: 16n + 12n bytes in 2n copies)
//   st.global 4n bytes (out); no ld.global.
extern "C" __global__ void async_copy(const float *a, const float2 *b, const float4 *c,
                                      const float4 *d, const float2 *e, float *out, int n) {
    __shared__ float sa[256];
    __shared__ float2 sb[256], se[256];
    __shared__ float4 sc[256], sd[256];
    int t = threadIdx.x;
    int i = blockIdx.x * blockDim.x + t;
    if (i >= n) return;
    __pipeline_memcpy_async(&sa[t], &a[i], 4);
    __pipeline_memcpy_async(&sb[t], &b[i], 8);
    __pipeline_memcpy_async(&sc[t], &c[i], 16);
    __pipeline_memcpy_async(&sd[t], &d[i], 16, 4);
    __pipeline_memcpy_async(&se[t], &e[i], 8, 8);
    __pipeline_commit();
    __pipeline_wait_prior(0);
    float4 x = sc[t], y = sd[t];
    out[i] = sa[t] + sb[t].x + sb[t].y + x.x + x.y + x.z + x.w + y.x + y.y + y.z + y.w +
             se[t].x + se[t].y;
}

// async_stages: a double-buffered loop, as a pipelined kernel reads its tiles. One block of 256
// threads per row of `tiles` tiles of 256 float4 (grid = rows, in is rows × tiles × 256
// float4); the copy of tile k + 1 is in flight while tile k is summed (wait_prior(1)).
// Thread t sums element t of every tile of its row and stores it in out[row * 256 + t].
//   cp.async.cg 16 bytes per thread per tile: rows × tiles × 256 copies, 4096 × rows × tiles
//     bytes (all of in)
//   st.global.v4 16 bytes per thread: 4096 × rows bytes; no ld.global.
extern "C" __global__ void async_stages(const float4 *in, float4 *out, int tiles) {
    __shared__ float4 buf[2][256];
    int t = threadIdx.x;
    const float4 *row = in + (size_t)blockIdx.x * tiles * 256;
    float4 sum = make_float4(0, 0, 0, 0);
    if (tiles > 0) __pipeline_memcpy_async(&buf[0][t], &row[t], 16);
    __pipeline_commit();
    for (int k = 0; k < tiles; k++) {
        if (k + 1 < tiles) {
            __pipeline_memcpy_async(&buf[(k + 1) & 1][t], &row[(k + 1) * 256 + t], 16);
        }
        __pipeline_commit();
        __pipeline_wait_prior(1);
        float4 v = buf[k & 1][t];
        sum.x += v.x, sum.y += v.y, sum.z += v.z, sum.w += v.w;
    }
    out[blockIdx.x * 256 + t] = sum;
}
