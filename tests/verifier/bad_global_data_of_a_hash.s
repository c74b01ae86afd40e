# expect: reject map-value-bounds
# attach: host::launch::enter
# map: counts=hash:8:8:16
# A hash map's values are found by lookups; only an array of one entry has one to address.
    lddw %r1, map[0]+0
    ldxdw %r0, [%r1+0]
    mov %r0, 0
    exit
