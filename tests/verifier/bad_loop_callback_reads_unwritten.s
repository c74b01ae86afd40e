# expect: reject uninit-stack
# attach: user(8)
# The callback reads the caller's slot at r10-8, which nothing wrote.
    mov %r1, 3
    lddw %r2, func body
    mov %r3, %r10
    mov %r4, 0
    call 181
    mov %r0, 0
    exit
body:
    ldxdw %r0, [%r2-8]
    and %r0, 1
    exit
