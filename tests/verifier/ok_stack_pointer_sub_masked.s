# expect: accept
# attach: user(8)
# Pointer minus a bounded scalar: r2 = r10 - ((ctx.u8[0] & 3) << 3), then an 8-byte store at
# [r2-8] lands on one of the slots r10-8, -16, -24 or -32, all four written beforehand so the
# constant reads afterwards see initialised bytes whichever slot was overwritten.
    ldxb %r6, [%r1+0]
    and %r6, 3
    lsh %r6, 3
    mov %r3, 0
    stxdw [%r10-8], %r3
    stxdw [%r10-16], %r3
    stxdw [%r10-24], %r3
    stxdw [%r10-32], %r3
    mov %r2, %r10
    sub %r2, %r6
    mov %r4, 9
    stxdw [%r2-8], %r4
    ldxdw %r0, [%r10-8]
    ldxdw %r5, [%r10-16]
    add %r0, %r5
    ldxdw %r5, [%r10-24]
    add %r0, %r5
    ldxdw %r5, [%r10-32]
    add %r0, %r5
    exit
