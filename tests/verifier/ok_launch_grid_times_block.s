# expect: accept
# attach: host::launch::enter
# A host probe computing the number of threads a launch starts along x and y:
# grid[0] * block[0] * grid[1] * block[1], from the u32 fields at offsets 40, 44, 52 and 56 of
# the 88-byte LaunchCtx (read only).
    ldxw %r2, [%r1+40]
    ldxw %r3, [%r1+52]
    mul %r2, %r3
    ldxw %r4, [%r1+44]
    ldxw %r5, [%r1+56]
    mul %r4, %r5
    mul %r2, %r4
    mov %r0, %r2
    exit
