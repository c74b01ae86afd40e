// y = a * x + y over n floats, with a grid-stride loop (the benchmark kernel of DESIGN.md).
extern "C" __global__ void saxpy(int n, float a, const float *__restrict__ x, float *y) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        y[i] = a * x[i] + y[i];
    }
}
