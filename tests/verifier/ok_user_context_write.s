# expect: accept
# attach: user(32)
# A user probe updating its writable 32-byte context in place with plain loads and stores inside
# [0, 32): ctx.u64[0] += 1, ctx.u32[2] <<= 1, ctx.u32[3] = 7, ctx.u64[2] |= 0x80, ctx.u8[31] = 0xff.
    ldxdw %r2, [%r1+0]
    add %r2, 1
    stxdw [%r1+0], %r2
    ldxw %r3, [%r1+8]
    lsh %r3, 1
    stxw [%r1+8], %r3
    stw [%r1+12], 7
    ldxdw %r4, [%r1+16]
    or %r4, 0x80
    stxdw [%r1+16], %r4
    stb [%r1+31], 0xff
    mov %r0, 0
    exit
