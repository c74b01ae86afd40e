# expect: accept
# attach: device::global_store
# A device probe on global stores reading MemAccessCtx fields with aligned constant offsets: addr
# (u64 @0), size (u32 @16), sm (u32 @56) and is_store, the last field (u32 @60, bytes 60..64 of
# 64). It returns the store's 4 KiB page offset when the access is a store, else the size.
    ldxw %r2, [%r1+60]
    ldxw %r0, [%r1+16]
    jeq %r2, 0, done
    ldxdw %r3, [%r1+0]
    and %r3, 0xfff
    ldxw %r4, [%r1+56]
    lsh %r4, 12
    or %r3, %r4
    mov %r0, %r3
done:
    exit
