# expect: reject maybe-null
# attach: user(8)
# map: values=hash:8:8:64
# The null check is skipped when a random number is 0: on that path the load at `use` goes
# through a lookup result that may be null.
    ldxdw %r2, [%r1+0]
    stxdw [%r10-8], %r2
    call 7
    mov %r7, %r0
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -8
    call 1
    jeq %r7, 0, use
    jeq %r0, 0, out
use:
    ldxdw %r0, [%r0+0]
    exit
out:
    mov %r0, 0
    exit
