# expect: reject uninit-stack
# attach: user(8)
# `stw` writes only bytes [r10-8, r10-4); the 8-byte load at [r10-8] also reads the four
# never-written bytes [r10-4, r10).
    stw [%r10-8], 1
    ldxdw %r0, [%r10-8]
    exit
