# expect: reject too-complex
# attach: host::launch::enter
# for (i = 0; i < grid.x; i++) sum += i, with grid.x a u32 from the context: up to 2^32 - 1
# iterations, each with a different counter, far beyond the verifier's budget.
    ldxw %r6, [%r1+40]
    mov %r0, 0
    mov %r7, 0
loop:
    jge %r7, %r6, done
    add %r0, %r7
    add %r7, 1
    ja loop
done:
    exit
