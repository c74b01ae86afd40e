/* Two attach points sharing a subprogram of .text: bytes written by stores and by atomics, per
 * kernel, in one hash map keyed by (kernel, class). */
#include <egpu.h>

struct key {
    __u64 kernel;
    __u64 atomic;
};

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 64);
    __type(key, struct key);
    __type(value, __u64);
} WRITTEN SEC(".maps");

static __attribute__((noinline)) int add(__u64 kernel, __u64 atomic, __u64 bytes) {
    struct key k = {kernel, atomic};
    __u64 *v = bpf_map_lookup_elem(&WRITTEN, &k);
    if (v) {
        __sync_fetch_and_add(v, bytes);
    } else {
        bpf_map_update_elem(&WRITTEN, &k, &bytes, BPF_NOEXIST);
    }
    return 0;
}

SEC("egpu/device/global_store")
int stored(struct egpu_mem_access_ctx *ctx) { return add(ctx->kernel_id, 0, ctx->size); }

SEC("egpu/device/global_atomic")
int atomics(struct egpu_mem_access_ctx *ctx) { return add(ctx->kernel_id, 1, ctx->size); }
