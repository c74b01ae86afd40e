# expect: reject stack-limit
# attach: user(8)
# main uses 400 bytes of stack (a slot at [r10-400]) and calls `work`, which uses 200 bytes of its
# own (a slot at [r10-200]): 600 bytes along the chain, over the 512-byte limit.
    mov %r2, 1
    stxdw [%r10-400], %r2
    call local work
    ldxdw %r1, [%r10-400]
    add %r0, %r1
    exit
work:
    mov %r2, 2
    stxdw [%r10-200], %r2
    ldxdw %r0, [%r10-200]
    exit
