/* What the interposed cuLaunchKernel costs by itself, as a launch right after another finds it:
 * each round runs the driver's own cuLaunchKernel (which leaves the caches and the branch
 * predictor as a real launch does), then times one call of the interposed one, whose real
 * function is a stub (argv[1], a library exporting an empty cuLaunchKernel, looked up through the
 * preloaded library's dlsym, which keeps it as the real one), then a second, warm call. The
 * probes are paused and running on alternate rounds. Prints medians in TSC cycles (rdtscp,
 * whose own cost is in every figure) and the cost added by the probes, cold and warm.
 * Built and run by benches/launch.rs, before launch_overhead.c. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <x86intrin.h>

#include "launch_setup.h"

#define ROUNDS 20000

static int cmp(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    NEED(argc == 2);
    struct bench b;
    int up = set_up(&b);
    if (up) return up;
    launch_fn hooked = b.hooked, driver = b.driver;
    void *f = b.f;
    int (*probes)(int) = b.probes, (*sync)(void) = b.sync;
    void *(*real_launch)(void) = b.real_launch;
    void *stub = dlopen(argv[1], RTLD_NOW);
    NEED(stub);
    /* Through the preloaded library's dlsym: the hook's real function is the stub from now on. */
    launch_fn through = (launch_fn)dlsym(stub, "cuLaunchKernel");
    NEED(through == hooked && real_launch() != (void *)driver);
    static long cold[2][ROUNDS], warm[2][ROUNDS];
    for (int i = 0; i < 2000; i++) { /* warm-up: the JIT, the driver's queues, the poster */
        probes(i & 1);
        CHECK(driver(f, 1, 1, 1, 32, 1, 1, 0, 0, 0, 0));
        hooked(f, 1, 1, 1, 32, 1, 1, 0, 0, 0, 0);
    }
    CHECK(sync());
    for (int i = 0; i < 2 * ROUNDS; i++) {
        int v = i & 1;
        unsigned aux;
        probes(v);
        CHECK(driver(f, 1, 1, 1, 32, 1, 1, 0, 0, 0, 0));
        long a = __rdtscp(&aux);
        hooked(f, 1, 1, 1, 32, 1, 1, 0, 0, 0, 0);
        long b = __rdtscp(&aux);
        hooked(f, 1, 1, 1, 32, 1, 1, 0, 0, 0, 0);
        long c = __rdtscp(&aux);
        cold[v][i / 2] = b - a;
        warm[v][i / 2] = c - b;
        if (i % 512 == 511) CHECK(sync());
    }
    probes(1);
    struct timespec s0, s1;
    long t0 = __rdtsc();
    clock_gettime(CLOCK_MONOTONIC, &s0);
    do clock_gettime(CLOCK_MONOTONIC, &s1);
    while ((s1.tv_sec - s0.tv_sec) * 1000000000L + s1.tv_nsec - s0.tv_nsec < 50000000);
    double ghz = (__rdtsc() - t0) / 5e7;
    for (int v = 0; v < 2; v++) {
        qsort(cold[v], ROUNDS, sizeof(long), cmp);
        qsort(warm[v], ROUNDS, sizeof(long), cmp);
    }
    long m[2][2] = {{cold[0][ROUNDS / 2], cold[1][ROUNDS / 2]}, {warm[0][ROUNDS / 2], warm[1][ROUNDS / 2]}};
    printf("the interposed cuLaunchKernel alone (a stub behind it), %d rounds, TSC cycles at %.2f GHz:\n", ROUNDS, ghz);
    printf("  right after a driver launch: paused %ld [%ld, %ld], probes %ld [%ld, %ld], added %.1f ns\n",
           m[0][0], cold[0][ROUNDS / 4], cold[0][3 * ROUNDS / 4], m[0][1], cold[1][ROUNDS / 4],
           cold[1][3 * ROUNDS / 4], (m[0][1] - m[0][0]) / ghz);
    printf("  again at once (warm):        paused %ld [%ld, %ld], probes %ld [%ld, %ld], added %.1f ns\n",
           m[1][0], warm[0][ROUNDS / 4], warm[0][3 * ROUNDS / 4], m[1][1], warm[1][ROUNDS / 4],
           warm[1][3 * ROUNDS / 4], (m[1][1] - m[1][0]) / ghz);
    return 0;
}
