# expect: reject not-a-pointer
# attach: user(8)
# Loads through r2 = 4096, a number, not a pointer.
    mov %r2, 4096
    ldxdw %r0, [%r2+0]
    exit
