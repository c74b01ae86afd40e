# expect: reject uninit-register
# attach: user(8)
# The local function `twice` computes its result in r2 but never writes r0, so its `exit` returns
# an uninitialised r0 (main never wrote r0 either).
    ldxdw %r1, [%r1+0]
    call local twice
    exit
twice:
    mov %r2, %r1
    add %r2, %r1
    exit
