# expect: reject stack-bounds
# attach: user(8)
# Writes the last 4 stack bytes, then loads 8 bytes at [r10-4]: bytes [r10, r10+4) are above
# the frame.
    stw [%r10-4], 0
    ldxdw %r0, [%r10-4]
    exit
