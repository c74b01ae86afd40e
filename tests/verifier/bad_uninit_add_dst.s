# expect: reject uninit-register
# attach: user(8)
# `add %r2, %r3` reads its destination r2, which was never written (only r3 was loaded).
    ldxdw %r3, [%r1+0]
    add %r2, %r3
    mov %r0, %r2
    exit
