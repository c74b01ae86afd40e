// Shared memory, barriers, atomics, predicated code and a device function that is not inlined.
__device__ __noinline__ unsigned mix(unsigned x) { return x * 2654435761u ^ (x >> 13); }

extern "C" __global__ void reduce(const unsigned *in, unsigned *total, int n) {
    __shared__ unsigned part[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    part[threadIdx.x] = i < n ? mix(in[i]) : 0;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(total, part[0]);
}
