"""The `allocs` set of `egpu mem` on the GPU machine: alloc_traffic.cu bare and under
`egpu mem run --sets allocs`, each buffer's bytes by class in the recording against what the
program says its kernels moved there (`expect alloc ADDRESS load L store S atomic A`), exactly.

    python3 alloc_check.py --egpu bin/egpu [--work DIR]
    python3 alloc_check.py --self-test          (no GPU: the parser and the verdict)

Prints `allocation bytes exact: K/K allocations` and `results identical: yes`; fails otherwise.
"""

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def expected(text):
    """{address: (load, store, atomic)} from the program's `expect alloc` lines."""
    out = {}
    for line in text.splitlines():
        w = line.split()
        if len(w) == 9 and w[:2] == ["expect", "alloc"]:
            out[int(w[2], 16)] = (int(w[4]), int(w[6]), int(w[8]))
    return out


def measured(lines):
    """{address: (load, store, atomic)} from a recording's `allocation` and `alloc_traffic`
    lines (bytes summed over kernels), and the bytes in no allocation."""
    addr = {}
    sums = {}
    for rec in lines:
        if rec.get("type") == "allocation":
            addr[rec["id"]] = rec["addr"]
        elif rec.get("type") == "alloc_traffic":
            s = sums.setdefault(rec["alloc"], [0, 0, 0])
            s[0] += rec.get("loaded", 0)
            s[1] += rec.get("stored", 0)
            s[2] += rec.get("atomic", 0)
    out = {a: tuple(sums.get(i, [0, 0, 0])) for i, a in addr.items()}
    return out, tuple(sums.get(0, [0, 0, 0]))


def verdict(want, got):
    """[(address, want, got, exact)] for each buffer the program named."""
    return [(a, w, got.get(a), got.get(a) == w) for a, w in sorted(want.items())]


def self_test():
    text = "expect alloc 0x10 load 8 store 0 atomic 0\nexpect alloc 0x20 load 0 store 4 atomic 4\n"
    want = expected(text)
    assert want == {16: (8, 0, 0), 32: (0, 4, 4)}, want
    lines = [{"type": "allocation", "id": 1, "addr": 16, "bytes": 64},
             {"type": "allocation", "id": 2, "addr": 32, "bytes": 64},
             {"type": "alloc_traffic", "kernel": "a", "alloc": 1, "loaded": 8},
             {"type": "alloc_traffic", "kernel": "b", "alloc": 2, "stored": 4, "atomic": 4},
             {"type": "alloc_traffic", "kernel": "b", "alloc": 0, "loaded": 12}]
    got, none = measured(lines)
    assert none == (12, 0, 0), none
    assert all(ok for *_, ok in verdict(want, got)), verdict(want, got)
    got[32] = (0, 4, 0)
    assert [ok for *_, ok in verdict(want, got)] == [True, False]
    print("alloc_check self-test: ok")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--egpu")
    ap.add_argument("--work", default="/tmp/egpu-alloc-check")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if not args.egpu:
        ap.error("--egpu is needed")
    os.makedirs(args.work, exist_ok=True)
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    exe = os.path.join(args.work, "alloc_traffic")
    subprocess.run([nvcc, "-O2", "-arch=sm_90", os.path.join(HERE, "alloc_traffic.cu"), "-o",
                    exe], check=True)
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    bare = subprocess.run([exe], capture_output=True, text=True, env=env, check=True).stdout
    out_dir = os.path.join(args.work, "rec")
    shutil.rmtree(out_dir, ignore_errors=True)
    probed = subprocess.run([os.path.abspath(args.egpu), "mem", "run", "--sets", "allocs",
                             "--out", out_dir, "--", exe], capture_output=True, text=True,
                            env=env)
    print(probed.stdout)
    if probed.returncode != 0:
        print(probed.stderr[-3000:])
        return 1
    lines = []
    for path in glob.glob(os.path.join(out_dir, "*.egpumem")):
        lines += [json.loads(line) for line in open(path) if line.strip()]
    want = expected(probed.stdout)
    got, none = measured(lines)
    rows = verdict(want, got)
    for a, w, g, ok in rows:
        print(f"  allocation {a:#x}: expected {w}, egpu {g} {'ok' if ok else 'NOT exact'}")
    print(f"  bytes in no allocation: {none}")
    exact = sum(ok for *_, ok in rows)
    print(f"allocation bytes exact: {exact}/{len(rows)} allocations")
    result = lambda text: [l for l in text.splitlines() if l.startswith("results")]  # noqa: E731
    same = result(bare) == result(probed.stdout) and result(bare) != []
    print(f"results identical: {'yes' if same else 'no'}")
    return 0 if rows and exact == len(rows) and same else 1


if __name__ == "__main__":
    sys.exit(main())
