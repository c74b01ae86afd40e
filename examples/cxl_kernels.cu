// The kernels of examples/cxl_slowdown.rs: three memory-bound ones (a row softmax and a row
// layer norm, one block of 256 threads per row; saxpy comes from tests/ptx/saxpy.ptx) and a
// compute-bound one (a 16x16-tiled matrix product). Compiled to PTX by nvcc on the GPU machine.

#define THREADS 256

__device__ float block_reduce(float v, bool max_not_sum) {
    __shared__ float red[THREADS];
    red[threadIdx.x] = v;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            float o = red[threadIdx.x + s];
            red[threadIdx.x] = max_not_sum ? fmaxf(red[threadIdx.x], o) : red[threadIdx.x] + o;
        }
        __syncthreads();
    }
    float r = red[0];
    __syncthreads();
    return r;
}

extern "C" __global__ void softmax_rows(const float *x, float *y, int cols) {
    const float *row = x + (size_t)blockIdx.x * cols;
    float *out = y + (size_t)blockIdx.x * cols;
    float m = -3.0e38f;
    for (int i = threadIdx.x; i < cols; i += THREADS) m = fmaxf(m, row[i]);
    m = block_reduce(m, true);
    float sum = 0.0f;
    for (int i = threadIdx.x; i < cols; i += THREADS) sum += __expf(row[i] - m);
    sum = block_reduce(sum, false);
    for (int i = threadIdx.x; i < cols; i += THREADS) out[i] = __expf(row[i] - m) / sum;
}

extern "C" __global__ void layernorm_rows(const float *x, float *y, int cols) {
    const float *row = x + (size_t)blockIdx.x * cols;
    float *out = y + (size_t)blockIdx.x * cols;
    float sum = 0.0f;
    for (int i = threadIdx.x; i < cols; i += THREADS) sum += row[i];
    float mean = block_reduce(sum, false) / cols;
    float sq = 0.0f;
    for (int i = threadIdx.x; i < cols; i += THREADS) sq += (row[i] - mean) * (row[i] - mean);
    float inv = rsqrtf(block_reduce(sq, false) / cols + 1e-5f);
    for (int i = threadIdx.x; i < cols; i += THREADS) out[i] = (row[i] - mean) * inv;
}

extern "C" __global__ void matmul(const float *a, const float *b, float *c, int n) {
    __shared__ float ta[16][16], tb[16][16];
    int row = blockIdx.y * 16 + threadIdx.y, col = blockIdx.x * 16 + threadIdx.x;
    float acc = 0.0f;
    for (int k0 = 0; k0 < n; k0 += 16) {
        ta[threadIdx.y][threadIdx.x] = a[(size_t)row * n + k0 + threadIdx.x];
        tb[threadIdx.y][threadIdx.x] = b[(size_t)(k0 + threadIdx.y) * n + col];
        __syncthreads();
        for (int k = 0; k < 16; k++) acc += ta[threadIdx.y][k] * tb[k][threadIdx.x];
        __syncthreads();
    }
    c[(size_t)row * n + col] = acc;
}
