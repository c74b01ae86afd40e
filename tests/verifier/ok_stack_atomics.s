# expect: accept
# attach: user(8)
# Atomics on initialised, naturally aligned stack slots: lock add, lock fetch add, lock xchg and
# lock cmpxchg (compares with r0, which is set) on the u64 at [r10-8], and lock or32 / fetch and32
# on the u32 at [r10-16]. All operands are scalars; the slots are read back at the end.
    mov %r2, 10
    stxdw [%r10-8], %r2
    mov %r3, 5
    lock add [%r10-8], %r3
    mov %r4, 3
    lock fetch add [%r10-8], %r4
    mov %r5, 100
    lock xchg [%r10-8], %r5
    mov %r0, 100
    mov %r1, 7
    lock cmpxchg [%r10-8], %r1
    stw [%r10-16], 0xf0
    mov %r2, 0x0f
    lock or32 [%r10-16], %r2
    mov %r3, 0x3c
    lock fetch and32 [%r10-16], %r3
    ldxdw %r6, [%r10-8]
    ldxw %r7, [%r10-16]
    add %r0, %r4
    add %r0, %r5
    add %r0, %r6
    add %r0, %r7
    add %r0, %r3
    exit
