# expect: reject pointer-leak
# attach: user(8)
# map: slots=array:4:8:1
# Stores a stack address (r10 - 8) into a checked, non-null map value at offset 0.
    stw [%r10-4], 0
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -4
    call 1
    jeq %r0, 0, out
    mov %r1, %r10
    add %r1, -8
    stxdw [%r0+0], %r1
out:
    mov %r0, 0
    exit
