# expect: reject misaligned
# attach: user(8)
# map: counters=array:4:16:1
# A 64-bit atomic add at offset 4 of a checked 16-byte map value: in bounds ([4, 12)) but not
# 8-byte aligned.
    stw [%r10-4], 0
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -4
    call 1
    jeq %r0, 0, out
    mov %r1, 1
    lock add [%r0+4], %r1
out:
    mov %r0, 0
    exit
