/* A section named egpu/ATTACH for an attach point egpu does not have. */
#include <egpu.h>

SEC("egpu/device/global_nothing")
int nothing(struct egpu_mem_access_ctx *ctx) { return 0; }
