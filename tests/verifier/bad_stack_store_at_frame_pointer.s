# expect: reject stack-bounds
# attach: user(8)
# Stores 8 bytes at [r10+0, r10+8), above the frame: the stack is [r10-512, r10).
    stdw [%r10+0], 1
    mov %r0, 0
    exit
