# expect: reject infinite-loop
# attach: user(8)
# A countdown that forgets to decrement: r6 stays 10, the body only copies it to r7, so from the
# second iteration on the state at `loop` repeats exactly.
    mov %r0, 0
    mov %r6, 10
loop:
    mov %r7, %r6
    jne %r6, 0, loop
    exit
