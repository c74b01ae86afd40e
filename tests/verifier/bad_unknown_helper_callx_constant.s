# expect: reject unknown-helper
# attach: user(8)
# `call %r2` with r2 = 99, a known constant that names no helper.
    mov %r2, 99
    call %r2
    mov %r0, 0
    exit
