# expect: accept
# attach: user(8)
# Nested bpf_loop calls with early stops: for i in 0..10, for j in 0..10, stop both when
# i * j equals the context's word (masked to 0..127), counting the inner calls in the caller's
# slot at r10-8 (bit 63 set when found); returns the slot.
    ldxw %r6, [%r1+0]
    and %r6, 127
    stxdw [%r10-16], %r6
    stdw [%r10-8], 0
    stdw [%r10-24], 0
    mov %r1, 10
    lddw %r2, func outer
    mov %r3, %r10
    mov %r4, 0
    call 181
    ldxdw %r0, [%r10-8]
    exit
outer:
    stxdw [%r2-24], %r1
    mov %r6, %r2
    mov %r1, 10
    lddw %r2, func inner
    mov %r3, %r6
    mov %r4, 0
    call 181
    ldxdw %r0, [%r6-8]
    rsh %r0, 63
    exit
inner:
    ldxdw %r3, [%r2-8]
    add %r3, 1
    and %r3, 0xffff
    stxdw [%r2-8], %r3
    ldxdw %r4, [%r2-24]
    mul %r4, %r1
    ldxdw %r5, [%r2-16]
    mov %r0, 0
    jne %r4, %r5, out
    mov %r5, 1
    lsh %r5, 63
    or %r3, %r5
    stxdw [%r2-8], %r3
    mov %r0, 1
out:
    exit
