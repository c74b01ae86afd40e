/* Global data on the GPU: bytes loaded, counted in an array and again, scaled by a constant of
 * .rodata, on top of a first value in .data; accesses counted in .bss. After a run,
 * SCALED == 1000 + SCALE * BYTES[0] whatever the program did. */
#include <egpu.h>

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, __u64);
} BYTES SEC(".maps");

volatile const __u64 SCALE = 3;
__u64 SCALED = 1000;
__u64 ACCESSES;

SEC("egpu/device/global_load")
int global_bytes(struct egpu_mem_access_ctx *ctx) {
    __u32 zero = 0;
    __u64 *v = bpf_map_lookup_elem(&BYTES, &zero);
    if (v) __sync_fetch_and_add(v, ctx->size);
    __sync_fetch_and_add(&SCALED, ctx->size * SCALE);
    __sync_fetch_and_add(&ACCESSES, 1);
    return 0;
}
