"""The `timeline` set in mem_check.py: a program that prints `expect phases NAME` (mem_timing.cu's
two-phase kernel) runs again under `egpu mem run --sets counts,timeline --sample 32 --kernel
'^NAME$'` (that kernel alone instrumented), and the
kernel's windows (`window` lines) must show its two phases, the fastest window's bandwidth more
than 3 times the slowest's, and sum to the bytes the `counts` set counted within 10% (the
sampling's error: one warp in 32); records dropped (a ring full before the merger emptied it:
measured, 848 of 524288 once on the H200) are said, their bytes missing from that sum.

    python3 mem_timeline.py --self-test          (no GPU: the parser and the verdict)
"""

import json
import os
import glob
import shutil
import sys

SAMPLE = 32
FAST_OVER_SLOW = 3.0
SUM_WITHIN = 0.10


def expected_phases(text):
    """The kernels of `expect phases NAME` lines."""
    return [w[2] for w in (l.split() for l in text.splitlines())
            if w[:2] == ["expect", "phases"] and len(w) == 3]


def read(folder):
    """(headers, {kernel name: counted bytes}, {kernel name: [windows]}) of the recordings."""
    headers, counted, windows = [], {}, {}
    for path in sorted(glob.glob(os.path.join(folder, "*.egpumem"))):
        names, lines = {}, [json.loads(l) for l in open(path) if l.strip()]
        for rec in lines:
            if rec["type"] == "header":
                headers.append(rec)
            elif rec["type"] == "kernel":
                names[rec["id"]] = rec["name"]
                t = rec.get("traffic") or {}
                total = sum(t.get(f, 0) for f in ("loaded", "stored", "atomic", "async",
                                                   "tensor_loaded", "tensor_stored"))
                counted[rec["name"]] = counted.get(rec["name"], 0) + total
        for rec in lines:
            if rec["type"] == "window":
                windows.setdefault(names.get(rec["kernel"], rec["kernel"]), []).append(rec)
    return headers, counted, windows


def verdict(kernel, counted, windows, dropped):
    """(ok, a line saying why) for one kernel's windows."""
    ws = windows.get(kernel, [])
    if not ws:
        return False, f"timeline {kernel}: no windows"
    longest = max(w["end_ns"] - w["start_ns"] for w in ws)
    full = [w for w in ws if 2 * (w["end_ns"] - w["start_ns"]) >= longest]
    bw = [w["bytes"] / ((w["end_ns"] - w["start_ns"]) * 1e-9) for w in full]
    fast, slow = max(bw), min(bw)
    total = sum(w["bytes"] for w in ws)
    want = counted.get(kernel, 0)
    off = abs(total - want) / want if want else float("inf")
    ok = slow > 0 and fast > FAST_OVER_SLOW * slow and off <= SUM_WITHIN
    return ok, (f"timeline {kernel}: {len(ws)} windows of {longest / 1e3:.1f} us, slowest "
                f"{slow / 1e9:.2f} GB/s, fastest {fast / 1e9:.2f} GB/s ({fast / max(slow, 1):.0f}x), "
                f"windows' bytes {total} against {want} counted ({100 * off:.1f}% off), "
                f"{dropped} dropped {'ok' if ok else 'NOT as expected'}")


def check(name, command, args, env, out, run, totals):
    """Runs `command` under the timeline if `out` (its output under egpu mem) expects phases;
    failures, as mem_check.py lists them. `run` is device_check.run."""
    kernels = expected_phases(out)
    if not kernels:
        return []
    folder = os.path.join(args.work, f"mem-{name}-timeline")
    shutil.rmtree(folder, ignore_errors=True)
    # Only the kernels checked (`--kernel`): the others' records (saxpy's 6 × 2^28 elements)
    # would fill the rings and make drops that say nothing of these.
    regex = "|".join(f"^{k}$" for k in kernels)
    rc, tout, terr = run([args.egpu, "mem", "run", "--sets", "counts,timeline", "--sample",
                          str(SAMPLE), "--kernel", regex, "--out", folder, "--", *command], env)
    if rc != 0:
        print("\n".join(f"  | {l}" for l in (tout + terr).splitlines()[-20:]))
        return [f"{name}: exits {rc} under the timeline"]
    if args.keep:
        shutil.copytree(folder, os.path.join(args.keep, name + "-timeline"), dirs_exist_ok=True)
    print("\n".join(f"  | {l}" for l in tout.splitlines() if "windows:" in l or "timeline:" in l))
    headers, counted, windows = read(folder)
    dropped = sum((h.get("timeline") or {}).get("dropped", 0) for h in headers)
    failures = []
    for kernel in kernels:
        ok, line = verdict(kernel, counted, windows, dropped)
        print(f"  {line}")
        totals.setdefault("timeline", []).append(ok)
        if not ok:
            failures.append(f"{name}: the timeline of {kernel}")
    return failures


def self_test():
    assert expected_phases("x\nexpect phases _Z6phases\n") == ["_Z6phases"]
    # 10 windows of 1 µs: 5 at 3.2 kB, 5 at 0.32 kB; 17.6 kB counted.
    ws = [{"start_ns": i * 1000, "end_ns": (i + 1) * 1000, "bytes": 3200 if i < 5 else 320}
          for i in range(10)]
    ok, line = verdict("k", {"k": 17600}, {"k": ws}, 0)
    assert ok, line
    assert not verdict("k", {"k": 30000}, {"k": ws}, 0)[0], "the sum is off"
    assert verdict("k", {"k": 17600}, {"k": ws}, 4)[0], "a few records dropped, the sum within"
    flat = [dict(w, bytes=1000) for w in ws]
    assert not verdict("k", {"k": 10000}, {"k": flat}, 0)[0], "one phase"
    print("mem_timeline self-test: ok")
    return 0


if __name__ == "__main__":
    sys.exit(self_test() if "--self-test" in sys.argv else 2)
