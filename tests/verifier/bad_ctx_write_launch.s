# expect: reject context-write
# attach: host::launch::enter
# Tries to overwrite LaunchCtx.result (offset 76): host contexts are read-only. The store itself
# is in bounds and aligned.
    stw [%r1+76], 0
    mov %r0, 0
    exit
