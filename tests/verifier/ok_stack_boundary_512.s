# expect: accept
# attach: user(8)
# Uses both ends of the 512-byte stack: an 8-byte store and load at [r10-512] (the lowest valid
# slot) and a byte at [r10-1] (the highest valid byte), each read after being written.
    mov %r2, 42
    stxdw [%r10-512], %r2
    stb [%r10-1], 1
    ldxdw %r0, [%r10-512]
    ldxb %r3, [%r10-1]
    add %r0, %r3
    exit
