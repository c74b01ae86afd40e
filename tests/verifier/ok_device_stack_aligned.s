# expect: accept
# attach: device::kernel_exit
# A device probe using its stack with naturally aligned accesses only: two u32 stores at
# [r10-8] and [r10-4] (sm@64 and warp@56), a u64 reload of the pair at [r10-8], a u16 store and
# load at [r10-10] and a byte at [r10-11].
    ldxw %r2, [%r1+64]
    ldxw %r3, [%r1+56]
    stxw [%r10-8], %r2
    stxw [%r10-4], %r3
    ldxdw %r0, [%r10-8]
    sth [%r10-10], 0x1234
    ldxh %r4, [%r10-10]
    stb [%r10-11], 7
    ldxb %r5, [%r10-11]
    add %r4, %r5
    add %r0, %r4
    exit
