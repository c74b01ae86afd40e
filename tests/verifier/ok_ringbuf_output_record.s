# expect: accept
# attach: host::launch::enter
# map: events=ringbuf:0:32:128
# Builds a 24-byte record {kernel_id, grid.x * block.x, now} at [r10-24, r10) and sends it with
# ringbuf_output(ring, r10-24, 24, 0): a constant size over fully initialised stack bytes. The
# helper's scalar result is returned.
    mov %r6, %r1
    ldxdw %r2, [%r6+0]
    stxdw [%r10-24], %r2
    ldxw %r3, [%r6+40]
    ldxw %r4, [%r6+52]
    mul %r3, %r4
    stxdw [%r10-16], %r3
    call 5
    stxdw [%r10-8], %r0
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -24
    mov %r3, 24
    mov %r4, 0
    call 130
    exit
