# expect: reject uninit-stack
# attach: host::memcpy::enter
# map: events=ringbuf:0:32:128
# ringbuf_output sends 16 bytes from [r10-16], but only the first 8 (dst) were written; the
# helper would read the uninitialised bytes [r10-8, r10).
    ldxdw %r2, [%r1+0]
    stxdw [%r10-16], %r2
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -16
    mov %r3, 16
    mov %r4, 0
    call 130
    exit
