# expect: reject pointer-leak
# attach: host::launch::enter
# Returns the context pointer itself in r0.
    mov %r0, %r1
    exit
