# expect: accept
# attach: host::module_load::enter
# map: image_bytes=percpu_hash:4:16:64
# Per-device module statistics in a per-CPU hash map keyed by the u32 `device` field (ModuleLoadCtx
# offset 40): when the entry exists add image_bytes (offset 8) and 1 with atomics at offsets 0
# and 8; otherwise insert {image_bytes, 1} built in a 16-byte stack record.
    mov %r6, %r1
    ldxw %r2, [%r6+40]
    stxw [%r10-4], %r2
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -4
    call 1
    ldxdw %r7, [%r6+8]
    jeq %r0, 0, insert
    lock add [%r0+0], %r7
    mov %r1, 1
    lock add [%r0+8], %r1
    mov %r0, 0
    exit
insert:
    stxdw [%r10-24], %r7
    stdw [%r10-16], 1
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -4
    mov %r3, %r10
    add %r3, -24
    mov %r4, 0
    call 2
    mov %r0, 0
    exit
