"""Several GPUs (issue 29), on a machine with two: two programs, each run bare, under
`egpu run --probes libkernel_bytes.so` (examples/kernel_bytes.rs) and under `egpu mem run`, and
what egpu counted compared with what the programs did.

    python3 multi_gpu_check.py --egpu bin/egpu --preload preload/libegpu_preload.so \\
        --pack preload/libkernel_bytes.so [--work DIR] [--only devices|nccl]
    python3 multi_gpu_check.py --self-test      (no GPU, no torch: the parsers and the verdicts)

The programs (this file again, with `--program`):
- `devices`: one process using both GPUs: a Triton add kernel launched 3 times on cuda:0 over
  2^20 floats and 5 times on cuda:1 over 2^21 (torch makes the tensors). Expected per device:
  threads started (ENTERED: launches × blocks × 128), bytes loaded (LOADED: launches × n × 8) and
  stored (STORED: launches × n × 4). Under `egpu run` they are read from the summary's
  per-device lines (`map LOADED device 1 add_kernel 41943040`), under `egpu mem run` from the
  recording's per-device traffic (`"devices":[{"device":1,"traffic":{"loaded":…}}]`).
- `nccl`: a two-process torch.distributed all-reduce without torchrun: this file spawns two
  ranks (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, backend nccl), one per GPU; each
  all-reduces three float32 tensors (2^10, 2^16 and 2^20 elements) and broadcasts one (2^12)
  from rank 0. Expected per rank: `nccl allreduce calls 3 bytes 4460544 ranks 2 rank R` and
  `nccl broadcast calls 1 bytes 16384 ranks 2 rank R` in its summary (NCCL's group calls, which
  PyTorch may add around them, are shown, not compared).

Every program prints `results ...` lines (hashes of its outputs), which must be the same bare
and under egpu. NVLink multicast stays off: every run, bare ones included, has
NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 (egpu forces
them for the programs it starts; the ranks print what they see, and the check fails on another
value). Prints, per program and mode,

    per-device counts exact: 2/2 devices
    nccl counts exact: 4/4 operations
    results identical: yes

and fails when a count differs, a run fails or results differ. With fewer than two GPUs it says
so and succeeds, or fails with EGPU_REQUIRE_GPU=1.
"""

import argparse
import glob
import json
import os
import re
import shutil
import socket
import subprocess
import sys

HERE = os.path.abspath(__file__)
# NVLink multicast off, as egpu sets it (egpu-cli/src/safety.rs); never another value.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                 "NVSHMEM_DISABLE_NVLS": "1"}
# The `devices` program: per device, (elements, launches); the Triton kernel's block and warps.
PLAN = {0: (1 << 20, 3), 1: (1 << 21, 5)}
BLOCK, WARPS = 1024, 4
# The `nccl` program: all-reduced sizes and the broadcast's, in float32 elements.
ALLREDUCE = (1 << 10, 1 << 16, 1 << 20)
BROADCAST = 1 << 12
WORLD = 2


def kernel_id(name):
    """A kernel's id as egpu computes it (egpu_ebpf::kernel_id): 64-bit FNV-1a of its name."""
    h = 0xCBF29CE484222325
    for b in name.encode():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


# --- the programs ----------------------------------------------------------------------------


def digest(t):
    """A hash of a tensor's bytes."""
    import hashlib
    import torch
    flat = t.detach().contiguous().cpu().view(torch.uint8).reshape(-1)
    try:
        data = flat.numpy().tobytes()
    except (RuntimeError, ImportError):
        data = bytes(flat.tolist())
    return hashlib.sha256(data).hexdigest()[:16]


def program_devices():
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, x + y, mask=mask)

    if torch.cuda.device_count() < 2:
        print(f"{torch.cuda.device_count()} GPUs, 2 needed", file=sys.stderr)
        return 2
    for d, (n, launches) in PLAN.items():
        with torch.cuda.device(d):
            x = torch.arange(n, dtype=torch.float32, device=f"cuda:{d}")
            y = x * 2 + d
            out = torch.empty_like(x)
            for _ in range(launches):
                add_kernel[(n // BLOCK,)](x, y, out, n, BLOCK=BLOCK, num_warps=WARPS)
            torch.cuda.synchronize(d)
            blocks = n // BLOCK
            print(f"expect device {d} add_kernel launches {launches} "
                  f"entered {launches * blocks * WARPS * 32} loaded {launches * n * 8} "
                  f"stored {launches * n * 4}")
            print(f"results device {d} add_kernel {digest(out)}")
    return 0


def program_rank():
    import torch
    import torch.distributed as dist
    rank = int(os.environ["RANK"])
    for name in MULTICAST_OFF:
        print(f"rank {rank} env {name}={os.environ.get(name, '<unset>')}")
    torch.cuda.set_device(rank)
    device = torch.device(f"cuda:{rank}")
    try:
        dist.init_process_group("nccl", rank=rank, world_size=WORLD, device_id=device)
    except TypeError:  # a PyTorch without `device_id`
        dist.init_process_group("nccl", rank=rank, world_size=WORLD)
    for i, n in enumerate(ALLREDUCE):
        t = torch.arange(n, dtype=torch.float32, device=device) * (rank + 1) + i
        dist.all_reduce(t)
        print(f"results rank {rank} allreduce {i} {digest(t)}")
    b = torch.full((BROADCAST,), float(rank + 7), device=device)
    dist.broadcast(b, src=0)
    print(f"results rank {rank} broadcast {digest(b)}")
    torch.cuda.synchronize()
    print(f"expect nccl allreduce rank {rank} calls {len(ALLREDUCE)} "
          f"bytes {4 * sum(ALLREDUCE)} ranks {WORLD}")
    print(f"expect nccl broadcast rank {rank} calls 1 bytes {4 * BROADCAST} ranks {WORLD}")
    dist.destroy_process_group()
    return 0


def program_nccl():
    """Spawns the two ranks (no torchrun), each on its GPU; prints what they printed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ranks = []
    for rank in range(WORLD):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   LOCAL_RANK=str(rank), WORLD_SIZE=str(WORLD))
        ranks.append(subprocess.Popen([sys.executable, HERE, "--program", "rank"], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    rc = 0
    for rank, p in enumerate(ranks):
        try:
            out, err = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            print(f"rank {rank} timed out", file=sys.stderr)
            rc = 1
        sys.stdout.write(out)
        if p.returncode != 0:
            sys.stderr.write(err[-3000:])
            rc = rc or p.returncode or 1
    return rc


# --- what the programs said, and what egpu saw -------------------------------------------------


def results(text):
    """What must not change under egpu: the `results ...` lines, sorted (ranks interleave)."""
    return sorted(l.strip() for l in text.splitlines() if l.startswith("results "))


def device_expectations(text):
    """{device: {ENTERED, LOADED, STORED: value}} for add_kernel, from `expect device ...`."""
    out = {}
    for line in text.splitlines():
        w = line.split()
        if w[:2] == ["expect", "device"] and len(w) == 12 and w[3] == "add_kernel":
            f = dict(zip(w[4::2], w[5::2]))
            out[int(w[2])] = {"ENTERED": int(f["entered"]), "LOADED": int(f["loaded"]),
                              "STORED": int(f["stored"])}
    return out


def nccl_expectations(text):
    """{(rank, op): (calls, bytes, ranks)} from `expect nccl OP rank R calls N bytes B ranks W`."""
    out = {}
    for line in text.splitlines():
        w = line.split()
        if w[:2] == ["expect", "nccl"] and len(w) == 11:
            f = dict(zip(w[3::2], w[4::2]))
            out[(int(f["rank"]), w[2])] = (int(f["calls"]), int(f["bytes"]), int(f["ranks"]))
    return out


def multicast_seen(text):
    """The multicast variables each rank saw: [(rank, name, value)]."""
    return re.findall(r"^rank (\d+) env (\w+)=(\S+)$", text, re.M)


def summary_texts(prefix):
    return [open(p).read() for p in sorted(glob.glob(prefix + ".*"))]


def per_device_maps(texts, kernel="add_kernel"):
    """{device: {MAP: value}} of `map MAP device D KEY VALUE` lines whose key is the kernel (by
    name or id), summed over the summaries."""
    keys = {kernel, str(kernel_id(kernel))}
    out = {}
    for text in texts:
        for line in text.splitlines():
            w = line.split()
            if len(w) == 6 and w[0] == "map" and w[2] == "device" and w[4] in keys:
                if w[3].isdigit() and w[5].isdigit():
                    got = out.setdefault(int(w[3]), {})
                    got[w[1]] = got.get(w[1], 0) + int(w[5])
    return out


def nccl_lines(texts):
    """{(rank, op): (calls, bytes, ranks)} of the summaries' `nccl OP calls N bytes B ranks W
    rank R host_ns T` lines (each rank's process writes its own summary); group calls under
    their rank -1 as the summary has it."""
    out = {}
    for text in texts:
        for line in text.splitlines():
            m = re.match(r"nccl (\w+) calls (\d+) bytes (\d+) ranks (-?\d+) rank (-?\d+) ", line)
            if m:
                op, calls, nbytes, ranks, rank = m.groups()
                key = (int(rank), op)
                c, b, _ = out.get(key, (0, 0, 0))
                out[key] = (c + int(calls), b + int(nbytes), int(ranks))
    return out


def recording_devices(folder, kernel="add_kernel"):
    """{device: {ENTERED?, LOADED, STORED}} from the `egpu mem` recordings' kernel lines'
    per-device traffic (`ENTERED` is not recorded: only bytes are compared)."""
    out = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.egpumem"))):
        for line in open(path):
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("type") != "kernel" or rec.get("name") != kernel:
                continue
            for d in rec.get("devices") or []:
                t = d.get("traffic") or {}
                got = out.setdefault(int(d["device"]), {"LOADED": 0, "STORED": 0})
                got["LOADED"] += int(t.get("loaded", 0))
                got["STORED"] += int(t.get("stored", 0))
    return out


def device_verdict(expected, observed):
    """(exact, of, rows): a device is exact when every figure observed for it (the maps the mode
    has) equals the expectation, and at least one was."""
    rows, exact = [], 0
    for d, want in sorted(expected.items()):
        got = observed.get(d, {})
        compared = [k for k in sorted(want) if k in got] or sorted(want)
        ok = bool(got)
        for k in compared:
            rows.append((d, k, want[k], got.get(k)))
            ok &= got.get(k) == want[k]
        exact += ok
    return exact, len(expected), rows


def nccl_verdict(expected, observed):
    rows, exact = [], 0
    for key, want in sorted(expected.items()):
        got = observed.get(key)
        rows.append((key, want, got))
        exact += got == want
    return exact, len(expected), rows


# --- running ---------------------------------------------------------------------------------


def run(command, env, timeout=420):
    p = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def show(text, last=25):
    print("\n".join(f"  | {l}" for l in text.splitlines()[-last:]))


def check(name, args, env):
    """Runs program `name` bare, under `egpu run --probes PACK` and under `egpu mem run`;
    prints the verdict lines; the failures."""
    command = [sys.executable, HERE, "--program", name]
    print(f"\n=== {name}", flush=True)
    rc, bare, err = run(command, env)
    if rc != 0:
        show(bare + err)
        return [f"{name}: exits {rc} bare"]
    failures = []
    for mode in ("egpu run", "egpu mem run"):
        prefix = os.path.join(args.work, f"summary-{name}-{mode.split()[-1]}")
        for old in glob.glob(prefix + ".*"):
            os.remove(old)
        recordings = os.path.join(args.work, f"mem-{name}")
        shutil.rmtree(recordings, ignore_errors=True)
        if mode == "egpu run":
            wrapped = [args.egpu, "run", "--library", args.preload, "--probes", args.pack,
                       "--summary", prefix, "--", *command]
            menv = env
        else:
            wrapped = [args.egpu, "mem", "run", "--library", args.preload, "--out", recordings,
                       "--", *command]
            menv = dict(env, EGPU_SUMMARY=prefix)  # the preloaded library writes it too
        print(f"  --- {mode}", flush=True)
        rc, out, err = run(wrapped, menv)
        for line in err.splitlines():
            if line.startswith("egpu:") and ("replaced" in line or "note" in line):
                print(f"  | {line}")
        if rc != 0:
            show(out + err)
            failures.append(f"{name}: exits {rc} under {mode}")
            continue
        texts = summary_texts(prefix)
        if name == "devices":
            observed = (per_device_maps(texts) if mode == "egpu run"
                        else recording_devices(recordings))
            exact, of, rows = device_verdict(device_expectations(out), observed)
            for d, k, want, got in rows:
                mark = "" if want == got else "   <-- differs"
                print(f"  device {d} add_kernel {k:<8} expected {want:>12} observed {got}{mark}")
            print(f"  per-device counts exact: {exact}/{of} devices")
            if of != len(PLAN) or exact != of:
                failures.append(f"{name} under {mode}: per-device counts exact: {exact}/{of}")
        else:
            observed = nccl_lines(texts)
            exact, of, rows = nccl_verdict(nccl_expectations(out), observed)
            for (rank, op), want, got in rows:
                mark = "" if want == got else "   <-- differs"
                print(f"  rank {rank} {op:<10} expected (calls, bytes, ranks) {want}, "
                      f"observed {got}{mark}")
            compared = {key for key, _, _ in rows}
            for (rank, op), got in sorted(observed.items()):
                if (rank, op) not in compared:
                    print(f"  also: nccl {op} (rank {rank}) calls {got[0]} bytes {got[1]}")
            print(f"  nccl counts exact: {exact}/{of} operations")
            if of != 2 * WORLD or exact != of:
                failures.append(f"{name} under {mode}: nccl counts exact: {exact}/{of}")
            wrong = [s for s in multicast_seen(out) if MULTICAST_OFF.get(s[1]) != s[2]]
            if wrong or not multicast_seen(out):
                failures.append(f"{name} under {mode}: multicast variables {wrong or 'unseen'}")
        same = bool(results(bare)) and results(bare) == results(out)
        print(f"  results identical: {'yes' if same else 'NO'}")
        if not same:
            failures.append(f"{name} under {mode}: results differ (or none printed)")
            for a, b in zip(results(bare), results(out)):
                if a != b:
                    print(f"    bare: {a}\n    egpu: {b}")
    return failures


def gpus():
    """How many GPUs: nvidia-smi's list, else PyTorch's count (in a process of its own)."""
    try:
        p = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
        if p.returncode == 0:
            return sum(l.startswith("GPU ") for l in p.stdout.splitlines())
    except (OSError, subprocess.TimeoutExpired):
        pass
    p = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                       capture_output=True, text=True)
    return int(p.stdout.strip() or 0) if p.returncode == 0 else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--egpu")
    ap.add_argument("--preload", help="libegpu_preload.so")
    ap.add_argument("--pack", help="libkernel_bytes.so")
    ap.add_argument("--work", default="/tmp/egpu-multi-gpu")
    ap.add_argument("--only", choices=("devices", "nccl"))
    ap.add_argument("--program", choices=("devices", "nccl", "rank"), help=argparse.SUPPRESS)
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if args.program:
        return {"devices": program_devices, "nccl": program_nccl, "rank": program_rank}[
            args.program]()
    if not (args.egpu and args.preload and args.pack):
        ap.error("--egpu, --preload and --pack are needed")
    n = gpus()
    if n < 2:
        print(f"multi_gpu_check: skipped: {n} GPU(s), this check needs 2 (nvidia-h200-x2)")
        return 1 if os.environ.get("EGPU_REQUIRE_GPU") == "1" else 0
    args.egpu, args.preload, args.pack = map(os.path.abspath, (args.egpu, args.preload, args.pack))
    os.makedirs(args.work, exist_ok=True)
    env = dict(os.environ, **MULTICAST_OFF)
    env.pop("LD_PRELOAD", None)
    failures = []
    for name in ("devices", "nccl"):
        if args.only and args.only != name:
            continue
        try:
            failures += check(name, args, env)
        except subprocess.TimeoutExpired:
            failures.append(f"{name}: timed out")
    print("\n=== several GPUs")
    for f in failures:
        print(f"  failure: {f}")
    print(f"  {'ok' if not failures else 'FAILED'}")
    return 1 if failures else 0


def self_test():
    out = ("expect device 0 add_kernel launches 3 entered 393216 loaded 25165824 stored 12582912\n"
           "results device 0 add_kernel 00ff\n"
           "expect device 1 add_kernel launches 5 entered 1310720 loaded 83886080 "
           "stored 41943040\nresults device 1 add_kernel 11ee\n")
    want = device_expectations(out)
    assert want == {0: {"ENTERED": 393216, "LOADED": 25165824, "STORED": 12582912},
                    1: {"ENTERED": 1310720, "LOADED": 83886080, "STORED": 41943040}}, want
    # The expectations match what PLAN says.
    for d, (n, launches) in PLAN.items():
        assert want[d]["LOADED"] == launches * n * 8 and want[d]["STORED"] == launches * n * 4
        assert want[d]["ENTERED"] == launches * (n // BLOCK) * WARPS * 32
    summary = ("map LOADED add_kernel 109051904\n"
               "map LOADED device 0 add_kernel 25165824\n"
               f"map LOADED device 1 {kernel_id('add_kernel')} 83886080\n"
               "map STORED device 0 add_kernel 12582912\nmap STORED device 1 add_kernel 41943040\n"
               "map ENTERED device 0 add_kernel 393216\nmap ENTERED device 1 add_kernel 1310720\n"
               "map LOADED device 0 other_kernel 5\n")
    got = per_device_maps([summary])
    exact, of, rows = device_verdict(want, got)
    assert (exact, of) == (2, 2), rows
    wrong = summary.replace("41943040", "41943041")
    exact, of, _ = device_verdict(want, per_device_maps([wrong]))
    assert (exact, of) == (1, 2)
    assert device_verdict(want, {})[:2] == (0, 2)  # nothing seen is not exact
    # egpu mem's recording: the bytes only.
    folder = "/tmp/egpu-multi-gpu-self-test"
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    with open(os.path.join(folder, "7.egpumem"), "w") as f:
        f.write('{"type":"header","format":"egpu-mem","version":1}\n'
                '{"type":"kernel","name":"add_kernel","id":"0a","launches":8,"traffic":{},'
                '"devices":[{"device":0,"traffic":{"loaded":25165824,"stored":12582912}},'
                '{"device":1,"traffic":{"loaded":83886080,"stored":41943040}}]}\n')
    exact, of, rows = device_verdict(want, recording_devices(folder))
    assert (exact, of) == (2, 2) and all(k != "ENTERED" for _, k, _, _ in rows), rows
    shutil.rmtree(folder)
    # NCCL: two ranks' summaries and what they expected.
    out = ("rank 0 env NCCL_NVLS_ENABLE=0\nrank 1 env NCCL_NVLS_ENABLE=0\n"
           "expect nccl allreduce rank 0 calls 3 bytes 4460544 ranks 2\n"
           "expect nccl broadcast rank 0 calls 1 bytes 16384 ranks 2\n"
           "expect nccl allreduce rank 1 calls 3 bytes 4460544 ranks 2\n"
           "expect nccl broadcast rank 1 calls 1 bytes 16384 ranks 2\n"
           "results rank 1 broadcast ab\nresults rank 0 broadcast ab\n")
    assert 4 * sum(ALLREDUCE) == 4460544 and 4 * BROADCAST == 16384
    want = nccl_expectations(out)
    assert want[(1, "broadcast")] == (1, 16384, 2) and len(want) == 4, want
    texts = ["pid 1\nnccl allreduce calls 3 bytes 4460544 ranks 2 rank 0 host_ns 10\n"
             "nccl broadcast calls 1 bytes 16384 ranks 2 rank 0 host_ns 5\n"
             "nccl groupstart calls 4 bytes 0 ranks -1 rank -1 host_ns 1\n",
             "pid 2\nnccl allreduce calls 3 bytes 4460544 ranks 2 rank 1 host_ns 10\n"
             "nccl broadcast calls 1 bytes 16384 ranks 2 rank 1 host_ns 5\n", "pid 3\n"]
    got = nccl_lines(texts)
    assert got[(-1, "groupstart")] == (4, 0, -1), got
    assert nccl_verdict(want, got)[:2] == (4, 4)
    texts[1] = texts[1].replace("calls 3 bytes 4460544", "calls 2 bytes 2973696")
    assert nccl_verdict(want, nccl_lines(texts))[:2] == (3, 4)
    assert multicast_seen(out) == [("0", "NCCL_NVLS_ENABLE", "0"), ("1", "NCCL_NVLS_ENABLE", "0")]
    assert results(out) == ["results rank 0 broadcast ab", "results rank 1 broadcast ab"]
    print("multi_gpu_check self-test: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
