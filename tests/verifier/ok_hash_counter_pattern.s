# expect: accept
# attach: host::launch::enter
# map: launches=hash:8:8:1024
# The classic counter: key = kernel_id on the stack, lookup; when absent insert an initial value
# of 1 with map_update_elem (key and value on the stack, all 8 bytes written); when present
# atomically add 1 to the value at offset 0 (8-byte aligned, inside the 8-byte value).
    ldxdw %r6, [%r1+0]
    stxdw [%r10-8], %r6
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -8
    call 1
    jne %r0, 0, found
    mov %r1, 1
    stxdw [%r10-16], %r1
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -8
    mov %r3, %r10
    add %r3, -16
    mov %r4, 0
    call 2
    mov %r0, 0
    exit
found:
    mov %r1, 1
    lock add [%r0+0], %r1
    mov %r0, 0
    exit
