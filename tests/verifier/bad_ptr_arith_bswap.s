# expect: reject pointer-arithmetic
# attach: user(8)
# Byte-swaps a copy of the frame pointer.
    mov %r2, %r10
    bswap64 %r2
    mov %r0, 0
    exit
