"""The zero-code benchmark (issue 17): unmodified programs, bare and under `egpu run`, with the
probe pack of examples/kernel_bytes.rs. Run on the GPU machine by target/gpu-bundle/run.sh for
the `bench` set (see scripts/gpu-bundle); it needs PyTorch and Triton there.

    python3 bench_preload.py --egpu PATH/TO/egpu --pack PATH/TO/libkernel_bytes.so --work DIR
        [--rounds 3] [--train-rounds 5] [--train-steps 2000] [--budget 540]
        [--skip-kernels] [--skip-latency] [--skip-train]
    python3 bench_preload.py --self-test [--pack PATH/TO/libkernel_bytes.so]

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
   under `egpu run --metrics`, in interleaved rounds: the median steps per second of each, its
   spread (min-max), and the ratio to bare against the target (>= 0.99x).

Exits 1 when a count is not exact, results differ, a check fails or a run fails, after
printing every table; the timing targets print PASS or MISS and never fail the run. The tables
are also written to RESULTS/bench-preload.md and the raw figures to RESULTS/bench-preload.json
(RESULTS: $OUT when set, else --work).
"""

import argparse
import collections
import ctypes
import glob
import json
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

KERNEL_TARGET = 1.3
TRAIN_TARGET = 0.99
MAPS = ("ENTERED", "EXITED", "LOADED", "STORED", "LAUNCHED")
# Which per-launch figure each map counts, times the launches.
PER_LAUNCH = {"ENTERED": "threads_per_launch", "EXITED": "threads_per_launch",
              "LOADED": "bytes_loaded_per_launch", "STORED": "bytes_stored_per_launch",
              "LAUNCHED": "threads_per_launch"}
PACK_PROBES = 5
# Seconds kept for the latency and training sections when the kernel rounds run long.
LATENCY_RESERVE, TRAIN_RESERVE = 45, 150
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


def train_section(r, args, python, failures, report, raw):
    """Interleaved rounds of bench_train.py: bare, `egpu run`, `egpu run --metrics`."""
    print("\n=== training: bench_train.py bare, under `egpu run`, under `egpu run --metrics`",
          flush=True)
    command = [python, os.path.join(HERE, "bench_train.py"), "--steps", str(args.train_steps)]
    variants = [("bare", command),
                ("egpu run", r.wrapped(command, probes=False)),
                ("egpu run --metrics", r.wrapped(command, probes=False, metrics=True))]
    rates = collections.defaultdict(list)
    for i in range(1, args.train_rounds + 1):
        for name, cmd in variants:
            got = r.run(cmd, f"round {i} {name}")
            if got is None:
                continue
            rc, out, _, _ = got
            f = parse_prefixed(out, "train").get("mlp", {})
            if rc != 0 or "steps_per_s" not in f:
                failures.append(f"train round {i} {name}: exit {rc}")
                continue
            rates[name].append(float(f["steps_per_s"]))
    raw["train"] = dict(rates)
    bare = median(rates["bare"])
    lines = ["", f"### Eager training steps per second ({args.train_rounds} interleaved rounds)",
             "", "| variant | median | spread (min-max) | ratio to bare | target | |",
             "|---|---|---|---|---|---|"]
    for name, _ in variants:
        xs = rates[name]
        med = median(xs)
        ratio = med / bare if med is not None and bare else None
        mark = "-" if ratio is None or name == "bare" else (
            "PASS" if ratio >= TRAIN_TARGET else "MISS")
        spread = f"{min(xs):.1f}-{max(xs):.1f}" if xs else "-"
        lines.append(f"| {name} | {'-' if med is None else f'{med:.1f}'} | {spread} | "
                     f"{'-' if ratio is None else f'{ratio:.4f}x'} | "
                     f"{'' if name == 'bare' else f'>= {TRAIN_TARGET}x'} | {mark} |")
    report += lines


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
    assert train["mlp"]["steps_per_s"] == "500.0"
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
    ap.add_argument("--train-rounds", type=int, default=5)
    ap.add_argument("--train-steps", type=int, default=2000)
    ap.add_argument("--budget", type=float, default=540, help="seconds for everything")
    ap.add_argument("--timeout", type=float, default=240, help="seconds for one run")
    ap.add_argument("--skip-kernels", action="store_true")
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument("--self-test", action="store_true", help="check the parsing; no GPU")
    args = ap.parse_args()
    if args.self_test:
        return self_test(args)
    if not args.egpu or not args.pack:
        ap.error("--egpu and --pack are needed (or --self-test)")
    os.makedirs(args.work, exist_ok=True)
    args.egpu, args.pack = os.path.abspath(args.egpu), os.path.abspath(args.pack)
    python = sys.executable or "python3"
    # Time the kernel rounds leave for the later sections.
    args.reserve = (0 if args.skip_latency else LATENCY_RESERVE) + (
        0 if args.skip_train else TRAIN_RESERVE)
    r = Runner(args.egpu, args.pack, args.work, args.budget, args.timeout)
    failures, report = [], ["## egpu zero-code benchmark"]
    raw = {"kernel_runs": [], "kernels": {}, "counts": []}
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
