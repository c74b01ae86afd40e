# expect: reject pointer-leak
# attach: user(8)
# Spills only the low 4 bytes of the context pointer (stxw) to the stack.
    stxw [%r10-8], %r1
    mov %r0, 0
    exit
