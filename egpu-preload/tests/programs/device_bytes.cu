// A CUDA C program whose kernels touch global memory in known ways, for egpu's device probes on
// the GPU machine (egpu-preload/tests/programs/device_check.py runs it, bare and under
// `egpu run --probes libkernel_bytes.so`).
//
// Kernels: `add` (ld.global and st.global), `histogram` (an atomic add per element, which nvcc
// makes `red.global.add`), `staged` (each thread copies 16 bytes into shared memory with
// `cp.async`, then writes them back doubled). They are launched directly, from a graph captured
// from a stream, and from a graph whose kernel node is added by hand. At the end the program
// prints, per kernel (by its mangled name, as the driver names it), the bytes its threads moved
// in all, by class, worked out from the sizes and the number of times each kernel ran:
//
//     expect bytes _Z3addPKfS0_Pf load 50331648 store 25165824 atomic 0 async 0
//
// and a line `results ...` with checksums of every output, which must be the same bare and under
// egpu. Build (device_check.py builds every flavour):
//     nvcc -O2 -arch=sm_90 device_bytes.cu -o device_bytes                  (static runtime)
//     nvcc -O2 -arch=sm_90 -cudart shared device_bytes.cu -o device_bytes   (shared runtime)
// and run with CUDA_MODULE_LOADING=LAZY (the default) or EAGER. `device_bytes graphs` leaves out
// the direct launches: its kernels run from graphs only.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

#include "cuda_check.h"

constexpr int N = 1 << 20;  // elements of every vector; a multiple of every block
constexpr int BLOCK = 256;

__global__ void add(const float *a, const float *b, float *c) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    c[i] = a[i] + b[i];
}

__global__ void histogram(const unsigned *x, unsigned *bins) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(&bins[x[i] & 255], 1u);
}

// Each thread moves one float4: 16 bytes by cp.async into shared memory, then 16 stored.
__global__ void staged(const float4 *in, float4 *out) {
    __shared__ float4 tile[BLOCK];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned shared = (unsigned)__cvta_generic_to_shared(&tile[threadIdx.x]);
    size_t global = __cvta_generic_to_global(&in[i]);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(shared), "l"(global) : "memory");
    asm volatile("cp.async.commit_group;" ::: "memory");
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    float4 v = tile[threadIdx.x];
    out[i] = make_float4(2 * v.x, 2 * v.y, 2 * v.z, 2 * v.w);
}

struct Runs {
    long long add = 0, histogram = 0, staged = 0;
};

static uint64_t fnv(const void *data, size_t bytes, uint64_t h = 0xcbf29ce484222325ull) {
    for (size_t i = 0; i < bytes; i++) h = (h ^ ((const unsigned char *)data)[i]) * 0x100000001b3ull;
    return h;
}

int main(int argc, char **argv) {
    const bool direct = !(argc > 1 && strcmp(argv[1], "graphs") == 0);
    const size_t fbytes = N * sizeof(float);
    float *a, *b, *c, *in, *out;
    unsigned *x, *bins;
    CHECK(cudaMalloc(&a, fbytes));
    CHECK(cudaMalloc(&b, fbytes));
    CHECK(cudaMalloc(&c, fbytes));
    CHECK(cudaMalloc(&in, fbytes));
    CHECK(cudaMalloc(&out, fbytes));
    CHECK(cudaMalloc(&x, N * sizeof(unsigned)));
    CHECK(cudaMalloc(&bins, 256 * sizeof(unsigned)));
    float *host = (float *)malloc(fbytes);
    unsigned *hx = (unsigned *)malloc(N * sizeof(unsigned));
    for (int i = 0; i < N; i++) host[i] = (float)(i % 977) * 0.25f;
    for (int i = 0; i < N; i++) hx[i] = (unsigned)(i * 2654435761u) >> 7;
    CHECK(cudaMemcpy(a, host, fbytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(b, host, fbytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(in, host, fbytes, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(x, hx, N * sizeof(unsigned), cudaMemcpyHostToDevice));
    CHECK(cudaMemset(bins, 0, 256 * sizeof(unsigned)));

    Runs runs;
    dim3 grid(N / BLOCK), block(BLOCK), grid4(N / 4 / BLOCK);
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    // Direct launches.
    for (int i = 0; direct && i < 3; i++) add<<<grid, block, 0, s>>>(a, b, c), runs.add++;
    for (int i = 0; direct && i < 2; i++) histogram<<<grid, block, 0, s>>>(x, bins), runs.histogram++;
    for (int i = 0; direct && i < 2; i++)
        staged<<<grid4, block, 0, s>>>((const float4 *)in, (float4 *)out), runs.staged++;
    CHECK(cudaGetLastError());

    // A graph captured from the stream: add, then staged; launched 3 times.
    cudaGraph_t captured;
    cudaGraphExec_t captured_exec;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    add<<<grid, block, 0, s>>>(a, b, c);
    staged<<<grid4, block, 0, s>>>((const float4 *)in, (float4 *)out);
    CHECK(cudaStreamEndCapture(s, &captured));
    CHECK(cudaGraphInstantiate(&captured_exec, captured, 0));
    for (int i = 0; i < 3; i++) {
        CHECK(cudaGraphLaunch(captured_exec, s));
        runs.add++, runs.staged++;
    }

    // A graph built by hand: one histogram node; launched 2 times.
    cudaGraph_t built;
    cudaGraphExec_t built_exec;
    cudaGraphNode_t node;
    CHECK(cudaGraphCreate(&built, 0));
    void *args[] = {&x, &bins};
    cudaKernelNodeParams params = {};
    params.func = (void *)histogram;
    params.gridDim = grid;
    params.blockDim = block;
    params.kernelParams = args;
    CHECK(cudaGraphAddKernelNode(&node, built, nullptr, 0, &params));
    CHECK(cudaGraphInstantiate(&built_exec, built, 0));
    for (int i = 0; i < 2; i++) {
        CHECK(cudaGraphLaunch(built_exec, s));
        runs.histogram++;
    }
    CHECK(cudaStreamSynchronize(s));

    // Check the results, and print their checksums.
    float *hc = (float *)malloc(fbytes), *hout = (float *)malloc(fbytes);
    unsigned hbins[256];
    CHECK(cudaMemcpy(hc, c, fbytes, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(hout, out, fbytes, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(hbins, bins, sizeof(hbins), cudaMemcpyDeviceToHost));
    long long counted = 0;
    for (int i = 0; i < 256; i++) counted += hbins[i];
    bool ok = counted == runs.histogram * N;
    for (int i = 0; i < N && ok; i++) ok = hc[i] == 2 * host[i] && hout[i] == 2 * host[i];
    printf("results %s add %016llx staged %016llx bins %016llx\n", ok ? "ok" : "WRONG",
           (unsigned long long)fnv(hc, fbytes), (unsigned long long)fnv(hout, fbytes),
           (unsigned long long)fnv(hbins, sizeof(hbins)));

    const long long f = sizeof(float);
    printf("expect bytes _Z3addPKfS0_Pf load %lld store %lld atomic 0 async 0\n", runs.add * 2 * N * f,
           runs.add * N * f);
    printf("expect bytes _Z9histogramPKjPj load %lld store 0 atomic %lld async 0\n",
           runs.histogram * N * f, runs.histogram * N * f);
    printf("expect bytes _Z6stagedPK6float4PS_ load 0 store %lld atomic 0 async %lld\n", runs.staged * N * f,
           runs.staged * N * f);
    CHECK(cudaGraphExecDestroy(captured_exec));
    CHECK(cudaGraphExecDestroy(built_exec));
    CHECK(cudaGraphDestroy(captured));
    CHECK(cudaGraphDestroy(built));
    return ok ? 0 : 1;
}
