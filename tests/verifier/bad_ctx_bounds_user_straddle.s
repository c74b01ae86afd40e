# expect: reject context-bounds
# attach: user(12)
# The user context is 12 bytes; an 8-byte load at offset 8 reads [8, 16), four bytes past it.
    ldxdw %r0, [%r1+8]
    exit
