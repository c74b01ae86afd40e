# expect: accept
# attach: user(16)
# Two counted loops, one inside the other (4 x 4 iterations), with a branch on the context in the
# inner body and both counters kept on the stack, as a compiler spilling its variables does. The
# verifier joins states only where they agree on their constants, so each iteration's counter
# stays exact; joining the iterations would make the inner loop look endless.
    mov %r6, %r1
    mov %r7, 0                  # x
    stdw [%r10-8], 0            # i = 0
outer:
    stdw [%r10-16], 0           # j = 0
inner:
    ldxw %r2, [%r6+0]
    ldxdw %r3, [%r10-16]
    jgt %r2, %r3, skip
    add %r7, 1
skip:
    ldxdw %r3, [%r10-16]
    add %r3, 1
    stxdw [%r10-16], %r3
    jlt %r3, 4, inner
    ldxdw %r3, [%r10-8]
    add %r3, 1
    stxdw [%r10-8], %r3
    jlt %r3, 4, outer
    mov %r0, %r7
    exit
