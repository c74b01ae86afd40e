# expect: reject pointer-leak
# attach: user(8)
# The callback leaves a pointer to its own frame, which ends with each call, in the caller's.
    mov %r1, 3
    lddw %r2, func body
    mov %r3, %r10
    mov %r4, 0
    call 181
    mov %r0, 0
    exit
body:
    mov %r3, %r10
    add %r3, -8
    stxdw [%r2-8], %r3
    mov %r0, 0
    exit
