// record_cost: what a `timeline` record costs a grid-stride saxpy (2^28 floats, 8 blocks of 256
// threads per SM, the GPU benchmark's), each part of a record timed with CUDA events beside the
// bare kernel in the same run. One warp in 32 is sampled as the `timeline` set samples (the
// Fibonacci hash of `block.x * 32 + warp`), or, for `lines-*`, one 128-byte line in 32 of each
// warp's; at every access of a sampled warp (three per step: two loads, a store) its lowest
// lane does the part named:
//
//   bare          nothing, and no test
//   test          the sampling test only (every warp, every access)
//   globaltimer   reads %globaltimer
//   clock         reads %clock64
//   stores        writes a 48-byte record into the warp's own buffer (no atomic)
//   timer-stores  both: what a record costs with tickets taken by the batch, but the batch's
//                 two atomics and release per 32 records
//   atomics       two dependent atomics and a release store per record (tickets per record,
//                 as rings were written before batches), with the clock and the stores
//   lines-*       timer-stores and atomics, one line in 32 of every warp's sampled
//
// It says which part makes a sampled warp slow, and so what `timeline` should do about it.
//
//     nvcc -O2 -arch=sm_90 record_cost.cu -o record_cost && ./record_cost
#include "cuda_check.h"

typedef unsigned long long u64;

enum Part { BARE, TEST, GLOBALTIMER, CLOCK, STORES, TIMER_STORES, ATOMICS, LINES_STORES,
            LINES_ATOMICS, PARTS };
static const char *names[] = {"bare",   "test",         "globaltimer", "clock",
                              "stores", "timer-stores", "atomics",     "lines-timer-stores",
                              "lines-atomics"};

// Records per sampled warp's buffer (a ring of its own).
const unsigned RECORDS = 1024;

__device__ __forceinline__ u64 globaltimer() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ bool sampled(u64 key) {
    return ((key * 0x9E3779B97F4A7C15ull) >> 32) < ((1ull << 32) >> 5);
}

// The record of one access, by the lowest active lane of a sampled warp.
template <int part>
__device__ __forceinline__ void record(u64 addr, u64 warp_key, u64 *buffers, u64 *heads,
                                       unsigned &n, u64 &sink) {
    const bool lines = part == LINES_STORES || part == LINES_ATOMICS;
    if (part == BARE) return;
    if (!sampled(lines ? (addr >> 7) ^ (warp_key * 0x9E3779B97F4A7C15ull) : warp_key)) return;
    if (part == TEST) return;
    unsigned active = __activemask();
    if ((active & ((1u << (threadIdx.x & 31)) - 1)) != 0) return;
    if (part == GLOBALTIMER) {
        sink += globaltimer();
        return;
    }
    if (part == CLOCK) {
        sink += clock64();
        return;
    }
    u64 time = part == STORES ? 0 : globaltimer();
    u64 slot;
    if (part == ATOMICS || part == LINES_ATOMICS) {
        // A claim, then a ticket (each waited for), then the record, then its release.
        u64 *head = heads + 2 * (warp_key & 255);
        u64 claimed = atomicAdd(head, 1ull);
        slot = atomicAdd(head + 1, claimed & 1) + claimed;
    } else {
        slot = n++;
    }
    u64 *r = buffers + 6 * ((warp_key & 1023) * RECORDS + slot % RECORDS);
    r[0] = time;
    r[1] = addr;
    r[2] = warp_key;
    r[3] = 5;
    r[4] = (u64)__popc(active) << 32 | 4;
    r[5] = slot;
    if (part == ATOMICS || part == LINES_ATOMICS) {
        __threadfence();
        *(volatile u64 *)(heads + 2 * (warp_key & 255) + 1) = slot;
    }
}

template <int part>
__global__ void saxpy(long long n, float a, const float *x, float *y, u64 *buffers, u64 *heads,
                      u64 *sinks) {
    const u64 warp_key = (u64)blockIdx.x * 32 + threadIdx.x / 32;
    unsigned count = 0;
    u64 sink = 0;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        record<part>((u64)(x + i), warp_key, buffers, heads, count, sink);
        float xi = x[i];
        record<part>((u64)(y + i), warp_key, buffers, heads, count, sink);
        float yi = y[i];
        record<part>((u64)(y + i), warp_key, buffers, heads, count, sink);
        y[i] = a * xi + yi;
    }
    if (sink == 42) sinks[0] = count;
}

typedef void (*Kernel)(long long, float, const float *, float *, u64 *, u64 *, u64 *);
static Kernel kernels[] = {saxpy<BARE>,         saxpy<TEST>,    saxpy<GLOBALTIMER>,
                           saxpy<CLOCK>,        saxpy<STORES>,  saxpy<TIMER_STORES>,
                           saxpy<ATOMICS>,      saxpy<LINES_STORES>, saxpy<LINES_ATOMICS>};

int main() {
    const long long n = 1ll << 28;
    const int block = 256, rounds = 5, reps = 10;
    int sms = 0;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    float *x, *y;
    u64 *buffers, *heads, *sinks;
    CHECK(cudaMalloc(&x, n * sizeof(float)));
    CHECK(cudaMalloc(&y, n * sizeof(float)));
    CHECK(cudaMalloc(&buffers, 1024ull * RECORDS * 6 * sizeof(u64)));
    CHECK(cudaMalloc(&heads, 512 * sizeof(u64)));
    CHECK(cudaMalloc(&sinks, 8 * sizeof(u64)));
    CHECK(cudaMemset(x, 0, n * sizeof(float)));
    CHECK(cudaMemset(y, 0, n * sizeof(float)));
    CHECK(cudaMemset(heads, 0, 512 * sizeof(u64)));
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    float best[PARTS];
    for (int p = 0; p < PARTS; p++) best[p] = 1e9f;
    for (int r = 0; r < rounds; r++)
        for (int p = 0; p < PARTS; p++) {
            kernels[p]<<<sms * 8, block>>>(n, 2.f, x, y, buffers, heads, sinks);
            CHECK(cudaEventRecord(a));
            for (int k = 0; k < reps; k++)
                kernels[p]<<<sms * 8, block>>>(n, 2.f, x, y, buffers, heads, sinks);
            CHECK(cudaEventRecord(b));
            CHECK(cudaEventSynchronize(b));
            float ms;
            CHECK(cudaEventElapsedTime(&ms, a, b));
            if (ms / reps < best[p]) best[p] = ms / reps;
        }
    CHECK(cudaGetLastError());
    for (int p = 0; p < PARTS; p++)
        printf("record_cost %-18s %.3f ms  %.2fx\n", names[p], best[p], best[p] / best[BARE]);
    return 0;
}
