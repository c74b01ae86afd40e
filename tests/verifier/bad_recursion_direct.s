# expect: reject recursion
# attach: user(8)
# fact(n) calls itself (bounded at run time by n = 5, but any recursion is refused).
    mov %r1, 5
    call local fact
    exit
fact:
    mov %r0, 1
    jeq %r1, 0, fact_done
    mov %r6, %r1
    sub %r1, 1
    call local fact
    mul %r0, %r6
fact_done:
    exit
