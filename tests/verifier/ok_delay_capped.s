# expect: accept
# attach: user(8)
# A wait read from the context and capped at 1,000 ns by a jump before egpu_delay_ns (0x10006),
# and a constant one at the bound.
    ldxdw %r1, [%r1+0]
    jle %r1, 1000, wait
    mov %r1, 1000
wait:
    call 65542
    mov %r1, 1000000
    call 65542
    mov %r0, 0
    exit
