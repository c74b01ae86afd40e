# expect: reject context-offset
# attach: device::kernel_entry
# Indexes KernelCtx.thread[] with (lane & 4), i.e. 0 or 4: the u32 load at ctx + {8, 12} is in
# bounds and 4-byte aligned either way, but device contexts need constant offsets.
    ldxw %r2, [%r1+60]
    and %r2, 4
    add %r1, %r2
    ldxw %r0, [%r1+8]
    exit
