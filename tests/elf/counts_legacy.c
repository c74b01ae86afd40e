/* The same as counts_btf.c, its map a legacy `struct bpf_map_def` in `maps`. */
#include <egpu.h>

struct bpf_map_def SEC("maps") BYTES = {
    .type = BPF_MAP_TYPE_HASH,
    .key_size = sizeof(__u64),
    .value_size = sizeof(__u64),
    .max_entries = 64,
};

SEC("egpu/device/global_load")
int count_loads(struct egpu_mem_access_ctx *ctx) {
    __u64 kernel = ctx->kernel_id, zero = 0;
    __u64 *v = bpf_map_lookup_elem(&BYTES, &kernel);
    if (!v) {
        bpf_map_update_elem(&BYTES, &kernel, &zero, BPF_NOEXIST);
        v = bpf_map_lookup_elem(&BYTES, &kernel);
        if (!v) return 0;
    }
    __sync_fetch_and_add(v, ctx->size);
    return 0;
}
