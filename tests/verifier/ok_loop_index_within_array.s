# expect: accept
# attach: user(8)
# The callback's index (r1) is below the count (8), so it indexes an 8-element array on the
# caller's stack (through callback_ctx) without a check: every element is set to its index
# squared, then main returns their sum (140). The array is zeroed first: the verifier cannot
# know which elements the callback wrote.
    stdw [%r10-8], 0
    stdw [%r10-16], 0
    stdw [%r10-24], 0
    stdw [%r10-32], 0
    stdw [%r10-40], 0
    stdw [%r10-48], 0
    stdw [%r10-56], 0
    stdw [%r10-64], 0
    mov %r1, 8
    lddw %r2, func body
    mov %r3, %r10
    add %r3, -64
    mov %r4, 0
    call 181
    mov %r0, 0
    mov %r6, 0
sum:
    mov %r2, %r6
    lsh %r2, 3
    mov %r3, %r10
    add %r3, -64
    add %r3, %r2
    ldxdw %r2, [%r3+0]
    add %r0, %r2
    add %r6, 1
    jlt %r6, 8, sum
    exit
body:
    mov %r3, %r1
    mul %r3, %r1
    lsh %r1, 3
    add %r2, %r1
    stxdw [%r2+0], %r3
    mov %r0, 0
    exit
