# expect: reject infinite-loop
# attach: user(8)
# When the first context byte is not 0 the program spins on `spin: ja spin`, whose state repeats
# exactly.
    ldxb %r2, [%r1+0]
    mov %r0, 0
    jeq %r2, 0, done
spin:
    ja spin
done:
    exit
