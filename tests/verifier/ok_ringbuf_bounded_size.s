# expect: accept
# attach: host::alloc::enter
# map: events=ringbuf:0:32:128
# Sends a record whose size is not constant but bounded: 8 + (kind & 8), so 8 or 16 bytes, and
# all 16 bytes at [r10-16, r10) are written. AllocCtx: ptr@0, bytes@8, kind@32.
    ldxdw %r2, [%r1+0]
    stxdw [%r10-16], %r2
    ldxdw %r2, [%r1+8]
    stxdw [%r10-8], %r2
    ldxw %r3, [%r1+32]
    and %r3, 8
    add %r3, 8
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -16
    mov %r4, 0
    call 130
    exit
