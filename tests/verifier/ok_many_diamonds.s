# expect: accept
# attach: user(8)
# Eight if/else diamonds in a row on bits and ranges of one context value (256 paths that merge
# again); r0 is written before the first and only updated with scalars on every side.
    ldxdw %r6, [%r1+0]
    mov %r0, 0
    jset %r6, 1, a1
    add %r0, 1
    ja j1
a1:
    add %r0, 2
j1:
    jset %r6, 2, a2
    xor %r0, 4
    ja j2
a2:
    or %r0, 8
j2:
    jgt %r6, 1000, a3
    mul %r0, 3
    ja j3
a3:
    sub %r0, 5
j3:
    jsgt %r6, -1, a4
    lsh %r0, 1
    ja j4
a4:
    rsh %r0, 1
j4:
    mov %r2, %r6
    and %r2, 0xf0
    jeq %r2, 0x30, a5
    add %r0, %r2
    ja j5
a5:
    mov %r0, 77
j5:
    jlt32 %r6, 12345, a6
    add %r0, 11
    ja j6
a6:
    add %r0, 13
j6:
    jsle %r6, 0, a7
    neg %r0
    ja j7
a7:
    arsh %r0, 2
j7:
    jne %r0, 42, a8
    mov %r0, 0
    ja j8
a8:
    and %r0, 0xffff
j8:
    exit
