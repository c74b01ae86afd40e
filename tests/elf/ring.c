/* A ring buffer of fixed-size records: each atomic's address and size. */
#include <egpu.h>

struct record {
    __u64 addr;
    __u64 size;
};

struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 128);
    __type(value, struct record);
} EVENTS SEC(".maps");

SEC("egpu/device/global_atomic")
int atomics(struct egpu_mem_access_ctx *ctx) {
    struct record r = {.addr = ctx->addr, .size = ctx->size};
    bpf_ringbuf_output(&EVENTS, &r, sizeof(r), 0);
    return 0;
}
