# expect: reject map-value-bounds
# attach: host::launch::enter
# map: slots=array:4:8:4
# Direct addressing takes an array of one entry (global data), as in Linux, not of four.
    lddw %r1, map[0]+0
    ldxdw %r0, [%r1+0]
    mov %r0, 0
    exit
