"""The `allocs` set of `egpu mem` on the GPU machine: alloc_traffic.cu bare and under
`egpu mem run --sets allocs`, each buffer's bytes by class in the recording against what the
program says its kernels moved there (`expect alloc ADDRESS load L store S atomic A`), exactly;
then managed_touch.cu, each kernel's first touches of managed pages against what the program
says (`expect touch KERNEL pages N first F last L`), and its prefetch and advice.

    python3 alloc_check.py --egpu bin/egpu [--work DIR]
    python3 alloc_check.py --self-test          (no GPU: the parser and the verdict)

Prints `allocation bytes exact: K/K allocations`, `first touches exact: K/K kernels`,
`prefetch and advice: ok` and `results identical: yes` (each program); fails otherwise.
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


def expected_touches(text):
    """{kernel name: (pages, first, last)} from the program's `expect touch` lines."""
    out = {}
    for line in text.splitlines():
        w = line.split()
        if len(w) == 9 and w[:2] == ["expect", "touch"]:
            out[w[2]] = (int(w[4]), int(w[6]), int(w[8]))
    return out


def measured_touches(lines):
    """{kernel name: (pages, first, last)} from a recording's `first_touch` lines (summed over
    launches of a kernel), and its managed allocations."""
    names = {r["id"]: r["name"] for r in lines if r.get("type") == "kernel"}
    out = {}
    for r in lines:
        if r.get("type") == "first_touch":
            name = names.get(r["kernel"], r["kernel"])
            pages, first, last = out.get(name, (0, r["first"], r["last"]))
            out[name] = (pages + r["pages"], min(first, r["first"]), max(last, r["last"]))
    managed = [r for r in lines if r.get("type") == "allocation" and r.get("managed")]
    return out, managed


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
    text = "expect touch _Z1kv pages 2 first 0 last 1\nexpect touch _Z1jv pages 1 first 5 last 5\n"
    lines = [{"type": "kernel", "name": "_Z1kv", "id": "0a"},
             {"type": "kernel", "name": "_Z1jv", "id": "0b"},
             {"type": "allocation", "id": 1, "addr": 0, "bytes": 8192, "managed": True},
             {"type": "first_touch", "alloc": 1, "kernel": "0a", "launch": 3, "pages": 1,
              "first": 0, "last": 0},
             {"type": "first_touch", "alloc": 1, "kernel": "0a", "launch": 4, "pages": 1,
              "first": 1, "last": 1},
             {"type": "first_touch", "alloc": 1, "kernel": "0b", "launch": 5, "pages": 1,
              "first": 5, "last": 5}]
    got, managed = measured_touches(lines)
    assert got == expected_touches(text), (got, expected_touches(text))
    assert len(managed) == 1
    print("alloc_check self-test: ok")
    return 0


def run_program(args, name, env):
    """Builds `name`.cu, runs it bare and under `egpu mem run --sets allocs`: (bare output,
    probed output, recording lines), or None when the probed run failed."""
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    exe = os.path.join(args.work, name)
    subprocess.run([nvcc, "-O2", "-arch=sm_90", os.path.join(HERE, name + ".cu"), "-o", exe],
                   check=True)
    bare = subprocess.run([exe], capture_output=True, text=True, env=env, check=True).stdout
    out_dir = os.path.join(args.work, "rec-" + name)
    shutil.rmtree(out_dir, ignore_errors=True)
    probed = subprocess.run([os.path.abspath(args.egpu), "mem", "run", "--sets", "allocs",
                             "--out", out_dir, "--", exe], capture_output=True, text=True,
                            env=env)
    print(probed.stdout)
    if probed.returncode != 0:
        print(probed.stderr[-3000:])
        return None
    lines = []
    for path in glob.glob(os.path.join(out_dir, "*.egpumem")):
        lines += [json.loads(line) for line in open(path) if line.strip()]
    return bare, probed.stdout, lines


def identical(bare, probed):
    """Whether the `results` lines of both runs are the same (and there are some)."""
    result = lambda text: [l for l in text.splitlines() if l.startswith("results")]  # noqa: E731
    same = result(bare) == result(probed) and result(bare) != []
    print(f"results identical: {'yes' if same else 'no'}")
    return same


def managed(args, env):
    """managed_touch.cu: first touches per kernel, prefetch and advice."""
    ran = run_program(args, "managed_touch", env)
    if ran is None:
        return False
    bare, probed, lines = ran
    want = expected_touches(probed)
    got, allocations = measured_touches(lines)
    exact = 0
    for k, w in sorted(want.items()):
        ok = got.get(k) == w
        exact += ok
        print(f"  {k}: expected {w}, egpu {got.get(k)} {'ok' if ok else 'NOT exact'}")
    print(f"first touches exact: {exact}/{len(want)} kernels")
    header = next((r for r in lines if r.get("type") == "header"), {})
    print(f"  the driver's unified-memory reports: {header.get('um_reports', '(none)')}")
    steer_ok = False
    for a in allocations:
        print(f"  managed allocation {a['id']}: " + ", ".join(
            f"{k} {a[k]}" for k in ("bytes", "prefetched_to_device", "prefetched_to_host",
                                    "advice", "migrated_in", "migrated_out", "gpu_faults",
                                    "cpu_faults", "thrashing") if k in a))
        prefetched = [int(l.split()[2]) for l in probed.splitlines()
                      if l.startswith("expect prefetched")]
        steer_ok = (prefetched == [a.get("prefetched_to_device", 0)]
                    and a.get("advice") == ["read mostly"])
    print(f"prefetch and advice: {'ok' if steer_ok else 'NOT as the program did'}")
    same = identical(bare, probed)
    return bool(want) and exact == len(want) and len(allocations) == 1 and steer_ok and same


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
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    ran = run_program(args, "alloc_traffic", env)
    if ran is None:
        return 1
    bare, probed, lines = ran
    want = expected(probed)
    got, none = measured(lines)
    rows = verdict(want, got)
    for a, w, g, ok in rows:
        print(f"  allocation {a:#x}: expected {w}, egpu {g} {'ok' if ok else 'NOT exact'}")
    print(f"  bytes in no allocation: {none}")
    exact = sum(ok for *_, ok in rows)
    print(f"allocation bytes exact: {exact}/{len(rows)} allocations")
    same = identical(bare, probed)
    managed_ok = managed(args, env)
    return 0 if rows and exact == len(rows) and same and managed_ok else 1


if __name__ == "__main__":
    sys.exit(main())
