# expect: accept
# attach: host::memcpy::enter
# Spills the context pointer to [r10-8] (a full, aligned 8-byte store), calls ktime_get_ns (which
# clobbers r1-r5), reloads the slot, which is a context pointer again, and reads MemcpyCtx
# timestamp_ns (offset 32) and bytes (offset 16) through it.
    stxdw [%r10-8], %r1
    call 5
    mov %r6, %r0
    ldxdw %r1, [%r10-8]
    ldxdw %r2, [%r1+32]
    sub %r6, %r2
    ldxdw %r3, [%r1+16]
    rsh %r3, 20
    add %r6, %r3
    mov %r0, %r6
    exit
