# expect: reject misaligned
# attach: device::kernel_exit
# On a device attach point, a u32 load at [r10-6] is misaligned (the 8 bytes at [r10-8] are
# written first, so the load is otherwise valid).
    mov %r2, 0
    stxdw [%r10-8], %r2
    ldxw %r0, [%r10-6]
    exit
