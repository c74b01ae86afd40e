# expect: reject stack-bounds
# attach: user(8)
# The caller's slot at r10-8 holds 0 before the loop; the callback stores 100 there on some
# iterations. After the loop the slot is used as an offset into the 8 bytes at r10-16: safe
# for 0, not for 100, and the verifier must judge what the callback left, not what was there.
    stdw [%r10-8], 0
    stdw [%r10-16], 0
    ldxw %r1, [%r1+0]
    and %r1, 15
    lddw %r2, func body
    mov %r3, %r10
    mov %r4, 0
    call 181
    ldxdw %r2, [%r10-8]
    mov %r3, %r10
    add %r3, -16
    add %r3, %r2
    ldxb %r0, [%r3+0]
    exit
body:
    jlt %r1, 3, keep
    mov %r3, 100
    stxdw [%r2-8], %r3
keep:
    mov %r0, 0
    exit
