/* A map of 2^31 entries: more than a map may hold. */
#include <egpu.h>

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 1u << 31);
    __type(key, __u64);
    __type(value, __u64);
} HUGE SEC(".maps");

SEC("egpu/device/global_load")
int huge(struct egpu_mem_access_ctx *ctx) {
    __u64 k = ctx->kernel_id, one = 1;
    bpf_map_update_elem(&HUGE, &k, &one, 0);
    return 0;
}
