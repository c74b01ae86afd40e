# expect: accept
# attach: user(16)
# Signed division and modulo of sign-extended context values (ldxsw, ldxsh) by non-zero constants,
# immediate and in a register, plus 32-bit signed forms; no division can overflow.
    ldxsw %r2, [%r1+0]
    sdiv %r2, -3
    ldxsh %r3, [%r1+4]
    smod %r3, 7
    ldxsw %r4, [%r1+8]
    mov %r5, -7
    sdiv %r4, %r5
    ldxsb %r6, [%r1+12]
    smod %r6, %r5
    mov %r7, -1000
    sdiv32 %r7, 9
    ldxw %r8, [%r1+12]
    smod32 %r8, -5
    add %r2, %r3
    add %r2, %r4
    add %r2, %r6
    add %r2, %r7
    add %r2, %r8
    mov %r0, %r2
    exit
