# expect: accept
# attach: user(8)
# Two nested bounded loops, for i in 0..5 { for j in 0..5 { sum += i * j } }: both counters are
# known constants, so the 25 inner iterations end and r0 = 100.
    mov %r0, 0
    mov %r6, 0
outer:
    mov %r7, 0
inner:
    mov %r2, %r6
    mul %r2, %r7
    add %r0, %r2
    add %r7, 1
    jlt %r7, 5, inner
    add %r6, 1
    jlt %r6, 5, outer
    exit
