# expect: reject map-value-bounds
# attach: host::launch::enter
# map: .data=array:4:24:1
# Byte 20 of the 24-byte value: an 8-byte load there reaches byte 27.
    lddw %r1, map[0]+20
    ldxdw %r0, [%r1+0]
    mov %r0, 0
    exit
