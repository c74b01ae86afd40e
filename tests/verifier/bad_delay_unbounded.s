# expect: reject unbounded-delay
# attach: user(8)
# egpu_delay_ns waits at most 1,048,575 ns a call: a wait read from the context, not capped, is
# refused (the helper is 0x10006).
    ldxdw %r1, [%r1+0]
    mov %r2, 0
    call 65542
    mov %r0, 0
    exit
