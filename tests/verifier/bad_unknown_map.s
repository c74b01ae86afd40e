# expect: reject unknown-map
# attach: user(8)
# map: counts=hash:8:8:64
# Only map 0 is declared, but the lookup uses map[1].
    ldxdw %r2, [%r1+0]
    stxdw [%r10-8], %r2
    lddw %r1, map[1]
    mov %r2, %r10
    add %r2, -8
    call 1
    jeq %r0, 0, out
    ldxdw %r0, [%r0+0]
    exit
out:
    mov %r0, 0
    exit
