# Counts a global access per 4 KiB page in map 0 (a hash map of u64 pages to u64 counts), as
# Probe Rust's `HashMap::fetch_add` does: look up, insert a zero when missing, look up again, add.
    ldxdw %r6, [%r1+0]
    rsh %r6, 12
    stxdw [%r10-8], %r6
    stdw [%r10-16], 0
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -8
    call 1
    jne %r0, 0, found
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
found:
    mov %r1, 1
    lock add [%r0+0], %r1
out:
    mov %r0, 0
    exit
