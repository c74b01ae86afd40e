/* What interposing cuLaunchKernel costs, measured in one process under egpu's preloaded
 * library: (a) the driver's own cuLaunchKernel, (b) the interposed one with the probes paused
 * (egpu_preload_probes(0): none runs; they stay attached, so that switching between rounds
 * costs nothing), (c) the interposed one with the built-in probes (a hash map update keyed by
 * kernel, and the launch-shape histograms), (d) the same with a tag set (issue 28: the thread's
 * tags copied into each context), (e) with launch sites captured at every launch (frame pointers,
 * interned) and (f) one launch in 64, each as
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
#define VARIANTS 6

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
    void *f = b.f;
    int (*probes)(int) = b.probes, (*sync)(void) = b.sync;
    const char *names[VARIANTS] = {"(a) cuLaunchKernel, not interposed", "(b) interposed, probes paused",
                                   "(c) interposed, hash map update per launch", "(d) (c) with a tag set",
                                   "(e) (c) with launch sites, every launch", "(f) (c) with launch sites, 1 in 64"};
    /* Per variant: the function, probes running, the tag, sites 1 in N (0: none). */
    launch_fn fns[VARIANTS] = {b.driver, b.hooked, b.hooked, b.hooked, b.hooked, b.hooked};
    const int running[VARIANTS] = {0, 0, 1, 1, 1, 1}, tagged[VARIANTS] = {0, 0, 0, 1, 0, 0};
    const int every[VARIANTS] = {0, 0, 0, 0, 1, 64};
#define SET(v) (probes(running[v]), b.tag(tagged[v] ? 42 : 0), b.sites(every[v]))
    static double ns[VARIANTS][ROUNDS];
    for (int v = 0; v < VARIANTS; v++) { /* warm-up: the JIT, the driver's queues */
        SET(v);
        for (int i = 0; i < BATCH; i++) CHECK(fns[v](f, 1, 1, 1, 32, 1, 1, 0, 0, 0, 0));
        CHECK(sync());
    }
    for (int r = 0; r < ROUNDS; r++) {
        for (int k = 0; k < VARIANTS; k++) {
            int v = (r + k) % VARIANTS;
            SET(v);
            double t0 = now();
            for (int i = 0; i < BATCH; i++) CHECK(fns[v](f, 1, 1, 1, 32, 1, 1, 0, 0, 0, 0));
            ns[v][r] = (now() - t0) / BATCH;
            CHECK(sync());
        }
    }
    probes(1), b.tag(0), b.sites(0);
    /* Per round, the differences to (a) in that round: drift between rounds cancels out. */
    static double diff[VARIANTS - 1][ROUNDS];
    double med[VARIANTS], q1[VARIANTS - 1], q3[VARIANTS - 1], lo[VARIANTS - 1], hi[VARIANTS - 1];
    /* The median's 95% interval: the order statistics 1.96 sqrt(n) / 2 either side of it. */
    int k = (int)ceil(0.98 * sqrt(ROUNDS));
    for (int d = 0; d < VARIANTS - 1; d++) {
        for (int r = 0; r < ROUNDS; r++) diff[d][r] = ns[d + 1][r] - ns[0][r];
        qsort(diff[d], ROUNDS, sizeof(double), cmp);
        q1[d] = diff[d][ROUNDS / 4];
        q3[d] = diff[d][3 * ROUNDS / 4];
        lo[d] = diff[d][ROUNDS / 2 - k];
        hi[d] = diff[d][ROUNDS / 2 + k];
    }
    printf("cuLaunchKernel of an empty kernel, %d rounds of %d launches, interleaved:\n", ROUNDS, BATCH);
    printf("%-46s %10s %10s %10s %10s\n", "variant", "median ns", "q1", "q3", "ratio");
    for (int v = 0; v < VARIANTS; v++) {
        qsort(ns[v], ROUNDS, sizeof(double), cmp);
        med[v] = ns[v][ROUNDS / 2];
    }
    for (int v = 0; v < VARIANTS; v++) {
        double added = v == 0 ? 0 : diff[v - 1][ROUNDS / 2];
        printf("%-46s %10.1f %10.1f %10.1f %9.4fx\n", names[v], med[v], ns[v][ROUNDS / 4],
               ns[v][3 * ROUNDS / 4], (med[0] + added) / med[0]);
    }
    printf("added per call (median of per-round differences, its 95%% interval; quartiles):\n");
    for (int d = 0; d < VARIANTS - 1; d++)
        printf("  %.3s %.1f ns (%.1f to %.1f; %.1f, %.1f)\n", names[d + 1], diff[d][ROUNDS / 2], lo[d], hi[d],
               q1[d], q3[d]);
    printf("ratio (c) %.4f, 95%% interval %.4f to %.4f (target <= 1.01)\n", (med[0] + diff[1][ROUNDS / 2]) / med[0],
           (med[0] + lo[1]) / med[0], (med[0] + hi[1]) / med[0]);
    printf("launch sites (e) every launch: +%.1f ns over (c); (f) 1 in 64: +%.1f ns over (c)\n",
           diff[3][ROUNDS / 2] - diff[1][ROUNDS / 2], diff[4][ROUNDS / 2] - diff[1][ROUNDS / 2]);
    return 0;
}
