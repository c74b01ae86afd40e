"""A PyTorch eager training loop that is bound by kernel launches, for the zero-code benchmark
(bench_preload.py, the GPU bundle's `bench` set): an MLP of 8 linear layers of width 256 (ReLU
between them), batches of 64, mean squared error, plain SGD. Every step launches a few dozen
small kernels through the CUDA runtime and waits for none of them, so its rate is the host's
rate of launching, which is what egpu's interposed entry points can slow down.

    python3 bench_train.py [--steps 600] [--warmup 200] [--block 50]
    egpu run -- python3 bench_train.py --ab 20 [--block 50]
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

With `--ab QUADS` (under egpu's preloaded library, whose `egpu_preload_probes` it calls through
ctypes) the timed steps run in blocks with egpu's probes running and paused, in the order
running, paused, paused, running, QUADS times, so that what egpu's host probes cost is measured
in one process, block against neighbouring block, free of what differs between processes. Prints

    ab mlp quads 20 block 50 on_median_steps_per_s 540.1 paused_median_steps_per_s 541.0
        ratio_median 0.9983 ratios 0.9950,0.9971,...

a quad's rate with the probes running over its rate with them paused (each the steps of its two
blocks over their seconds), the ratios sorted.
"""

import argparse
import ctypes
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


def ab_blocks(step, quads, block, sync, toggle, clock=time.perf_counter):
    """Blocks of `block` steps with egpu's probes running and paused (`toggle(True)`,
    `toggle(False)`), in the order running, paused, paused, running, `quads` times:
    [(rate running, rate paused)] per quad, each its two blocks' steps over their seconds. The
    probes run again at the end."""
    out = []
    for _ in range(quads):
        seconds = {True: 0.0, False: 0.0}
        for on in (True, False, False, True):
            toggle(on)
            sync()
            t0 = clock()
            for _ in range(block):
                step()
            sync()
            seconds[on] += clock() - t0
        out.append(tuple(2 * block / seconds[on] if seconds[on] > 0 else float("inf")
                         for on in (True, False)))
    toggle(True)
    return out


def ab_line(block, pairs):
    """The `--ab` line (see above)."""
    ratios = sorted(on / off for on, off in pairs)
    return (f"ab mlp quads {len(pairs)} block {block} "
            f"on_median_steps_per_s {statistics.median(on for on, _ in pairs):.1f} "
            f"paused_median_steps_per_s {statistics.median(off for _, off in pairs):.1f} "
            f"ratio_median {statistics.median(ratios):.4f} "
            f"ratios {','.join(f'{r:.4f}' for r in ratios)}")


def egpu_toggle():
    """A function that runs (True) or pauses (False) the probes of egpu's preloaded library in
    this process, or None when the library is not there."""
    try:
        f = ctypes.CDLL(None).egpu_preload_probes
    except (OSError, AttributeError):
        return None
    f.argtypes, f.restype = [ctypes.c_int], ctypes.c_int
    if f(1) < 0:
        return None
    return lambda on: f(1 if on else 0)


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
    # A/B: the probes cost a quarter more time per step while they run.
    now[0], state, toggles = 0.0, [True], []

    def ab_step():
        now[0] += 0.0025 if state[0] else 0.002

    def toggle(on):
        state[0] = on
        toggles.append(on)

    pairs = ab_blocks(ab_step, 3, 10, lambda: None, toggle, clock=lambda: now[0])
    assert toggles == [True, False, False, True] * 3 + [True], toggles
    assert [(round(a), round(b)) for a, b in pairs] == [(400, 500)] * 3, pairs
    line = ab_line(10, pairs)
    assert line.startswith("ab mlp quads 3 block 10 on_median_steps_per_s 400.0 "), line
    assert "ratio_median 0.8000 ratios 0.8000,0.8000,0.8000" in line, line
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
    ap.add_argument("--ab", type=int, metavar="QUADS",
                    help="blocks with egpu's probes running and paused, in QUADS quads")
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

    toggle = None
    if args.ab is not None:
        toggle = egpu_toggle()
        if toggle is None or args.ab < 1:
            print("--ab needs egpu's preloaded library (egpu run) and at least 1 quad",
                  file=sys.stderr)
            return 2
    for _ in range(args.warmup):
        step()
    if toggle is not None:
        print(ab_line(args.block, ab_blocks(step, args.ab, args.block, torch.cuda.synchronize,
                                            toggle)), flush=True)
        return 0
    seconds, rates, first, last = timed_blocks(step, args.steps, args.block,
                                               torch.cuda.synchronize)
    print(result_line(args.steps, seconds, args.block, rates, first.item(), last.item()),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
