# expect: reject helper-arg
# attach: user(8)
# map: events=ringbuf:0:32:128
# map_lookup_elem on a ring buffer: the map argument has the wrong kind (ring buffers have no
# keys or values). The result is not used.
    stw [%r10-4], 0
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -4
    call 1
    mov %r0, 0
    exit
