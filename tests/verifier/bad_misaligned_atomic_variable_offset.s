# expect: reject misaligned
# attach: user(8)
# map: buckets=array:4:64:1
# An 8-byte atomic add at offset (ctx.u8[0] & 7) * 4 of a 64-byte map value: in bounds, but the
# offset may be 4 (mod 8), and atomics must be aligned.
    ldxb %r6, [%r1+0]
    and %r6, 7
    lsh %r6, 2
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
