# expect: reject uninit-stack
# attach: host::launch::enter
# map: by_kernel=hash:8:8:256
# The hash map's key is 8 bytes, but only 4 of them ([r10-8, r10-4), the u32 grid.x) are written
# before map_lookup_elem reads the key at [r10-8].
    ldxw %r2, [%r1+40]
    stxw [%r10-8], %r2
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -8
    call 1
    jeq %r0, 0, out
    ldxdw %r0, [%r0+0]
    exit
out:
    mov %r0, 0
    exit
