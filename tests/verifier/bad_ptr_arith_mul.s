# expect: reject pointer-arithmetic
# attach: user(8)
# Multiplies a copy of the context pointer by 2.
    mov %r2, %r1
    mul %r2, 2
    mov %r0, 0
    exit
