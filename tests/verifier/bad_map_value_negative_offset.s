# expect: reject map-value-bounds
# attach: host::launch::enter
# map: per_kernel=hash:8:16:1024
# Stores a u32 at offset -4 of a checked, non-null 16-byte map value: before its start.
    ldxdw %r2, [%r1+0]
    stxdw [%r10-8], %r2
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -8
    call 1
    jeq %r0, 0, out
    mov %r1, 1
    stxw [%r0-4], %r1
out:
    mov %r0, 0
    exit
