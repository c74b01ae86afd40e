"""The zero-code benchmark (issue 17): unmodified programs, bare and under `egpu run`, with the
probe packs of examples/kernel_bytes.rs and examples/empty_probes.rs. Run on the GPU machine by
target/gpu-bundle/run.sh for the `bench` set (see scripts/gpu-bundle); it needs PyTorch and
Triton there.

    python3 bench_preload.py --egpu PATH/TO/egpu --pack PATH/TO/libkernel_bytes.so --work DIR
        [--empty-pack PATH/TO/libempty_probes.so (default: beside --pack; '' for none)]
        [--rounds 3] [--train-rounds 12] [--train-steps 600] [--train-block 50]
        [--train-warmup 200] [--budget 540] [--skip-kernels] [--skip-latency] [--skip-train]
    python3 bench_preload.py --self-test [--pack PATH/TO/libkernel_bytes.so]
    python3 bench_preload.py --fake --work DIR [--train-rounds 4 ...]   (no GPU, see below)

1. Kernels: bench_kernels.py (six Triton kernels, a cp.async and a TMA matmul among them, and a
   saxpy of 2^28 floats, 20 timed launches each after a warm-up) bare, under `egpu run --probes
   EMPTY_PACK` (probes at every global memory instruction that do nothing: what the
   instrumentation costs by itself) and under `egpu run --probes PACK --summary ...`, in
   interleaved rounds (the order rotated each round). Prints a table of the median time per
   launch of each, the probed ones' ratios to bare and their targets (empty probes <= 1.05x for
   the matmuls, kernel_bytes <= 1.3x; saxpy on a line of its own); whether every run computed
   the same results (float64 sums and hashes of the outputs, and each run's own check against
   PyTorch); and the counts of each map of the kernel_bytes summaries (`map NAME KERNEL VALUE`:
   threads, bytes loaded and stored, cp.async bytes, TMA copies, atomics) against the expected
   ones, launches x the per-launch figures the program prints, marked exact or not.
2. Latency: bench_kernels.py --latency under egpu: from a kernel's end to its count showing in
   the shared-memory map, after `torch.cuda.synchronize()` and after an event's `query()`.
3. Training: bench_train.py (an eager PyTorch MLP, launch-bound) bare, under `egpu run` and
   under `egpu run --metrics`, one process each per round, in rounds that rotate which variant
   goes first (bare, egpu run, --metrics; then egpu run, --metrics, bare; ...), so that a drift
   of the machine's speed reaches every variant alike. A run's rate is the median of its blocks
   of 50 steps (bench_train.py). For each variant beside bare, the ratios of its rate to bare's
   in the same round (paired): their median against the target (>= 0.99x, PASS or MISS), a 95%
   interval of that median from order statistics (distribution-free: the k-th smallest and the
   k-th largest ratio, k from the binomial distribution; its exact coverage is printed), and
   whether the interval lies above the target (clear pass), below it (clear miss) or across it
   (within noise). A round starts only when the budget left fits it (the longest round so far,
   and a margin), so that the budget ends rounds whole. Before the rounds, bench_train.py --ab
   under `egpu run` and `egpu run --metrics`: in one process, blocks with egpu's probes running
   against neighbouring blocks with them paused, the paired ratios' median and its interval.

Exits 1 when a count is not exact, results differ, a check fails or a run fails, after
printing every table; the timing targets print PASS or MISS and never fail the run. The tables
are also written to RESULTS/bench-preload.md and the raw figures to RESULTS/bench-preload.json
(RESULTS: $OUT when set, else --work).

`--fake` checks the harness without a GPU, PyTorch or egpu: it writes into --work a stand-in
for `torch` (each step spins for about 1/600 s, with a factor per process, a slow drift and
rare stalls) and for `egpu run` (runs the command; under `--metrics` the steps are 3% slower),
and runs the training section alone with them.
"""

import argparse
import collections
import ctypes
import glob
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the working tree
import bench_kernels  # noqa: E402 (the map reader and the kernel ids, shared)
import bench_train  # noqa: E402 (its self-test)
from bench_fake import setup_fake  # noqa: E402
from bench_stats import (TRAIN_TARGET, judge, median, median_interval,  # noqa: E402
                         rotated, run_rate, train_self_test, train_table)

# Targets of a kernel's time per launch over bare's: under kernel_bytes, and under the empty
# probes for the matmuls (the kernels with the most global memory instructions per byte).
KERNEL_TARGET, EMPTY_TARGET = 1.3, 1.05
MATMULS = ("matmul", "matmul_tma")
# The kernel rounds' variants, and how the tables name them; "egpu" runs the kernel_bytes pack.
MODES = {"bare": "bare", "empty": "empty probes", "egpu": "kernel_bytes"}
# The maps of the kernel_bytes pack, and which per-launch figure of bench_kernels.py each one
# counts, times the launches.
PER_LAUNCH = {"ENTERED": "threads_per_launch", "EXITED": "threads_per_launch",
              "LOADED": "bytes_loaded_per_launch", "STORED": "bytes_stored_per_launch",
              "ASYNC": "bytes_async_per_launch", "TENSOR_LOADS": "tensor_loads_per_launch",
              "TENSOR_STORES": "tensor_stores_per_launch",
              "TENSOR_LOADED": "tensor_bytes_loaded_per_launch",
              "TENSOR_STORED": "tensor_bytes_stored_per_launch",
              "ATOMIC": "atomic_bytes_per_launch", "ATOMICS": "atomics_per_launch",
              "LAUNCHED": "threads_per_launch"}
MAPS = tuple(PER_LAUNCH)
# The probes each pack exports.
PROBES = {"empty": 3, "egpu": 6}
# Seconds kept for the latency and training sections when the kernel rounds run long (a
# training run takes 8 to 12 s on the H200, most of it PyTorch's start: 36 runs for 12 rounds).
LATENCY_RESERVE, TRAIN_RESERVE = 45, 300


# --- parsing ------------------------------------------------------------------------------


def parse_kernel_lines(text):
    """bench_kernels.py's `kernel NAME key value ...` lines: {NAME: {key: value string}}."""
    kernels = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == "kernel" and len(words) % 2 == 0:
            kernels[words[1]] = dict(zip(words[2::2], words[3::2]))
    return kernels


def parse_prefixed(text, first):
    """Lines `FIRST WORD key value ...`: {WORD: {key: value}} (e.g. latency, train)."""
    out = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == first:
            out[words[1]] = dict(zip(words[2::2], words[3::2]))
    return out


def parse_map_lines(text, into=None):
    """`map NAME KEY VALUE` lines of a summary (egpu-host/src/builtin/report.rs): a Counter
    {(NAME, KEY): VALUE}. KEY is a kernel's name where the process knew it, else a number; a
    line of three words (an id with no name, printed as an empty name) counts under KEY ''.
    Lines of maps that are not shown (`... not shown)`) are skipped."""
    counts = into if into is not None else collections.Counter()
    for line in text.splitlines():
        words = line.split()
        if len(words) < 3 or words[0] != "map" or not words[-1].isdigit():
            continue
        counts[(words[1], " ".join(words[2:-1]))] += int(words[-1])
    return counts


def read_summaries(prefix):
    """The summed map counts of every process's summary (`PREFIX.<pid>`), and how many."""
    counts = collections.Counter()
    paths = sorted(glob.glob(prefix + ".*"))
    for path in paths:
        with open(path) as f:
            parse_map_lines(f.read(), counts)
    return counts, len(paths)


def observed(counts, map_name, kernel, fields):
    """A kernel's count in a map, whether the summary keyed it by name or by id (decimal)."""
    name = fields.get("name", kernel)
    kid = bench_kernels.kernel_id(name)
    return sum(counts.get((map_name, k), 0) for k in {name, str(kid)})


def expected_counts(kernel_fields):
    """{MAP: launches x per-launch figure, or None where the program says `-`}."""
    launches = int(kernel_fields["launches"])
    out = {}
    for m in MAPS:
        per = kernel_fields.get(PER_LAUNCH[m], "-")
        out[m] = None if per == "-" else launches * int(per)
    # LOADED counts the reads other than cp.async's, which go to ASYNC alone.
    if out.get("LOADED") is not None and out.get("ASYNC") is not None:
        out["LOADED"] -= out["ASYNC"]
    return out


def compare_counts(kernels, counts):
    """[(kernel, map, expected or None, observed)] for every kernel and map."""
    return [(k, m, want, observed(counts, m, k, f))
            for k, f in kernels.items() for m, want in expected_counts(f).items()]


# --- running ------------------------------------------------------------------------------


class Runner:
    """Runs commands within an overall time budget, bare or under egpu."""

    def __init__(self, egpu, pack, work, budget, timeout):
        self.egpu, self.pack, self.work = egpu, pack, work
        self.deadline = time.monotonic() + budget
        self.timeout = timeout
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("LD_PRELOAD", "EGPU_PROBES", "EGPU_SUMMARY")}

    def left(self):
        return self.deadline - time.monotonic()

    def run(self, command, label, reserve=0.0):
        """(exit code, stdout, stderr, seconds); 124 on a timeout, None when out of budget
        (what is left, less `reserve` seconds kept for what comes after)."""
        timeout = min(self.timeout, self.left() - reserve)
        if timeout < 5:
            print(f"  {label}: skipped, the budget is spent", flush=True)
            return None
        start = time.monotonic()
        # In a process group of its own, so that a timeout ends the program under `egpu run`
        # too, not only egpu (it would go on using the GPU).
        p = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=self.env, start_new_session=True)
        try:
            out, err = p.communicate(timeout=timeout)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            rc = 124
        seconds = time.monotonic() - start
        status = "ok" if rc == 0 else ("TIMEOUT" if rc == 124 else f"exit {rc}")
        print(f"  {label}: {status}, {seconds:.1f} s", flush=True)
        if rc != 0:
            tail = (out + err).strip().splitlines()[-25:]
            print("\n".join(f"    | {line}" for line in tail))
        return rc, out, err, seconds

    def wrapped(self, command, summary=None, probes=True, metrics=False, pack=None):
        """`egpu run [--probes PACK] [--summary PREFIX] [--metrics 127.0.0.1:0] -- command`
        (PACK: `pack`, else the kernel_bytes pack); the old summaries of PREFIX removed first."""
        w = [self.egpu, "run"]
        if probes:
            w += ["--probes", pack or self.pack]
        if summary:
            for old in glob.glob(summary + ".*"):
                os.remove(old)
            w += ["--summary", summary]
        if metrics:
            w += ["--metrics", "127.0.0.1:0"]
        return w + ["--"] + command


def f4(x):
    return "-" if x is None else f"{x:.4f}"


def probes_loaded(stderr):
    """How many probes egpu said it loaded from the pack (`egpu: N probes from PACK`), or 0."""
    lines = [l for l in stderr.splitlines() if " probes from " in l]
    return int(lines[0].split()[1]) if lines else 0


def judged(ratio, target):
    """The ratio's cell and its mark against `target` (None: no target, no mark)."""
    if ratio is None:
        return "-", "-" if target else ""
    mark = "" if target is None else ("PASS" if ratio <= target else "MISS")
    return f"{ratio:.2f}x", mark


def time_table(times, raw):
    """The time table's lines: per kernel (saxpy last), the median time per launch bare, under
    the empty probes and under kernel_bytes, each probed one's ratio to bare and its target."""
    lines = ["", "### Time per launch (median of the rounds)", "",
             "| kernel | bare ms | empty probes ms | ratio | target | | kernel_bytes ms | "
             "ratio | target | |", "|---|---|---|---|---|---|---|---|---|---|"]
    names = list(times)
    for k in [n for n in names if n != "saxpy"] + [n for n in names if n == "saxpy"]:
        med = {mode: median(times[k][mode]) for mode in MODES}
        bare = med["bare"]
        ratio = {m: med[m] / bare if bare and med[m] is not None else None
                 for m in ("empty", "egpu")}
        empty_target = EMPTY_TARGET if k in MATMULS else None
        cells = [k, f4(bare)]
        for m, target in (("empty", empty_target), ("egpu", KERNEL_TARGET)):
            cell, mark = judged(ratio[m], target)
            shown = "-" if target is None else f"<= {target}x"
            if k == "saxpy" and m == "egpu":
                shown += " (and within 0.05 of benches/device.rs (b), (d))"
            cells += [f4(med[m]), cell, shown, mark]
        lines.append("| " + " | ".join(cells) + " |")
        raw["kernels"][k] = {"bare_ms": times[k]["bare"], "empty_ms": times[k]["empty"],
                             "egpu_ms": times[k]["egpu"], "ratio_empty": ratio["empty"],
                             "ratio": ratio["egpu"]}
    lines += ["", "Empty probes: examples/empty_probes.rs, probes at every global memory "
              "instruction that do nothing (the instrumentation alone); kernel_bytes: "
              "examples/kernel_bytes.rs (its map updates too). Ratios to bare; the empty "
              f"probes' target (<= {EMPTY_TARGET}x) is the matmuls'."]
    return lines


def count_table(rounds_counts, failures, raw):
    """The counts table's lines: every map of every kernel_bytes run against launches x the
    per-launch figure, exact or not."""
    lines = ["", "### Counts under egpu with kernel_bytes (launches x per launch)", "",
             "| kernel | map | expected | observed | |", "|---|---|---|---|---|"]
    rows = collections.OrderedDict()
    for kernels, counts in rounds_counts:
        for k, m, want, got in compare_counts(kernels, counts):
            rows.setdefault((k, m), (want, []))[1].append(got)
    for (k, m), (want, gots) in rows.items():
        seen = "/".join(str(g) for g in sorted(set(gots)))
        if want is None:
            mark = "not checked"
        elif all(g == want for g in gots):
            mark = "exact"
        else:
            mark = "NOT EXACT"
            failures.append(f"{k}: {m} expected {want}, observed {seen}")
        lines.append(f"| {k} | {m} | {'-' if want is None else want} | {seen} | {mark} |")
        raw["counts"].append({"kernel": k, "map": m, "expected": want, "observed": gots})
    return lines


def kernels_section(r, args, python, failures, report, raw):
    """Interleaved rounds of bench_kernels.py, bare, under the empty probes and under
    kernel_bytes (the order rotated each round); the three tables."""
    command = [python, os.path.join(HERE, "bench_kernels.py"), "--launches",
               str(args.launches)]
    times = collections.defaultdict(lambda: {mode: [] for mode in MODES})
    results = collections.defaultdict(set)  # kernel -> {output hash}
    sums = collections.defaultdict(set)  # kernel -> {float64 sum}
    checks = collections.defaultdict(list)  # kernel -> ["ok"/"WRONG"]
    rounds_counts = []  # per kernel_bytes round: (kernels fields, Counter)
    modes = [m for m in MODES if m != "empty" or args.empty_pack]
    if not args.empty_pack:
        print("  no empty probes pack (--empty-pack ''): its runs are left out", flush=True)
    elif not os.path.exists(args.empty_pack):
        failures.append(f"no empty probes pack at {args.empty_pack}")
        modes.remove("empty")
    print("\n=== kernels: bench_kernels.py bare and under `egpu run --probes` with the empty "
          "probes and kernel_bytes", flush=True)
    for i in range(1, args.rounds + 1):
        for mode in rotated(modes, i - 1):
            prefix = os.path.join(args.work, f"kernels-{i}")
            cmd = {"bare": command,
                   "empty": r.wrapped(command, pack=args.empty_pack),
                   "egpu": r.wrapped(command, summary=prefix)}[mode]
            got = r.run(cmd, f"round {i} {MODES[mode]}", reserve=args.reserve)
            if got is None:
                continue
            rc, out, err, _ = got
            raw["kernel_runs"].append({"round": i, "mode": mode, "rc": rc, "stdout": out})
            if rc != 0:
                failures.append(f"kernels round {i} {MODES[mode]}: exit {rc}")
            kernels = parse_kernel_lines(out)
            for k, f in list(kernels.items()):
                if "ms" not in f:
                    failures.append(f"kernels round {i} {MODES[mode]}: {k} failed (see its "
                                    "stderr)")
                    del kernels[k]
                    continue
                times[k][mode].append(float(f["ms"]))
                # The hash identifies the output; the sum stands in without numpy.
                digest = f.get("hash", "-")
                results[k].add(digest if digest != "-" else f"sum {f.get('sum')}")
                sums[k].add(f.get("sum"))
                checks[k].append(f.get("check", "?"))
            if mode != "bare" and i == 1:
                n, want = probes_loaded(err), PROBES[mode]
                if n != want:
                    failures.append(f"egpu loaded {n} probes from the {MODES[mode]} pack, not "
                                    f"{want}")
            if mode == "egpu":
                counts, files = read_summaries(prefix)
                print(f"    {files} summaries, {len(counts)} map entries")
                rounds_counts.append((kernels, counts))

    lines = time_table(times, raw)
    lines += ["", "### Results (every run: bare, empty probes, kernel_bytes)", "",
              "| kernel | checks | outputs | sum | hash |", "|---|---|---|---|---|"]
    for k in times:
        same = len(results[k]) == 1
        bad = [c for c in checks[k] if c != "ok"]
        lines.append(f"| {k} | {'ok' if not bad else f'{len(bad)} WRONG'} | "
                     f"{'identical' if same else f'DIFFER ({len(results[k])} kinds)'} | "
                     f"{' / '.join(sorted(sums[k]))} | {' / '.join(sorted(results[k]))} |")
        if not same:
            failures.append(f"{k}: outputs differ between runs: {sorted(results[k])}")
        if bad:
            failures.append(f"{k}: {len(bad)} runs computed wrong results")
    lines += count_table(rounds_counts, failures, raw)
    if not rounds_counts:
        failures.append("kernels: no run under egpu finished")
    report += lines


def latency_section(r, args, python, failures, report, raw):
    """bench_kernels.py --latency under egpu, and its table."""
    print("\n=== latency: from a kernel's end to its count in the shared-memory map", flush=True)
    cmd = r.wrapped([python, os.path.join(HERE, "bench_kernels.py"), "--latency", "--repeats",
                     str(args.latency_repeats)], summary=os.path.join(args.work, "latency"))
    got = r.run(cmd, "latency under egpu", reserve=0 if args.skip_train else TRAIN_RESERVE)
    if got is None:
        return
    rc, out, _, _ = got
    for line in out.splitlines():
        if line.startswith("latency"):
            print(f"    {line}")
    if rc != 0:
        failures.append(f"latency: exit {rc}")
    modes = parse_prefixed(out, "latency")
    raw["latency"] = modes
    lines = ["", "### Latency: kernel end to count in the map (ms)", "",
             "| after | samples | median | max | timeouts | merge lag (median) |",
             "|---|---|---|---|---|---|"]
    for mode, label in (("sync", "torch.cuda.synchronize()"), ("query", "event.query() done")):
        f = modes.get(mode, {})
        lines.append(f"| {label} | {f.get('n', '-')} | {f.get('median_ms', '-')} | "
                     f"{f.get('max_ms', '-')} | {f.get('timeouts', '-')} | "
                     f"{f.get('merge_lag_median_ms', '-')} |")
    final = modes.get("final", {})
    if final:
        lines.append(f"\nfinal ENTERED count: expected {final.get('expected')}, observed "
                     f"{final.get('observed')} ({'exact' if final.get('exact') == 'yes' else 'NOT EXACT'})")
    report += lines


def train_section(r, args, python, failures, report, raw):
    """Rounds of bench_train.py in rotated order: bare, `egpu run`, `egpu run --metrics`."""
    print("\n=== training: bench_train.py bare, under `egpu run`, under `egpu run --metrics`",
          flush=True)
    command = [python, os.path.join(HERE, "bench_train.py"), "--steps", str(args.train_steps),
               "--block", str(args.train_block), "--warmup", str(args.train_warmup)]
    variants = [("bare", command),
                ("egpu run", r.wrapped(command, probes=False)),
                ("egpu run --metrics", r.wrapped(command, probes=False, metrics=True))]
    names = [name for name, _ in variants]
    if args.train_ab and not args.fake:
        ab_section(r, args, command, failures, report, raw)
    rounds, longest = [], 0.0
    for i in range(args.train_rounds):
        # A round starts only when what is left fits it, so that the budget ends rounds whole.
        if rounds and r.left() < longest * 1.15 + 5:
            print(f"  stopped after {len(rounds)} rounds: {r.left():.0f} s left, a round took "
                  f"up to {longest:.0f} s", flush=True)
            break
        start, order = time.monotonic(), rotated(variants, i)
        rd = {"round": i + 1, "order": [name for name, _ in order], "runs": {}}
        for name, cmd in order:
            got = r.run(cmd, f"round {i + 1} {name}")
            if got is None:
                continue
            rc, out, _, seconds = got
            f = parse_prefixed(out, "train").get("mlp", {})
            if rc != 0 or "steps_per_s" not in f:
                failures.append(f"train round {i + 1} {name}: exit {rc}")
                continue
            run = {"rate": run_rate(f), "overall": float(f["steps_per_s"]),
                   "seconds": round(seconds, 2), "line": out.strip().splitlines()[-1]}
            for key in ("block_min_steps_per_s", "block_max_steps_per_s", "blocks"):
                if key in f:
                    run[key] = int(f[key]) if key == "blocks" else float(f[key])
            rd["runs"][name] = run
            print(f"    {run['rate']:.1f} steps/s (median of blocks), "
                  f"{run['overall']:.1f} whole run", flush=True)
        rounds.append(rd)
        longest = max(longest, time.monotonic() - start)
    title = (f"### Eager training steps per second ({len(rounds)} rounds of "
             f"{args.train_steps} steps, order rotated)")
    lines, summary = train_table(rounds, names, title)
    lines += ["", f"A run: {args.train_warmup} steps of warm-up, then {args.train_steps} timed "
              f"in blocks of {args.train_block} (synchronised at each block's end); its rate is "
              "the median of its blocks'. Paired ratio: a variant's rate over bare's in the same "
              f"round; PASS when their median is >= {TRAIN_TARGET}. Interval: order statistics "
              "of the paired ratios (the k-th smallest and k-th largest, k from Binomial(n, 1/2); "
              "distribution-free, no bootstrap), its coverage in brackets; clear pass when its "
              f"lower end is >= {TRAIN_TARGET}, clear miss when its upper end is below, else "
              "within noise."]
    raw["train"] = {"steps": args.train_steps, "block": args.train_block,
                    "warmup": args.train_warmup, "target": TRAIN_TARGET,
                    "interval": "order statistics (binomial), 95%", "rounds": rounds,
                    "variants": summary}
    report += lines


def ab_section(r, args, command, failures, report, raw):
    """bench_train.py --ab under `egpu run` and `egpu run --metrics`: in one process, blocks
    with egpu's probes running against neighbouring blocks with them paused (see
    bench_train.py), so that what the host probes cost shows without the noise between
    processes. The interposition that remains while they are paused is the launch benchmark's
    (b) (egpu-preload/benches/launch.rs)."""
    print("\n=== training A/B: probes running and paused in one process", flush=True)
    ab = command + ["--ab", str(args.train_ab)]
    lines = ["", f"### Eager training, probes running against paused in one process "
             f"({args.train_ab} quads of blocks of {args.train_block} steps)", "",
             "| variant | quads | running steps/s (median) | paused steps/s (median) | "
             "paired ratio (median) | its 95% interval (coverage) | target | | |",
             "|---|---|---|---|---|---|---|---|---|"]
    raw["train_ab"] = {}
    summary = os.path.join(r.work, "ab-summary")
    for name, cmd in (("egpu run", r.wrapped(ab, probes=False, summary=summary)),
                      ("egpu run --metrics", r.wrapped(ab, probes=False, metrics=True))):
        got = r.run(cmd, f"A/B {name}")
        if got is None:
            continue
        rc, out, _, _ = got
        f = parse_prefixed(out, "ab").get("mlp", {})
        if rc != 0 or "ratios" not in f:
            failures.append(f"train A/B {name}: exit {rc}")
            continue
        ratios = [float(x) for x in f["ratios"].split(",")]
        pm, lo, hi, cover = median_interval(ratios)
        mark, noise = judge(pm, lo, hi)
        lines.append(f"| {name} | {len(ratios)} | {f['on_median_steps_per_s']} | "
                     f"{f['paused_median_steps_per_s']} | {pm:.4f}x | {lo:.4f}-{hi:.4f} "
                     f"({100 * cover:.1f}%) | >= {TRAIN_TARGET}x | {mark} | {noise} |")
        raw["train_ab"][name] = {"ratios": ratios, "median": pm, "interval": [lo, hi],
                                 "coverage": cover, "line": out.strip().splitlines()[-1]}
        print(f"    {name}: paired ratio {pm:.4f} ({lo:.4f}-{hi:.4f})", flush=True)
    lines += ["", "A quad: blocks with the probes running, paused, paused, running; its ratio "
              "is the running blocks' rate over the paused blocks'. Interval as below."]
    steps = args.train_warmup + 4 * args.train_ab * args.train_block
    calls = interposed_calls(summary)
    if calls:
        # While the probes run, what each call costs the calling thread is what the launch
        # benchmark measures for a launch with a probe (egpu-preload/benches/launch.rs (c)).
        per_step = {k: v / steps for k, v in calls.items()}
        lines += ["", f"Interposed calls per training step (the `egpu run` A/B process: {steps} "
                  "steps, with its warm-up; from its summary): " +
                  ", ".join(f"{k} {v:.2f}" for k, v in per_step.items())]
        raw["train_ab"]["calls_per_step"] = per_step
    report += lines


def interposed_calls(prefix):
    """The interposed calls egpu counted in the summaries `PREFIX.<pid>`, by kind (launches,
    copies, sets, allocations, frees, syncs, module loads) and the probes' runs."""
    calls = collections.Counter()
    for path in sorted(glob.glob(prefix + ".*")):
        with open(path) as f:
            for line in f:
                w = line.split()
                if len(w) >= 2 and w[0] in ("launches", "sets"):
                    calls[w[0]] += int(w[1])
                elif len(w) >= 3 and w[0] in ("copies", "allocations", "frees", "syncs",
                                              "modules"):
                    calls[w[0]] += int(w[2])
                elif w and w[0] == "probes":
                    fields = dict(f.partition("=")[::2] for f in w[1:])
                    calls["probe runs"] += int(fields.get("runs", 0))
    return calls


def pack_probes(path):
    """The `probe NAME ATTACH` and `map ...` lines of the pack a library exports (called through
    ctypes, as egpu::pack::Pack::load does with dlopen), or a line saying why not."""
    try:
        lib = ctypes.CDLL(os.path.abspath(path))
        f = lib.egpu_probe_pack
        f.restype = ctypes.c_char_p
        text = f().decode()
    except (OSError, AttributeError) as e:
        return [f"cannot read the pack of {path}: {e}"]
    return [l for l in text.splitlines() if l.startswith(("egpu-probes", "probe ", "map ",
                                                          "error "))]


def self_test(args):
    """The parsing and comparison on a made-up run; no GPU."""
    bench_kernels.self_test()
    os.makedirs(args.work, exist_ok=True)
    prefix = os.path.join(args.work, "self-test-summary")
    with open(prefix + ".1", "w") as f:
        f.write("pid 1\nlaunches 400\nkernel 0x1 400 k\ncopies htod 3 12\nsets 5 20\n"
                "syncs stream 10\nprobes runs=420 faults=0 rejected=0\n")
    calls = interposed_calls(prefix)
    assert calls == {"launches": 400, "copies": 3, "sets": 5, "syncs": 10,
                     "probe runs": 420}, calls
    zeros = " bytes_async_per_launch 0 tensor_loads_per_launch 0 tensor_stores_per_launch 0"
    out = ("kernel add name add_kernel id 0x0 ms 0.0291 launches 21 grid 4096 num_warps 4 "
           "threads_per_launch 524288 bytes_loaded_per_launch 33554432 "
           f"bytes_stored_per_launch 16777216{zeros} atomic_bytes_per_launch 0 "
           "atomics_per_launch 0 sum 123.5 hash ab check ok\n"
           "kernel matmul name matmul_kernel id 0x0 ms 0.0320 launches 21 grid 64 num_warps 8 "
           "threads_per_launch 16384 bytes_loaded_per_launch - bytes_stored_per_launch 2097152 "
           "bytes_async_per_launch 33554432 tensor_loads_per_launch 0 tensor_stores_per_launch "
           "0 atomic_bytes_per_launch 0 atomics_per_launch 0 sum 1.0 hash cd check ok\n"
           "kernel matmul_tma name matmul_tma_kernel id 0x0 ms 0.0300 launches 21 grid 64 "
           "num_warps 4 threads_per_launch 8192 bytes_loaded_per_launch 0 "
           "bytes_stored_per_launch 0 bytes_async_per_launch 0 tensor_loads_per_launch 3072 "
           "tensor_stores_per_launch 128 atomic_bytes_per_launch 0 atomics_per_launch 0 "
           "tma_blocks 128x64,64x64,128x64 sum 2.0 hash ef check ok\n"
           "kernel histogram name histogram_kernel id 0x0 ms 0.01 launches 21 grid 4096 "
           f"num_warps 4 threads_per_launch 524288 bytes_loaded_per_launch 16777216 "
           f"bytes_stored_per_launch 0{zeros} atomic_bytes_per_launch 16777216 "
           "atomics_per_launch 4194304 sum 3.0 hash 01 check ok\n")
    kernels = parse_kernel_lines(out)
    assert kernels["add"]["threads_per_launch"] == "524288"
    assert kernels["matmul_tma"]["tma_blocks"] == "128x64,64x64,128x64"
    assert expected_counts(kernels["matmul"])["LOADED"] is None
    assert expected_counts(kernels["matmul"])["ASYNC"] == 21 * 33554432
    assert expected_counts(kernels["add"])["LOADED"] == 21 * 33554432
    assert expected_counts(kernels["add"])["ATOMICS"] == 0
    assert set(expected_counts(kernels["add"])) == set(MAPS)
    mm, tma = bench_kernels.kernel_id("matmul_kernel"), bench_kernels.kernel_id("matmul_tma_kernel")
    summary_a = ("pid 100\nlaunches 42\nkernel 0x1 21 add_kernel\n"
                 f"map ENTERED add_kernel {21 * 524288}\nmap ENTERED {mm} {21 * 16384}\n"
                 f"map EXITED add_kernel {21 * 524288}\n"
                 f"map LOADED add_kernel {21 * 33554432 - 4}\n"
                 f"map ASYNC matmul_kernel {21 * 33554432}\n"
                 f"map TENSOR_LOADS {tma} {21 * 3072}\nmap TENSOR_STORES {tma} 7\n"
                 f"map ATOMIC histogram_kernel {21 * 16777216}\n"
                 f"map ATOMICS histogram_kernel {21 * 4194304}\n"
                 "map STORED add_kernel 100\nmap RING ringbuf (0 B keys, 16 B values: not shown)\n"
                 "map LAUNCHED  77\nprobes runs=42 faults=0 rejected=0\n")
    summary_b = f"pid 101\nlaunches 0\nmap STORED add_kernel {21 * 16777216 - 100}\n"
    counts = parse_map_lines(summary_b, parse_map_lines(summary_a))
    assert counts[("LAUNCHED", "")] == 77
    got = {(k, m): (want, obs) for k, m, want, obs in compare_counts(kernels, counts)}
    assert got[("add", "ENTERED")] == (21 * 524288, 21 * 524288)
    assert got[("add", "STORED")] == (21 * 16777216, 21 * 16777216)  # two processes summed
    assert got[("add", "LOADED")] == (21 * 33554432, 21 * 33554432 - 4)
    assert got[("add", "ASYNC")] == (0, 0)  # no entry: 0, as expected
    assert got[("matmul", "ENTERED")] == (21 * 16384, 21 * 16384)  # keyed by id
    assert got[("matmul", "LOADED")] == (None, 0)
    assert got[("matmul", "ASYNC")] == (21 * 33554432, 21 * 33554432)
    assert got[("matmul_tma", "TENSOR_LOADS")] == (21 * 3072, 21 * 3072)  # keyed by id
    assert got[("matmul_tma", "TENSOR_STORES")] == (21 * 128, 7)
    assert got[("histogram", "ATOMIC")] == (21 * 16777216, 21 * 16777216)
    assert got[("histogram", "ATOMICS")] == (21 * 4194304, 21 * 4194304)
    assert got[("add", "LAUNCHED")] == (21 * 524288, 0)
    assert len(got) == 4 * len(MAPS)
    failures, raw = [], {"counts": [], "kernels": {}}
    lines = count_table([(kernels, counts)], failures, raw)
    assert "| histogram | ATOMICS | 88080384 | 88080384 | exact |" in lines, lines
    assert "| matmul | LOADED | - | 0 | not checked |" in lines, lines
    # Every count above that is not launches x per launch, and only those.
    assert len(failures) == sum(want is not None and obs != want
                                for want, obs in got.values()) == 13, failures
    assert f"matmul_tma: TENSOR_STORES expected {21 * 128}, observed 7" in failures, failures
    times = {"matmul": {"bare": [1.0, 1.2, 1.1], "empty": [1.12, 1.16], "egpu": [1.2]},
             "saxpy": {"bare": [2.0], "empty": [], "egpu": [2.2]},
             "add": {"bare": [1.0], "empty": [1.5], "egpu": [1.25]}}
    lines = time_table(times, raw)
    assert lines[5] == "| matmul | 1.1000 | 1.1400 | 1.04x | <= 1.05x | PASS | 1.2000 | 1.09x " \
                       "| <= 1.3x | PASS |", lines[5]
    assert lines[6] == "| add | 1.0000 | 1.5000 | 1.50x | - |  | 1.2500 | 1.25x | <= 1.3x | " \
                       "PASS |", lines[6]
    assert lines[7].startswith("| saxpy | 2.0000 | - | - | - |  | 2.2000 | 1.10x | <= 1.3x ("), \
        lines[7]
    assert abs(raw["kernels"]["matmul"]["ratio_empty"] - 1.14 / 1.1) < 1e-12
    assert probes_loaded("x\negpu: 6 probes from /p/libkernel_bytes.so\n") == 6
    assert probes_loaded("nothing\n") == 0
    assert [rotated(list(MODES), i) for i in range(2)] == [["bare", "empty", "egpu"],
                                                           ["empty", "egpu", "bare"]]
    lat = parse_prefixed("latency sync n 20 median_ms 0.01 max_ms 0.2 timeouts 0\n", "latency")
    assert lat["sync"]["median_ms"] == "0.01"
    train = parse_prefixed("train mlp steps 2000 seconds 4.0 steps_per_s 500.0\n", "train")
    assert train["mlp"]["steps_per_s"] == "500.0" and run_rate(train["mlp"]) == 500.0
    bench_train.self_test()
    line = bench_train.result_line(600, 1.2, 50, [520.0, 505.0, 90.0, 510.0], 0.5, 0.4)
    assert run_rate(parse_prefixed(line, "train")["mlp"]) == 507.5  # the blocks' median
    train_self_test()
    for mode, pack in (("egpu", args.pack), ("empty", args.empty_pack)):
        if not pack or (mode == "empty" and not os.path.exists(pack)):
            continue
        lines = pack_probes(pack)
        print("\n".join(f"  {l}" for l in lines))
        assert sum(l.startswith("probe ") for l in lines) == PROBES[mode], lines
        maps = {l.split()[1].split("=")[0] for l in lines if l.startswith("map ")}
        assert maps == (set(MAPS) if mode == "egpu" else set()), maps
    print("bench_preload self-test: ok")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--egpu", help="the egpu binary (libegpu_preload.so beside it)")
    ap.add_argument("--pack", help="the kernel_bytes pack (libkernel_bytes.so)")
    ap.add_argument("--empty-pack", help="the empty probes pack (default: libempty_probes.so "
                    "beside --pack; '' for none)")
    ap.add_argument("--work", default=os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                                   "egpu-bench"))
    ap.add_argument("--rounds", type=int, default=3, help="kernel rounds (bare and egpu each)")
    ap.add_argument("--launches", type=int, default=20, help="timed launches per kernel")
    ap.add_argument("--latency-repeats", type=int, default=20)
    ap.add_argument("--train-rounds", type=int, default=12,
                    help="training rounds (a run of each variant each)")
    ap.add_argument("--train-steps", type=int, default=600, help="timed steps of a run")
    ap.add_argument("--train-block", type=int, default=50,
                    help="steps of a timed block (a run's rate: the median of its blocks')")
    ap.add_argument("--train-warmup", type=int, default=200, help="steps before the timed")
    ap.add_argument("--train-ab", type=int, default=24,
                    help="quads of the in-process A/B (bench_train.py --ab); 0 for none")
    ap.add_argument("--budget", type=float, default=540, help="seconds for everything")
    ap.add_argument("--timeout", type=float, default=240, help="seconds for one run")
    ap.add_argument("--skip-kernels", action="store_true")
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument("--self-test", action="store_true", help="check the parsing; no GPU")
    ap.add_argument("--fake", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.empty_pack is None and args.pack:
        args.empty_pack = os.path.join(os.path.dirname(os.path.abspath(args.pack)),
                                       "libempty_probes.so")
    if args.self_test:
        return self_test(args)
    fake = setup_fake(args) if args.fake else None
    if not args.egpu or not args.pack:
        ap.error("--egpu and --pack are needed (or --self-test)")
    os.makedirs(args.work, exist_ok=True)
    args.egpu, args.pack = os.path.abspath(args.egpu), os.path.abspath(args.pack)
    args.empty_pack = args.empty_pack and os.path.abspath(args.empty_pack)
    python = sys.executable or "python3"
    # Time the kernel rounds leave for the later sections.
    args.reserve = (0 if args.skip_latency else LATENCY_RESERVE) + (
        0 if args.skip_train else TRAIN_RESERVE)
    r = Runner(args.egpu, args.pack, args.work, args.budget, args.timeout)
    failures, report = [], ["## egpu zero-code benchmark" + (" (--fake)" if fake else "")]
    raw = {"kernel_runs": [], "kernels": {}, "counts": []}
    if fake:
        r.env["PYTHONPATH"] = fake
    else:
        for pack in filter(None, (args.pack, args.empty_pack)):
            print(f"=== the pack {pack}:")
            print("\n".join(f"  {l}" for l in pack_probes(pack)), flush=True)
    if not args.skip_kernels:
        kernels_section(r, args, python, failures, report, raw)
    if not args.skip_latency:
        latency_section(r, args, python, failures, report, raw)
    if not args.skip_train:
        train_section(r, args, python, failures, report, raw)

    results = os.environ.get("OUT") or args.work
    os.makedirs(results, exist_ok=True)
    report += ["", "### Failures", ""] + ([f"- {f}" for f in failures] or ["none"])
    with open(os.path.join(results, "bench-preload.md"), "w") as f:
        f.write("\n".join(report) + "\n")
    with open(os.path.join(results, "bench-preload.json"), "w") as f:
        json.dump(raw, f, indent=1)
    print("\n=== summary (also in " + os.path.join(results, "bench-preload.md") + ")")
    print("\n".join(report))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
