/* Global data: a table in .rodata, which egpu does not take yet. */
#include <egpu.h>

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, __u64);
} OUT SEC(".maps");

volatile const __u64 SCALE = 3;

SEC("egpu/device/global_load")
int scaled(struct egpu_mem_access_ctx *ctx) {
    __u32 zero = 0;
    __u64 *v = bpf_map_lookup_elem(&OUT, &zero);
    if (v) __sync_fetch_and_add(v, ctx->size * SCALE);
    return 0;
}
