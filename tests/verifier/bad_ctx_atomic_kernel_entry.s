# expect: reject context-write
# attach: device::kernel_entry
# An atomic add to KernelCtx.kernel_id (offset 0, 8-byte aligned, in bounds): device contexts are
# read-only, atomics included.
    mov %r2, 1
    lock add [%r1+0], %r2
    mov %r0, 0
    exit
