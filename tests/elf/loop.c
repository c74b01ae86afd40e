/* bpf_loop with a callback of .text (an `lddw` of a function): each load adds its size times
 * 0 + 1 + 2 + 3. */
#include <egpu.h>

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, __u64);
} SUM SEC(".maps");

struct acc {
    __u64 sum;
    __u64 size;
};

static long step(__u64 i, void *data) {
    struct acc *a = data;
    a->sum += i * a->size;
    return 0;
}

SEC("egpu/device/global_load")
int looped(struct egpu_mem_access_ctx *ctx) {
    struct acc a = {0, ctx->size};
    __u32 zero = 0;
    bpf_loop(4, step, &a, 0);
    __u64 *v = bpf_map_lookup_elem(&SUM, &zero);
    if (v) __sync_fetch_and_add(v, a.sum);
    return 0;
}
