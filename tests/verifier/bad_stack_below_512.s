# expect: reject stack-bounds
# attach: user(8)
# r2 = r10 - 500, then a byte store at [r2-13] = r10-513, one byte below the 512-byte stack.
    mov %r2, %r10
    add %r2, -500
    stb [%r2-13], 1
    mov %r0, 0
    exit
