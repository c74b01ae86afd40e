# expect: reject infinite-loop
# attach: user(8)
# bpf_loop bounds the calls, not what one call does: this callback never returns.
    mov %r1, 3
    lddw %r2, func body
    mov %r3, 0
    mov %r4, 0
    call 181
    mov %r0, 0
    exit
body:
    mov %r0, 0
spin:
    ja spin
