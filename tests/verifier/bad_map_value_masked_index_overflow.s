# expect: reject map-value-bounds
# attach: user(8)
# map: buckets=array:4:16:1
# The index is masked (bounded, 0..15) but not scaled to fit: value + [0, 15] with an 8-byte load
# reaches byte 23 of a 16-byte value.
    ldxb %r6, [%r1+0]
    and %r6, 15
    stw [%r10-4], 0
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -4
    call 1
    jeq %r0, 0, out
    add %r0, %r6
    ldxdw %r0, [%r0+0]
    exit
out:
    mov %r0, 0
    exit
