/* Two programs in one object, sharing an array: loads count in slot 0, stores in slot 1. */
#include <egpu.h>

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 2);
    __type(key, __u32);
    __type(value, __u64);
} ACCESSES SEC(".maps");

static __attribute__((always_inline)) int add(__u32 slot) {
    __u64 *v = bpf_map_lookup_elem(&ACCESSES, &slot);
    if (v) __sync_fetch_and_add(v, 1);
    return 0;
}

SEC("egpu/device/global_load")
int loads(struct egpu_mem_access_ctx *ctx) { return add(0); }

SEC("egpu/device/global_store")
int stores(struct egpu_mem_access_ctx *ctx) { return add(1); }
