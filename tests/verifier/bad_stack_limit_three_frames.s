# expect: reject stack-limit
# attach: user(8)
# Three frames of 200 bytes each (main -> outer -> inner): every frame alone is fine, but the
# chain uses 600 bytes, over 512.
    mov %r2, 1
    stxdw [%r10-200], %r2
    call local outer
    ldxdw %r1, [%r10-200]
    add %r0, %r1
    exit
outer:
    mov %r2, 2
    stxdw [%r10-200], %r2
    call local inner
    ldxdw %r1, [%r10-200]
    add %r0, %r1
    exit
inner:
    mov %r2, 3
    stxdw [%r10-200], %r2
    ldxdw %r0, [%r10-200]
    exit
