/* What the interposed cuLaunchKernel costs by itself, as a launch right after another finds it:
 * each round runs the driver's own cuLaunchKernel (which leaves the caches and the branch
 * predictor as a real launch does), then times one call of the interposed one, whose real
 * function is a stub (argv[1], a library exporting an empty cuLaunchKernel, looked up through the
 * preloaded library's dlsym, which keeps it as the real one), then a second, warm call. The
 * probes are paused and running on alternate rounds. Prints medians in TSC cycles (rdtscp,
 * whose own cost is in every figure) and the cost added by the probes, cold and warm.
 * Built and run by benches/launch.rs, before launch_overhead.c. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <x86intrin.h>

typedef int (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         unsigned, void *, void **, void **);

static const char PTX[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                          ".visible .entry empty()\n{\n\tret;\n}\n";

#define ROUNDS 20000

static int cmp(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

#define NEED(f) if (!(f)) { fprintf(stderr, "missing: %s\n", #f); return 1; }
#define CHECK(call) do { int r_ = (call); if (r_) { fprintf(stderr, "%s: %d\n", #call, r_); return 1; } } while (0)

int main(int argc, char **argv) {
    NEED(argc == 2);
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    NEED(cuda);
    int (*init)(unsigned) = dlsym(cuda, "cuInit");
    int (*device_get)(int *, int) = dlsym(cuda, "cuDeviceGet");
    int (*retain)(void **, int) = dlsym(cuda, "cuDevicePrimaryCtxRetain");
    int (*set_current)(void *) = dlsym(cuda, "cuCtxSetCurrent");
    int (*load)(void **, const void *) = dlsym(cuda, "cuModuleLoadData");
    int (*get_function)(void **, void *, const char *) = dlsym(cuda, "cuModuleGetFunction");
    int (*sync)(void) = dlsym(cuda, "cuCtxSynchronize");
    launch_fn hooked = (launch_fn)dlsym(cuda, "cuLaunchKernel");
    int (*probes)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "egpu_preload_probes");
    void *(*real_launch)(void) = (void *(*)(void))dlsym(RTLD_DEFAULT, "egpu_preload_real_launch");
    NEED(init && device_get && retain && set_current && load && get_function && sync && hooked);
    if (!probes || !real_launch) { fprintf(stderr, "not under egpu's preloaded library\n"); return 2; }
    int dev;
    void *ctx, *module, *f;
    CHECK(init(0));
    CHECK(device_get(&dev, 0));
    CHECK(retain(&ctx, dev));
    CHECK(set_current(ctx));
    CHECK(load(&module, PTX));
    CHECK(get_function(&f, module, "empty"));
    launch_fn driver = (launch_fn)real_launch();
    NEED(driver && driver != hooked);
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
