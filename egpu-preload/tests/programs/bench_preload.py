"""The zero-code benchmark (issue 17): unmodified programs, bare and under `egpu run`, with the
probe pack of examples/kernel_bytes.rs. Run on the GPU machine by target/gpu-bundle/run.sh for
the `bench` set (see scripts/gpu-bundle); it needs PyTorch and Triton there.

    python3 bench_preload.py --egpu PATH/TO/egpu --pack PATH/TO/libkernel_bytes.so --work DIR
        [--rounds 3] [--train-rounds 12] [--train-steps 600] [--train-block 50]
        [--train-warmup 200] [--budget 540] [--skip-kernels] [--skip-latency] [--skip-train]
    python3 bench_preload.py --self-test [--pack PATH/TO/libkernel_bytes.so]
    python3 bench_preload.py --fake --work DIR [--train-rounds 4 ...]   (no GPU, see below)

1. Kernels: bench_kernels.py (five Triton kernels and a saxpy of 2^28 floats, 20 timed
   launches each after a warm-up) bare and under `egpu run --probes PACK --summary ...`, in
   interleaved rounds. Prints a table of the median time per launch bare and under egpu, their
   ratio and the target (<= 1.3x; saxpy on a line of its own); whether every run computed the
   same results (float64 sums and hashes of the outputs, and each run's own check against
   PyTorch); and the counts of each map of the summaries (`map NAME KERNEL VALUE`) against the
   expected ones, launches x the per-launch figures the program prints, marked exact or not.
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
import math
import os
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the working tree
import bench_kernels  # noqa: E402 (the map reader and the kernel ids, shared)
import bench_train  # noqa: E402 (its self-test)
from bench_fake import setup_fake  # noqa: E402

KERNEL_TARGET = 1.3
TRAIN_TARGET = 0.99
MAPS = ("ENTERED", "EXITED", "LOADED", "STORED", "LAUNCHED")
# Which per-launch figure each map counts, times the launches.
PER_LAUNCH = {"ENTERED": "threads_per_launch", "EXITED": "threads_per_launch",
              "LOADED": "bytes_loaded_per_launch", "STORED": "bytes_stored_per_launch",
              "LAUNCHED": "threads_per_launch"}
PACK_PROBES = 5
# Seconds kept for the latency and training sections when the kernel rounds run long (a
# training run takes 8 to 12 s on the H200, most of it PyTorch's start: 36 runs for 12 rounds).
LATENCY_RESERVE, TRAIN_RESERVE = 45, 300
# Figures bench_kernels.py prints beside a `-` or a 0 that egpu cannot observe today: the map
# they concern, and how the table says it.
NOTES = {"bytes_loaded_if_ld_per_launch": ("LOADED", "cp.async, not observed today: "
                                                     "{} a launch if read by ld"),
         "atomic_bytes_per_launch": ("STORED", "atomics, not observed today: {} a launch")}


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

    def wrapped(self, command, summary=None, probes=True, metrics=False):
        """`egpu run [--probes PACK] [--summary PREFIX] [--metrics 127.0.0.1:0] -- command`;
        the old summaries of PREFIX removed first."""
        w = [self.egpu, "run"]
        if probes:
            w += ["--probes", self.pack]
        if summary:
            for old in glob.glob(summary + ".*"):
                os.remove(old)
            w += ["--summary", summary]
        if metrics:
            w += ["--metrics", "127.0.0.1:0"]
        return w + ["--"] + command


def median(xs):
    return statistics.median(xs) if xs else None


def f4(x):
    return "-" if x is None else f"{x:.4f}"


def kernels_section(r, args, python, failures, report, raw):
    """Interleaved rounds of bench_kernels.py, bare and under egpu; the three tables."""
    command = [python, os.path.join(HERE, "bench_kernels.py"), "--launches",
               str(args.launches)]
    times = collections.defaultdict(lambda: {"bare": [], "egpu": []})
    results = collections.defaultdict(set)  # kernel -> {output hash}
    sums = collections.defaultdict(set)  # kernel -> {float64 sum}
    checks = collections.defaultdict(list)  # kernel -> ["ok"/"WRONG"]
    rounds_counts = []  # per egpu round: (kernels fields, Counter)
    print("\n=== kernels: bench_kernels.py bare and under `egpu run --probes`", flush=True)
    for i in range(1, args.rounds + 1):
        for mode in ("bare", "egpu"):
            prefix = os.path.join(args.work, f"kernels-{i}")
            cmd = command if mode == "bare" else r.wrapped(command, summary=prefix)
            got = r.run(cmd, f"round {i} {mode}", reserve=args.reserve)
            if got is None:
                continue
            rc, out, err, _ = got
            raw["kernel_runs"].append({"round": i, "mode": mode, "rc": rc, "stdout": out})
            if rc != 0:
                failures.append(f"kernels round {i} {mode}: exit {rc}")
            kernels = parse_kernel_lines(out)
            for k, f in list(kernels.items()):
                if "ms" not in f:
                    failures.append(f"kernels round {i} {mode}: {k} failed (see its stderr)")
                    del kernels[k]
                    continue
                times[k][mode].append(float(f["ms"]))
                # The hash identifies the output; the sum stands in without numpy.
                digest = f.get("hash", "-")
                results[k].add(digest if digest != "-" else f"sum {f.get('sum')}")
                sums[k].add(f.get("sum"))
                checks[k].append(f.get("check", "?"))
            if mode == "egpu":
                if i == 1:
                    probes = [l for l in err.splitlines() if " probes from " in l]
                    n = int(probes[0].split()[1]) if probes else 0
                    if n != PACK_PROBES:
                        failures.append(f"egpu loaded {n} probes from the pack, not "
                                        f"{PACK_PROBES}")
                counts, files = read_summaries(prefix)
                print(f"    {files} summaries, {len(counts)} map entries")
                rounds_counts.append((kernels, counts))
    names = list(times)

    lines = ["", "### Time per launch (median of the rounds)", "",
             "| kernel | bare ms | under egpu ms | ratio | target | |", "|---|---|---|---|---|---|"]
    for k in [n for n in names if n != "saxpy"] + [n for n in names if n == "saxpy"]:
        bare, egpu = median(times[k]["bare"]), median(times[k]["egpu"])
        ratio = egpu / bare if bare and egpu is not None else None
        mark = "-" if ratio is None else ("PASS" if ratio <= KERNEL_TARGET else "MISS")
        target = f"<= {KERNEL_TARGET}x"
        if k == "saxpy":
            target += " (and within 0.05 of benches/device.rs (b), (d))"
        lines.append(f"| {k} | {f4(bare)} | {f4(egpu)} | "
                     f"{'-' if ratio is None else f'{ratio:.2f}x'} | {target} | {mark} |")
        raw["kernels"][k] = {"bare_ms": times[k]["bare"], "egpu_ms": times[k]["egpu"],
                             "ratio": ratio}

    lines += ["", "### Results (every run, bare and under egpu)", "",
              "| kernel | checks | outputs | sum | hash |", "|---|---|---|---|---|"]
    for k in names:
        same = len(results[k]) == 1
        bad = [c for c in checks[k] if c != "ok"]
        lines.append(f"| {k} | {'ok' if not bad else f'{len(bad)} WRONG'} | "
                     f"{'identical' if same else f'DIFFER ({len(results[k])} kinds)'} | "
                     f"{' / '.join(sorted(sums[k]))} | {' / '.join(sorted(results[k]))} |")
        if not same:
            failures.append(f"{k}: outputs differ between runs: {sorted(results[k])}")
        if bad:
            failures.append(f"{k}: {len(bad)} runs computed wrong results")

    lines += ["", "### Counts under egpu (launches x per launch)", "",
              "| kernel | map | expected | observed | |", "|---|---|---|---|---|"]
    rows = collections.OrderedDict()
    for kernels, counts in rounds_counts:
        for k, m, want, got in compare_counts(kernels, counts):
            rows.setdefault((k, m), (want, [], kernels[k]))[1].append(got)
    for (k, m), (want, gots, fields) in rows.items():
        seen = "/".join(str(g) for g in sorted(set(gots)))
        if want is None:
            mark = "not checked"
        elif all(g == want for g in gots):
            mark = "exact"
        else:
            mark = "NOT EXACT"
            failures.append(f"{k}: {m} expected {want}, observed {seen}")
        mark += "".join(f" ({text.format(fields[key])})" for key, (on, text) in NOTES.items()
                        if on == m and key in fields)
        lines.append(f"| {k} | {m} | {'-' if want is None else want} | {seen} | {mark} |")
        raw["counts"].append({"kernel": k, "map": m, "expected": want, "observed": gots})
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


# --- training: rounds, paired ratios and the interval of their median ---------------------


def rotated(variants, i):
    """Round i's order (i from 0): the variants rotated by i, so that each goes first in turn
    (ABC, BCA, CAB, ABC, ...)."""
    k = i % len(variants)
    return list(variants[k:]) + list(variants[:k])


def binomial_below(n, k):
    """P(Binomial(n, 1/2) < k)."""
    return sum(math.comb(n, j) for j in range(k)) / 2 ** n


def median_interval(xs, confidence=0.95):
    """(median, lo, hi, coverage), or None for no values: the median of xs and an interval for
    the median of what they sample from, from order statistics (distribution-free, for
    independent values): the k-th smallest and the k-th largest of the n values, k the largest
    with P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2; it covers that median with probability
    coverage = 1 - 2 P(Binomial(n, 1/2) < k). For 95% and 12 values: the 3rd and 10th, 96.1%.
    With fewer than 6 values no k reaches 95%: the min and the max, with their lower coverage."""
    if not xs:
        return None
    s, n = sorted(xs), len(xs)
    k = 1
    while k < (n + 1) // 2 and binomial_below(n, k + 1) <= (1 - confidence) / 2:
        k += 1
    return statistics.median(s), s[k - 1], s[n - k], 1 - 2 * binomial_below(n, k)


def judge(med, lo, hi, target=TRAIN_TARGET):
    """(PASS or MISS on the median, and what the interval says: clear pass, clear miss or
    within noise)."""
    mark = "PASS" if med >= target else "MISS"
    noise = ("clear pass" if lo >= target else "clear miss" if hi < target
             else "within noise")
    return mark, noise


def run_rate(fields):
    """A run's rate from bench_train.py's line: the median of its blocks, or (a line without
    blocks) the whole run's."""
    return float(fields.get("block_median_steps_per_s", fields["steps_per_s"]))


def paired_ratios(rounds, name, base="bare"):
    """[(round, NAME's rate / BASE's rate)] of the rounds where both ran."""
    out = []
    for rd in rounds:
        runs = rd["runs"]
        if name in runs and base in runs and runs[base]["rate"] > 0:
            out.append((rd["round"], runs[name]["rate"] / runs[base]["rate"]))
    return out


def train_table(rounds, names, title):
    """The training table's lines and, per variant, its figures (for the JSON)."""
    fmt = lambda x, spec: "-" if x is None else format(x, spec)  # noqa: E731
    base = median([rd["runs"][names[0]]["rate"] for rd in rounds if names[0] in rd["runs"]])
    lines = ["", title, "",
             "| variant | runs | steps/s (median) | spread (min-max) | whole-run steps/s "
             "(median) | ratio of medians | paired ratio (median) | its 95% interval "
             "(coverage) | paired spread | target | | |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    summary = {}
    for name in names:
        rates = [rd["runs"][name]["rate"] for rd in rounds if name in rd["runs"]]
        whole = [rd["runs"][name]["overall"] for rd in rounds if name in rd["runs"]]
        med = median(rates)
        of_medians = med / base if med is not None and base else None
        s = {"rates": rates, "overall": whole, "median": med, "ratio_of_medians": of_medians}
        cells = [name, str(len(rates)), fmt(med, ".1f"),
                 f"{min(rates):.1f}-{max(rates):.1f}" if rates else "-",
                 fmt(median(whole), ".1f"),
                 "-" if of_medians is None else f"{of_medians:.4f}x"]
        ratios = paired_ratios(rounds, name, names[0]) if name != names[0] else []
        got = median_interval([x for _, x in ratios])
        if got is None:
            cells += ["-", "-", "-", "" if name == names[0] else f">= {TRAIN_TARGET}x", "-", ""]
        else:
            pm, lo, hi, cover = got
            mark, noise = judge(pm, lo, hi)
            xs = [x for _, x in ratios]
            cells += [f"{pm:.4f}x", f"{lo:.4f}-{hi:.4f} ({100 * cover:.1f}%)",
                      f"{min(xs):.4f}-{max(xs):.4f}", f">= {TRAIN_TARGET}x", mark, noise]
            s.update({"paired": dict(ratios), "paired_median": pm, "interval": [lo, hi],
                      "coverage": cover, "mark": mark, "noise": noise})
        lines.append("| " + " | ".join(cells) + " |")
        summary[name] = s
    return lines, summary


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


def fabricated_rounds():
    """Twelve rounds of made-up rates, the same every time: bare drifts from 560 to 640 steps/s
    over the rounds (each round's runs alike), `egpu run` is bare within 0.4% and `--metrics`
    3% slower within 0.4%; bare of round 5 failed."""
    rounds = []
    for i in range(12):
        bare = 560 + 80 * ((7 * i) % 12) / 11  # a permutation of 12 levels
        wobble = ((5 * i) % 12 - 5.5) / 5.5 * 0.004  # within +-0.4%, median 0
        rates = {"bare": bare, "egpu run": bare * (1 + wobble),
                 "egpu run --metrics": bare * (0.97 - wobble)}
        runs = {k: {"rate": v, "overall": v * 0.98} for k, v in rates.items()
                if not (i == 4 and k == "bare")}
        rounds.append({"round": i + 1, "order": [], "runs": runs})
    return rounds


def train_self_test():
    """The training statistics on fabricated numbers (deterministic)."""
    assert ["".join(rotated("ABC", i)) for i in range(4)] == ["ABC", "BCA", "CAB", "ABC"]
    assert binomial_below(12, 3) == 79 / 4096
    xs = [(7 * i) % 12 + 1 for i in range(12)]  # 1..12, shuffled
    assert median_interval(xs) == (6.5, 3, 10, 1 - 2 * 79 / 4096)
    assert median_interval(xs[:6]) == (6.5, 1, 12, 1 - 2 / 64)  # 1 3 5 8 10 12: k = 1
    assert median_interval([3, 1, 2, 5, 4]) == (3, 1, 5, 1 - 2 / 32)  # fewer than 6: 93.8%
    assert median_interval([2.0]) == (2.0, 2.0, 2.0, 0.0) and median_interval([]) is None
    assert median_interval(list(range(100)))[1:3] == (39, 60)  # k = 40 for 100 values
    assert judge(0.995, 0.991, 1.0) == ("PASS", "clear pass")
    assert judge(0.995, 0.98, 1.01) == ("PASS", "within noise")
    assert judge(0.985, 0.97, 0.995) == ("MISS", "within noise")
    assert judge(0.985, 0.97, 0.989) == ("MISS", "clear miss")
    assert judge(0.99, 0.99, 1.0) == ("PASS", "clear pass")
    rounds = fabricated_rounds()
    names = ["bare", "egpu run", "egpu run --metrics"]
    assert [r for r, _ in paired_ratios(rounds, "egpu run")] == [1, 2, 3, 4] + list(range(6, 13))
    lines, summary = train_table(rounds, names, "### t")
    bare, plain, metrics = (summary[n] for n in names)
    assert len(bare["rates"]) == 11 and len(plain["paired"]) == 11 and "paired" not in bare
    assert abs(plain["paired_median"] - 1.0) < 0.0005 and plain["noise"] == "clear pass"
    assert abs(metrics["paired_median"] - 0.97) < 0.0005, metrics
    assert (metrics["mark"], metrics["noise"]) == ("MISS", "clear miss")
    assert abs(metrics["coverage"] - (1 - 2 * binomial_below(11, 2))) < 1e-12  # k = 2 of 11
    assert max(metrics["interval"]) < 0.975 < 0.99 <= min(plain["interval"])
    assert lines[3].startswith("| variant | runs |") and len(lines) == 8, lines
    assert lines[5].startswith("| bare | 11 | ") and lines[5].endswith(" |  | - |  |"), lines[5]
    assert lines[7].endswith("| >= 0.99x | MISS | clear miss |"), lines[7]
    assert "(98.8%)" in lines[7], lines[7]
    # A round that lost bare, a variant with no pair at all.
    lines, summary = train_table([{"round": 1, "order": [], "runs": {"egpu run": {
        "rate": 1.0, "overall": 1.0}}}], names, "### t")
    assert "paired" not in summary["egpu run"], summary
    assert lines[5] == "| bare | 0 | - | - | - | - | - | - | - |  | - |  |", lines[5]
    assert lines[6] == "| egpu run | 1 | 1.0 | 1.0-1.0 | 1.0 | - | - | - | - | >= 0.99x | - |  |"
    print("bench_preload training statistics self-test: ok")


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
    out = ("kernel add name add_kernel id 0x0 ms 0.0291 launches 21 grid 4096 num_warps 4 "
           "threads_per_launch 524288 bytes_loaded_per_launch 33554432 "
           "bytes_stored_per_launch 16777216 sum 123.5 hash ab check ok\n"
           "kernel matmul name matmul_kernel id 0x0 ms 0.0320 launches 21 grid 64 num_warps 8 "
           "threads_per_launch 16384 bytes_loaded_per_launch - bytes_stored_per_launch 2097152 "
           "bytes_loaded_if_ld_per_launch 33554432 sum 1.0 hash cd check ok\n")
    kernels = parse_kernel_lines(out)
    assert kernels["add"]["threads_per_launch"] == "524288"
    assert expected_counts(kernels["matmul"])["LOADED"] is None
    assert expected_counts(kernels["add"])["LOADED"] == 21 * 33554432
    mm = bench_kernels.kernel_id("matmul_kernel")
    summary_a = ("pid 100\nlaunches 42\nkernel 0x1 21 add_kernel\n"
                 f"map ENTERED add_kernel {21 * 524288}\nmap ENTERED {mm} {21 * 16384}\n"
                 f"map EXITED add_kernel {21 * 524288}\n"
                 f"map LOADED add_kernel {21 * 33554432 - 4}\n"
                 "map STORED add_kernel 100\nmap RING ringbuf (0 B keys, 16 B values: not shown)\n"
                 "map LAUNCHED  77\nprobes runs=42 faults=0 rejected=0\n")
    summary_b = f"pid 101\nlaunches 0\nmap STORED add_kernel {21 * 16777216 - 100}\n"
    counts = parse_map_lines(summary_b, parse_map_lines(summary_a))
    assert counts[("LAUNCHED", "")] == 77
    got = {(k, m): (want, obs) for k, m, want, obs in compare_counts(kernels, counts)}
    assert got[("add", "ENTERED")] == (21 * 524288, 21 * 524288)
    assert got[("add", "STORED")] == (21 * 16777216, 21 * 16777216)  # two processes summed
    assert got[("add", "LOADED")] == (21 * 33554432, 21 * 33554432 - 4)
    assert got[("matmul", "ENTERED")] == (21 * 16384, 21 * 16384)  # keyed by id
    assert got[("matmul", "LOADED")] == (None, 0)
    assert got[("add", "LAUNCHED")] == (21 * 524288, 0)
    lat = parse_prefixed("latency sync n 20 median_ms 0.01 max_ms 0.2 timeouts 0\n", "latency")
    assert lat["sync"]["median_ms"] == "0.01"
    train = parse_prefixed("train mlp steps 2000 seconds 4.0 steps_per_s 500.0\n", "train")
    assert train["mlp"]["steps_per_s"] == "500.0" and run_rate(train["mlp"]) == 500.0
    bench_train.self_test()
    line = bench_train.result_line(600, 1.2, 50, [520.0, 505.0, 90.0, 510.0], 0.5, 0.4)
    assert run_rate(parse_prefixed(line, "train")["mlp"]) == 507.5  # the blocks' median
    train_self_test()
    if args.pack:
        lines = pack_probes(args.pack)
        print("\n".join(f"  {l}" for l in lines))
        assert sum(l.startswith("probe ") for l in lines) == PACK_PROBES, lines
        assert {l.split()[1].split("=")[0] for l in lines if l.startswith("map ")} == set(MAPS)
    print("bench_preload self-test: ok")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--egpu", help="the egpu binary (libegpu_preload.so beside it)")
    ap.add_argument("--pack", help="the kernel_bytes pack (libkernel_bytes.so)")
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
    if args.self_test:
        return self_test(args)
    fake = setup_fake(args) if args.fake else None
    if not args.egpu or not args.pack:
        ap.error("--egpu and --pack are needed (or --self-test)")
    os.makedirs(args.work, exist_ok=True)
    args.egpu, args.pack = os.path.abspath(args.egpu), os.path.abspath(args.pack)
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
        print(f"=== the pack {args.pack}:")
        print("\n".join(f"  {l}" for l in pack_probes(args.pack)), flush=True)
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
