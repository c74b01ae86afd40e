# expect: reject uninit-register
# attach: user(8)
# map: counts=hash:8:8:64
# map_update_elem takes four arguments, but r4 (flags) is never written; map, key and value
# (both 8 initialised stack bytes) are all correct.
    mov %r2, 0
    stxdw [%r10-8], %r2
    stxdw [%r10-16], %r2
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -8
    mov %r3, %r10
    add %r3, -16
    call 2
    exit
