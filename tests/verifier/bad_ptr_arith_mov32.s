# expect: reject pointer-arithmetic
# attach: user(8)
# mov32 of the context pointer truncates it to 32 bits: a 32-bit operation on a pointer.
    mov32 %r2, %r1
    mov %r0, 0
    exit
