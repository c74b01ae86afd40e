# expect: reject recursion
# attach: user(8)
# A callback that passes itself to bpf_loop again: recursion, which no program may have.
    mov %r1, 3
    lddw %r2, func body
    mov %r3, 0
    mov %r4, 0
    call 181
    mov %r0, 0
    exit
body:
    mov %r1, 2
    lddw %r2, func body
    mov %r3, 0
    mov %r4, 0
    call 181
    mov %r0, 0
    exit
