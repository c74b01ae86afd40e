// Managed memory with known first touches, for `egpu mem run --sets allocs` (alloc_check.py).
//
// One managed buffer of 64 pages of 4 KiB (256 KiB: far below any GPU's free memory), advised
// read-mostly and half of it prefetched to the device, then three kernels, in order, on one
// stream: `write_pages` writes pages 0-15, `read_pages` reads pages 8-39, `bump_pages` adds to
// every page. The first touches per page are therefore: write_pages 0-15, read_pages 16-39,
// bump_pages 40-63. A plain device buffer that `read_pages` also reads has no first touches.
// The host then reads the buffer back (CPU page faults, migrations to host memory).
//
// Prints `expect touch KERNEL pages N first F last L` per kernel, `expect prefetched BYTES`,
// `expect advice read mostly`, and `results SUM`.
#include <cstdio>
#include <cuda_runtime.h>

#include "cuda_check.h"

constexpr int PAGE_WORDS = 4096 / 4;
constexpr int PAGES = 64;

// One thread per word of pages `first` to `last` (inclusive).
__global__ void write_pages(unsigned *m, int first, int last) {
    int i = blockIdx.x * blockDim.x + threadIdx.x + first * PAGE_WORDS;
    if (i < (last + 1) * PAGE_WORDS) m[i] = i;
}

__global__ void read_pages(const unsigned *m, int first, int last, const unsigned *plain,
                           unsigned *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x + first * PAGE_WORDS;
    if (i < (last + 1) * PAGE_WORDS) atomicAdd(out, m[i] + plain[i % 1024]);
}

__global__ void bump_pages(unsigned *m, int first, int last) {
    int i = blockIdx.x * blockDim.x + threadIdx.x + first * PAGE_WORDS;
    if (i < (last + 1) * PAGE_WORDS) m[i] += 1;
}

static int run(void (*launch)(int, int, int), int first, int last) {
    int words = (last - first + 1) * PAGE_WORDS;
    launch((words + 255) / 256, first, last);
    CHECK(cudaGetLastError());
    return 0;
}

static unsigned *m, *plain, *out;

int main() {
    size_t bytes = size_t(PAGES) * 4096;
    CHECK(cudaMallocManaged(&m, bytes));
    CHECK(cudaMalloc(&plain, 4096));
    CHECK(cudaMalloc(&out, 4));
    CHECK(cudaMemset(plain, 0, 4096));
    CHECK(cudaMemset(out, 0, 4));
    int device = 0;
    CHECK(cudaGetDevice(&device));
#if CUDART_VERSION >= 13000
    cudaMemLocation here = {cudaMemLocationTypeDevice, device};
    CHECK(cudaMemAdvise(m, bytes, cudaMemAdviseSetReadMostly, here));
    CHECK(cudaMemPrefetchAsync(m, bytes / 2, here, 0, 0));
#else
    CHECK(cudaMemAdvise(m, bytes, cudaMemAdviseSetReadMostly, device));
    CHECK(cudaMemPrefetchAsync(m, bytes / 2, device, 0));
#endif
    if (run([](int g, int f, int l) { write_pages<<<g, 256>>>(m, f, l); }, 0, 15) ||
        run([](int g, int f, int l) { read_pages<<<g, 256>>>(m, f, l, plain, out); }, 8, 39) ||
        run([](int g, int f, int l) { bump_pages<<<g, 256>>>(m, f, l); }, 0, 63))
        return 1;
    CHECK(cudaDeviceSynchronize());
    unsigned long long sum = 0;
    for (int i = 0; i < PAGES * PAGE_WORDS; i++) sum += m[i];
    unsigned got = 0;
    CHECK(cudaMemcpy(&got, out, 4, cudaMemcpyDeviceToHost));
    printf("expect touch _Z11write_pagesPjii pages 16 first 0 last 15\n");
    printf("expect touch _Z10read_pagesPKjiiS0_Pj pages 24 first 16 last 39\n");
    printf("expect touch _Z10bump_pagesPjii pages 24 first 40 last 63\n");
    printf("expect prefetched %zu\n", bytes / 2);
    printf("expect advice read mostly\n");
    printf("results %llu %u\n", sum, got);
    CHECK(cudaFree(m));
    CHECK(cudaFree(plain));
    CHECK(cudaFree(out));
    return 0;
}
