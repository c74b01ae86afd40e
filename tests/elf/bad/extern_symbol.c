/* An `lddw` of a symbol defined nowhere in the object: a relocation egpu cannot apply. */
#include <egpu.h>

extern __u64 elsewhere;

SEC("egpu/device/global_load")
int outside(struct egpu_mem_access_ctx *ctx) {
    __sync_fetch_and_add(&elsewhere, ctx->size);
    return 0;
}
