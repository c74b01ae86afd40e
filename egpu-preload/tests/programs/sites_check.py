"""Checks egpu's Python launch sites against torch.profiler's stacks (issue 28): runs a small
PyTorch training loop (sites_train.py, profiled with `with_stack=True` from before its first
CUDA call) under `egpu run` with every launch's site captured (EGPU_SITES=1) and timed
(`--kernel-times --gpu-time-report`, whose report counts the launches per call site), then
compares, kernel by kernel, where each came from:

- the profiler's: the innermost frame outside torch/ of the Python stack of the op that launched
  the kernel (or of the nearest op around it with a stack); "no Python frame" for an op with
  none, as autograd's ops on its own threads have none;
- egpu's: the innermost Python frame outside torch/ of the launch's site (its Python frames are
  read from the launching thread's own state, whether the thread holds the GIL or not); "no
  Python frame" for a site without one (autograd's threads run no Python code).

Frames are compared by file (its base name: the profiler names a file outside torch/ by it alone)
and function (the profiler names a frame by the line where its function starts, egpu by the
line it is at). The profiler's ops on threads that run no Python code (autograd's) count as "no
Python frame" whatever it links them to, and the CUDA runtime's module-loading events, which
list a kernel again beside its op, are left out. The launches egpu counted per frame are matched
with the profiler's kernels per frame; a kernel matches when both put it at the same frame:

    python launch sites match torch.profiler: K/K kernels

and the run passes when every kernel the profiler tied to an op matches and egpu counted as many
launches as the profiler saw kernels. Everything needed to see why it did not is printed: both
counts per frame, egpu's report, the summary's site lines, the profiler's stacks of the kernels
that did not match, the commands' standard error.

On the GPU machine, with the release `egpu` and `libegpu_preload.so`:

    EGPU_REQUIRE_GPU=1 python3 egpu-preload/tests/programs/sites_check.py \
        --egpu PATH/egpu --preload PATH/libegpu_preload.so --out DIR

Without CUDA (no torch, or no device) it says so and exits 0, or 1 with EGPU_REQUIRE_GPU=1.
"""

import argparse
import collections
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
# `file:line:function`, as egpu names a Python frame.
EGPU_FRAME = re.compile(r"^(.+):(\d+):([^:]+)$")
NONE = "(no Python frame)"
# Events of the CUDA runtime, not ops, that the profiler lists a kernel under (again).
RUNTIME_EVENTS = ("Lazy Function Loading", "Runtime Triggered Module Loading",
                  "Activity Buffer Request")
# `file(line): function`, as torch.profiler names a Python frame (C functions and modules are
# named otherwise).
PROFILER_FRAME = re.compile(r"^(.*)\((\d+)\): (.*)$")
# A call-site row of `egpu run --gpu-time-report`'s report: launches and stack.
REPORT_ROW = re.compile(r"^.*?\s+\d+\.\d{9}\s+(\d+)\s+\d+  (.*)$")


def skip(why):
    print(f"skipped: {why}", flush=True)
    if os.environ.get("EGPU_REQUIRE_GPU") == "1":
        print("EGPU_REQUIRE_GPU=1: failing instead of skipping", flush=True)
        return 1
    return 0


def egpu_rows(report):
    """The report's call-site rows of the one process: (launches, frames innermost first)."""
    rows = []
    in_sites = False
    for line in report.splitlines():
        if line.startswith("call site"):
            in_sites = True
            continue
        if line.startswith("process ") or not line.strip():
            in_sites = False
            continue
        # FRAME GPU-SECONDS LAUNCHES SITES  STACK (frames joined by " <- ")
        m = REPORT_ROW.match(line) if in_sites else None
        if m:
            rows.append((int(m.group(1)), m.group(2).split(" <- ")))
    return rows


def egpu_frame(frames):
    """The innermost Python frame outside torch/ of a site's frames: "file:function", NONE when
    it has no Python frame, or a note when all its Python frames are torch's."""
    python = [m for m in (EGPU_FRAME.match(f) for f in frames) if m]
    for m in python:
        if not in_torch(m.group(1)):
            return f"{os.path.basename(m.group(1))}:{m.group(3)}"
    return NONE if not python else "(only torch/ frames among the 8 kept)"


def profiler_frame(kernel):
    """The innermost frame outside torch/ of a kernel's op's stack (the profiler's entries,
    innermost first, `file(line): function`): "file:function", or NONE. A profile written
    without stacks (this repository's tests write them so) gives its `frame` as written."""
    if not kernel.get("stack"):
        frame = kernel.get("frame")
        return f"{os.path.basename(frame[0])}:{frame[1]}" if frame else NONE
    for entry in kernel["stack"]:
        m = PROFILER_FRAME.match(entry)
        if m and not in_torch(m.group(1)):
            return f"{os.path.basename(m.group(1))}:{m.group(3).rsplit('.', 1)[-1]}"
    return NONE


def in_torch(path):
    """Whether a frame's file is torch's: egpu names files by their full path, the profiler
    torch's from the package (`torch/nn/modules/linear.py`) and others by their base name. So
    frames are compared by base name and function."""
    return path.startswith("torch/") or "/torch/" in path


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--egpu", required=True, help="the egpu binary")
    parser.add_argument("--preload", required=True, help="libegpu_preload.so")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds for the run")
    parser.add_argument("--out", help="a folder for the report, summary and profile")
    parser.add_argument("--from", dest="again", metavar="DIR",
                        help="compare the files an earlier run left in DIR (its --out), without "
                        "running anything")
    args = parser.parse_args()
    if args.again:
        return compare(args.again)

    probe = subprocess.run([args.python, "-c", "import torch; print(torch.cuda.is_available())"],
                           capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        return skip(f"no torch for {args.python}: {probe.stderr.strip()[-300:]}")
    if probe.stdout.strip() != "True":
        return skip("torch sees no CUDA device")

    out = args.out or tempfile.mkdtemp(prefix="egpu-sites-")
    os.makedirs(out, exist_ok=True)
    profile = os.path.join(out, "profile.json")
    report = os.path.join(out, "gpu-time.txt")
    summary = os.path.join(out, "summary")
    command = [args.egpu, "run", "--library", args.preload, "--kernel-times",
               "--gpu-time-report", report, "--summary", summary, "--",
               args.python, os.path.join(HERE, "sites_train.py"), profile, str(args.steps)]
    env = dict(os.environ, EGPU_SITES="1")
    print("running: EGPU_SITES=1 " + " ".join(command), flush=True)
    try:
        run = subprocess.run(command, capture_output=True, text=True, env=env,
                             timeout=args.timeout)
    except subprocess.TimeoutExpired as e:
        print(f"failure: the run took over {args.timeout} s\n{e.stdout}\n{e.stderr}")
        return 1
    print(run.stdout.strip())
    if run.stderr.strip():
        print("standard error (last lines):")
        for line in run.stderr.strip().splitlines()[-20:]:
            print("  " + line)
    if run.returncode == 77:
        return skip("the training script found no CUDA device")
    if run.returncode != 0 or not os.path.exists(profile) or not os.path.exists(report):
        print(f"failure: egpu run exited {run.returncode}; profile or report missing")
        return 1

    return compare(out)


def compare(out):
    """Compares the profile and egpu's report of a run in `out`; prints the result."""
    profile = os.path.join(out, "profile.json")
    report = os.path.join(out, "gpu-time.txt")
    summary = os.path.join(out, "summary")
    with open(profile) as f:
        prof = json.load(f)
    with open(report) as f:
        report_text = f.read()
    summaries = ""
    for path in sorted(glob.glob(summary + ".*")):
        with open(path) as f:
            summaries += f.read()
    print(f"Python {prof['python']}, torch {prof['torch']}, losses {prof['losses']}")
    print("summary's site lines:")
    for line in summaries.splitlines():
        if line.startswith(("sites ", "spans ")):
            print("  " + line)

    # The profiler's kernels on the thread that runs Python (sites_train.py says which; an older
    # profile: the first kernel's), those of the runtime's own events left out.
    main = prof.get("python_thread", prof["kernels"][0]["thread"] if prof["kernels"] else None)
    prof["kernels"] = [k for k in prof["kernels"] if k["op"] not in RUNTIME_EVENTS]
    for k in prof["kernels"]:
        if k["thread"] != main:
            k["stack"], k["frame"] = [], None
    expected = collections.Counter(profiler_frame(k) for k in prof["kernels"])
    seen = collections.Counter()
    rows = egpu_rows(report_text)
    for launches, frames in rows:
        seen[egpu_frame(frames)] += launches
    k = sum(expected.values())
    matched = sum(min(n, seen[frame]) for frame, n in expected.items())
    launches = sum(seen.values())

    width = max([len(f) for f in expected | seen] + [10])
    print(f"\n{'innermost frame outside torch/':<{width}}  {'profiler':>8}  {'egpu':>8}")
    for frame in sorted(expected | seen, key=lambda f: -(expected[f] + seen[f])):
        mark = "" if expected[frame] == seen[frame] else "   <- differs"
        print(f"{frame:<{width}}  {expected[frame]:>8}  {seen[frame]:>8}{mark}")
    print(f"\nprofiler: {prof['kernels_total']} kernels, {k} tied to an op, "
          f"{len(prof['unlinked'])} to none {prof['unlinked'][:5]}")
    print(f"egpu: {launches} launches timed and attributed, in {len(rows)} call-site rows")
    differing = {f for f in expected | seen if expected[f] != seen[f]}
    if differing:
        print("\nthe profiler's stacks of kernels at frames that differ (first 8):")
        shown = 0
        for kern in prof["kernels"]:
            if profiler_frame(kern) in differing and shown < 8:
                shown += 1
                print(f"  {kern['name'][:70]} (op {kern['op']}, thread {kern['thread']}): "
                      + " <- ".join(kern["stack"][:6]))
        print("egpu's call-site rows at frames that differ (first 8):")
        shown = 0
        for n, frames in rows:
            if egpu_frame(frames) in differing and shown < 8:
                shown += 1
                python = [f for f in frames if EGPU_FRAME.match(f)]
                native = [f for f in frames if not EGPU_FRAME.match(f)]
                print(f"  {n} launches: " + " <- ".join(python) + f" (native: "
                      + " <- ".join(native[:4]) + " ...)")
    print(f"\n(files in {out})")
    print(f"python launch sites match torch.profiler: {matched}/{k} kernels")
    ok = matched == k and k > 0 and launches == prof["kernels_total"]
    if launches != prof["kernels_total"]:
        print(f"failure: egpu counted {launches} launches, the profiler {prof['kernels_total']} "
              "kernels")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
