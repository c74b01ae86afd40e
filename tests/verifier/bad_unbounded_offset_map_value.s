# expect: reject unbounded-offset
# attach: host::launch::exit
# map: duration_hist=array:4:64:1
# A histogram whose bucket offset is duration_ns (u64 at 32) with no mask: the map value pointer
# plus an unbounded scalar (the `and %r6, 7` and scaling of ok_map_value_masked_index are missing).
    ldxdw %r6, [%r1+32]
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
