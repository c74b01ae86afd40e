# expect: reject helper-arg
# attach: host::launch::enter
# map: launches=hash:8:8:1024
# ringbuf_output with a hash map as its first argument; the 16-byte stack record, the constant
# size and the flags are correct.
    ldxdw %r2, [%r1+0]
    stxdw [%r10-16], %r2
    ldxdw %r3, [%r1+24]
    stxdw [%r10-8], %r3
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -16
    mov %r3, 16
    mov %r4, 0
    call 130
    exit
