# expect: reject context-bounds
# attach: host::launch::exit
# LaunchCtx is 88 bytes (reserved is the last field, at 84); a u32 load at offset 88 reads
# [88, 92), past its end.
    ldxw %r0, [%r1+88]
    exit
