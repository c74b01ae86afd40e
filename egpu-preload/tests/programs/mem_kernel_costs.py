"""Which kernels a set of `egpu mem` makes slower, and by how much: one profiled step of the
torch.compile'd transformer block (mem_model.py) bare and under `egpu mem run --sets SET`, GPU
time per kernel from PyTorch's profiler, the kernels that lost the most time first. With
`--modules DIR`, the first instrumented run also writes every module's PTX and its instrumented form
there (EGPU_LOG=modules), so the costly kernels can be read.

    python3 mem_kernel_costs.py --egpu bin/egpu [--sets "counts;pages;timeline --sample 1024"]
        [--top 15] [--modules DIR]

A run's KEY=VALUE words are its environment: --sets "pages;pages EGPU_DEFER_MISSES=1".
"""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def profile(command, env):
    p = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    if p.returncode != 0:
        sys.stdout.write(p.stdout[-3000:] + p.stderr[-3000:])
        raise RuntimeError(f"{command[0]}: exit {p.returncode}")
    times = {}
    for line in p.stdout.splitlines():
        w = line.split(maxsplit=3)
        if len(w) == 4 and w[:2] == ["profiled", "kernel"]:
            times[w[3]] = times.get(w[3], 0.0) + float(w[2])
    if not times:
        raise RuntimeError("the profiled step printed no kernels")
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--egpu", required=True)
    ap.add_argument("--sets", default="counts", help="sets, runs separated by ;")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--work", default="/tmp/egpu-bench-mem",
                    help="caches and recordings (bench_mem.py's default: their caches shared)")
    ap.add_argument("--modules", default="")
    args = ap.parse_args()
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(args.work, "inductor-cache")
    env["TRITON_CACHE_DIR"] = os.path.join(args.work, "triton-cache")
    model = [sys.executable or "python3", os.path.join(HERE, "mem_model.py"), "--steps", "3",
             "--profile"]
    bare = profile(model, env)
    probed_env = dict(env)
    if args.modules:
        os.makedirs(args.modules, exist_ok=True)
        probed_env.update(EGPU_LOG="modules", TMPDIR=os.path.abspath(args.modules))
    total_bare = sum(bare.values())
    for run in args.sets.split(";"):
        # A run's sets, then `egpu mem run` options and KEY=VALUE environment:
        # "timeline --sample 1024", "pages EGPU_DEFER_MISSES=1".
        sets, *words = run.split()
        options = [w for w in words if "=" not in w or w.startswith("-")]
        extra = dict(w.split("=", 1) for w in words if "=" in w and not w.startswith("-"))
        probed = profile([os.path.abspath(args.egpu), "mem", "run", "--sets", sets, *options,
                          "--out", os.path.join(args.work, f"rec-{sets}"), "--", *model],
                         dict(probed_env, **extra))
        total = sum(probed.values())
        print(f"\nkernel_costs {run}: GPU time bare {total_bare:.0f} us, "
              f"under egpu {total:.0f} us ({total / total_bare:.2f}x)")
        rows = sorted(bare, key=lambda k: probed.get(k, 0.0) - bare[k], reverse=True)
        print(f"{'bare us':>9} {'egpu us':>9} {'ratio':>6} {'lost us':>8}  kernel")
        for name in rows[:args.top]:
            b, p = bare[name], probed.get(name, 0.0)
            print(f"{b:9.1f} {p:9.1f} {p / b if b else 0:6.2f} {p - b:8.1f}  {name[:90]}",
                  flush=True)
        probed_env.pop("EGPU_LOG", None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
