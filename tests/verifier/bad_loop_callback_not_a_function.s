# expect: reject helper-arg
# attach: user(8)
# bpf_loop's callback (r2) must be a function reference (`lddw r2, func f`), not a number
# (here the function's slot index).
    mov %r1, 4
    mov %r2, 7
    mov %r3, 0
    mov %r4, 0
    call 181
    mov %r0, 0
    exit
body:
    mov %r0, 0
    exit
