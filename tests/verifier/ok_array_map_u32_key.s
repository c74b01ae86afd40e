# expect: accept
# attach: host::memcpy::enter
# map: bytes_by_kind=array:4:16:8
# Per copy direction totals in an array map: the 4-byte key is the u32 `kind` field (offset 48)
# stored to [r10-4]; after the null check it atomically adds `bytes` (offset 16) to value[0..8]
# and 1 to value[8..16]. The context pointer is kept in r6 across the helper call.
    mov %r6, %r1
    ldxw %r2, [%r6+48]
    stxw [%r10-4], %r2
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -4
    call 1
    jeq %r0, 0, out
    ldxdw %r2, [%r6+16]
    lock add [%r0+0], %r2
    mov %r3, 1
    lock add [%r0+8], %r3
out:
    mov %r0, 0
    exit
