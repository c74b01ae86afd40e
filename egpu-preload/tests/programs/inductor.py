"""Functions compiled by torch.compile (Inductor's Triton kernels), for egpu's device probes on
the GPU machine: egpu-preload/tests/programs/device_check.py runs this bare and then under
`egpu run --probes libkernel_bytes.so`, sharing Inductor's and Triton's caches, so that the run
under egpu loads its kernels from the caches as a warm program does.

    python3 inductor.py [--calls 5]

- pointwise: relu(x * y + x) of two 4 Mi fp32 vectors, default mode (`triton_poi_...`): per run,
  8 bytes read and 4 written per element.
- reduction: the sum of each row of a 2048 × 1024 fp32 matrix, default mode (`triton_per_...` or
  `triton_red_...`): per run, the matrix read and 4 bytes written per row.
- matmul: a 1024³ fp16 product under mode="max-autotune" with Triton's GEMM templates only
  (`triton_tem_...`; CUDA graphs on, as the mode has them): per run, each program of the grid
  reads its BLOCK_M rows of A and BLOCK_N columns of B, K deep, and C is written once (fp16).
  BLOCK_M and BLOCK_N are those of the config autotuning chose, read from the module Inductor
  generated. Whether the tiles are read by `ld.global` or `cp.async` is the kernel's choice, so
  the figure is of bytes read, either way (`read`).

Every kernel run is counted by PyTorch's profiler (CUDA graphs' replays too), over the whole
program. The shapes are multiples of every block, so no lane is masked off. Lines printed:

    expect bytes KERNEL runs R load L store S atomic 0 async 0     (totals over R runs)
    expect bytes KERNEL runs R read L store S atomic 0             (load and async together)
    results pointwise SUM reduction SUM matmul SUM check ok
"""

import argparse
import collections
import re
import sys

import torch

N = 1 << 22
ROWS, COLS = 2048, 1024
M = K = NN = 1024


def pointwise(x, y):
    return torch.relu(x * y + x)


def reduction(x):
    return x.sum(dim=1)


def matmul(a, b):
    return a @ b


def template_blocks(name):
    """(BLOCK_M, BLOCK_N) of template kernel `name` in the modules Inductor generated and loaded
    (the output code, which has a `call`), or None."""
    from torch._inductor.codecache import PyCodeCache

    modules = getattr(PyCodeCache, "modules", None)
    if modules is None:
        modules = list(getattr(PyCodeCache, "cache", {}).values())
    for module in modules:
        if not hasattr(module, "call"):
            continue
        try:
            source = open(module.__file__).read()
        except OSError:
            continue
        start = source.find(f"'{name}'")
        if start < 0:
            continue
        text = source[start:]
        bm = re.search(r"BLOCK_M\s*:\s*tl\.constexpr\s*=\s*(\d+)", text)
        bn = re.search(r"BLOCK_N\s*:\s*tl\.constexpr\s*=\s*(\d+)", text)
        if bm and bn:
            return int(bm.group(1)), int(bn.group(1))
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=5, help="calls of each compiled function")
    args = ap.parse_args()
    import torch._inductor.config as config

    config.max_autotune_gemm_backends = "TRITON"
    g = torch.Generator(device="cuda").manual_seed(7)
    x = torch.rand(N, device="cuda", generator=g) - 0.5
    y = torch.rand(N, device="cuda", generator=g) - 0.5
    rows = torch.rand(ROWS, COLS, device="cuda", generator=g)
    a = (torch.rand(M, K, device="cuda", generator=g) - 0.5).half()
    b = (torch.rand(K, NN, device="cuda", generator=g) - 0.5).half()
    compiled_pointwise = torch.compile(pointwise)
    compiled_reduction = torch.compile(reduction)
    compiled_matmul = torch.compile(matmul, mode="max-autotune")

    activities = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(args.calls):
            p = compiled_pointwise(x, y)
            r = compiled_reduction(rows)
            mm = compiled_matmul(a, b).clone()
        torch.cuda.synchronize()
    runs = collections.Counter(e.name for e in prof.events() if e.device_type.name == "CUDA")

    ok = (torch.allclose(p, pointwise(x, y))
          and torch.allclose(r, reduction(rows), rtol=1e-4, atol=1e-3)
          and torch.allclose(mm.float(), matmul(a, b).float(), rtol=1e-2, atol=1e-2))
    print(f"results pointwise {p.double().sum().item():.6f} reduction "
          f"{r.double().sum().item():.6f} matmul {mm.double().sum().item():.6f} "
          f"check {'ok' if ok else 'WRONG'}")
    for name, n in sorted(runs.items()):
        print(f"profiled kernel {n} {name}")

    def kernel(prefix):
        names = [k for k in runs if k.startswith(prefix)]
        if len(names) != 1:
            print(f"note: kernels named {prefix}*: {names}", file=sys.stderr)
            return None, 0
        return names[0], runs[names[0]]

    name, n = kernel("triton_poi_")
    if name:
        print(f"expect bytes {name} runs {n} load {n * 8 * N} store {n * 4 * N} atomic 0 async 0")
    for prefix in ("triton_per_", "triton_red_"):
        name, n = kernel(prefix)
        if name:
            print(f"expect bytes {name} runs {n} load {n * 4 * ROWS * COLS} store {n * 4 * ROWS} "
                  f"atomic 0 async 0")
    name, n = kernel("triton_tem_")
    if name:
        blocks = template_blocks(name)
        if blocks is None:
            print(f"note: no BLOCK_M, BLOCK_N found for {name}", file=sys.stderr)
        else:
            bm, bn = blocks
            programs = (M // bm) * (NN // bn)
            read = programs * K * (bm + bn) * 2
            print(f"expect bytes {name} runs {n} read {n * read} store {n * 2 * M * NN} atomic 0 "
                  f"block_m {bm} block_n {bn}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
