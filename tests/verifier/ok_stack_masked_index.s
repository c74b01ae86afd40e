# expect: accept
# attach: user(8)
# A lookup table of 8 u64 (1, 2, 4, ..., 128) at [r10-64, r10), all written first; the index is the
# first context byte masked to 0..7 and scaled by 8, so r10 - 64 + index reads 8 initialised
# bytes inside the stack for every possible index.
    ldxb %r6, [%r1+0]
    and %r6, 7
    lsh %r6, 3
    mov %r2, 1
    stxdw [%r10-64], %r2
    lsh %r2, 1
    stxdw [%r10-56], %r2
    lsh %r2, 1
    stxdw [%r10-48], %r2
    lsh %r2, 1
    stxdw [%r10-40], %r2
    lsh %r2, 1
    stxdw [%r10-32], %r2
    lsh %r2, 1
    stxdw [%r10-24], %r2
    lsh %r2, 1
    stxdw [%r10-16], %r2
    lsh %r2, 1
    stxdw [%r10-8], %r2
    mov %r3, %r10
    add %r3, -64
    add %r3, %r6
    ldxdw %r0, [%r3+0]
    exit
