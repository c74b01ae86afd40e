/* A legacy map definition of a ring buffer: its value_size is the record's, max_entries the
 * records it holds; each kernel entry's kernel and block. */
#include <egpu.h>

struct bpf_map_def SEC("maps") STARTS = {
    .type = BPF_MAP_TYPE_RINGBUF,
    .key_size = 0,
    .value_size = 16,
    .max_entries = 64,
};

SEC("egpu/device/kernel_entry")
int started(struct egpu_kernel_ctx *ctx) {
    __u64 record[2] = {ctx->kernel_id, ctx->block[0]};
    bpf_ringbuf_output(&STARTS, record, sizeof(record), 0);
    return 0;
}
