/* Global data: a constant in .rodata, a variable with a first value in .data, a counter in .bss;
 * each section an array of one entry, read and written in place. */
#include <egpu.h>

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, __u64);
} OUT SEC(".maps");

volatile const __u64 SCALE = 3;
__u64 base = 100;
__u64 calls;

SEC("egpu/device/global_load")
int scaled(struct egpu_mem_access_ctx *ctx) {
    __u32 zero = 0;
    __u64 *v = bpf_map_lookup_elem(&OUT, &zero);
    __sync_fetch_and_add(&calls, 1);
    if (v) __sync_fetch_and_add(v, ctx->size * SCALE + base);
    if (ctx->size == 16) base += 1;
    return 0;
}
