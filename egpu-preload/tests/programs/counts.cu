// A CUDA C program with known counts, for egpu's preloaded library on the GPU machine.
//
// It launches, copies, sets, allocates and synchronises a known number of times through the CUDA
// runtime API, checks its own results, and prints what it did as `expect KEY VALUE` lines, which
// egpu-preload/tests/programs/check.py compares with what the library observed.
//
// Build: nvcc -O2 -arch=sm_90 counts.cu -o counts            (static runtime, the default)
//        nvcc -O2 -arch=sm_90 -cudart shared counts.cu -o counts-shared
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#include "cuda_check.h"

__global__ void scale(float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}

__global__ void shift(float *x, float b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += b;
}

int main() {
    const int n = 1 << 20;
    const size_t bytes = n * sizeof(float);
    const int rows = 64, row_bytes = 1024, pitch_bytes = 4096;
    int launches = 0, captured = 0, graph_launches = 0;
    int htod = 0, dtoh = 0, dtod = 0, sets = 0;
    long long htod_bytes = 0, dtoh_bytes = 0, dtod_bytes = 0, set_bytes = 0;

    float *host = (float *)malloc(bytes), *pinned = nullptr, *d = nullptr, *e = nullptr;
    for (int i = 0; i < n; i++) host[i] = (float)(i % 1000);
    CHECK(cudaMallocHost(&pinned, bytes));
    CHECK(cudaMalloc(&d, bytes));
    CHECK(cudaMalloc(&e, bytes));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    CHECK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    htod++, htod_bytes += bytes;
    for (int i = 0; i < n; i++) pinned[i] = 1.0f;
    CHECK(cudaMemcpyAsync(e, pinned, bytes, cudaMemcpyHostToDevice, s));
    htod++, htod_bytes += bytes;
    CHECK(cudaStreamSynchronize(s));

    dim3 grid(n / 256), block(256);
    for (int i = 0; i < 10; i++) {
        scale<<<grid, block>>>(d, 2.0f, n);
        launches++;
    }
    float three = 3.0f;
    int count = n;
    void *args[] = {&d, &three, &count};
    for (int i = 0; i < 3; i++) {
        CHECK(cudaLaunchKernel((const void *)shift, grid, block, args, 0, nullptr));
        launches++;
    }
    CHECK(cudaGetLastError());

    // A graph of two launches, captured once and launched four times.
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    shift<<<grid, block, 0, s>>>(e, 1.0f, n);
    scale<<<grid, block, 0, s>>>(e, 0.5f, n);
    captured += 2;
    CHECK(cudaStreamEndCapture(s, &graph));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < 4; i++) {
        CHECK(cudaGraphLaunch(exec, s));
        graph_launches++;
    }
    CHECK(cudaStreamSynchronize(s));

    CHECK(cudaMemcpy(host, d, bytes, cudaMemcpyDeviceToHost));
    dtoh++, dtoh_bytes += bytes;
    // d[i] = (i % 1000) * 2^10 + 9
    for (int i = 0; i < n; i += 4099) {
        float want = (float)(i % 1000) * 1024.0f + 9.0f;
        if (host[i] != want) {
            fprintf(stderr, "d[%d] = %f, want %f\n", i, host[i], want);
            return 1;
        }
    }
    CHECK(cudaMemcpy(pinned, e, bytes, cudaMemcpyDeviceToHost));
    dtoh++, dtoh_bytes += bytes;
    // e: 4 times (x + 1) / 2 from 1: 1, 1, 1, 1.
    if (pinned[12345] != 1.0f) {
        fprintf(stderr, "e[12345] = %f, want 1\n", pinned[12345]);
        return 1;
    }

    CHECK(cudaMemcpy(e, d, bytes, cudaMemcpyDeviceToDevice));
    dtod++, dtod_bytes += bytes;
    // A 2D copy: 64 rows of 1 KiB out of rows 4 KiB apart.
    CHECK(cudaMemcpy2D(d, row_bytes, host, pitch_bytes, row_bytes, rows, cudaMemcpyHostToDevice));
    htod++, htod_bytes += (long long)rows * row_bytes;
    CHECK(cudaMemset(d, 0, bytes));
    sets++, set_bytes += bytes;
    CHECK(cudaMemsetAsync(e, 0, bytes / 2, s));
    sets++, set_bytes += bytes / 2;
    CHECK(cudaDeviceSynchronize());

    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(d));
    CHECK(cudaFree(e));
    CHECK(cudaFreeHost(pinned));
    free(host);

    printf("expect launches %d\n", launches);
    printf("expect captured %d\n", captured);
    printf("expect graph_launches %d\n", graph_launches);
    printf("expect copies htod %d %lld\n", htod, htod_bytes);
    printf("expect copies dtoh %d %lld\n", dtoh, dtoh_bytes);
    printf("expect copies dtod %d %lld\n", dtod, dtod_bytes);
    printf("expect sets %d %lld\n", sets, set_bytes);
    printf("expect kernel _Z5scalePffi 10\n");
    printf("expect kernel _Z5shiftPffi 3\n");
    printf("ok\n");
    return 0;
}
