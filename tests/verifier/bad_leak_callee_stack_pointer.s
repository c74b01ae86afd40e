# expect: reject pointer-leak
# attach: user(8)
# The local function `make` returns a pointer to its own stack frame, which is gone once it
# returns; main ignores it and returns 0.
    call local make
    mov %r0, 0
    exit
make:
    mov %r2, 1
    stxdw [%r10-8], %r2
    mov %r0, %r10
    add %r0, -8
    exit
