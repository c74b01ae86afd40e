# expect: reject too-complex
# attach: user(8)
# while (n != 0) n -= 1, with n a u64 loaded from the context and never bounded: every iteration
# narrows n by one, so no state repeats and the loop cannot be shown to end within the budget.
    ldxdw %r2, [%r1+0]
    mov %r0, 0
loop:
    jeq %r2, 0, done
    sub %r2, 1
    ja loop
done:
    exit
