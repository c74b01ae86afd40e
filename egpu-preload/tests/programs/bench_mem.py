"""`egpu mem`'s benchmark on the GPU machine: steps per second of saxpy over 2^28 floats
(mem_timing.cu's `bench` mode: the GPU benchmark's grid-stride saxpy, and `saxpy-flat`, one
element per thread) and of a torch.compile'd transformer block (mem_model.py,
mode="max-autotune"), bare and under `egpu mem run` with each set, as ratios to the bare runs of
the same round (rounds interleaved, the median ratio), each beside the share of GPU time spent
in the kernels egpu instruments (from a profiled step of the bare run and the recording's
`instrumented` flags). Also the model's first call (compile, autotuning, JIT) bare and under
`counts`, each from empty caches.

    python3 bench_mem.py --egpu bin/egpu --work DIR [--rounds 3]

Targets (issue 22): counts <= 1.1x, timing <= 1.02x, pages <= 3x on saxpy and <= 2x on the model.
"""

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# (label, sets and options, target by benchmark (None: any), environment). `timing-events`: the `timing`
# set with every launch also timed by CUDA events (`--kernel-times`, as EGPU_KERNEL_TIMES=1):
# its cost beside `timing`'s is the events'.
VARIANTS = (("counts", "counts", {None: 1.1}, {}),
            ("timing", "timing", {None: 1.02}, {}),
            ("timing-events", "timing", {}, {"EGPU_KERNEL_TIMES": "1"}),
            ("counts,timing", "counts,timing", {}, {}),
            ("pages", "pages", {"model": 2.0, None: 3.0}, {}),
            # Misses of the page cache run at the end of the access's straight line of code
            # (`EGPU_DEFER_MISSES=1`, `InjectOptions::defer_misses`).
            ("pages deferred", "pages", {"model": 2.0, None: 3.0}, {"EGPU_DEFER_MISSES": "1"}),
            # `egpu mem run`'s default sampling: one warp in 32, drawn again at each turn of
            # a loop (every warp records in about one turn in 32, no warp all along).
            ("timeline 1/32", "timeline", {None: 1.5}, {}),
            # One warp in 32 for life.
            ("timeline warps 1/32", "timeline --sample-by warps", {}, {}),
            # One block in 32, each of its warps recording: the warps a block's barriers hold
            # together are slowed together.
            ("timeline blocks 1/32", "timeline --sample-by blocks", {None: 1.5}, {}),
            # One line in 32 of each warp's (the sets' word, then `egpu mem run` options).
            ("timeline lines 1/32", "timeline --sample-by lines", {None: 1.5}, {}),
            # Hardly a warp recording: what every access's test and the set's registers cost,
            # without the recording warps' own work (a diagnostic, no target).
            ("timeline 1/1024", "timeline --sample 1024", {}, {}))


def value(text, key):
    for line in text.splitlines():
        w = line.split()
        if len(w) >= 2 and w[0] == key:
            return float(w[1])
    return None


def run(command, env, timeout=900):
    p = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
    if p.returncode != 0:
        sys.stdout.write("".join(f"  | {l}\n" for l in (p.stdout + p.stderr).splitlines()[-25:]))
        raise RuntimeError(f"{' '.join(command[:4])}...: exit {p.returncode}")
    return p.stdout


def instrumented_share(profiled, folder):
    """The share of the profiled GPU time in kernels the recordings in `folder` call
    instrumented."""
    inst = set()
    for path in glob.glob(os.path.join(folder, "*.egpumem")):
        for line in open(path):
            rec = json.loads(line)
            if rec.get("type") == "kernel" and rec.get("instrumented"):
                inst.add(rec["name"])
    total = sum(profiled.values())
    return sum(us for name, us in profiled.items() if name in inst) / total if total else 0.0


def registers(folder):
    """The instrumented kernels' registers in the recordings in `folder`, as the driver loaded
    them beside their cubin's count: `name R (M without probes)`, most grown first, at most 3."""
    grown = {}
    for path in glob.glob(os.path.join(folder, "*.egpumem")):
        for line in open(path):
            rec = json.loads(line)
            if rec.get("type") == "kernel" and rec.get("instrumented") and rec.get("registers"):
                grown[rec["name"]] = (rec["registers"], rec.get("machine_registers", 0),
                                      rec.get("local_bytes", 0))
    top = sorted(grown.items(), key=lambda kv: kv[1][1] - kv[1][0])[:3]
    return "; ".join(f"{n[:40]} {r}" + (f" ({m} without probes)" if m else "")
                     + (f", {l} B local" if l else "") for n, (r, m, l) in top)


def profiled_kernels(text):
    out = {}
    for line in text.splitlines():
        w = line.split(maxsplit=3)
        if len(w) == 4 and w[:2] == ["profiled", "kernel"]:
            out[w[3]] = out.get(w[3], 0.0) + float(w[2])
    return out


def bench(name, command, args, env, profiled):
    print(f"\n=== {name}: steps per second, bare and under egpu mem run (ratio: bare / egpu)",
          flush=True)
    ratios = {v: [] for v, *_ in VARIANTS}
    shares, regs = {}, {}
    for r in range(args.rounds):
        bare = value(run(command, env), "steps_per_second")
        line = f"  round {r + 1}: bare {bare:.2f}/s"
        for i, (v, sets, _, extra) in enumerate(VARIANTS):
            out_dir = os.path.join(args.work, f"rec-{name}-{i}")
            shutil.rmtree(out_dir, ignore_errors=True)
            sets, *options = sets.split()
            got = value(run([args.egpu, "mem", "run", "--sets", sets, *options, "--out", out_dir,
                             "--", *command], dict(env, **extra)), "steps_per_second")
            ratios[v].append(bare / got)
            shares[v] = instrumented_share(profiled, out_dir) if profiled else 1.0
            regs[v] = registers(out_dir)
            line += f", {v} {got:.2f}/s"
        print(line, flush=True)
    for v, _, targets, _ in VARIANTS:
        target = targets.get(name, targets.get(None))
        ratio = statistics.median(ratios[v])
        verdict = "" if target is None else (
            f" (target <= {target}: {'met' if ratio <= target else 'NOT met'})")
        print(f"  {name} {v}: {ratio:.3f}x, instrumented kernels' share of GPU time "
              f"{100 * shares[v]:.0f}%{verdict}")
        if regs.get(v):
            print(f"    registers per thread: {regs[v]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--egpu", required=True)
    ap.add_argument("--work", default="/tmp/egpu-bench-mem")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="", help="saxpy or model")
    ap.add_argument("--variants", default="",
                    help="only these variants (labels separated by ;, e.g. \"counts;counts,timing\")")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="set in every run, bare and instrumented (a diagnostic: EGPU_SPREAD=128)")
    ap.add_argument("--no-first-call", action="store_true",
                    help="skip the model's first call from empty caches (several minutes)")
    args = ap.parse_args()
    args.egpu = os.path.abspath(args.egpu)
    if args.variants:
        wanted = set(args.variants.split(";"))
        global VARIANTS
        VARIANTS = tuple(v for v in VARIANTS if v[0] in wanted)
    os.makedirs(args.work, exist_ok=True)
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    for kv in args.env:
        key, _, val = kv.partition("=")
        env[key] = val
    if args.env:
        print(f"environment: {' '.join(args.env)}")
    if args.only in ("", "saxpy"):
        nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
        exe = os.path.join(args.work, "mem_timing")
        subprocess.run([nvcc, "-O2", "-arch=sm_90", os.path.join(HERE, "mem_timing.cu"), "-o",
                        exe], check=True)
        bench("saxpy", [exe, "bench", "200"], args, env, None)
        bench("saxpy-flat", [exe, "bench", "200", "flat"], args, env, None)
    if args.only in ("", "model"):
        python = sys.executable or "python3"
        model = [python, os.path.join(HERE, "mem_model.py")]
        caches = {"TORCHINDUCTOR_CACHE_DIR": os.path.join(args.work, "inductor-cache"),
                  "TRITON_CACHE_DIR": os.path.join(args.work, "triton-cache")}
        menv = dict(env, **caches)
        first_calls = () if args.no_first_call else (
            ("bare", []), ("counts", [args.egpu, "mem", "run", "--sets", "counts", "--"]))
        if first_calls:
            print("\n=== model: the first call (compile, autotuning, JIT), from empty caches")
        for label, prefix in first_calls:
            for d in caches.values():
                shutil.rmtree(d, ignore_errors=True)
            out = run([*prefix, *model, "--steps", "3"], menv, timeout=1800)
            print(f"  model {label}: first call {value(out, 'compile_seconds'):.1f} s", flush=True)
        profiled = profiled_kernels(run([*model, "--steps", "3", "--profile"], menv))
        bench("model", [*model, "--steps", "30"], args, menv, profiled)
    return 0


if __name__ == "__main__":
    sys.exit(main())
