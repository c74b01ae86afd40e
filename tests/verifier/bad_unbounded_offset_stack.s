# expect: reject unbounded-offset
# attach: user(8)
# Adds a u64 loaded from the context, never masked or bounds-checked, to the frame pointer and
# stores a byte there.
    ldxdw %r2, [%r1+0]
    mov %r3, %r10
    add %r3, %r2
    stb [%r3-1], 0
    mov %r0, 0
    exit
