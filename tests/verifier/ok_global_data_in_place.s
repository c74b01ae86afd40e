# expect: accept
# attach: host::launch::enter
# map: .data=array:4:24:1
# Global data, as clang's objects use it: `lddw map[0]+8` is the address of byte 8 of the value
# of an array of one entry, never null; the program adds the kernel id there and reads the
# word before it.
    ldxdw %r2, [%r1+0]
    lddw %r1, map[0]+8
    lock add [%r1+0], %r2
    ldxdw %r0, [%r1-8]
    mov %r0, 0
    exit
