# expect: accept
# attach: user(16)
# Two local functions returning scalars: min(max(ctx.a, ctx.b), 1000). Each function sets r0 on
# both sides of its comparison; main keeps its values in callee-saved r6/r7.
    ldxw %r6, [%r1+0]
    ldxw %r7, [%r1+4]
    mov %r1, %r6
    mov %r2, %r7
    call local max
    mov %r1, %r0
    mov %r2, 1000
    call local min
    exit
max:
    mov %r0, %r1
    jge %r1, %r2, max_done
    mov %r0, %r2
max_done:
    exit
min:
    mov %r0, %r1
    jle %r1, %r2, min_done
    mov %r0, %r2
min_done:
    exit
