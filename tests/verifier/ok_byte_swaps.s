# expect: accept
# attach: user(16)
# Byte-order conversions on scalars: be16/be32/be64, le16/le32/le64 and bswap16/32/64 of a context
# value, and bswap64 of a constant compared with its expected image. All results are scalars.
    ldxdw %r2, [%r1+0]
    mov %r3, %r2
    be16 %r3
    mov %r4, %r2
    be32 %r4
    mov %r5, %r2
    be64 %r5
    xor %r3, %r4
    xor %r3, %r5
    ldxdw %r6, [%r1+8]
    le16 %r6
    ldxw %r7, [%r1+8]
    le32 %r7
    ldxdw %r8, [%r1+0]
    le64 %r8
    bswap16 %r6
    bswap32 %r7
    bswap64 %r8
    add %r3, %r6
    add %r3, %r7
    add %r3, %r8
    lddw %r9, 0x1122334455667788
    bswap64 %r9
    lddw %r2, 0x8877665544332211
    mov %r0, %r3
    jeq %r9, %r2, same
    mov %r0, 1
same:
    exit
