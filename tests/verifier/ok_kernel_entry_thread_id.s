# expect: accept
# attach: device::kernel_entry
# A device probe on kernel entry: for lane 0 of each warp it returns the global x thread index
# block[0] * block_dim[0] + thread[0], else 0. Every KernelCtx read is a naturally aligned u32 at a
# constant offset (lane@60, block[0]@20, block_dim[0]@32, thread[0]@8) or the u64 kernel_id@0.
    ldxw %r6, [%r1+60]
    mov %r0, 0
    jne %r6, 0, done
    ldxw %r2, [%r1+20]
    ldxw %r3, [%r1+32]
    mul %r2, %r3
    ldxw %r4, [%r1+8]
    add %r2, %r4
    ldxdw %r5, [%r1+0]
    xor %r5, %r2
    mov %r0, %r2
done:
    exit
