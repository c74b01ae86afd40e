# expect: accept
# attach: host::launch::exit
# map: duration_hist=array:4:64:1
# A histogram of launch durations in one 64-byte array value (8 u64 buckets): bucket =
# (duration_ns >> 10) & 7, scaled by 8 to a byte offset in [0, 56]; the map value pointer plus
# this bounded scalar is read and written with 8-byte accesses that stay inside [0, 64).
    ldxdw %r6, [%r1+32]
    rsh %r6, 10
    and %r6, 7
    lsh %r6, 3
    stw [%r10-4], 0
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -4
    call 1
    jeq %r0, 0, out
    add %r0, %r6
    ldxdw %r1, [%r0+0]
    add %r1, 1
    stxdw [%r0+0], %r1
out:
    mov %r0, 0
    exit
