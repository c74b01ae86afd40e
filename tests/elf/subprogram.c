/* A bpf-to-bpf call: the page of an access, by a function of .text, and 1 added to it. */
#include <egpu.h>

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 256);
    __type(key, __u64);
    __type(value, __u64);
} PAGES SEC(".maps");

static __attribute__((noinline)) __u64 page_of(__u64 addr, __u64 shift) {
    return addr >> shift;
}

SEC("egpu/device/global_load")
int pages(struct egpu_mem_access_ctx *ctx) {
    __u64 page = page_of(ctx->addr, 12), one = 1;
    __u64 *v = bpf_map_lookup_elem(&PAGES, &page);
    if (v)
        __sync_fetch_and_add(v, 1);
    else
        bpf_map_update_elem(&PAGES, &page, &one, BPF_NOEXIST);
    return 0;
}
