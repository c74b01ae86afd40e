"""A transformer block compiled by torch.compile (mode="max-autotune"), random weights built here,
nothing downloaded: the model workload of `egpu mem`'s benchmark (bench_mem.py).

    python3 mem_model.py [--steps 30] [--profile]

It prints `compile_seconds S` (the first call: tracing, Inductor, autotuning, Triton's compile
and the driver's JIT), `steps_per_second S` (forward passes, wall clock, synchronised at the
end), `results SUM` (the output's checksum) and, with --profile, one more step under PyTorch's
profiler: `profiled kernel MICROSECONDS NAME` per kernel, which gives the share of GPU time in
the kernels egpu instruments.
"""

import argparse
import collections
import sys
import time

import torch
import torch.nn.functional as F

D, HEADS, SEQ, BATCH = 1024, 16, 512, 8


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = torch.nn.LayerNorm(D)
        self.qkv = torch.nn.Linear(D, 3 * D)
        self.proj = torch.nn.Linear(D, D)
        self.norm2 = torch.nn.LayerNorm(D)
        self.up = torch.nn.Linear(D, 4 * D)
        self.down = torch.nn.Linear(4 * D, D)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(D, dim=2)
        heads = lambda t: t.view(b, s, HEADS, D // HEADS).transpose(1, 2)  # noqa: E731
        a = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, D))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(11)
    model = Block().cuda().half().eval()
    x = torch.randn(BATCH, SEQ, D, device="cuda", dtype=torch.half)
    compiled = torch.compile(model, mode="max-autotune")
    with torch.no_grad():
        start = time.perf_counter()
        out = compiled(x)
        torch.cuda.synchronize()
        print(f"compile_seconds {time.perf_counter() - start:.2f}")
        for _ in range(3):
            compiled(x)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(args.steps):
            out = compiled(x)
        torch.cuda.synchronize()
        print(f"steps_per_second {args.steps / (time.perf_counter() - start):.3f}")
        print(f"results {out.double().sum().item():.4f}")
        if args.profile:
            activities = [torch.profiler.ProfilerActivity.CUDA]
            with torch.profiler.profile(activities=activities) as prof:
                compiled(x)
                torch.cuda.synchronize()
            times = collections.Counter()
            for e in prof.events():
                if e.device_type.name == "CUDA":
                    times[e.name] += e.device_time_total
            for name, us in times.most_common():
                print(f"profiled kernel {us:.1f} {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
