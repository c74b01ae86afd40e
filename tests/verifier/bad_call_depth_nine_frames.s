# expect: reject call-depth
# attach: user(8)
# main -> f1 -> ... -> f8 is 9 frames, one more than the limit of 8 (ok_call_chain_eight_frames
# stops at f7).
    mov %r1, 0
    call local f1
    exit
f1:
    add %r1, 1
    call local f2
    exit
f2:
    add %r1, 1
    call local f3
    exit
f3:
    add %r1, 1
    call local f4
    exit
f4:
    add %r1, 1
    call local f5
    exit
f5:
    add %r1, 1
    call local f6
    exit
f6:
    add %r1, 1
    call local f7
    exit
f7:
    add %r1, 1
    call local f8
    exit
f8:
    add %r1, 1
    mov %r0, %r1
    exit
