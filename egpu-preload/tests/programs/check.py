"""Runs real CUDA programs under egpu's preloaded library and compares what the library observed
with what the programs did. Run on the GPU machine by target/gpu-bundle/run.sh (see
scripts/gpu-bundle); it needs nvcc, PyTorch and Triton there.

    python3 check.py --egpu PATH/TO/egpu --work DIR

For each program it prints the expected and the observed counts side by side, and exits non-zero
when one differs or a program fails. The programs print `expect KEY VALUE...` lines: the CUDA C
program from what it did, the PyTorch script from its profiler, the Triton script from its launch
loop. The library's counts come from the summaries `egpu run --summary` makes each process write.
Each program also runs without the library, and must behave the same.
"""

import argparse
import collections
import glob
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_summaries(prefix):
    """Sums the reports of every process (`PREFIX.<pid>`)."""
    observed = collections.Counter()
    pids = []
    for path in sorted(glob.glob(prefix + ".*")):
        pids.append(path.rsplit(".", 1)[1])
        for line in open(path):
            words = line.split()
            if not words:
                continue
            if words[0] == "kernel":
                n, name = int(words[2]), " ".join(words[3:])
                if name == "(graph)":
                    observed["graph_launches"] += n
                elif name == "(captured)":
                    observed["captured"] += n
                else:
                    observed["launches"] += n
                    observed[f"kernel {name}"] += n
            elif words[0] == "copies":
                observed[f"copies {words[1]}"] += int(words[2])
                observed[f"copies {words[1]} bytes"] += int(words[3])
            elif words[0] == "sets":
                observed["sets"] += int(words[1])
                observed["sets bytes"] += int(words[2])
            elif words[:2] == ["modules", "instrumented:"]:
                # `modules instrumented: X, not instrumentable: Y (reason: n, ...)`
                observed["modules instrumented"] += int(words[2].rstrip(","))
                observed["modules not instrumentable"] += int(words[5])
                print(f"  | summary: {line.strip()}")
            elif words[0] == "modules":
                observed[f"modules {words[1]}"] += int(words[2])
            elif words[0] == "map" and len(words) >= 4 and re.fullmatch(r"\d+", words[-1]):
                observed[" ".join(words[:-1])] += int(words[-1])
            elif words[:2] == ["not", "instrumentable:"]:
                print(f"  | summary: {line.strip()}")
            elif words[0] == "probes":
                for field in words[1:]:
                    key, _, value = field.partition("=")
                    observed[f"probes {key}"] += int(value)
            elif words[:2] == ["device", "maps"]:
                # `device maps contexts C parts P ... drained N`: pairs of a name and a count.
                for key, value in zip(words[2::2], words[3::2]):
                    observed[f"device {key}"] += int(value)
    return observed, pids


def expectations(stdout):
    """`expect KEY... COUNT [BYTES]` lines: {key: count} (and `key bytes`)."""
    expected = {}
    for line in stdout.splitlines():
        words = line.split()
        if len(words) < 3 or words[0] != "expect":
            continue
        numbers = []
        while words and re.fullmatch(r"-?\d+", words[-1]):
            numbers.insert(0, int(words.pop()))
        key = " ".join(words[1:])
        expected[key] = numbers[0]
        if len(numbers) > 1:
            expected[f"{key} bytes"] = numbers[1]
    return expected


def scrape_while_running(proc, lines, want_launches, failures):
    """Reads the metrics address egpu prints, waits for the program's `hold` line, scrapes,
    and lets the program finish (it waits for the file named by EGPU_CHECK_HOLD)."""
    address = None
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        text = "".join(lines)
        m = re.search(r"metrics at (http://\S+/metrics)", text)
        if m:
            address = m.group(1)
        if address and "holding" in text:
            break
        time.sleep(0.05)
    if not address:
        failures.append("metrics: egpu printed no address")
        return None
    try:
        body = urllib.request.urlopen(address, timeout=10).read().decode()
    except OSError as e:
        failures.append(f"metrics: scraping {address}: {e}")
        return None
    total = 0
    for line in body.splitlines():
        m = re.match(r"gpu_cuda_kernel_launch_calls_total\{[^}]*\} (\d+)$", line)
        if m:
            total += int(m.group(1))
    print(f"  scraped {address} while the program ran: {len(body)} bytes, "
          f"gpu_cuda_kernel_launch_calls_total {total}")
    for line in body.splitlines():
        if line.startswith(("gpu_cuda_kernel_launch_calls_total", "gpu_cuda_memory_copies_bytes_count",
                            "gpu_cuda_memory_allocations_bytes_total", "egpu_")):
            print(f"    {line}")
    if want_launches is not None and total != want_launches:
        failures.append(f"metrics: {total} launches served, {want_launches} expected")
    return body


def run_program(name, command, egpu, work, compare, metrics=False, env=None, only=None,
                probes=None):
    """Runs `command` without and with the library; returns the failures."""
    failures = []
    env = dict(os.environ, **(env or {}))
    env.pop("LD_PRELOAD", None)
    print(f"\n=== {name}: {' '.join(command)}")
    plain = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    if plain.returncode != 0:
        print(plain.stdout + plain.stderr)
        return [f"{name}: exits {plain.returncode} without the library"]
    prefix = os.path.join(work, f"summary-{name}")
    for old in glob.glob(prefix + ".*"):
        os.remove(old)
    hold = os.path.join(work, f"hold-{name}")
    if os.path.exists(hold):
        os.remove(hold)
    wrapped = [egpu, "run", "--summary", prefix]
    if probes:
        wrapped += ["--probes", probes]
        env["EGPU_PROBES"] = probes  # for the program's own `expect` lines
    if metrics:
        wrapped += ["--metrics", "127.0.0.1:0"]
        env["EGPU_CHECK_HOLD"] = hold
    wrapped += ["--"] + command
    start = time.time()
    proc = subprocess.Popen(wrapped, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")))
    reader.start()
    if metrics:
        expected_now = expectations(plain.stdout).get("launches")
        scrape_while_running(proc, lines, expected_now, failures)
        open(hold, "w").close()
    try:
        proc.wait(timeout=600)
    except subprocess.TimeoutExpired:
        proc.kill()
        failures.append(f"{name}: timed out under the library")
    reader.join()
    seconds = time.time() - start
    out = "".join(lines)
    if proc.returncode != 0:
        print(out)
        return failures + [f"{name}: exits {proc.returncode} under the library"]
    for line in out.splitlines():
        if not line.startswith(("expect ", "profiled kernel")):
            print(f"  | {line}")
    expected = expectations(out)
    observed, pids = parse_summaries(prefix)
    print(f"  {len(pids)} process(es) wrote summaries; {seconds:.1f} s under the library")
    print(f"  {'what':<44} {'expected':>14} {'observed':>14}")
    for key, want in expected.items():
        if only and not key.startswith(only):
            print(f"  {key:<44} {want:>14} {'not seen':>14}   (a statically linked runtime)")
            continue
        got = observed.get(key, 0)
        mark = "" if got == want else "   <-- differs"
        print(f"  {key:<44} {want:>14} {got:>14}{mark}")
        if got != want:
            failures.append(f"{name}: {key}: expected {want}, observed {got}")
    for key in sorted(observed):
        if key not in expected and not key.startswith("kernel "):
            print(f"  {key:<44} {'':>14} {observed[key]:>14}")
    traced = sum(v for k, v in observed.items() if k.startswith("map TRACED "))
    if traced:
        # Every block the device probes traced reached the ring in shared memory, drained from
        # the GPU while the program ran: one record each.
        drained = observed.get("device drained", 0)
        mark = "" if drained == traced else "   <-- differs"
        print(f"  {'ring records drained (blocks traced)':<44} {traced:>14} {drained:>14}{mark}")
        if drained != traced:
            failures.append(f"{name}: {drained} ring records drained, {traced} blocks traced")
    if observed.get("device failed", 0):
        failures.append(f"{name}: {observed['device failed']} device-map merges failed")
    if compare:
        strip = lambda s: [l for l in s.splitlines() if not l.startswith(("egpu:", "  |"))]
        if compare(plain.stdout) != compare(out):
            failures.append(f"{name}: output differs with the library")
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--egpu", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--only", default="")
    ap.add_argument("--probes", default=os.environ.get("EGPU_EXAMPLE_PROBES"),
                    help="the example probes (libprobes.so), to instrument Triton's kernel")
    ap.add_argument("--trace-probes", default=os.environ.get("EGPU_TRACE_PROBES"),
                    help="the block_trace example pack (libblock_trace.so): a ring on the GPU")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    egpu = os.path.abspath(args.egpu)
    failures = []
    results = []

    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    source = os.path.join(HERE, "counts.cu")
    programs = []
    for flavour, flags in [("static", []), ("shared", ["-cudart", "shared"])]:
        exe = os.path.join(args.work, f"counts-{flavour}")
        build = subprocess.run([nvcc, "-O2", "-arch=sm_90", *flags, source, "-o", exe],
                               capture_output=True, text=True)
        if build.returncode != 0:
            failures.append(f"nvcc {flavour}: {build.stderr.strip()}")
            continue
        programs.append((f"cuda-c-{flavour}", [exe], False))
    # A runtime linked into the program reaches the driver's copies, sets and allocations through
    # private entry points: only its launches (public entry points) can be seen.
    static_only = ("launches", "captured", "graph_launches", "kernel ")
    python = sys.executable or "python3"
    programs.append(("pytorch", [python, os.path.join(HERE, "train.py"), "5"], True))
    programs.append(("triton", [python, os.path.join(HERE, "triton_add.py"), "7"], False))
    if args.probes:
        programs.append(("triton-probed", [python, os.path.join(HERE, "triton_add.py"), "7"], False))
    if args.trace_probes:
        programs.append(("triton-traced", [python, os.path.join(HERE, "triton_add.py"), "7"], False))

    # What the program computed and launched, which the library must not change.
    expected_kernel_lines = lambda s: [l for l in s.splitlines()
                                       if l.startswith(("expect kernel", "expect launches", "ok"))
                                       or "results" in l]
    for name, command, metrics in programs:
        if args.only and args.only not in name:
            continue
        compare = None if name == "pytorch" else expected_kernel_lines
        only = static_only if name == "cuda-c-static" else None
        probes = {"-probed": args.probes, "-traced": args.trace_probes}.get(name[-7:])
        got = run_program(name, command, egpu, args.work, compare, metrics=metrics, only=only,
                          probes=probes)
        results.append((name, "ok" if not got else "FAILED"))
        failures += got

    print("\n=== programs under the library")
    for name, status in results:
        print(f"  {name:<20} {status}")
    for f in failures:
        print(f"  failure: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
