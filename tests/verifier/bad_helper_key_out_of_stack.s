# expect: reject stack-bounds
# attach: user(8)
# map: by_id=hash:8:8:64
# The key pointer is r10-4, so only 4 of the map's 8 key bytes are inside the stack (all 4
# written): the key argument does not cover key_size bytes in bounds.
    stw [%r10-4], 7
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -4
    call 1
    jeq %r0, 0, out
    ldxdw %r0, [%r0+0]
    exit
out:
    mov %r0, 0
    exit
