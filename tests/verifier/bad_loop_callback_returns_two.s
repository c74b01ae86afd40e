# expect: reject callback-return
# attach: user(8)
# A bpf_loop callback must return 0 (go on) or 1 (stop); this one returns 2.
    mov %r1, 4
    lddw %r2, func body
    mov %r3, 0
    mov %r4, 0
    call 181
    mov %r0, 0
    exit
body:
    mov %r0, 2
    exit
