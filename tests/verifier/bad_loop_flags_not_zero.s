# expect: reject helper-arg
# attach: user(8)
# bpf_loop's flags (r4) must be 0.
    mov %r1, 4
    lddw %r2, func body
    mov %r3, 0
    mov %r4, 1
    call 181
    mov %r0, 0
    exit
body:
    mov %r0, 0
    exit
