# Counts one event: an atomic add of 1 to entry 0 of map 0 (an array or a per-CPU array).
    stw [%r10-4], 0
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -4
    call 1
    jeq %r0, 0, +2
    mov %r1, 1
    lock add [%r0+0], %r1
    mov %r0, 0
    exit
