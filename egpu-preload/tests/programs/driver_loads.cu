// Every way the CUDA driver API loads a module, for egpu's device probes on the GPU machine
// (egpu-preload/tests/programs/device_check.py runs it, bare and under
// `egpu run --probes libkernel_bytes.so`). It loads device_bytes.cu's kernels from a fat binary
// file (argv[1], made with `nvcc -fatbin`) in each way below, finds `add` in what was loaded,
// launches it once and unloads it:
//
//   cuModuleLoadData, cuModuleLoadDataEx (with a JIT option), cuModuleLoadFatBinary (the bytes),
//   cuModuleLoad (the file), cuLibraryLoadData (bytes; the kernel by cuLibraryGetKernel and
//   launched by its handle), cuLibraryLoadFromFile (the module by cuLibraryGetModule), and
//   cuModuleLoadData as cuGetProcAddress hands it out (as the runtime and Python bindings find
//   the driver's functions).
//
// It prints the bytes `add` moved in all and a checksum of its output, as device_bytes.cu does:
//     expect bytes _Z3addPKfS0_Pf load L store S atomic 0 async 0
// Build: nvcc -O2 -arch=sm_90 driver_loads.cu -o driver_loads -lcuda
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cuda.h>
#include <vector>

#define CHECK(call)                                                                   \
    do {                                                                              \
        CUresult r_ = (call);                                                         \
        if (r_ != CUDA_SUCCESS) {                                                     \
            const char *s_ = "?";                                                     \
            cuGetErrorName(r_, &s_);                                                  \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, s_);        \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

constexpr int N = 1 << 20;
constexpr const char *ADD = "_Z3addPKfS0_Pf";

typedef CUresult (*LoadDataFn)(CUmodule *, const void *);

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: driver_loads FATBIN\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f) return 2;
    std::vector<char> image;
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) image.insert(image.end(), buf, buf + n);
    fclose(f);

    CHECK(cuInit(0));
    CUdevice device;
    CUcontext context;
    CHECK(cuDeviceGet(&device, 0));
    CHECK(cuDevicePrimaryCtxRetain(&context, device));
    CHECK(cuCtxSetCurrent(context));
    CUdeviceptr a, b, c;
    CHECK(cuMemAlloc(&a, N * sizeof(float)));
    CHECK(cuMemAlloc(&b, N * sizeof(float)));
    CHECK(cuMemAlloc(&c, N * sizeof(float)));
    std::vector<float> host(N);
    for (int i = 0; i < N; i++) host[i] = (float)(i % 1013);
    CHECK(cuMemcpyHtoD(a, host.data(), N * sizeof(float)));
    CHECK(cuMemcpyHtoD(b, host.data(), N * sizeof(float)));
    void *args[] = {&a, &b, &c};
    auto launch = [&](CUfunction fn) {
        CHECK(cuLaunchKernel(fn, N / 256, 1, 1, 256, 1, 1, 0, 0, args, nullptr));
        CHECK(cuCtxSynchronize());
    };
    LoadDataFn by_proc_address = nullptr;
    CUdriverProcAddressQueryResult found;
    CHECK(cuGetProcAddress("cuModuleLoadData", (void **)&by_proc_address, 13000,
                           CU_GET_PROC_ADDRESS_DEFAULT, &found));

    int runs = 0;
    CUmodule module;
    CUfunction fn;
    const char *ways[] = {"cuModuleLoadData", "cuModuleLoadDataEx", "cuModuleLoadFatBinary",
                          "cuModuleLoad", "cuGetProcAddress(cuModuleLoadData)"};
    for (int way = 0; way < 5; way++) {
        CUjit_option option = CU_JIT_OPTIMIZATION_LEVEL;
        void *level = (void *)(uintptr_t)4;
        if (way == 0) CHECK(cuModuleLoadData(&module, image.data()));
        if (way == 1) CHECK(cuModuleLoadDataEx(&module, image.data(), 1, &option, &level));
        if (way == 2) CHECK(cuModuleLoadFatBinary(&module, image.data()));
        if (way == 3) CHECK(cuModuleLoad(&module, argv[1]));
        if (way == 4) CHECK(by_proc_address(&module, image.data()));
        CHECK(cuModuleGetFunction(&fn, module, ADD));
        launch(fn);
        runs++;
        CHECK(cuModuleUnload(module));
        printf("loaded by %s\n", ways[way]);
    }
    CUlibrary library;
    CUkernel kernel;
    CHECK(cuLibraryLoadData(&library, image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
    CHECK(cuLibraryGetKernel(&kernel, library, ADD));
    launch((CUfunction)kernel);
    runs++;
    CHECK(cuLibraryUnload(library));
    printf("loaded by cuLibraryLoadData\n");
    CHECK(cuLibraryLoadFromFile(&library, argv[1], nullptr, nullptr, 0, nullptr, nullptr, 0));
    CHECK(cuLibraryGetModule(&module, library));
    CHECK(cuModuleGetFunction(&fn, module, ADD));
    launch(fn);
    runs++;
    CHECK(cuLibraryUnload(library));
    printf("loaded by cuLibraryLoadFromFile\n");

    std::vector<float> out(N);
    CHECK(cuMemcpyDtoH(out.data(), c, N * sizeof(float)));
    bool ok = true;
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < N; i++) {
        ok &= out[i] == 2 * host[i];
        const unsigned char *p = (const unsigned char *)&out[i];
        for (int k = 0; k < 4; k++) h = (h ^ p[k]) * 0x100000001b3ull;
    }
    printf("results %s add %016llx runs %d\n", ok ? "ok" : "WRONG", (unsigned long long)h, runs);
    const long long fb = sizeof(float);
    printf("expect bytes %s load %lld store %lld atomic 0 async 0\n", ADD, runs * 2 * N * fb,
           runs * N * fb);
    CHECK(cuDevicePrimaryCtxRelease(device));
    return ok ? 0 : 1;
}
