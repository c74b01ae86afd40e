# expect: accept
# attach: user(8)
# for i in 0..10 { sum += i } with the counter in r6: the counter is a known constant on every
# iteration, so the loop ends after ten iterations and r0 = 45 at exit.
    mov %r0, 0
    mov %r6, 0
loop:
    add %r0, %r6
    add %r6, 1
    jlt %r6, 10, loop
    exit
