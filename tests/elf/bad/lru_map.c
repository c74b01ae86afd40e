/* A kind of map egpu does not have (BPF_MAP_TYPE_LRU_HASH, 9). */
#include <egpu.h>

struct {
    __uint(type, 9);
    __uint(max_entries, 64);
    __type(key, __u64);
    __type(value, __u64);
} RECENT SEC(".maps");

SEC("egpu/device/global_load")
int recent(struct egpu_mem_access_ctx *ctx) {
    __u64 k = ctx->kernel_id, one = 1;
    bpf_map_update_elem(&RECENT, &k, &one, 0);
    return 0;
}
