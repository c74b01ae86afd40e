# expect: reject unknown-helper
# attach: user(8)
# `call %r6` where r6 is a random number from get_prandom_u32: not a known constant, so the helper
# cannot be determined.
    call 7
    mov %r6, %r0
    call %r6
    mov %r0, 0
    exit
