/* egpu.h: what probes written in C need of egpu, generated from its field and helper
 * tables (egpu_ebpf::c_header; a test keeps this file equal to it). Build probes with
 * `clang -O2 -g -target bpf -c probe.c`; put each in a section named `egpu/` and its
 * attach point with `/` for `::` (SEC("egpu/device/global_load")). */
#ifndef EGPU_H
#define EGPU_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed char __s8;
typedef short __s16;
typedef int __s32;
typedef long long __s64;

/* libbpf's: a section, and a BTF-defined map's members. */
#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name

/* The map kinds egpu has (Linux's numbers); a ring buffer's value is its record. */
enum {
    BPF_MAP_TYPE_HASH = 1,
    BPF_MAP_TYPE_ARRAY = 2,
    BPF_MAP_TYPE_PERCPU_HASH = 5,
    BPF_MAP_TYPE_PERCPU_ARRAY = 6,
    BPF_MAP_TYPE_RINGBUF = 27,
};
enum { BPF_ANY = 0, BPF_NOEXIST = 1, BPF_EXIST = 2 };

/* A legacy map definition, in a `maps` section. */
struct bpf_map_def {
    __u32 type;
    __u32 key_size;
    __u32 value_size;
    __u32 max_entries;
    __u32 map_flags;
};

/* LaunchCtx: Context of a kernel launch (`cuLaunchKernel`, `cudaLaunchKernel`, graph launches). */
struct egpu_launch_ctx {
    __u64 kernel_id; /* 64-bit hash of the kernel's mangled name, stable across processes. */
    __u64 function; /* The `CUfunction` handle. */
    __u64 stream; /* The stream (`CUstream`), 0 for the legacy default stream. */
    __u64 timestamp_ns; /* Host monotonic clock at the call, in ns. */
    __u32 flags; /* `LaunchCtx::CAPTURED`, `LaunchCtx::GRAPH`. */
    __u32 shared_mem_bytes; /* Dynamic shared memory per block, in bytes. */
    __u32 grid[3]; /* Grid size in blocks (x, y, z). */
    __u32 block[3]; /* Block size in threads (x, y, z). */
    __u32 device; /* CUDA device ordinal. */
    __u32 host_tid; /* Host thread id (`gettid`). */
    __s32 result; /* Exit only: the call's `CUresult`. */
    __u32 tag; /* `context_tag(HostEvent::Launch)`. */
    __u64 duration_ns; /* Exit only: host time spent in the call, in ns. */
    __u64 site_id; /* The launch site this call was made from: the id of its stack, interned in the process's site table (`egpu-<pid>-sites`), when launch sites are captured (`EGPU_SITES`) and this call was sampled; 0 otherwise. */
    __u64 tag_id; /* The request or job the program said this work belongs to (`egpu_tag_set`), 0 for none. */
    __u64 trace_id[2]; /* The W3C trace context's trace id the program set (`egpu_traceparent_set`): its high 64 bits, then its low 64 bits (as the 32 hex digits read); zero for none. */
    __u64 span_id; /* The W3C trace context's parent span id the program set, 0 for none. */
};
_Static_assert(sizeof(struct egpu_launch_ctx) == 128, "LaunchCtx is 128 bytes");
_Static_assert(__builtin_offsetof(struct egpu_launch_ctx, kernel_id) == 0, "LaunchCtx.kernel_id");
_Static_assert(__builtin_offsetof(struct egpu_launch_ctx, function) == 8, "LaunchCtx.function");
_Static_assert(__builtin_offsetof(struct egpu_launch_ctx, stream) == 16, "LaunchCtx.stream");
_Static_assert(__builtin_offsetof(struct egpu_launch_ctx, timestamp_ns) == 24, "LaunchCtx.timestamp_ns");
_Static_assert(__builtin_offsetof(struct egpu_launch_ctx, flags) == 32, "LaunchCtx.flags");
_Static_assert(__builtin_offsetof(struct egpu_launch_ctx, shared_mem_bytes) == 36, "LaunchCtx.shared_mem_bytes");
_Static_assert(__builtin_offsetof(struct egpu_launch_ctx, grid) == 40, "LaunchCtx.grid");
_Static_assert(__builtin_offsetof(struct egpu_launch_ctx, block) == 52, "LaunchCtx.block");
_Static_assert(__builtin_offsetof(struct egpu_launch_ctx, device) == 64, "LaunchCtx.device");
_Static_assert(__builtin_offsetof(struct egpu_launch_ctx, host_tid) == 68, "LaunchCtx.host_tid");
_Static_assert(__builtin_offsetof(struct egpu_launch_ctx, result) == 72, "LaunchCtx.result");
_Static_assert(__builtin_offsetof(struct egpu_launch_ctx, tag) == 76, "LaunchCtx.tag");
_Static_assert(__builtin_offsetof(struct egpu_launch_ctx, duration_ns) == 80, "LaunchCtx.duration_ns");
_Static_assert(__builtin_offsetof(struct egpu_launch_ctx, site_id) == 88, "LaunchCtx.site_id");
_Static_assert(__builtin_offsetof(struct egpu_launch_ctx, tag_id) == 96, "LaunchCtx.tag_id");
_Static_assert(__builtin_offsetof(struct egpu_launch_ctx, trace_id) == 104, "LaunchCtx.trace_id");
_Static_assert(__builtin_offsetof(struct egpu_launch_ctx, span_id) == 120, "LaunchCtx.span_id");

/* MemcpyCtx: Context of a memory copy or set (`cuMemcpy*`, `cudaMemcpy*`, `cuMemset*`). */
struct egpu_memcpy_ctx {
    __u64 dst; /* Destination address. */
    __u64 src; /* Source address (0 for sets). */
    __u64 bytes; /* Bytes copied or set. */
    __u64 stream; /* The stream, 0 for synchronous copies. */
    __u64 timestamp_ns; /* Host monotonic clock at the call, in ns. */
    __u64 duration_ns; /* Exit only: host time spent in the call, in ns. */
    __u32 kind; /* One of the `MemcpyCtx::*` kinds: `MemcpyCtx::HOST_TO_DEVICE`, … */
    __u32 device; /* CUDA device ordinal. */
    __u32 host_tid; /* Host thread id. */
    __s32 result; /* Exit only: the call's `CUresult`. */
    __u32 flags; /* `MemcpyCtx::ASYNC`, `MemcpyCtx::MEMSET`. */
    __u32 tag; /* `context_tag(HostEvent::Memcpy)`. */
    __u64 site_id; /* The launch site this call was made from: the id of its stack, interned in the process's site table (`egpu-<pid>-sites`), when launch sites are captured (`EGPU_SITES`) and this call was sampled; 0 otherwise. */
    __u64 tag_id; /* The request or job the program said this work belongs to (`egpu_tag_set`), 0 for none. */
    __u64 trace_id[2]; /* The W3C trace context's trace id the program set (`egpu_traceparent_set`): its high 64 bits, then its low 64 bits (as the 32 hex digits read); zero for none. */
    __u64 span_id; /* The W3C trace context's parent span id the program set, 0 for none. */
    __u32 src_device; /* A copy between devices (`MemcpyCtx::PEER`): the source's CUDA device ordinal (the context it names, for the driver's `cuMemcpyPeer`); 0 for other copies, whose device is `device`. */
    __u32 dst_device; /* A copy between devices: the destination's CUDA device ordinal; 0 for other copies. */
};
_Static_assert(sizeof(struct egpu_memcpy_ctx) == 120, "MemcpyCtx is 120 bytes");
_Static_assert(__builtin_offsetof(struct egpu_memcpy_ctx, dst) == 0, "MemcpyCtx.dst");
_Static_assert(__builtin_offsetof(struct egpu_memcpy_ctx, src) == 8, "MemcpyCtx.src");
_Static_assert(__builtin_offsetof(struct egpu_memcpy_ctx, bytes) == 16, "MemcpyCtx.bytes");
_Static_assert(__builtin_offsetof(struct egpu_memcpy_ctx, stream) == 24, "MemcpyCtx.stream");
_Static_assert(__builtin_offsetof(struct egpu_memcpy_ctx, timestamp_ns) == 32, "MemcpyCtx.timestamp_ns");
_Static_assert(__builtin_offsetof(struct egpu_memcpy_ctx, duration_ns) == 40, "MemcpyCtx.duration_ns");
_Static_assert(__builtin_offsetof(struct egpu_memcpy_ctx, kind) == 48, "MemcpyCtx.kind");
_Static_assert(__builtin_offsetof(struct egpu_memcpy_ctx, device) == 52, "MemcpyCtx.device");
_Static_assert(__builtin_offsetof(struct egpu_memcpy_ctx, host_tid) == 56, "MemcpyCtx.host_tid");
_Static_assert(__builtin_offsetof(struct egpu_memcpy_ctx, result) == 60, "MemcpyCtx.result");
_Static_assert(__builtin_offsetof(struct egpu_memcpy_ctx, flags) == 64, "MemcpyCtx.flags");
_Static_assert(__builtin_offsetof(struct egpu_memcpy_ctx, tag) == 68, "MemcpyCtx.tag");
_Static_assert(__builtin_offsetof(struct egpu_memcpy_ctx, site_id) == 72, "MemcpyCtx.site_id");
_Static_assert(__builtin_offsetof(struct egpu_memcpy_ctx, tag_id) == 80, "MemcpyCtx.tag_id");
_Static_assert(__builtin_offsetof(struct egpu_memcpy_ctx, trace_id) == 88, "MemcpyCtx.trace_id");
_Static_assert(__builtin_offsetof(struct egpu_memcpy_ctx, span_id) == 104, "MemcpyCtx.span_id");
_Static_assert(__builtin_offsetof(struct egpu_memcpy_ctx, src_device) == 112, "MemcpyCtx.src_device");
_Static_assert(__builtin_offsetof(struct egpu_memcpy_ctx, dst_device) == 116, "MemcpyCtx.dst_device");

/* AllocCtx: Context of an allocation or a free. */
struct egpu_alloc_ctx {
    __u64 ptr; /* The address allocated (exit) or freed. */
    __u64 bytes; /* Bytes allocated (0 for frees when unknown). */
    __u64 timestamp_ns; /* Host monotonic clock at the call, in ns. */
    __u64 duration_ns; /* Exit only: host time spent in the call, in ns. */
    __u32 kind; /* `AllocCtx::DEVICE`, `AllocCtx::HOST_PINNED` or `AllocCtx::MANAGED`. */
    __u32 op; /* `AllocCtx::ALLOC` or `AllocCtx::FREE`. */
    __u32 device; /* CUDA device ordinal. */
    __u32 host_tid; /* Host thread id. */
    __s32 result; /* Exit only: the call's `CUresult`. */
    __u32 tag; /* `context_tag(HostEvent::Alloc)`. */
    __u64 site_id; /* The launch site this call was made from: the id of its stack, interned in the process's site table (`egpu-<pid>-sites`), when launch sites are captured (`EGPU_SITES`) and this call was sampled; 0 otherwise. */
    __u64 tag_id; /* The request or job the program said this work belongs to (`egpu_tag_set`), 0 for none. */
    __u64 trace_id[2]; /* The W3C trace context's trace id the program set (`egpu_traceparent_set`): its high 64 bits, then its low 64 bits (as the 32 hex digits read); zero for none. */
    __u64 span_id; /* The W3C trace context's parent span id the program set, 0 for none. */
};
_Static_assert(sizeof(struct egpu_alloc_ctx) == 96, "AllocCtx is 96 bytes");
_Static_assert(__builtin_offsetof(struct egpu_alloc_ctx, ptr) == 0, "AllocCtx.ptr");
_Static_assert(__builtin_offsetof(struct egpu_alloc_ctx, bytes) == 8, "AllocCtx.bytes");
_Static_assert(__builtin_offsetof(struct egpu_alloc_ctx, timestamp_ns) == 16, "AllocCtx.timestamp_ns");
_Static_assert(__builtin_offsetof(struct egpu_alloc_ctx, duration_ns) == 24, "AllocCtx.duration_ns");
_Static_assert(__builtin_offsetof(struct egpu_alloc_ctx, kind) == 32, "AllocCtx.kind");
_Static_assert(__builtin_offsetof(struct egpu_alloc_ctx, op) == 36, "AllocCtx.op");
_Static_assert(__builtin_offsetof(struct egpu_alloc_ctx, device) == 40, "AllocCtx.device");
_Static_assert(__builtin_offsetof(struct egpu_alloc_ctx, host_tid) == 44, "AllocCtx.host_tid");
_Static_assert(__builtin_offsetof(struct egpu_alloc_ctx, result) == 48, "AllocCtx.result");
_Static_assert(__builtin_offsetof(struct egpu_alloc_ctx, tag) == 52, "AllocCtx.tag");
_Static_assert(__builtin_offsetof(struct egpu_alloc_ctx, site_id) == 56, "AllocCtx.site_id");
_Static_assert(__builtin_offsetof(struct egpu_alloc_ctx, tag_id) == 64, "AllocCtx.tag_id");
_Static_assert(__builtin_offsetof(struct egpu_alloc_ctx, trace_id) == 72, "AllocCtx.trace_id");
_Static_assert(__builtin_offsetof(struct egpu_alloc_ctx, span_id) == 88, "AllocCtx.span_id");

/* SyncCtx: Context of a synchronisation call. */
struct egpu_sync_ctx {
    __u64 handle; /* The stream or event waited on, 0 for context and device synchronisation. */
    __u64 timestamp_ns; /* Host monotonic clock at the call, in ns. */
    __u64 duration_ns; /* Exit only: host time spent in the call, in ns. */
    __u32 kind; /* `SyncCtx::STREAM`, `SyncCtx::EVENT`, `SyncCtx::CONTEXT` or `SyncCtx::DEVICE`. */
    __u32 device; /* CUDA device ordinal. */
    __u32 host_tid; /* Host thread id. */
    __s32 result; /* Exit only: the call's `CUresult`. */
    __u32 tag; /* `context_tag(HostEvent::Sync)`. */
    __u32 reserved; /* Zero. */
};
_Static_assert(sizeof(struct egpu_sync_ctx) == 48, "SyncCtx is 48 bytes");
_Static_assert(__builtin_offsetof(struct egpu_sync_ctx, handle) == 0, "SyncCtx.handle");
_Static_assert(__builtin_offsetof(struct egpu_sync_ctx, timestamp_ns) == 8, "SyncCtx.timestamp_ns");
_Static_assert(__builtin_offsetof(struct egpu_sync_ctx, duration_ns) == 16, "SyncCtx.duration_ns");
_Static_assert(__builtin_offsetof(struct egpu_sync_ctx, kind) == 24, "SyncCtx.kind");
_Static_assert(__builtin_offsetof(struct egpu_sync_ctx, device) == 28, "SyncCtx.device");
_Static_assert(__builtin_offsetof(struct egpu_sync_ctx, host_tid) == 32, "SyncCtx.host_tid");
_Static_assert(__builtin_offsetof(struct egpu_sync_ctx, result) == 36, "SyncCtx.result");
_Static_assert(__builtin_offsetof(struct egpu_sync_ctx, tag) == 40, "SyncCtx.tag");
_Static_assert(__builtin_offsetof(struct egpu_sync_ctx, reserved) == 44, "SyncCtx.reserved");

/* ModuleLoadCtx: Context of a module load. */
struct egpu_module_load_ctx {
    __u64 module; /* The module handle (exit). */
    __u64 image_bytes; /* Size of the image loaded, in bytes (0 when unknown). */
    __u64 timestamp_ns; /* Host monotonic clock at the call, in ns. */
    __u64 duration_ns; /* Exit only: host time spent in the call, in ns. */
    __u32 has_ptx; /* 1 when the image carries PTX that can be instrumented. */
    __u32 instrumented; /* 1 when egpu instrumented it. */
    __u32 device; /* CUDA device ordinal. */
    __u32 host_tid; /* Host thread id. */
    __s32 result; /* Exit only: the call's `CUresult`. */
    __u32 tag; /* `context_tag(HostEvent::ModuleLoad)`. */
};
_Static_assert(sizeof(struct egpu_module_load_ctx) == 56, "ModuleLoadCtx is 56 bytes");
_Static_assert(__builtin_offsetof(struct egpu_module_load_ctx, module) == 0, "ModuleLoadCtx.module");
_Static_assert(__builtin_offsetof(struct egpu_module_load_ctx, image_bytes) == 8, "ModuleLoadCtx.image_bytes");
_Static_assert(__builtin_offsetof(struct egpu_module_load_ctx, timestamp_ns) == 16, "ModuleLoadCtx.timestamp_ns");
_Static_assert(__builtin_offsetof(struct egpu_module_load_ctx, duration_ns) == 24, "ModuleLoadCtx.duration_ns");
_Static_assert(__builtin_offsetof(struct egpu_module_load_ctx, has_ptx) == 32, "ModuleLoadCtx.has_ptx");
_Static_assert(__builtin_offsetof(struct egpu_module_load_ctx, instrumented) == 36, "ModuleLoadCtx.instrumented");
_Static_assert(__builtin_offsetof(struct egpu_module_load_ctx, device) == 40, "ModuleLoadCtx.device");
_Static_assert(__builtin_offsetof(struct egpu_module_load_ctx, host_tid) == 44, "ModuleLoadCtx.host_tid");
_Static_assert(__builtin_offsetof(struct egpu_module_load_ctx, result) == 48, "ModuleLoadCtx.result");
_Static_assert(__builtin_offsetof(struct egpu_module_load_ctx, tag) == 52, "ModuleLoadCtx.tag");

/* KernelCtx: Context of a kernel's entry and exit, one per thread. */
struct egpu_kernel_ctx {
    __u64 kernel_id; /* 64-bit hash of the kernel's mangled name. */
    __u32 thread[3]; /* Thread index in the block (`%tid`). */
    __u32 block[3]; /* Block index in the grid (`%ctaid`). */
    __u32 block_dim[3]; /* Block size (`%ntid`). */
    __u32 grid_dim[3]; /* Grid size (`%nctaid`). */
    __u32 warp; /* Warp index in the block: the linear thread index divided by 32. */
    __u32 lane; /* Lane in the warp (`%laneid`). */
    __u32 sm; /* Streaming multiprocessor (`%smid`). */
    __u32 device; /* The CUDA device ordinal (0 until launches fill it). */
    __u64 launch_id; /* Which launch this thread runs in: on the GPU, `%gridid`, the number the GPU gives each grid it starts in a context (the same for every thread of the launch, different for every launch of the context, whichever kernel, and growing with them; a CUDA graph's kernel node keeps one for all its replays). On the CPU VM, what the caller puts. */
    __u64 tag_id; /* The request or job the launch belongs to: the launching thread's tag id (`egpu_tag_set`, as the launch context's `tag_id`), 0 for none. On the GPU, a hidden parameter the injector appends to the kernel and the preloaded library fills at each launch (a graph's kernel node: when it was captured or made); 0 in device functions and where nothing fills it. On the CPU VM, what the caller puts. */
};
_Static_assert(sizeof(struct egpu_kernel_ctx) == 88, "KernelCtx is 88 bytes");
_Static_assert(__builtin_offsetof(struct egpu_kernel_ctx, kernel_id) == 0, "KernelCtx.kernel_id");
_Static_assert(__builtin_offsetof(struct egpu_kernel_ctx, thread) == 8, "KernelCtx.thread");
_Static_assert(__builtin_offsetof(struct egpu_kernel_ctx, block) == 20, "KernelCtx.block");
_Static_assert(__builtin_offsetof(struct egpu_kernel_ctx, block_dim) == 32, "KernelCtx.block_dim");
_Static_assert(__builtin_offsetof(struct egpu_kernel_ctx, grid_dim) == 44, "KernelCtx.grid_dim");
_Static_assert(__builtin_offsetof(struct egpu_kernel_ctx, warp) == 56, "KernelCtx.warp");
_Static_assert(__builtin_offsetof(struct egpu_kernel_ctx, lane) == 60, "KernelCtx.lane");
_Static_assert(__builtin_offsetof(struct egpu_kernel_ctx, sm) == 64, "KernelCtx.sm");
_Static_assert(__builtin_offsetof(struct egpu_kernel_ctx, device) == 68, "KernelCtx.device");
_Static_assert(__builtin_offsetof(struct egpu_kernel_ctx, launch_id) == 72, "KernelCtx.launch_id");
_Static_assert(__builtin_offsetof(struct egpu_kernel_ctx, tag_id) == 80, "KernelCtx.tag_id");

/* MemAccessCtx: Context of an access to global memory, one per thread and access: a load, a store or an atomic, of a class (`MemAccessCtx::class`). */
struct egpu_mem_access_ctx {
    __u64 addr; /* The address accessed. */
    __u64 kernel_id; /* 64-bit hash of the kernel's mangled name. */
    __u32 size; /* Bytes accessed. */
    __u32 site; /* Index of the access among the kernel's observed accesses. */
    __u32 thread[3]; /* Thread index in the block (`%tid`). */
    __u32 block[3]; /* Block index in the grid (`%ctaid`). */
    __u32 warp; /* Warp index in the block. */
    __u32 lane; /* Lane in the warp (`%laneid`). */
    __u32 sm; /* Streaming multiprocessor (`%smid`). */
    __u32 is_store; /* 1 when the access writes global memory (a store, a copy or reduction to global memory, an atomic), 0 when it only reads it. */
    __u64 launch_id; /* Which launch the access is in: `%gridid` on the GPU (see `KernelCtx::launch_id`). */
    __u32 device; /* The CUDA device ordinal (0 until launches fill it). */
    __u32 class; /* The class of instruction that made the access: `MemAccessCtx::LOAD_STORE`, `MemAccessCtx::ATOMIC`, `MemAccessCtx::ASYNC_COPY`, `MemAccessCtx::BULK_COPY`, `MemAccessCtx::TENSOR_COPY` or `MemAccessCtx::TENSOR_MAP`. */
    __u32 op; /* For an atomic or a reduction (`atom`, `red`, `cp.reduce.async.bulk`), the operation: `MemAccessCtx::OP_ADD` and the next numbers; 0 otherwise. */
    __u32 fetch; /* 1 for an atomic that returns the old value (`atom`), 0 otherwise (`red`, and every access that is not an atomic). */
    __u64 tag_id; /* The request or job the launch belongs to, 0 for none (see `KernelCtx::tag_id`). */
};
_Static_assert(sizeof(struct egpu_mem_access_ctx) == 96, "MemAccessCtx is 96 bytes");
_Static_assert(__builtin_offsetof(struct egpu_mem_access_ctx, addr) == 0, "MemAccessCtx.addr");
_Static_assert(__builtin_offsetof(struct egpu_mem_access_ctx, kernel_id) == 8, "MemAccessCtx.kernel_id");
_Static_assert(__builtin_offsetof(struct egpu_mem_access_ctx, size) == 16, "MemAccessCtx.size");
_Static_assert(__builtin_offsetof(struct egpu_mem_access_ctx, site) == 20, "MemAccessCtx.site");
_Static_assert(__builtin_offsetof(struct egpu_mem_access_ctx, thread) == 24, "MemAccessCtx.thread");
_Static_assert(__builtin_offsetof(struct egpu_mem_access_ctx, block) == 36, "MemAccessCtx.block");
_Static_assert(__builtin_offsetof(struct egpu_mem_access_ctx, warp) == 48, "MemAccessCtx.warp");
_Static_assert(__builtin_offsetof(struct egpu_mem_access_ctx, lane) == 52, "MemAccessCtx.lane");
_Static_assert(__builtin_offsetof(struct egpu_mem_access_ctx, sm) == 56, "MemAccessCtx.sm");
_Static_assert(__builtin_offsetof(struct egpu_mem_access_ctx, is_store) == 60, "MemAccessCtx.is_store");
_Static_assert(__builtin_offsetof(struct egpu_mem_access_ctx, launch_id) == 64, "MemAccessCtx.launch_id");
_Static_assert(__builtin_offsetof(struct egpu_mem_access_ctx, device) == 72, "MemAccessCtx.device");
_Static_assert(__builtin_offsetof(struct egpu_mem_access_ctx, class) == 76, "MemAccessCtx.class");
_Static_assert(__builtin_offsetof(struct egpu_mem_access_ctx, op) == 80, "MemAccessCtx.op");
_Static_assert(__builtin_offsetof(struct egpu_mem_access_ctx, fetch) == 84, "MemAccessCtx.fetch");
_Static_assert(__builtin_offsetof(struct egpu_mem_access_ctx, tag_id) == 88, "MemAccessCtx.tag_id");

/* The helpers, by number, as libbpf declares Linux's. */
static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_map_update_elem)(void *map, const void *key, const void *value, __u64 flags) = (void *)2;
static long (*bpf_map_delete_elem)(void *map, const void *key) = (void *)3;
static long (*bpf_ktime_get_ns)(void) = (void *)5;
static long (*bpf_get_prandom_u32)(void) = (void *)7;
static long (*bpf_get_smp_processor_id)(void) = (void *)8;
static long (*bpf_get_current_pid_tgid)(void) = (void *)14;
static long (*bpf_ringbuf_output)(void *ringbuf, const void *data, __u64 size, __u64 flags) = (void *)130;
static long (*egpu_ringbuf_output_warp)(void *ringbuf, const void *data, __u64 size, __u64 flags) = (void *)65541;
static long (*bpf_loop)(__u64 nr_loops, void *callback_fn, void *callback_ctx, __u64 flags) = (void *)181;
static long (*egpu_warp_lanes)(void) = (void *)65536;
static long (*egpu_warp_leader)(void) = (void *)65537;
static long (*egpu_warp_sectors)(__u64 addr, __u64 size) = (void *)65538;
static long (*egpu_warp_peers)(__u64 value) = (void *)65539;
static long (*egpu_warp_stride)(__u64 addr) = (void *)65540;
static long (*egpu_delay_ns)(__u64 ns, __u64 since) = (void *)65542;
static long (*egpu_clock)(void) = (void *)65543;

#endif /* EGPU_H */
