# expect: reject recursion
# attach: user(8)
# is_even calls is_odd, which calls is_even: indirect recursion.
    mov %r1, 4
    call local is_even
    exit
is_even:
    mov %r0, 1
    jeq %r1, 0, even_done
    sub %r1, 1
    call local is_odd
even_done:
    exit
is_odd:
    mov %r0, 0
    jeq %r1, 0, odd_done
    sub %r1, 1
    call local is_even
odd_done:
    exit
