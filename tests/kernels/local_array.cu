// A per-thread array indexed at run time, which lives in local memory (a stack frame), and a
// __constant__ table.
__constant__ float weights[16];

extern "C" __global__ void local_array(float *out, const float *in, int stride) {
    float window[32];
    for (int i = 0; i < 32; i++) window[i] = in[i * stride + threadIdx.x];
    float sum = 0;
    for (int i = 0; i < 32; i++) sum += window[(i * 7 + stride) & 31] * weights[i & 15];
    out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}
