/* A host probe at copies' exits: bytes by direction (the copy's kind, 0 to 4), a legacy array. */
#include <egpu.h>

struct bpf_map_def SEC("maps") COPIED = {
    .type = BPF_MAP_TYPE_ARRAY,
    .key_size = sizeof(__u32),
    .value_size = sizeof(__u64),
    .max_entries = 5,
};

SEC("egpu/host/memcpy/exit")
int copied(struct egpu_memcpy_ctx *ctx) {
    __u32 kind = ctx->kind;
    if (ctx->result != 0) return 0;
    __u64 *v = bpf_map_lookup_elem(&COPIED, &kind);
    if (v) __sync_fetch_and_add(v, ctx->bytes);
    return 0;
}
