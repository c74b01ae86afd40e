# expect: accept
# attach: host::launch::exit
# Classifies a launch from its flags (u32 at 80) with jset (CAPTURED = 1, GRAPH = 2) and from the
# sign of its i32 result (ldxsw at 76); r0 collects the bits.
    ldxw %r2, [%r1+80]
    mov %r0, 0
    jset %r2, 1, captured
    ja check_graph
captured:
    or %r0, 1
check_graph:
    jset %r2, 2, graph
    ja check_result
graph:
    or %r0, 2
check_result:
    ldxsw %r3, [%r1+76]
    jsge %r3, 0, done
    or %r0, 4
done:
    exit
