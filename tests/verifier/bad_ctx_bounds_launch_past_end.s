# expect: reject context-bounds
# attach: host::launch::exit
# LaunchCtx is 128 bytes (span_id is the last field, at 120); a u32 load at offset 128 reads
# [128, 132), past its end.
    ldxw %r0, [%r1+128]
    exit
