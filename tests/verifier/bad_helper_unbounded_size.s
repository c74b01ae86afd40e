# expect: reject helper-arg
# attach: host::memcpy::enter
# map: events=ringbuf:0:32:128
# ringbuf_output with size = MemcpyCtx.bytes (u64 at 16), an unbounded scalar; the record
# [r10-16, r10) itself is fully written.
    ldxdw %r6, [%r1+16]
    ldxdw %r2, [%r1+0]
    stxdw [%r10-16], %r2
    ldxdw %r2, [%r1+8]
    stxdw [%r10-8], %r2
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -16
    mov %r3, %r6
    mov %r4, 0
    call 130
    exit
