// Kernels whose bytes and GPU time are known, for `egpu mem` on the GPU machine
// (egpu-preload/tests/programs/mem_check.py runs it bare and under `egpu mem run`). Each launch
// is bracketed by CUDA events on its stream, recorded in the same run as egpu's own clocks:
//
// - `saxpy` over 2^28 floats (one element per thread): 8 bytes read and 4 written per element;
//   the reference for bandwidth (memory-bound);
// - `spin`: each block spins on the clock for a time that grows with its index, so blocks end
//   at different times and the last to end is not the last to start;
// - `tiny`: 2^12 elements, a few microseconds: the clocks' resolution shows;
// - a graph of `tiny`, replayed 3 times (a graph's kernel node keeps one `%gridid` for all its
//   replays: egpu counts the runs and times the last);
// - `empty`: no work at all, whose event time is the floor of what events can time;
// - `strided`: each thread reads the float 32 floats after its neighbour's (128 bytes apart:
//   32 sectors per warp's request where 4 would do) and writes one, unit stride;
// - `hot`: a histogram, every thread reading a float and adding 1 to one of 16 counters with
//   an atomic: one hot page (the counters') against the pages the reads stream through;
// - `phases`: two phases of different speed in one launch, every block resident at once (8
//   blocks of 256 threads per SM, a grid-stride loop): first it streams 2^26 floats (read and
//   written, at full speed), then each thread follows a chain of dependent loads through 64 MiB
//   (a load's latency each): the `timeline` set's windows must show both (`expect phases`).
//
// Before each timed launch a `hold` kernel keeps the GPU busy for 50 µs, so that the events and
// the launch are queued before the GPU reaches them: the events then time the kernel, not the
// host's launch path.
//
// `mem_timing bench STEPS [flat]` instead runs saxpy STEPS times after a warm-up and prints
// `steps_per_second S` (wall clock, synchronised at the end): the benchmark's workload
// (bench_mem.py). Its saxpy is the GPU benchmark's (benches/device.rs): a grid-stride loop, 8
// blocks of 256 threads per SM; with `flat`, the one above, one element per thread, where what
// a probe set costs each thread once (its lookups and its sums' flush at exit) is not spread
// over several elements.
//
// It prints per kernel `expect bytes NAME load L store S atomic 0 async 0` and
// `expect times NAME first F t1 t2 ...` (the event time of the kernel's launches F, F+1, ...
// in launch order, ms), `expect floor US` (an empty kernel's event time, µs) and `results ...`
// (checksums that must not change under egpu).
//     nvcc -O2 -arch=sm_90 mem_timing.cu -o mem_timing
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>
#include <cuda_runtime.h>

#include "cuda_check.h"

constexpr int BLOCK = 256;

__global__ void saxpy(float a, const float *x, float *y, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

__global__ void saxpy_loop(float a, const float *x, float *y, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        y[i] = a * x[i] + y[i];
}

// Spins for (blockIdx.x % 8 + 1) * 20 µs of the global timer, then writes one word per block.
__global__ void spin(unsigned long long *out) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    unsigned long long wait = (blockIdx.x % 8 + 1) * 20000ull;
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < wait);
    if (threadIdx.x == 0) out[blockIdx.x] = blockIdx.x;
}

// Holds the GPU for `ns` of the global timer.
__global__ void hold(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}

__global__ void empty() {}

__global__ void strided(const float *x, float *y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = x[(long long)i * 32];
}

__global__ void hot(const float *x, unsigned *bins) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    atomicAdd(&bins[(unsigned)x[i] & 15], 1u);
}

__global__ void tiny(float *v) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    v[i] = v[i] * 0.5f + 1.0f;
}

__global__ void phases(const float *x, float *y, long long n, const int *chain, int hops, int *out) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long threads = (long long)gridDim.x * blockDim.x;
    for (long long i = t; i < n; i += threads) y[i] = x[i] * 2.0f;
    int at = (int)(t & ((1 << 24) - 1));
    for (int h = 0; h < hops; h++) at = chain[at];
    out[t] = at;
}

static uint64_t fnv(const void *data, size_t bytes) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < bytes; i++) h = (h ^ ((const unsigned char *)data)[i]) * 0x100000001b3ull;
    return h;
}

struct Timed {
    const char *name;
    std::vector<cudaEvent_t> marks;  // start, end, start, end, ...
};

static int mark(Timed &t, cudaStream_t s, bool start) {
    if (start) hold<<<1, 1, 0, s>>>(50000);
    cudaEvent_t e;
    CHECK(cudaEventCreate(&e));
    CHECK(cudaEventRecord(e, s));
    t.marks.push_back(e);
    return 0;
}

static int report(Timed &t, int first) {
    printf("expect times %s first %d", t.name, first);
    for (size_t i = 0; i + 1 < t.marks.size(); i += 2) {
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, t.marks[i], t.marks[i + 1]));
        printf(" %.6f", ms);
    }
    printf("\n");
    return 0;
}

static int bench(int steps, bool flat) {
    const long long n = 1ll << 28;
    float *x, *y;
    CHECK(cudaMalloc(&x, n * sizeof(float)));
    CHECK(cudaMalloc(&y, n * sizeof(float)));
    CHECK(cudaMemset(x, 0, n * sizeof(float)));
    CHECK(cudaMemset(y, 0, n * sizeof(float)));
    int sms = 0;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const unsigned grid = flat ? (unsigned)((n + BLOCK - 1) / BLOCK) : (unsigned)sms * 8;
    auto step = [&]() {
        if (flat)
            saxpy<<<grid, BLOCK>>>(1.0f, x, y, n);
        else
            saxpy_loop<<<grid, BLOCK>>>(1.0f, x, y, n);
    };
    for (int i = 0; i < 3; i++) step();
    CHECK(cudaDeviceSynchronize());
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK(cudaEventRecord(a));
    for (int i = 0; i < steps; i++) step();
    CHECK(cudaEventRecord(b));
    CHECK(cudaDeviceSynchronize());
    clock_gettime(CLOCK_MONOTONIC, &t1);
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    double secs = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    printf("steps_per_second %.3f gpu_ms_per_step %.4f\n", steps / secs, ms / steps);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[1], "bench") == 0)
        return bench(atoi(argv[2]), argc > 3 && strcmp(argv[3], "flat") == 0);
    const long long n = 1ll << 28;
    const int small = 1 << 12, spin_blocks = 132 * 4;
    float *x, *y, *v;
    unsigned long long *spun;
    CHECK(cudaMalloc(&x, n * sizeof(float)));
    CHECK(cudaMalloc(&y, n * sizeof(float)));
    CHECK(cudaMalloc(&v, small * sizeof(float)));
    CHECK(cudaMalloc(&spun, spin_blocks * sizeof(unsigned long long)));
    std::vector<float> host(n);
    for (long long i = 0; i < n; i++) host[i] = (float)(i % 1013) * 0.5f;
    CHECK(cudaMemcpy(x, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(y, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(v, host.data(), small * sizeof(float), cudaMemcpyHostToDevice));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    // Warm up (the module loaded, instrumented, the clocks up), not counted.
    saxpy<<<(unsigned)((n + BLOCK - 1) / BLOCK), BLOCK, 0, s>>>(0.0f, x, y, n);
    CHECK(cudaStreamSynchronize(s));

    Timed ts{"_Z5saxpyfPKfPfx", {}}, tspin{"_Z4spinPy", {}}, ttiny{"_Z4tinyPf", {}}, tempty{"_Z5emptyv", {}};
    const int saxpy_runs = 5, spin_runs = 2, tiny_runs = 4, replays = 3;
    for (int r = 0; r < saxpy_runs; r++) {
        if (mark(ts, s, true)) return 1;
        saxpy<<<(unsigned)((n + BLOCK - 1) / BLOCK), BLOCK, 0, s>>>(1.5f, x, y, n);
        if (mark(ts, s, false)) return 1;
    }
    // One launch of each before they are timed: a kernel's first launch loads its code, which
    // the events see and the kernel does not.
    spin<<<spin_blocks, 128, 0, s>>>(spun);
    tiny<<<small / BLOCK, BLOCK, 0, s>>>(v);
    empty<<<1, 32, 0, s>>>();
    for (int r = 0; r < spin_runs; r++) {
        if (mark(tspin, s, true)) return 1;
        spin<<<spin_blocks, 128, 0, s>>>(spun);
        if (mark(tspin, s, false)) return 1;
    }
    for (int r = 0; r < tiny_runs; r++) {
        if (mark(ttiny, s, true)) return 1;
        tiny<<<small / BLOCK, BLOCK, 0, s>>>(v);
        if (mark(ttiny, s, false)) return 1;
    }
    for (int r = 0; r < 5; r++) {
        if (mark(tempty, s, true)) return 1;
        empty<<<1, 32, 0, s>>>();
        if (mark(tempty, s, false)) return 1;
    }
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    tiny<<<small / BLOCK, BLOCK, 0, s>>>(v);
    CHECK(cudaStreamEndCapture(s, &graph));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int r = 0; r < replays; r++) CHECK(cudaGraphLaunch(exec, s));
    // 2^20 threads reading 32 floats apart over x (2^25 floats), writing the first 2^20 of v2.
    const int strided_n = 1 << 20;
    float *v2;
    CHECK(cudaMalloc(&v2, strided_n * sizeof(float)));
    strided<<<strided_n / BLOCK, BLOCK, 0, s>>>(x, v2);
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaGetLastError());
    std::vector<float> hv2(strided_n);
    CHECK(cudaMemcpy(hv2.data(), v2, strided_n * sizeof(float), cudaMemcpyDeviceToHost));

    // A hot page: 2^22 atomics on 16 counters.
    const int hot_n = 1 << 22;
    unsigned *bins;
    CHECK(cudaMalloc(&bins, 16 * sizeof(unsigned)));
    CHECK(cudaMemset(bins, 0, 16 * sizeof(unsigned)));
    hot<<<hot_n / BLOCK, BLOCK, 0, s>>>(x, bins);
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaGetLastError());
    unsigned hbins[16];
    CHECK(cudaMemcpy(hbins, bins, sizeof(hbins), cudaMemcpyDeviceToHost));
    printf("results hot %016llx\n", (unsigned long long)fnv(hbins, sizeof(hbins)));
    printf("expect bytes _Z3hotPKfPj load %lld store 0 atomic %lld async 0\n", hot_n * 4ll, hot_n * 4ll);

    // Two phases: streaming, then dependent loads (a permutation of 2^24 ints: i -> i * P + Q).
    const int chain_n = 1 << 24, hops = 256;
    std::vector<int> hc(chain_n);
    for (long long i = 0; i < chain_n; i++) hc[i] = (int)((i * 1000003ll + 12345) & (chain_n - 1));
    int *chain, *chased;
    int sms = 0;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const long long phase_threads = (long long)sms * 8 * BLOCK, streamed = 1ll << 26;
    CHECK(cudaMalloc(&chain, chain_n * sizeof(int)));
    CHECK(cudaMalloc(&chased, phase_threads * sizeof(int)));
    CHECK(cudaMemcpy(chain, hc.data(), chain_n * sizeof(int), cudaMemcpyHostToDevice));
    phases<<<sms * 8, BLOCK, 0, s>>>(x, y, streamed, chain, hops, chased);
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaGetLastError());
    std::vector<int> hchased(phase_threads);
    CHECK(cudaMemcpy(hchased.data(), chased, phase_threads * sizeof(int), cudaMemcpyDeviceToHost));
    printf("results phases %016llx\n", (unsigned long long)fnv(hchased.data(), phase_threads * 4));
    printf("expect bytes _Z6phasesPKfPfxPKiiPi load %lld store %lld atomic 0 async 0\n",
           streamed * 4 + phase_threads * hops * 4, streamed * 4 + phase_threads * 4);
    printf("expect phases _Z6phasesPKfPfxPKiiPi\n");
    // Its chase: each lane's next load at a random place of the chain, no one stride.
    printf("expect stride _Z6phasesPKfPfxPKiiPi load gather\n");

    std::vector<float> hy(n), hv(small);
    std::vector<unsigned long long> hs(spin_blocks);
    CHECK(cudaMemcpy(hy.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(hv.data(), v, small * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(hs.data(), spun, hs.size() * 8, cudaMemcpyDeviceToHost));
    printf("results y %016llx v %016llx spin %016llx strided %016llx\n", (unsigned long long)fnv(hy.data(), n * 4),
           (unsigned long long)fnv(hv.data(), small * 4), (unsigned long long)fnv(hs.data(), hs.size() * 8),
           (unsigned long long)fnv(hv2.data(), strided_n * 4));
    // Sectors per warp-level request of each kernel's loads: unit stride, and 128 bytes apart.
    printf("expect pattern _Z5saxpyfPKfPfx load 4\n");
    printf("expect pattern _Z7stridedPKfPf load 32\n");
    printf("expect stride _Z5saxpyfPKfPfx load unit\n");
    printf("expect stride _Z7stridedPKfPf load 128\n");
    printf("expect bytes _Z7stridedPKfPf load %lld store %lld atomic 0 async 0\n", strided_n * 4ll, strided_n * 4ll);
    // The warm-up launch of saxpy counts: it ran under egpu too.
    const long long sr = saxpy_runs + 1, tr = tiny_runs + replays + 1;
    printf("expect bytes _Z5saxpyfPKfPfx load %lld store %lld atomic 0 async 0\n", sr * n * 8, sr * n * 4);
    printf("expect bytes _Z4spinPy load 0 store %lld atomic 0 async 0\n", (spin_runs + 1) * spin_blocks * 8ll);
    printf("expect bytes _Z4tinyPf load %lld store %lld atomic 0 async 0\n", tr * small * 4ll, tr * small * 4ll);
    // Each kernel's first launch is not timed; the graph's node is tiny's last launch.
    if (report(ts, 1) || report(tspin, 1) || report(ttiny, 1)) return 1;
    float floor_ms = 1e9;
    for (size_t i = 0; i + 1 < tempty.marks.size(); i += 2) {
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, tempty.marks[i], tempty.marks[i + 1]));
        if (ms < floor_ms) floor_ms = ms;
    }
    printf("expect floor %.3f\n", floor_ms * 1000);
    return 0;
}
