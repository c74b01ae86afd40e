# expect: reject helper-arg
# attach: user(8)
# map: counts=hash:8:8:64
# map_update_elem with r4 (flags, a scalar) set to a stack pointer; map, key and value are fine.
    mov %r2, 1
    stxdw [%r10-8], %r2
    stxdw [%r10-16], %r2
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -8
    mov %r3, %r10
    add %r3, -16
    mov %r4, %r10
    call 2
    exit
