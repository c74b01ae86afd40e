# expect: reject maybe-null
# attach: host::launch::enter
# map: launches=hash:8:8:1024
# Reads the map value without checking the lookup result against 0 first.
    ldxdw %r2, [%r1+0]
    stxdw [%r10-8], %r2
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -8
    call 1
    ldxdw %r0, [%r0+0]
    exit
