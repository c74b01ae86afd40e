# expect: reject not-a-pointer
# attach: user(8)
# map: counts=array:4:8:16
# Loads directly through the map reference from `lddw map[0]` instead of looking up a value.
    lddw %r1, map[0]
    ldxdw %r0, [%r1+0]
    exit
