# expect: reject context-bounds
# attach: device::global_load
# An 8-byte load at offset -8 of the MemAccessCtx, before its start (constant and 8-byte
# aligned, so the only fault is the bounds).
    ldxdw %r0, [%r1-8]
    exit
