# expect: accept
# attach: device::global_load
# map: size_counts=percpu_array:4:8:16
# A device probe counting global loads per access size: key = size (u32 at the aligned offset 16)
# masked to 0..15, stored with an aligned stxw at [r10-4]; after the null check an aligned 64-bit
# `lock fetch add` returns the previous count, which becomes the (scalar) result.
    ldxw %r2, [%r1+16]
    and %r2, 15
    stxw [%r10-4], %r2
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -4
    call 1
    jeq %r0, 0, out
    mov %r1, 1
    lock fetch add [%r0+0], %r1
    mov %r0, %r1
    exit
out:
    mov %r0, 0
    exit
