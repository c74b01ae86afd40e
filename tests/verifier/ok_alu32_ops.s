# expect: accept
# attach: user(8)
# 32-bit ALU on scalars: mov32 (zero-extends), add32, mul32, lsh32, arsh32, xor32, neg32, div32
# and mod32 by non-zero immediates, and 32-bit register forms; the result is a scalar.
    ldxdw %r2, [%r1+0]
    mov32 %r3, %r2
    add32 %r3, 0x7fffffff
    mul32 %r3, 3
    lsh32 %r3, 5
    arsh32 %r3, 3
    xor32 %r3, -1
    neg32 %r3
    mov32 %r4, %r3
    div32 %r4, 10
    mod32 %r3, 1000
    sub32 %r3, %r4
    or32 %r3, 0x100
    and32 %r3, 0xfffff
    rsh32 %r3, 2
    mov %r0, %r3
    exit
