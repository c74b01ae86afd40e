# expect: accept
# attach: user(8)
# Scalar helpers only: get_current_pid_tgid (14) >> 32 gives the process id, get_smp_processor_id
# (8) and get_prandom_u32 (7); the results are kept in callee-saved registers across the calls,
# since each call clobbers r1-r5.
    call 14
    rsh %r0, 32
    mov %r6, %r0
    call 8
    mov %r7, %r0
    call 7
    and %r0, 0xff
    lsh %r7, 8
    or %r0, %r7
    xor %r0, %r6
    exit
