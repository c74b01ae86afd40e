# expect: accept
# attach: host::sync::exit
# Calls helpers through a register holding a known constant: `mov %r2, 5; call %r2` is
# ktime_get_ns and `mov %r7, 7; call %r7` is get_prandom_u32. The context is kept in r6 and
# SyncCtx timestamp_ns (offset 8) is read after the calls.
    mov %r6, %r1
    mov %r2, 5
    call %r2
    ldxdw %r3, [%r6+8]
    sub %r0, %r3
    mov %r8, %r0
    mov %r7, 7
    call %r7
    and %r0, 1
    add %r0, %r8
    exit
