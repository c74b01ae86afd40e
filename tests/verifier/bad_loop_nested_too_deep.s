# expect: reject call-depth
# attach: user(8)
# Each bpf_loop costs two frames (the helper's and the callback's): main and four nested
# loops would be 9 frames, one more than 8.
    mov %r1, 2
    lddw %r2, func a
    mov %r3, 0
    mov %r4, 0
    call 181
    mov %r0, 0
    exit
a:
    mov %r1, 2
    lddw %r2, func b
    mov %r3, 0
    mov %r4, 0
    call 181
    mov %r0, 0
    exit
b:
    mov %r1, 2
    lddw %r2, func c
    mov %r3, 0
    mov %r4, 0
    call 181
    mov %r0, 0
    exit
c:
    mov %r1, 2
    lddw %r2, func d
    mov %r3, 0
    mov %r4, 0
    call 181
    mov %r0, 0
    exit
d:
    mov %r0, 0
    exit
