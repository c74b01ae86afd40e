// A CUDA C program whose buffers are touched in known ways, for the `allocs` set of `egpu mem`
// on the GPU machine (egpu-preload/tests/programs/alloc_check.py runs it, bare and under
// `egpu mem run --sets allocs`). Buffers of N floats: `once` read once, `looped` read R times
// (each pass at another offset, so that nothing is hoisted), `written` written once, `untouched`
// never touched, and `out`, which both reading kernels write and `count` adds to atomically.
// Before exiting the program prints, per buffer, its device address and the bytes its kernels
// moved there by class, worked out from the sizes:
//
//     expect alloc 0x7f0000200000 load 4194304 store 0 atomic 0
//
// and `results ...` with a checksum of `out`, which must be the same bare and under egpu.
//     nvcc -O2 -arch=sm_90 alloc_traffic.cu -o alloc_traffic
#include <cstdint>
#include <cstdio>

#include "cuda_check.h"

constexpr int N = 1 << 20;  // elements of every buffer; a multiple of the block
constexpr int BLOCK = 256;
constexpr int R = 5;        // passes of `looped`

__global__ void read_once(const float *once, float *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    out[i] = once[i] * 2.0f;
}

__global__ void read_looped(const float *looped, float *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float s = 0.0f;
    for (int r = 0; r < R; r++) s += looped[(i + r * 4099) % N];
    out[i] = s;
}

__global__ void fill(float *written) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    written[i] = (float)i;
}

__global__ void count(unsigned *out_bits) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(&out_bits[i % 1024], 1u);
}

int main() {
    const size_t bytes = N * sizeof(float);
    float *once, *looped, *written, *untouched, *out;
    CHECK(cudaMalloc(&once, bytes));
    CHECK(cudaMalloc(&looped, bytes));
    CHECK(cudaMalloc(&written, bytes));
    CHECK(cudaMalloc(&untouched, bytes));
    CHECK(cudaMalloc(&out, bytes));
    CHECK(cudaMemset(once, 0, bytes));
    CHECK(cudaMemset(looped, 0, bytes));
    CHECK(cudaMemset(out, 0, bytes));
    const int blocks = N / BLOCK;
    read_once<<<blocks, BLOCK>>>(once, out);
    read_looped<<<blocks, BLOCK>>>(looped, out);
    fill<<<blocks, BLOCK>>>(written);
    count<<<blocks, BLOCK>>>(reinterpret_cast<unsigned *>(out));
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    static float host[N];
    CHECK(cudaMemcpy(host, out, bytes, cudaMemcpyDeviceToHost));
    double sum = 0;
    for (int i = 0; i < N; i++) sum += host[i];
    const uint64_t f = sizeof(float), n = N;
    struct { const void *at; uint64_t load, store, atomic; } expect[] = {
        {once, n * f, 0, 0},
        {looped, R * n * f, 0, 0},
        {written, 0, n * f, 0},
        {untouched, 0, 0, 0},
        {out, 0, 2 * n * f, n * sizeof(unsigned)},
    };
    for (auto &e : expect)
        printf("expect alloc %p load %llu store %llu atomic %llu\n", e.at,
               (unsigned long long)e.load, (unsigned long long)e.store,
               (unsigned long long)e.atomic);
    printf("results %.6e\n", sum);
    return 0;
}
