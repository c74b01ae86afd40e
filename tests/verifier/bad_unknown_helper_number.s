# expect: reject unknown-helper
# attach: user(8)
# Calls helper 6 (Linux's trace_printk), which is not in egpu's helper table.
    call 6
    mov %r0, 0
    exit
