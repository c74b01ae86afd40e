# Counts a global access per 4 KiB page in map 0 (a hash map of u64 pages to u64 counts), as
# Probe Rust's `HashMap::fetch_add` lowers: look up and add; when missing, insert a zero (unless
# another thread just did), look up again and add.
    ldxdw %r6, [%r1+0]
    rsh %r6, 12
    stxdw [%r10-8], %r6
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -8
    call 1
    jeq %r0, 0, missing
    mov %r1, 1
    lock add [%r0+0], %r1
    ja out
missing:
    stdw [%r10-16], 0
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -8
    mov %r3, %r10
    add %r3, -16
    mov %r4, 1
    call 2
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -8
    call 1
    jeq %r0, 0, out
    mov %r1, 1
    lock add [%r0+0], %r1
out:
    mov %r0, 0
    exit
