# expect: reject misaligned
# attach: user(8)
# A 64-bit atomic add at [r10-12], which is not 8-byte aligned; the bytes [r10-16, r10) are all
# written first.
    mov %r2, 0
    stxdw [%r10-16], %r2
    stxdw [%r10-8], %r2
    mov %r3, 1
    lock add [%r10-12], %r3
    mov %r0, 0
    exit
