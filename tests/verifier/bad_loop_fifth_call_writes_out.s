# expect: reject stack-bounds
# attach: user(8)
# The callback counts its calls in the caller's slot at r10-8 and, on the fifth only, writes
# above the caller's frame: the verifier must follow the count past the first rounds (it
# widens it) rather than judge the callback by its first calls.
    stdw [%r10-8], 0
    mov %r1, 10
    lddw %r2, func body
    mov %r3, %r10
    mov %r4, 0
    call 181
    mov %r0, 0
    exit
body:
    ldxdw %r3, [%r2-8]
    add %r3, 1
    stxdw [%r2-8], %r3
    jne %r3, 5, fine
    stdw [%r2+8], 1
fine:
    mov %r0, 0
    exit
