# expect: reject context-write
# attach: host::memcpy::enter
# The context pointer is spilled, reloaded after a helper call and used to store into
# MemcpyCtx.bytes (offset 16): still the read-only host context.
    stxdw [%r10-8], %r1
    call 5
    ldxdw %r1, [%r10-8]
    stxdw [%r1+16], %r0
    mov %r0, 0
    exit
