# expect: accept
# attach: user(8)
# map: buckets=array:4:64:1
# An atomic add into bucket (ctx.u8[0] & 7) * 8 of a 64-byte map value: the offset is variable,
# but its low three bits are known to be zero, so the 8-byte atomic is aligned.
    ldxb %r6, [%r1+0]
    and %r6, 7
    lsh %r6, 3
    stw [%r10-4], 0
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -4
    call 1
    jeq %r0, 0, out
    add %r0, %r6
    mov %r1, 1
    lock add [%r0+0], %r1
out:
    mov %r0, 0
    exit
