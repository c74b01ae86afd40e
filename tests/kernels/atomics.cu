// Atomic read-modify-writes on global memory, in the forms that reach PTX for sm_90: `atom.global`
// of every operation and type, with and without a scope (.cta, .sys), `red.global` (written as
// inline asm: nvcc 13.0 emits `atom` even where the result is unused, and only ptxas turns it
// into a RED in SASS; Triton's PTX has `red.global` itself), and generic `atom` (no state space)
// through a pointer that may point to shared or global memory, with and without .relaxed.gpu.
// The bytes an atomic moves are the size of its memory operand (u32/s32/b32/f32: 4 bytes,
// u64/f64: 8 bytes), whatever the operation, and whether or not its old value is returned.
//
// Every kernel: n threads, blocks of 256 (grid = n / 256 with n a multiple of 256); thread i
// does its accesses once when i < n.

// histogram: in[i] & 255 picks one of 256 u32 bins; atomicAdd's result is unused.
//   ld.global.nc 4n bytes (in)        atom.global.add.u32 4n bytes (bins)
extern "C" __global__ void histogram(const unsigned *__restrict__ in, unsigned *bins, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&bins[in[i] & 255], 1u);
}

// histogram_red: the same histogram with `red.global.add.u32`, and the sum of the values in a
// u64 with `red.global.add.u64`, as inline asm.
//   ld.global.nc 4n bytes (in)
//   red.global.add.u32 4n bytes (bins), red.global.add.u64 8n bytes (*sum): 12n bytes
extern "C" __global__ void histogram_red(const unsigned *__restrict__ in, unsigned *bins,
                                         unsigned long long *sum, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned v = in[i];
    asm volatile("red.global.add.u32 [%0], %1;" ::"l"(&bins[v & 255]), "r"(1u) : "memory");
    asm volatile("red.global.add.u64 [%0], %1;" ::"l"(sum), "l"((unsigned long long)v)
                 : "memory");
}

// Counters of every atomic form; each field is one word that all threads update.
// (nvcc emits `atom` for each, its result unused or not.)
struct Counters {
    unsigned ticket;          // atom.global.add.u32, result used
    unsigned long long u64;   // atom.global.add.u64
    double f64;               // atom.global.add.f64
    float f32;                // atom.global.add.f32
    int lock;                 // atom.global.cas.b32, result used
    int last;                 // atom.global.exch.b32, result used
    int min, max;             // atom.global.min.s32, atom.global.max.s32
    unsigned and_, or_, xor_; // atom.global.and.b32, atom.global.or.b32, atom.global.xor.b32
    unsigned long long wide;  // atom.global.add.u64, result used
    unsigned block, system;   // atom.global.cta.add.u32, atom.global.sys.add.u32
    unsigned wrap;            // atom.global.inc.u32
    unsigned relaxed;         // atom.add.relaxed.gpu.u32 (generic, from __nv_atomic_add)
};

// atomic_forms: thread i < n updates each field of *c once and stores what four of the atomics
// returned (the CAS and exchange xored into one word) into out[3i .. 3i+3).
//   atomics (all on global memory), per thread: 16 atomics, 3 of them 8-byte (u64, f64, wide)
//     and 13 of them 4-byte (the generic relaxed add included): 76 bytes per thread, 76n bytes
//     in 16n atomics (72n bytes in 15n `atom.global`, 4n bytes in n generic `atom`)
//   st.global  out: 3 u32 words per thread, 12n bytes
extern "C" __global__ void atomic_forms(Counters *c, unsigned *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned ticket = atomicAdd(&c->ticket, 1u);
    atomicAdd(&c->u64, 1ull);
    atomicAdd(&c->f64, 0.5);
    atomicAdd(&c->f32, 0.25f);
    int seen = atomicCAS(&c->lock, 0, i + 1);
    int before = atomicExch(&c->last, i);
    atomicMin(&c->min, i);
    atomicMax(&c->max, i);
    atomicAnd(&c->and_, ~(1u << (i & 31)));
    atomicOr(&c->or_, 1u << (i & 31));
    atomicXor(&c->xor_, (unsigned)i);
    unsigned long long wide = atomicAdd(&c->wide, (unsigned long long)i << 32);
    atomicAdd_block(&c->block, 1u);
    atomicAdd_system(&c->system, 1u);
    atomicInc(&c->wrap, 1000u);
    __nv_atomic_add(&c->relaxed, 1u, __NV_ATOMIC_RELAXED, __NV_THREAD_SCOPE_DEVICE);
    out[3 * i] = ticket;
    out[3 * i + 1] = (unsigned)(seen ^ before);
    out[3 * i + 2] = (unsigned)(wide >> 32);
}

// generic_atomic: the counter is chosen at run time, by the launch's `to_shared`, between a
// block's __shared__ word and a global one, so the add is a generic `atom.add.u32` (its result
// used): which memory it touches is known only when it runs. Thread i < n adds in[i] and stores
// the old value in old[i]; with `to_shared`, thread 0 of each block then adds the block's total
// to *total with an `atom.global.add.u32`.
//   ld.global 4n bytes (in), st.global 4n bytes (old)
//   atom.add (generic) 4n bytes: on *total when to_shared == 0, on shared memory otherwise
//   atom.global.add.u32: 0 when to_shared == 0, otherwise 4 bytes per block (4 * n / 256)
extern "C" __global__ void generic_atomic(const unsigned *__restrict__ in, unsigned *total,
                                          unsigned *old, int n, int to_shared) {
    __shared__ unsigned block_total;
    if (threadIdx.x == 0) block_total = 0;
    __syncthreads();
    unsigned *counter = to_shared ? &block_total : total;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) old[i] = atomicAdd(counter, in[i]);
    __syncthreads();
    if (to_shared && threadIdx.x == 0) atomicAdd(total, block_total);
}
