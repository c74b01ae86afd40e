# expect: accept
# attach: user(8)
# main uses 256 bytes of stack (down to [r10-256]) and calls `leaf`, which uses 256 bytes of its
# own frame: 512 bytes along the chain, exactly the limit. Each frame reads only what it wrote.
    mov %r2, 1
    stxdw [%r10-256], %r2
    call local leaf
    ldxdw %r1, [%r10-256]
    add %r0, %r1
    exit
leaf:
    mov %r2, 2
    stxdw [%r10-256], %r2
    ldxdw %r0, [%r10-256]
    exit
