# expect: reject helper-arg
# attach: user(8)
# bpf_loop's callback_ctx (r3) must point to the stack or be 0: the program's context is
# neither.
    mov %r3, %r1
    mov %r1, 4
    lddw %r2, func body
    mov %r4, 0
    call 181
    mov %r0, 0
    exit
body:
    mov %r0, 0
    exit
