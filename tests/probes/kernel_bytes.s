# bytes[kernel_id] += size at every access, as examples/kernel_bytes.rs's probes do with Probe
# Rust's `HashMap::fetch_add`: look up; when missing, insert a zero (unless another thread just
# did) and look up again; add. Additive in the size: runs of accesses run it once.
    mov %r9, %r1
    ldxdw %r0, [%r9+8]
    stxdw [%r10-8], %r0
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -8
    call 1
    jeq %r0, 0, missing
    ldxw %r1, [%r9+16]
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
    ldxw %r1, [%r9+16]
    lock add [%r0+0], %r1
out:
    mov %r0, 0
    exit
