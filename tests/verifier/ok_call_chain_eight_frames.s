# expect: accept
# attach: user(8)
# A chain of local calls exactly at the limit: main -> f1 -> ... -> f7 is 8 frames. Each function
# adds 1 to its argument and passes it on; f7 returns it, and every caller returns the callee's r0.
    mov %r1, 0
    call local f1
    exit
f1:
    add %r1, 1
    call local f2
    exit
f2:
    add %r1, 1
    call local f3
    exit
f3:
    add %r1, 1
    call local f4
    exit
f4:
    add %r1, 1
    call local f5
    exit
f5:
    add %r1, 1
    call local f6
    exit
f6:
    add %r1, 1
    call local f7
    exit
f7:
    add %r1, 1
    mov %r0, %r1
    exit
