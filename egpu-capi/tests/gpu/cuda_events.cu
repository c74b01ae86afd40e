/* egpu's C ABI attaching a probe to this process's CUDA launches through the preloaded library,
 * on a real GPU (the GPU machine: run under `egpu run`, or with LD_PRELOAD=libegpu_preload.so):
 * the blocks of two kernels launched through the CUDA runtime counted in a map in shared memory,
 * which the preloaded library opens by name and this program reads; the kernels' results checked.
 * Prints `cuda events (GPU): ok`, or what went wrong and exits 1.
 *
 * Build: nvcc -O2 -arch=sm_90 -I egpu-capi/include cuda_events.cu -L DIR -legpu_capi -o cuda_events
 *        (DIR holding libegpu_capi.so, also on LD_LIBRARY_PATH when it runs) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "egpu_capi.h"

#define CHECK(cond, what)                                                                      \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "cuda events (GPU): line %d: %s (last error: %s)\n", __LINE__,     \
                    what, egpu_last_error());                                                  \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)
#define OK(call) CHECK((call) == EGPU_OK, #call)

__global__ void kernA(float *x) { x[blockIdx.x * blockDim.x + threadIdx.x] += 1.0f; }

extern "C" __global__ void kernC(float *x) {
    unsigned block = blockIdx.y * gridDim.x + blockIdx.x;
    x[block * blockDim.x + threadIdx.x] *= 2.0f;
}

#include "../fixture/blocks.h"

int main(void) {
    if (egpu_cuda_available() != 1) {
        fprintf(stderr, "cuda events (GPU): the preloaded library is not loaded: %s\n",
                egpu_cuda_flush() == EGPU_OK ? "?" : egpu_last_error());
        return 2;
    }
    const int n = 16 * 256;
    float *x = NULL;
    CHECK(cudaMalloc(&x, n * sizeof(float)) == cudaSuccess, "cudaMalloc");
    CHECK(cudaMemset(x, 0, n * sizeof(float)) == cudaSuccess, "cudaMemset");

    egpu_program *program = NULL;
    egpu_program_desc desc = {.size = sizeof desc, .name = "blocks", .attach = "host::launch",
                              .maps = "blocks=hash:8:8:64"};
    OK(egpu_program_from_assembly(&desc, BLOCKS, &program));
    char name[64];
    snprintf(name, sizeof name, "egpu-capi-gpu-%d-blocks", (int)getpid());
    egpu_map *map = NULL;
    OK(egpu_map_create_for(program, 0, name, &map));
    const egpu_map *bound[] = {map};
    uint64_t id = 0;
    OK(egpu_cuda_attach(program, bound, 1, &id));

    kernA<<<16, 256>>>(x);
    for (int i = 0; i < 3; i++) kernC<<<dim3(4, 2), 128>>>(x);
    CHECK(cudaDeviceSynchronize() == cudaSuccess, "the kernels ran");
    OK(egpu_cuda_flush());
    uint64_t got[2];
    totals(map, got);
    CHECK(got[0] == 16 && got[1] == 24, "kernA 16 blocks, kernC 3 x 8");
    printf("cuda events (GPU): kernC %llu blocks, _Z5kernAPf %llu blocks\n",
           (unsigned long long)got[1], (unsigned long long)got[0]);

    /* Detached: launches count nothing more. */
    OK(egpu_cuda_detach(id));
    kernC<<<dim3(4, 2), 128>>>(x);
    CHECK(cudaDeviceSynchronize() == cudaSuccess, "the kernel ran");
    OK(egpu_cuda_flush());
    totals(map, got);
    CHECK(got[0] == 16 && got[1] == 24, "nothing counted after the detach");

    /* The kernels' results: the first 1024 floats (kernC's blocks) 1 x 2^4, the rest 1. */
    float *h = (float *)malloc(n * sizeof(float));
    CHECK(cudaMemcpy(h, x, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess, "copy");
    for (int i = 0; i < n; i++) CHECK(h[i] == (i < 1024 ? 16.0f : 1.0f), "the kernels' results");
    printf("cuda events (GPU): results as computed\n");

    free(h);
    cudaFree(x);
    egpu_map_free(map);
    egpu_program_free(program);
    printf("cuda events (GPU): ok\n");
    return 0;
}
