// delay_cost: what a wait of Δ ns adds to each load of a one-thread pointer chase (64 MiB, a
// random cycle: every load goes to memory), by how the wait is made: a spin on %globaltimer
// (egpu_delay_ns's translation), the same with Δ read from global memory first (as the far
// tier's probe reads it from its map), a spin on %clock64 scaled by the SM clock measured in
// the kernel, and nanosleep. Tells the far tier which clock to spin on and what a wait costs
// beyond Δ.
//
//     nvcc -O2 -arch=sm_90 delay_cost.cu -o delay_cost && ./delay_cost
#include <stdlib.h>
#include "cuda_check.h"

typedef unsigned long long u64;
enum Way { BARE, TIMER, TIMER_LOADED, CLOCK, SLEEP, WAYS };
static const char *names[] = {"bare", "globaltimer", "globaltimer+ld", "clock64", "nanosleep"};

__device__ __forceinline__ u64 timer() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

template <int way>
__global__ void chase(u64 *p, u64 steps, u64 delta, const u64 *config, double cycles_per_ns,
                      u64 *out) {
    u64 start = timer();
    for (u64 i = 0; i < steps; i++) {
        if (way == TIMER || way == TIMER_LOADED) {
            u64 d = way == TIMER_LOADED ? *(volatile const u64 *)&config[(u64)p & 0] : delta;
            u64 t0 = timer();
            while (timer() - t0 < d) {
            }
        } else if (way == CLOCK) {
            long long c0 = clock64();
            long long n = (long long)(delta * cycles_per_ns);
            while (clock64() - c0 < n) {
            }
        } else if (way == SLEEP) {
            __nanosleep((unsigned)delta);
        }
        p = (u64 *)*p;
    }
    out[0] = timer() - start;
    out[1] = (u64)p;
}

// Cycles of %clock64 per ns of %globaltimer over ~100 us, in one thread.
__global__ void rate(double *out) {
    long long c0 = clock64();
    u64 t0 = timer();
    while (timer() - t0 < 100000) {
    }
    out[0] = (double)(clock64() - c0) / (double)(timer() - t0);
}

typedef void (*Kernel)(u64 *, u64, u64, const u64 *, double, u64 *);
static Kernel kernels[] = {chase<BARE>, chase<TIMER>, chase<TIMER_LOADED>, chase<CLOCK>,
                           chase<SLEEP>};

int main() {
    const size_t slots = 1 << 23;
    const u64 steps = 20000;
    u64 *host = (u64 *)malloc(slots * 8), *chain, *out, *config;
    size_t *next = (size_t *)malloc(slots * sizeof(size_t));
    CHECK(cudaMalloc(&chain, slots * 8));
    CHECK(cudaMalloc(&out, 16));
    CHECK(cudaMalloc(&config, 8));
    for (size_t i = 0; i < slots; i++) next[i] = i;
    srand(0xc41);
    for (size_t i = slots - 1; i > 0; i--) {  // Sattolo: one cycle through every slot
        size_t j = (((size_t)rand() << 31) ^ (size_t)rand()) % i;
        size_t t = next[i];
        next[i] = next[j];
        next[j] = t;
    }
    for (size_t i = 0; i < slots; i++) host[i] = (u64)(chain + next[i]);
    CHECK(cudaMemcpy(chain, host, slots * 8, cudaMemcpyHostToDevice));
    double *r;
    CHECK(cudaMalloc(&r, sizeof(double)));
    rate<<<1, 1>>>(r);
    double cycles_per_ns;
    CHECK(cudaMemcpy(&cycles_per_ns, r, sizeof(double), cudaMemcpyDeviceToHost));
    printf("delay_cost: %%clock64 runs %.3f cycles per ns of %%globaltimer\n", cycles_per_ns);
    const u64 deltas[] = {0, 100, 200, 400, 800};
    double bare = 0;
    for (int w = 0; w < WAYS; w++)
        for (u64 delta : deltas) {
            if ((w == BARE) != (delta == 0)) continue;
            CHECK(cudaMemcpy(config, &delta, 8, cudaMemcpyHostToDevice));
            double best = 1e30;
            for (int rep = 0; rep < 3; rep++) {
                kernels[w]<<<1, 1>>>(chain, steps, delta, config, cycles_per_ns, out);
                u64 got[2];
                CHECK(cudaMemcpy(got, out, 16, cudaMemcpyDeviceToHost));
                best = best < (double)got[0] / steps ? best : (double)got[0] / steps;
            }
            if (w == BARE) {
                bare = best;
                printf("delay_cost %-15s %7.1f ns per load\n", names[w], best);
            } else {
                printf("delay_cost %-15s delta %4llu: %7.1f ns added per load (%+.1f ns)\n",
                       names[w], delta, best - bare, best - bare - (double)delta);
            }
        }
    return 0;
}
