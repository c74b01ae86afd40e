"""A Triton kernel under egpu's preloaded library: its results must be unchanged.

Triton compiles the kernel to PTX, loads the cubin (which keeps the PTX) with cuModuleLoadData
and launches it with cuLaunchKernelEx, found with dlsym. Prints `expect KEY VALUE` lines for
egpu-preload/tests/programs/check.py.
"""

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
    for _ in range(runs):
        out = torch.empty_like(x)
        add_kernel[grid](x, y, out, n, BLOCK=block)
        torch.cuda.synchronize()
        if not torch.equal(out, want):
            bad = (out != want).nonzero()[:5].flatten().tolist()
            print(f"wrong results at {bad}", file=sys.stderr)
            return 1
    print(f"{runs} runs of add_kernel over {n} floats, {grid[0]} blocks: results unchanged")
    print(f"expect kernel add_kernel {runs}")
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
