"""A PyTorch eager training loop that is bound by kernel launches, for the zero-code benchmark
(bench_preload.py, the GPU bundle's `bench` set): an MLP of 8 linear layers of width 256 (ReLU
between them), batches of 64, mean squared error, plain SGD. Every step launches a few dozen
small kernels through the CUDA runtime and waits for none of them, so its rate is the host's
rate of launching, which is what egpu's interposed entry points can slow down.

    python3 bench_train.py [--steps 2000] [--warmup 100]

Prints one line, after `--warmup` steps that are not timed:

    train mlp steps 2000 seconds 3.812 steps_per_s 524.7 loss_first 0.341201 loss_last 0.298810

(the losses of the first and last timed step, read after the loop, so that the loop itself
never waits for the GPU).
"""

import argparse
import sys
import time

import torch


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=2000, help="timed steps")
    ap.add_argument("--warmup", type=int, default=100, help="steps before the timed ones")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()

    torch.manual_seed(0)
    layers = []
    for i in range(args.layers):
        layers.append(torch.nn.Linear(args.width, args.width))
        if i + 1 < args.layers:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.randn(args.batch, args.width, device="cuda")
    target = torch.randn(args.batch, args.width, device="cuda")

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(data), target)
        loss.backward()
        optimizer.step()
        return loss.detach()

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    first = last = step()
    for _ in range(args.steps - 1):
        last = step()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    print(f"train mlp steps {args.steps} seconds {seconds:.3f} "
          f"steps_per_s {args.steps / seconds:.1f} loss_first {first.item():.6f} "
          f"loss_last {last.item():.6f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
