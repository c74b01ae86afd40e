# expect: accept
# attach: user(8)
# A wait read from the context and capped at 1,000 ns by a jump before egpu_delay_ns (0x10006),
# counted from the call (since 0); and one at the bound, counted from a clock read earlier
# (egpu_clock, 0x10007).
    mov %r7, %r1
    call 65543
    mov %r6, %r0
    ldxdw %r1, [%r7+0]
    jle %r1, 1000, wait
    mov %r1, 1000
wait:
    mov %r2, 0
    call 65542
    mov %r1, 1048575
    mov %r2, %r6
    call 65542
    mov %r0, 0
    exit
