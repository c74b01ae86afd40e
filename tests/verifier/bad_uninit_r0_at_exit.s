# expect: reject uninit-register
# attach: user(8)
# Reads a context byte into r2 but never writes r0, so `exit` reads an uninitialised r0.
    ldxb %r2, [%r1+0]
    exit
