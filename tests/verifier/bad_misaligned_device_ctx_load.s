# expect: reject misaligned
# attach: device::kernel_entry
# An 8-byte load of KernelCtx thread[1..3] at offset 12: in bounds ([12, 20)) and constant, but
# not 8-byte aligned, which device attach points require.
    ldxdw %r0, [%r1+12]
    exit
