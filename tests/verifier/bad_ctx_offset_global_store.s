# expect: reject context-offset
# attach: device::global_store
# Picks thread[0] or thread[2] of the MemAccessCtx with a variable offset (warp & 8, so 0 or 8):
# the u32 load at ctx + {24, 32} is aligned and in bounds, but not at a constant offset.
    ldxw %r2, [%r1+48]
    and %r2, 8
    mov %r3, %r1
    add %r3, %r2
    ldxw %r0, [%r3+24]
    exit
