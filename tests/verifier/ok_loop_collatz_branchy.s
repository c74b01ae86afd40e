# expect: accept
# attach: user(8)
# map: steps=array:4:8:1
# bpf_loop with a count of 1000 and a callback that branches (a Collatz step) and updates
# a map. The verifier follows the callback a few times, not 1000. The context holds n; the callback's
# context is {steps, n} on the caller's stack. Returns the steps taken.
    ldxw %r2, [%r1+0]
    stxdw [%r10-8], %r2
    stdw [%r10-16], 0
    mov %r1, 1000
    lddw %r2, func step
    mov %r3, %r10
    add %r3, -16
    mov %r4, 0
    call 181
    ldxdw %r0, [%r10-16]
    exit
step:
    mov %r6, %r2
    ldxdw %r3, [%r6+8]
    jle %r3, 1, stop
    mov %r4, %r3
    and %r4, 1
    jne %r4, 0, odd
    rsh %r3, 1
    ja store
odd:
    mul %r3, 3
    add %r3, 1
store:
    stxdw [%r6+8], %r3
    ldxdw %r3, [%r6+0]
    add %r3, 1
    stxdw [%r6+0], %r3
    stw [%r10-4], 0
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -4
    call 1
    jeq %r0, 0, next
    mov %r1, 1
    lock add [%r0+0], %r1
next:
    mov %r0, 0
    exit
stop:
    mov %r0, 1
    exit
