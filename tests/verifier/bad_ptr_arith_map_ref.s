# expect: reject pointer-arithmetic
# attach: user(8)
# map: table=array:4:32:4
# Adds 8 to a map reference; map references allow no arithmetic at all.
    lddw %r1, map[0]
    add %r1, 8
    mov %r0, 0
    exit
