"""Which weights and activations of a small transformer's inference are hot: `egpu mem run
--sets allocs` over a decoder (random weights, nothing downloaded) compiled by torch.compile,
its matrix products Triton's (so that egpu instruments every kernel that touches the weights),
and each tensor allocated by itself (PYTORCH_NO_CUDA_MEMORY_CACHING=1: PyTorch's caching
allocator would otherwise hand out segments that hold many tensors, and the attribution would be
to segments).

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 python3 examples/llm_memory.py
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 egpu mem run --sets allocs --out rec -- \\
        python3 examples/llm_memory.py --tensors rec/tensors.json
    python3 examples/llm_memory.py --report rec

The first, plain run fills Inductor's and Triton's caches (its autotuning included), so that the
run under egpu compiles nothing: autotuning instrumented kernels takes minutes. On the H200 the
plain run took 67 s from empty caches and 22 s from full ones, the run under egpu 178 s (not
yet broken down: the driver's JIT of 21 instrumented modules, and the allocation table copied to
the GPU at each of the 314 allocations, are the candidates).

The run under egpu writes the weights' addresses and sizes (`--tensors`); `--report` joins them with
the recording's allocations and prints, per weight and for the other allocations (activations,
Inductor's buffers, the KV cache), the bytes the kernels read and wrote, hottest first, and the
weights no kernel read (cold).
"""

import argparse
import glob
import json
import os
import sys

LAYERS, D, HEADS, VOCAB, PROMPT, NEW = 4, 512, 8, 8192, 256, 16


def build():
    import torch
    import torch._inductor.config as inductor

    # Matrix products as Triton templates: kernels with PTX, which egpu instruments.
    inductor.max_autotune = True
    inductor.max_autotune_gemm_backends = "TRITON"

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1 = torch.nn.LayerNorm(D)
            self.qkv = torch.nn.Linear(D, 3 * D)
            self.out = torch.nn.Linear(D, D)
            self.norm2 = torch.nn.LayerNorm(D)
            self.up = torch.nn.Linear(D, 4 * D)
            self.down = torch.nn.Linear(4 * D, D)

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = self.qkv(self.norm1(x)).split(D, dim=2)
            h = lambda t: t.view(b, s, HEADS, D // HEADS).transpose(1, 2)  # noqa: E731
            q, k, v = h(q), h(k), h(v)
            # Attention written out (not the fused ATen kernel, which has no PTX).
            scores = (q @ k.transpose(2, 3)) / (D // HEADS) ** 0.5
            mask = torch.ones(s, s, device=x.device, dtype=torch.bool).triu(1)
            a = scores.masked_fill(mask, float("-inf")).softmax(-1) @ v
            x = x + self.out(a.transpose(1, 2).reshape(b, s, D))
            return x + self.down(torch.nn.functional.gelu(self.up(self.norm2(x))))

    class Decoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(VOCAB, D)
            self.layers = torch.nn.ModuleList(Layer() for _ in range(LAYERS))
            self.norm = torch.nn.LayerNorm(D)
            self.head = torch.nn.Linear(D, VOCAB, bias=False)

        def forward(self, tokens):
            x = self.embed(tokens)
            for layer in self.layers:
                x = layer(x)
            return self.head(self.norm(x[:, -1]))

    torch.manual_seed(0)
    return Decoder().cuda().half().eval()


def run(tensors_path):
    import torch

    model = build()
    if tensors_path:
        # Written before anything runs, so that it exists even if the run fails.
        weights = [{"name": n, "addr": p.data_ptr(), "bytes": p.numel() * p.element_size()}
                   for n, p in model.named_parameters()]
        with open(tensors_path, "w") as f:
            json.dump(weights, f)
    step = torch.compile(model)
    tokens = torch.randint(0, VOCAB, (1, PROMPT), device="cuda")
    with torch.no_grad():
        new = []
        for _ in range(NEW):  # greedy decoding over a window of PROMPT tokens (one shape)
            nxt = step(tokens).argmax(-1, keepdim=True)
            tokens = torch.cat([tokens[:, 1:], nxt], dim=1)
            new.append(int(nxt))
    torch.cuda.synchronize()
    print("results", new)


def report(folder, rows_shown=40):
    tensors = json.load(open(os.path.join(folder, "tensors.json")))
    lines = []
    for path in glob.glob(os.path.join(folder, "*.egpumem")):
        lines += [json.loads(line) for line in open(path) if line.strip()]
    allocations = {r["id"]: r for r in lines if r.get("type") == "allocation"}
    moved = {}
    for r in lines:
        if r.get("type") == "alloc_traffic":
            m = moved.setdefault(r["alloc"], [0, 0])
            m[0] += r.get("loaded", 0)
            m[1] += r.get("stored", 0) + r.get("atomic", 0)
    if not allocations:
        sys.exit(f"{folder}: no allocations recorded (was it run with --sets allocs?)")
    by_addr = {}
    for a in allocations.values():
        by_addr.setdefault(a["addr"], []).append(a)
    named = {}
    for t in tensors:
        # The weight's is the latest allocation at its address: it lives to the end, so no
        # later one reuses the address (earlier ones may have: `.half()` frees the fp32 copies).
        made = [a for a in by_addr.get(t["addr"], []) if a["bytes"] >= t["bytes"]]
        if made:
            named[max(made, key=lambda a: a["id"])["id"]] = t["name"]
    rows = []
    for i, a in allocations.items():
        read, written = moved.get(i, [0, 0])
        rows.append((read + written, read, written, a["bytes"], named.get(i), i))
    rows.sort(key=lambda r: (r[0], r[1], r[3], -r[5]), reverse=True)
    mb = lambda n: f"{n / 1e6:10.2f} MB"  # noqa: E731
    print(f"{len(allocations)} allocations, {len(named)} of them weights "
          f"(of {len(tensors)} parameters)")
    print(f"{'allocation':<34} {'size':>13} {'read':>13} {'written':>13}  read / size")
    reached = [r for r in rows if r[0] > 0]
    for total, read, written, size, name, i in reached[:rows_shown]:
        what = name or f"#{i} (activation or buffer)"
        print(f"{what[:34]:<34} {mb(size)} {mb(read)} {mb(written)}  {read / max(size, 1):8.1f}x")
    rest = reached[rows_shown:]
    if rest:
        weights = sum(1 for r in rest if r[4])
        read, written = sum(r[1] for r in rest) / 1e6, sum(r[2] for r in rest) / 1e6
        print(f"... {len(rest)} more reached ({weights} weights), "
              f"{read:.2f} MB read, {written:.2f} MB written")
    cold = [(name, size) for total, _, _, size, name, _ in rows if total == 0 and name]
    print(f"cold weights (no kernel read them): {len(cold)}"
          + "".join(f"\n  {n} ({size} B)" for n, size in cold[:20]))
    others = sum(1 for total, *_, name, _ in rows if total == 0 and not name)
    print(f"other allocations no kernel reached: {others}")
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tensors", help="write the weights' addresses and sizes to this file")
    ap.add_argument("--report", metavar="DIR", help="join a recording folder with its tensors")
    ap.add_argument("--rows", type=int, default=40, help="the report's hottest allocations shown")
    args = ap.parse_args()
    if args.report:
        sys.exit(report(args.report, args.rows))
    run(args.tensors)
