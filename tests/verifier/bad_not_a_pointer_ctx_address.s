# expect: reject not-a-pointer
# attach: host::memcpy::enter
# Dereferences MemcpyCtx.src (offset 8): an address in the traced process, but to the verifier a
# scalar loaded from the context, not a pointer it can check.
    ldxdw %r2, [%r1+8]
    ldxdw %r0, [%r2+0]
    exit
