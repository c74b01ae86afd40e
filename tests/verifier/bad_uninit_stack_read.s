# expect: reject uninit-stack
# attach: user(8)
# Stores the context value at [r10-16] but reloads [r10-8], a slot never written.
    ldxdw %r2, [%r1+0]
    stxdw [%r10-16], %r2
    ldxdw %r0, [%r10-8]
    exit
