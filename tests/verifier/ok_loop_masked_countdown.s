# expect: accept
# attach: user(8)
# Counts down a value loaded from the context after masking it with 15: the counter is in [0, 15],
# the `jeq 0` exit narrows it to [1, 15] inside the body, so the loop runs at most 15 times.
    ldxdw %r1, [%r1+0]
    and %r1, 15
    mov %r0, 0
loop:
    jeq %r1, 0, done
    add %r0, 3
    sub %r1, 1
    ja loop
done:
    exit
