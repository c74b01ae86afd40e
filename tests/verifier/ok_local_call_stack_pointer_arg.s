# expect: accept
# attach: user(16)
# main passes a pointer to its own 16-byte stack buffer [r10-16, r10) to `fill`, which writes
# both u64 through it and returns 0; main then reads the two initialised slots back (r6 and r7,
# callee-saved, carry the context values across the call).
    ldxdw %r6, [%r1+0]
    ldxdw %r7, [%r1+8]
    mov %r1, %r10
    add %r1, -16
    mov %r2, %r6
    mov %r3, %r7
    call local fill
    ldxdw %r0, [%r10-16]
    ldxdw %r1, [%r10-8]
    xor %r0, %r1
    exit
# fill(ptr, a, b): ptr[0] = a + b; ptr[1] = a - b; return 0
fill:
    mov %r4, %r2
    add %r4, %r3
    stxdw [%r1+0], %r4
    sub %r2, %r3
    stxdw [%r1+8], %r2
    mov %r0, 0
    exit
