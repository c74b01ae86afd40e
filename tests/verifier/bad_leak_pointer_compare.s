# expect: reject pointer-leak
# attach: user(8)
# Compares the context pointer with the number 4096, which would reveal its value (only the null
# check of a lookup result may compare a pointer with a number).
    mov %r0, 0
    jgt %r1, 4096, high
    mov %r0, 1
high:
    exit
