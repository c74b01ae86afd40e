"""A few training steps of a small model, under PyTorch's profiler, for egpu's preloaded library.

Everything this process does on the GPU happens inside the profiler, so the profiler's count of
kernels and copies is what the library must have seen. Prints `expect KEY VALUE` lines
(from the profiler) for egpu-preload/tests/programs/check.py.
"""

import collections
import os
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(256, 512),
            torch.nn.ReLU(),
            torch.nn.Linear(512, 10),
        ).cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        data = torch.randn(64, 256).cuda()
        target = torch.randint(0, 10, (64,)).cuda()
        losses = []
        for _ in range(steps):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(data), target)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        torch.cuda.synchronize()
    if not losses[-1] < losses[0]:
        print(f"loss did not fall: {losses}", file=sys.stderr)
        return 1

    kinds = collections.Counter()
    names = collections.Counter()
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        name = event.name
        if name.startswith("Memcpy HtoD"):
            kinds["copies htod"] += 1
        elif name.startswith("Memcpy DtoH"):
            kinds["copies dtoh"] += 1
        elif name.startswith("Memcpy DtoD"):
            kinds["copies dtod"] += 1
        elif name.startswith("Memcpy"):
            kinds["copies other"] += 1
        elif name.startswith("Memset"):
            kinds["sets"] += 1
        else:
            kinds["launches"] += 1
            names[name] += 1
    print(f"steps {steps}, losses {losses[0]:.4f} -> {losses[-1]:.4f}")
    for key in ["launches", "copies htod", "copies dtoh", "copies dtod"]:
        print(f"expect {key} {kinds[key]}")
    # Not compared: the profiler sees memsets that no PyTorch operator issued and that never
    # reach a public entry point of the runtime or the driver (a library with the runtime linked
    # in, as the static CUDA C program's memsets are not seen either).
    print(f"profiled sets {kinds['sets']} (not compared)")
    if kinds["copies other"]:
        print(f"expect copies other {kinds['copies other']}")
    for name, n in sorted(names.items()):
        print(f"profiled kernel {n} {name[:100]}")
    print("ok", flush=True)
    hold()
    return 0


def hold():
    """Under check.py's metrics check: waits (a minute at most) until the file EGPU_CHECK_HOLD
    names exists, so that the metrics endpoint is scraped while this process is still alive."""
    path = os.environ.get("EGPU_CHECK_HOLD")
    if not path:
        return
    print("holding", flush=True)
    deadline = time.time() + 60
    while not os.path.exists(path) and time.time() < deadline:
        time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main())
