# Traces a global access: a 16-byte record (the address, then size | site << 32) into map 0, a
# ring buffer.
    ldxdw %r2, [%r1+0]
    stxdw [%r10-16], %r2
    ldxw %r3, [%r1+16]
    ldxw %r4, [%r1+20]
    lsh %r4, 32
    or %r3, %r4
    stxdw [%r10-8], %r3
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -16
    mov %r3, 16
    mov %r4, 0
    call 130
    mov %r0, 0
    exit
