// The CUDA C test programs' check of a runtime API call: on an error, says where and what, and
// returns 1 from the function it is in.
#ifndef EGPU_PROGRAMS_CUDA_CHECK_H
#define EGPU_PROGRAMS_CUDA_CHECK_H

#include <cstdio>
#include <cuda_runtime.h>

#define CHECK(call)                                                                   \
    do {                                                                              \
        cudaError_t e_ = (call);                                                      \
        if (e_ != cudaSuccess) {                                                      \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,             \
                    cudaGetErrorString(e_));                                          \
            return 1;                                                                 \
        }                                                                             \
    } while (0)

#endif
