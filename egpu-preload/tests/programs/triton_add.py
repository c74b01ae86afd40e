"""A Triton kernel under egpu's preloaded library: its results must be unchanged.

Triton compiles the kernel to PTX, loads the cubin (which keeps the PTX) with cuModuleLoadData
and launches it with cuLaunchKernelEx, found with dlsym. Under `egpu run --probes` with the
example probes, the library loads the kernel's PTX instrumented instead, and the results must
still be exact. Prints `expect KEY VALUE` lines for egpu-preload/tests/programs/check.py.
"""

import os
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    n, block = 1 << 20, 1024
    torch.manual_seed(0)
    x = torch.rand(n, device="cuda")
    y = torch.rand(n, device="cuda")
    want = x + y
    grid = (triton.cdiv(n, block),)
    threads = 0
    for _ in range(runs):
        out = torch.empty_like(x)
        compiled = add_kernel[grid](x, y, out, n, BLOCK=block)
        threads += grid[0] * compiled.metadata.num_warps * 32
        torch.cuda.synchronize()
        if not torch.equal(out, want):
            bad = (out != want).nonzero()[:5].flatten().tolist()
            print(f"wrong results at {bad}", file=sys.stderr)
            return 1
    print(f"{runs} runs of add_kernel over {n} floats, {grid[0]} blocks: results unchanged")
    print(f"expect kernel add_kernel {runs}")
    if "block_trace" in os.environ.get("EGPU_PROBES", ""):
        # examples/block_trace.rs: each block's start traced into a ring on the GPU (counted
        # there per kernel), and the blocks launched counted on the host.
        print(f"expect map TRACED add_kernel {runs * grid[0]}")
        print(f"expect map BLOCKS add_kernel {runs * grid[0]}")
    elif os.environ.get("EGPU_PROBES"):
        # The example probes (examples/probes.rs): every thread of every launch counted on the
        # GPU as it starts, every launch on the host.
        print(f"expect map THREADS add_kernel {threads}")
        print(f"expect map LAUNCHES add_kernel {runs}")
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
