# expect: accept
# attach: host::sync::exit
# map: sync_times=array:4:16:4
# Looks up slot (kind & 3) (SyncCtx kind at offset 24), checks for null, spills the non-null map
# value pointer to [r10-16], calls ktime_get_ns (clobbering r1-r5), reloads the pointer and
# stores the time at value offset 0 and atomically adds duration_ns (offset 16) at offset 8.
    mov %r6, %r1
    ldxw %r2, [%r6+24]
    and %r2, 3
    stxw [%r10-4], %r2
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -4
    call 1
    jeq %r0, 0, out
    stxdw [%r10-16], %r0
    call 5
    ldxdw %r1, [%r10-16]
    stxdw [%r1+0], %r0
    ldxdw %r2, [%r6+16]
    lock add [%r1+8], %r2
out:
    mov %r0, 0
    exit
