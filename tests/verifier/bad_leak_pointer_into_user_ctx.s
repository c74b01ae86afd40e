# expect: reject pointer-leak
# attach: user(16)
# The user context is writable, but storing a pointer into it (the context pointer itself, at
# offset 0) leaks an address.
    stxdw [%r1+0], %r1
    mov %r0, 0
    exit
