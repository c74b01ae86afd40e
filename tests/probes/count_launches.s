# The built-in launch counter (egpu-host's `count_launches`, in Probe Rust) as hand-written eBPF:
# counts in map 0, a hash of u64 counts by kernel id (launches captured into graphs under -2):
# look up and add; when missing, insert 1 (unless another thread just did: then look up again
# and add). egpu-host's tests check that it counts as the probe does.
    ldxdw %r6, [%r1+0]
    ldxw %r7, [%r1+32]
    and %r7, 1
    jeq %r7, 0, keyed
    mov %r6, -2
keyed:
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
    stdw [%r10-16], 1
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -8
    mov %r3, %r10
    add %r3, -16
    mov %r4, 1
    call 2
    jeq %r0, 0, out
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
