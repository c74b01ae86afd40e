# expect: reject falls-off-end
# attach: user(8)
# The local function `inc` (the last function) forgets its `exit`: its last instruction is `add`.
    mov %r1, 2
    call local inc
    exit
inc:
    mov %r0, %r1
    add %r0, 1
