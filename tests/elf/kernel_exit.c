/* A device probe at threads' exits: the threads of each SM, in a per-CPU array (a shard per
 * CPU on the host, per SM on the GPU). */
#include <egpu.h>

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, __u64);
} THREADS SEC(".maps");

SEC("egpu/device/kernel_exit")
int exited(struct egpu_kernel_ctx *ctx) {
    __u32 zero = 0;
    __u64 *v = bpf_map_lookup_elem(&THREADS, &zero);
    if (v) *v += 1;
    return 0;
}
