# expect: reject helper-arg
# attach: user(8)
# map_lookup_elem with r1 = 0, a scalar, where a map reference is expected; the key is 8
# initialised stack bytes.
    ldxdw %r2, [%r1+0]
    stxdw [%r10-8], %r2
    mov %r1, 0
    mov %r2, %r10
    add %r2, -8
    call 1
    mov %r0, 0
    exit
