/* A host probe: launches and blocks per kernel, at each launch's entry. */
#include <egpu.h>

struct launches {
    __u64 launches;
    __u64 blocks;
};

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 32);
    __type(key, __u64);
    __type(value, struct launches);
} LAUNCHES SEC(".maps");

SEC("egpu/host/launch/enter")
int launched(struct egpu_launch_ctx *ctx) {
    __u64 kernel = ctx->kernel_id;
    struct launches zero = {0, 0};
    struct launches *v = bpf_map_lookup_elem(&LAUNCHES, &kernel);
    if (!v) {
        bpf_map_update_elem(&LAUNCHES, &kernel, &zero, BPF_NOEXIST);
        v = bpf_map_lookup_elem(&LAUNCHES, &kernel);
        if (!v) return 0;
    }
    __sync_fetch_and_add(&v->launches, 1);
    __sync_fetch_and_add(&v->blocks, (__u64)ctx->grid[0] * ctx->grid[1] * ctx->grid[2]);
    return 0;
}
