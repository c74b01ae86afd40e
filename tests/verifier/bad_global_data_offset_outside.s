# expect: reject map-value-bounds
# attach: host::launch::enter
# map: .data=array:4:24:1
# The address of byte 24 of a 24-byte value: outside it, refused where it is taken.
    lddw %r1, map[0]+24
    mov %r0, 0
    exit
