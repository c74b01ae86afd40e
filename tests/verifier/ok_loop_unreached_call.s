# expect: accept
# attach: user(8)
# A bpf_loop call on a path the verifier proves never taken (r1 is at most 0xffffffff after
# `and32`, so the jump is always taken): its callback is never followed, and the engines, which
# run every bpf_loop as a loop of local calls, meet an inert instruction in its place.
    ldxdw %r1, [%r1+0]
    and32 %r1, -1
    lddw %r2, 0xffffffff
    jle %r1, %r2, out
    mov %r1, 3
    lddw %r2, func body
    mov %r3, 0
    mov %r4, 0
    call 181
out:
    mov %r0, 7
    exit
body:
    mov %r0, 0
    exit
