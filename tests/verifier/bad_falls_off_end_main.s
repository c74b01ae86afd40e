# expect: reject falls-off-end
# attach: user(8)
# The program's last instruction is an `add`, not `exit`: control runs past the end.
    ldxdw %r0, [%r1+0]
    add %r0, 1
