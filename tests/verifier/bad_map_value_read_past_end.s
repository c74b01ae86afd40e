# expect: reject map-value-bounds
# attach: user(8)
# map: slots=array:4:8:4
# The value is 8 bytes; after the null check the program loads 8 bytes at offset 8, i.e. [8, 16).
    stw [%r10-4], 0
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -4
    call 1
    jeq %r0, 0, out
    ldxdw %r0, [%r0+8]
    exit
out:
    mov %r0, 0
    exit
