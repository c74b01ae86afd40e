# expect: reject uninit-register
# attach: user(16)
# A helper call clobbers r1-r5: after ktime_get_ns, r1 no longer holds the context pointer, so
# loading through it reads an uninitialised register (the context should have been kept in r6).
    call 5
    ldxdw %r0, [%r1+0]
    exit
