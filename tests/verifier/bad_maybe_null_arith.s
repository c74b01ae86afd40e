# expect: reject maybe-null
# attach: user(8)
# map: pairs=hash:8:16:64
# Adds 8 to the lookup result before the null check; the later check and the load at offset 8 of
# the 16-byte value would otherwise be fine.
    ldxdw %r2, [%r1+0]
    stxdw [%r10-8], %r2
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -8
    call 1
    add %r0, 8
    jeq %r0, 0, out
    ldxdw %r0, [%r0+0]
    exit
out:
    mov %r0, 0
    exit
