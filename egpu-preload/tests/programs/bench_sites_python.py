"""What a Python launch site costs: launches through ctypes into egpu-preload's stand-in driver
from a Python stack 13 frames deep (8 read), with the GIL held (ctypes.PyDLL) and released
(ctypes.CDLL), the best of 5 rounds of 100000 each, in ns per launch. Run it under the
preloaded library with and without sites, and take the differences:

    cc -shared -fPIC -O1 -o DIR/libcuda.so.1 egpu-preload/tests/fixture/fake_cuda.c
    for s in 0 1; do EGPU_SITES=$s LD_PRELOAD=target/release/libegpu_preload.so \\
        LD_LIBRARY_PATH=DIR python3 egpu-preload/tests/programs/bench_sites_python.py \\
        DIR/libcuda.so.1; done

(EGPU_SITES_PYTHON=0 leaves the Python frames out: the native frames' share.)
"""

import ctypes
import sys
import time

held = ctypes.PyDLL(sys.argv[1])
released = ctypes.CDLL(sys.argv[1])
for lib in (held, released):
    lib.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    lib.cuLaunchKernel.restype = ctypes.c_int
kernel = ctypes.c_void_p()
assert held.cuInit(0) == 0
assert held.cuModuleGetFunction(ctypes.byref(kernel), None, b"empty") == 0


def deep(n, f):
    """`f` called 10 frames further down."""
    return deep(n - 1, f) if n else f()


def round_of(lib, n):
    launch = lib.cuLaunchKernel
    start = time.perf_counter_ns()
    for _ in range(n):
        launch(kernel, 1, 1, 1, 32, 1, 1, 0, None, None, None)
    return (time.perf_counter_ns() - start) / n


for name, lib in (("PyDLL (GIL held)", held), ("CDLL (GIL released)", released)):
    best = min(deep(10, lambda: round_of(lib, 100000)) for _ in range(5))
    print(f"{name}: {best:.0f} ns per launch", flush=True)
