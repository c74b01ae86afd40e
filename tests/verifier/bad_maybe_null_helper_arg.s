# expect: reject maybe-null
# attach: user(8)
# map: values=hash:8:16:64
# Passes the unchecked lookup result as the value pointer of map_update_elem (same map, so its
# size would match); every other argument is correct.
    ldxdw %r2, [%r1+0]
    stxdw [%r10-8], %r2
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -8
    call 1
    mov %r3, %r0
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -8
    mov %r4, 0
    call 2
    exit
