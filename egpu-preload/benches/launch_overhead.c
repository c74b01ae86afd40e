/* What interposing cuLaunchKernel costs, measured in one process under egpu's preloaded
 * library: (a) the driver's own cuLaunchKernel, (b) the interposed one with the probes paused
 * (egpu_preload_probes(0): none runs; they stay attached, so that switching between rounds
 * costs nothing), (c) the interposed one with the built-in probes (a hash map update keyed by
 * kernel, and the launch-shape histograms), each as
 * nanoseconds per call over batches of launches of an empty kernel, interleaved in rotating
 * order; the cost added is the median of the per-round differences to (a), with a 95% confidence
 * interval of that median (order statistics, no assumption on the distribution) and the
 * quartiles of the differences. Built and run by benches/launch.rs. */
#include <stdint.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "launch_setup.h"

#define ROUNDS 4801
#define BATCH 200

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(void) {
    struct bench b;
    int up = set_up(&b);
    if (up) return up;
    launch_fn fns[3] = {b.driver, b.hooked, b.hooked};
    void *f = b.f;
    int (*probes)(int) = b.probes, (*sync)(void) = b.sync;
    const char *names[3] = {"(a) cuLaunchKernel, not interposed", "(b) interposed, probes paused",
                            "(c) interposed, hash map update per launch"};
    static double ns[3][ROUNDS];
    for (int v = 0; v < 3; v++) { /* warm-up: the JIT, the driver's queues */
        probes(v == 2);
        for (int i = 0; i < BATCH; i++) CHECK(fns[v](f, 1, 1, 1, 32, 1, 1, 0, 0, 0, 0));
        CHECK(sync());
    }
    for (int r = 0; r < ROUNDS; r++) {
        for (int k = 0; k < 3; k++) {
            int v = (r + k) % 3;
            probes(v == 2);
            double t0 = now();
            for (int i = 0; i < BATCH; i++) CHECK(fns[v](f, 1, 1, 1, 32, 1, 1, 0, 0, 0, 0));
            ns[v][r] = (now() - t0) / BATCH;
            CHECK(sync());
        }
    }
    probes(1);
    /* Per round, the differences to (a) in that round: drift between rounds cancels out. */
    static double diff[2][ROUNDS];
    double med[3], q1[2], q3[2], lo[2], hi[2];
    /* The median's 95% interval: the order statistics 1.96 sqrt(n) / 2 either side of it. */
    int k = (int)ceil(0.98 * sqrt(ROUNDS));
    for (int r = 0; r < ROUNDS; r++) {
        diff[0][r] = ns[1][r] - ns[0][r];
        diff[1][r] = ns[2][r] - ns[0][r];
    }
    for (int d = 0; d < 2; d++) {
        qsort(diff[d], ROUNDS, sizeof(double), cmp);
        q1[d] = diff[d][ROUNDS / 4];
        q3[d] = diff[d][3 * ROUNDS / 4];
        lo[d] = diff[d][ROUNDS / 2 - k];
        hi[d] = diff[d][ROUNDS / 2 + k];
    }
    printf("cuLaunchKernel of an empty kernel, %d rounds of %d launches, interleaved:\n", ROUNDS, BATCH);
    printf("%-46s %10s %10s %10s %10s\n", "variant", "median ns", "q1", "q3", "ratio");
    for (int v = 0; v < 3; v++) {
        qsort(ns[v], ROUNDS, sizeof(double), cmp);
        med[v] = ns[v][ROUNDS / 2];
    }
    for (int v = 0; v < 3; v++) {
        double added = v == 0 ? 0 : diff[v - 1][ROUNDS / 2];
        printf("%-46s %10.1f %10.1f %10.1f %9.4fx\n", names[v], med[v], ns[v][ROUNDS / 4],
               ns[v][3 * ROUNDS / 4], (med[0] + added) / med[0]);
    }
    printf("added per call (median of per-round differences, its 95%% interval; quartiles): "
           "(b) %.1f ns (%.1f to %.1f; %.1f, %.1f), (c) %.1f ns (%.1f to %.1f; %.1f, %.1f)\n",
           diff[0][ROUNDS / 2], lo[0], hi[0], q1[0], q3[0], diff[1][ROUNDS / 2], lo[1], hi[1], q1[1], q3[1]);
    printf("ratio (c) %.4f, 95%% interval %.4f to %.4f (target <= 1.01)\n", (med[0] + diff[1][ROUNDS / 2]) / med[0],
           (med[0] + lo[1]) / med[0], (med[0] + hi[1]) / med[0]);
    return 0;
}
