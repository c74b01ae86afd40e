# expect: reject stack-bounds
# attach: user(8)
# As ok_loop_index_within_array, but with a count of 9: index 8 writes past the array, above
# the caller's frame.
    mov %r1, 9
    lddw %r2, func body
    mov %r3, %r10
    add %r3, -64
    mov %r4, 0
    call 181
    mov %r0, 0
    exit
body:
    mov %r3, %r1
    lsh %r1, 3
    add %r2, %r1
    stxdw [%r2+0], %r3
    mov %r0, 0
    exit
