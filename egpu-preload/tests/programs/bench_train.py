"""A PyTorch eager training loop that is bound by kernel launches, for the zero-code benchmark
(bench_preload.py, the GPU bundle's `bench` set): an MLP of 8 linear layers of width 256 (ReLU
between them), batches of 64, mean squared error, plain SGD. Every step launches a few dozen
small kernels through the CUDA runtime and waits for none of them, so its rate is the host's
rate of launching, which is what egpu's interposed entry points can slow down.

    python3 bench_train.py [--steps 600] [--warmup 200] [--block 50]
    python3 bench_train.py --self-test     (the block timing against a made-up clock; no GPU)

After `--warmup` steps that are not timed, the `--steps` timed ones run in blocks of `--block`
steps, with `torch.cuda.synchronize()` at the end of each block only (the loop never waits for
the GPU within a block). Prints one line (on one line):

    train mlp steps 600 seconds 1.012 steps_per_s 592.9 block 50 blocks 12
        block_median_steps_per_s 601.3 block_min_steps_per_s 540.2
        block_max_steps_per_s 612.0 loss_first 0.341201 loss_last 0.298810

`steps_per_s` is the whole timed run's (steps over seconds); `block_median_steps_per_s` the
median of the full blocks' rates, the steady-state rate that a stall of one block (a page
fault, another process's burst, a collection) does not move; the harness compares that one.
The losses are those of the first and last timed step, read after the loop.
"""

import argparse
import statistics
import sys
import time


def timed_blocks(step, steps, block, sync, clock=time.perf_counter):
    """Runs `step()` `steps` times in blocks of `block`, calling `sync()` at each block's end:
    (seconds in all, [steps per second of each full block], first step's result, last's).
    A last block shorter than `block` counts in the seconds but not among the blocks' rates
    (unless it is the only one)."""
    sync()
    start = t0 = clock()
    first = last = None
    rates, partial, done = [], None, 0
    while done < steps:
        n = min(block, steps - done)
        for _ in range(n):
            last = step()
            if first is None:
                first = last
        sync()
        t1 = clock()
        rate = n / (t1 - t0) if t1 > t0 else float("inf")
        if n == block:
            rates.append(rate)
        else:
            partial = rate
        t0, done = t1, done + n
    if not rates and partial is not None:
        rates.append(partial)
    return t0 - start, rates, first, last


def result_line(steps, seconds, block, rates, loss_first, loss_last):
    """The program's one line of output (see above)."""
    return (f"train mlp steps {steps} seconds {seconds:.3f} steps_per_s {steps / seconds:.1f} "
            f"block {block} blocks {len(rates)} "
            f"block_median_steps_per_s {statistics.median(rates):.1f} "
            f"block_min_steps_per_s {min(rates):.1f} block_max_steps_per_s {max(rates):.1f} "
            f"loss_first {loss_first:.6f} loss_last {loss_last:.6f}")


def self_test():
    """timed_blocks and result_line against a made-up clock; no GPU."""
    now = [0.0]
    syncs = []

    def step():
        now[0] += 0.002 if len(syncs) != 3 else 0.004  # the third block stalls
        return len(syncs)

    seconds, rates, first, last = timed_blocks(step, 230, 50, lambda: syncs.append(now[0]),
                                               clock=lambda: now[0])
    assert len(syncs) == 6 and len(rates) == 4, (syncs, rates)  # 4 full blocks and 30 steps
    assert abs(seconds - (180 * 0.002 + 50 * 0.004)) < 1e-9, seconds
    assert [round(r) for r in rates] == [500, 500, 250, 500], rates
    assert (first, last) == (1, 5)
    line = result_line(230, seconds, 50, rates, 0.5, 0.25)
    assert "steps_per_s 410.7 block 50 blocks 4 block_median_steps_per_s 500.0" in line, line
    assert "block_min_steps_per_s 250.0" in line and line.endswith("loss_last 0.250000")
    _, rates, _, _ = timed_blocks(lambda: None, 10, 50, lambda: None,
                                  clock=iter([0.0, 0.5]).__next__)
    assert rates == [20.0], rates  # fewer steps than a block: the partial one alone
    print("bench_train self-test: ok")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=600, help="timed steps")
    ap.add_argument("--warmup", type=int, default=200, help="steps before the timed ones")
    ap.add_argument("--block", type=int, default=50, help="steps between synchronisations")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--self-test", action="store_true", help="check the timing; no GPU")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if args.steps < 1 or args.block < 1:
        ap.error("--steps and --block must be at least 1")

    import torch

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
    seconds, rates, first, last = timed_blocks(step, args.steps, args.block,
                                               torch.cuda.synchronize)
    print(result_line(args.steps, seconds, args.block, rates, first.item(), last.item()),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
