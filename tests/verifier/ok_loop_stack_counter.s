# expect: accept
# attach: user(8)
# A loop whose counter lives in the stack slot [r10-8]: it is spilled as a known constant, reloaded,
# incremented and spilled again each iteration, and the loop ends when it reaches 8. The loop adds
# the first context byte times the counter to r0.
    ldxb %r6, [%r1+0]
    mov %r0, 0
    mov %r2, 0
    stxdw [%r10-8], %r2
loop:
    ldxdw %r2, [%r10-8]
    mov %r3, %r6
    mul %r3, %r2
    add %r0, %r3
    add %r2, 1
    stxdw [%r10-8], %r2
    jlt %r2, 8, loop
    exit
