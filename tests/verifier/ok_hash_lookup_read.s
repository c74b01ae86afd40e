# expect: accept
# attach: host::launch::exit
# map: kernel_stats=hash:8:16:1024
# Looks up the launched kernel (key = kernel_id copied to an 8-byte stack slot), checks the result
# against null, and reads both u64 fields of the 16-byte value at constant offsets 0 and 8.
    ldxdw %r2, [%r1+0]
    stxdw [%r10-8], %r2
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -8
    call 1
    jeq %r0, 0, missing
    ldxdw %r1, [%r0+0]
    ldxdw %r2, [%r0+8]
    add %r1, %r2
    mov %r0, %r1
    exit
missing:
    mov %r0, 0
    exit
