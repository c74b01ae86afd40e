"""Device probes in real programs: every program runs bare and under
`egpu run --probes libkernel_bytes.so` (examples/kernel_bytes.rs), and the bytes the probes counted
in each kernel, by class, are compared with the bytes worked out from the program. Run on the GPU
machine by target/gpu-bundle/run.sh (the `default` set's `device-programs` item); it needs nvcc,
PyTorch and Triton there.

    python3 device_check.py --egpu bin/egpu --pack preload/libkernel_bytes.so --work DIR
    python3 device_check.py --self-test          (no GPU: the parsers and the verdicts)

The programs:
- Triton (bench_kernels.py, one kernel per program): add, softmax, layernorm, a `cp.async`
  matmul, a TMA matmul, an atomic histogram; each launched 4 times. Expected: launches × the
  figures per launch the program works out from its shapes.
- torch.compile (inductor.py): a pointwise function and a row reduction (default mode) and a
  max-autotune matmul (Triton templates, CUDA graphs); Inductor's and Triton's caches are the
  work folder's, emptied first, so the bare run compiles and the run under egpu loads the
  kernels from the caches. Expected: the runs PyTorch's profiler counted × bytes per run.
- CUDA C (device_bytes.cu, built here with nvcc): plain, atomic and `cp.async` accesses, launched
  directly and from CUDA graphs (captured, and built by hand), with the static and the shared
  runtime, lazy and eager module loading, fat binaries compressed (nvcc's default) and not;
  `cuda-graph`, whose kernels run from graphs only; and `cuda-driver-loads` (driver_loads.cu),
  the same kernels' fat binary loaded by every way of the driver API (cuModuleLoadData, ...Ex,
  cuModuleLoadFatBinary, cuModuleLoad, cuLibraryLoadData, cuLibraryLoadFromFile, and
  cuModuleLoadData as cuGetProcAddress hands it out). Expected: the program's own totals.

Classes, and the maps of the kernel_bytes pack that count them: `load` (LOADED: ld.global and
the like), `store` (STORED), `atomic` (ATOMIC), `async copy` (ASYNC + TENSOR_LOADED +
TENSOR_STORED: cp.async and TMA copies). Where a program knows the bytes read but not which
instructions read them (a Triton template's tiles), it says `read` and load + async copy are
compared with it. A kernel is exact when every class it has is. Each program prints

    device bytes exact: K/K kernels (load a/a, store b/b, atomic c/c, async copy d/d)
    results identical: yes
    modules instrumented: X, not instrumentable: Y (reasons)

and the check fails when a kernel is not exact, K is 0, results differ or a run fails.
"""

import argparse
import collections
import glob
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the working tree
from bench_kernels import kernel_id  # noqa: E402 (the FNV-1a id of a kernel's name, shared)
CLASSES = ("load", "store", "atomic", "async copy")
# The kernel_bytes maps that count each class.
MAPS = {"load": ("LOADED",), "store": ("STORED",), "atomic": ("ATOMIC",),
        "async copy": ("ASYNC", "TENSOR_LOADED", "TENSOR_STORED")}
TRITON = ("add", "softmax", "layernorm", "matmul", "matmul_tma", "histogram")


# --- what the programs say -------------------------------------------------------------------


def number(v):
    return None if v == "-" else int(v)


def expected_bytes(text):
    """{kernel name: {class: bytes, or None where unknown}} from a program's output: `expect bytes
    NAME key value ...` (totals) and bench_kernels.py's `kernel CASE name NAME ... launches N
    ..._per_launch V` lines (launches × per launch)."""
    out = {}
    for line in text.splitlines():
        w = line.split()
        if w[:2] == ["expect", "bytes"] and len(w) % 2 == 1:
            f = dict(zip(w[3::2], w[4::2]))
            got = {c: number(f[k]) for c, k in (("load", "load"), ("store", "store"),
                                                 ("atomic", "atomic"), ("async copy", "async"))
                   if k in f}
            if "read" in f:
                got["read"] = number(f["read"])
            out[w[2]] = got
        elif len(w) >= 4 and w[0] == "kernel" and w[2] == "name" and len(w) % 2 == 0:
            f = dict(zip(w[2::2], w[3::2]))
            n = int(f["launches"])

            def per(*keys):
                vals = [number(f.get(k, "0")) for k in keys]
                return None if None in vals else n * sum(vals)

            loaded, async_ = per("bytes_loaded_per_launch"), per("bytes_async_per_launch")
            out[f["name"]] = {
                "load": None if None in (loaded, async_) else loaded - async_,
                "store": per("bytes_stored_per_launch"),
                "atomic": per("atomic_bytes_per_launch"),
                "async copy": per("bytes_async_per_launch", "tensor_bytes_loaded_per_launch",
                                  "tensor_bytes_stored_per_launch"),
            }
    return out


def results(text):
    """What must not change under egpu: `results ...` lines, and each bench_kernels.py kernel's
    sum, hash and check."""
    kept = []
    for line in text.splitlines():
        w = line.split()
        if w[:1] == ["results"]:
            kept.append(line.strip())
        elif len(w) >= 4 and w[0] == "kernel" and w[2] == "name":
            f = dict(zip(w[2::2], w[3::2]))
            kept.append(" ".join(f"{k} {f.get(k)}" for k in ("name", "sum", "hash", "check")))
    return kept


# --- what egpu saw ---------------------------------------------------------------------------


def summaries(prefix):
    """Every process's summary (`PREFIX.<pid>`): map counts {(MAP, key): value}, modules
    {instrumented, not, reasons Counter}, details (a list), launches per kernel."""
    maps = collections.Counter()
    modules = {"instrumented": 0, "not": 0, "reasons": collections.Counter()}
    details, launches = [], collections.Counter()
    for path in sorted(glob.glob(prefix + ".*")):
        for line in open(path):
            w = line.split()
            if len(w) >= 4 and w[0] == "map" and w[-1].isdigit():
                maps[(w[1], " ".join(w[2:-1]))] += int(w[-1])
            elif line.startswith("modules instrumented: "):
                m = re.match(r"modules instrumented: (\d+), not instrumentable: (\d+)(?: \((.*)\))?",
                             line)
                if m:
                    modules["instrumented"] += int(m.group(1))
                    modules["not"] += int(m.group(2))
                    for part in (m.group(3) or "").split(", "):
                        why, _, n = part.rpartition(": ")
                        if why:
                            modules["reasons"][why] += int(n)
            elif line.startswith(("not instrumentable: ", "kernels launched uninstrumented: ")):
                details.append(line.strip())
            elif w[:1] == ["kernel"] and len(w) >= 4 and w[2].isdigit():
                launches[" ".join(w[3:])] += int(w[2])
    return maps, modules, details, launches


def observed(maps, name, cls):
    keys = {name, str(kernel_id(name))}
    return sum(maps.get((m, k), 0) for m in MAPS[cls] for k in keys)


def verdicts(expected, maps):
    """[(kernel, class, want, got)] for every class a kernel has (a `read` compared with load +
    async copy), and per class [exact, of] over the kernels, and the kernels exact."""
    rows, per_class, exact = [], {c: [0, 0] for c in CLASSES}, []
    for name, want in expected.items():
        ok = True
        classes = [c for c in CLASSES if c in want]
        if "read" in want:
            got = observed(maps, name, "load") + observed(maps, name, "async copy")
            cls = "async copy" if observed(maps, name, "async copy") else "load"
            rows.append((name, f"read ({cls})", want["read"], got))
            per_class[cls][1] += 1
            per_class[cls][0] += want["read"] == got
            ok &= want["read"] == got
            classes = [c for c in classes if c not in ("load", "async copy")]
        for cls in classes:
            got = observed(maps, name, cls)
            if want[cls] == 0 and got == 0:
                continue
            rows.append((name, cls, want[cls], got))
            per_class[cls][1] += 1
            per_class[cls][0] += want[cls] == got
            ok &= want[cls] == got
        if all(v is not None for v in want.values()):
            exact.append(ok)
    return rows, per_class, exact


def exact_line(per_class, exact):
    parts = ", ".join(f"{c} {per_class[c][0]}/{per_class[c][1]}" for c in CLASSES)
    return f"device bytes exact: {sum(exact)}/{len(exact)} kernels ({parts})"


def modules_line(modules):
    line = (f"modules instrumented: {modules['instrumented']}, "
            f"not instrumentable: {modules['not']}")
    if modules["reasons"]:
        line += " (" + ", ".join(f"{w}: {n}" for w, n in modules["reasons"].items()) + ")"
    return line


# --- running ---------------------------------------------------------------------------------


def run(command, env, timeout=600):
    p = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def check_program(name, command, args, env=None):
    """Runs `command` bare and under egpu with the pack; prints the verdict lines; the
    failures."""
    env = dict(os.environ, **(env or {}))
    env.pop("LD_PRELOAD", None)
    shown = " ".join([os.path.basename(command[0]), *command[1:]])
    loading = env.get("CUDA_MODULE_LOADING")
    print(f"\n=== {name}: {shown}{f' (CUDA_MODULE_LOADING={loading})' if loading else ''}",
          flush=True)
    rc, bare, err = run(command, env)
    if rc != 0:
        print("\n".join(f"  | {l}" for l in (bare + err).splitlines()[-20:]))
        return [f"{name}: exits {rc} bare"]
    prefix = os.path.join(args.work, f"summary-{name}")
    for old in glob.glob(prefix + ".*"):
        os.remove(old)
    wrapped = [args.egpu, "run", "--probes", args.pack, "--summary", prefix, "--", *command]
    rc, out, err = run(wrapped, env)
    if rc != 0:
        print("\n".join(f"  | {l}" for l in (out + err).splitlines()[-30:]))
        return [f"{name}: exits {rc} under egpu"]
    for line in err.splitlines():
        if line.startswith("egpu:") or "note:" in line:
            print(f"  | {line}")
    maps, modules, details, launches = summaries(prefix)
    expected = expected_bytes(out)
    rows, per_class, exact = verdicts(expected, maps)
    print(f"  {'kernel':<44} {'class':<18} {'expected':>14} {'observed':>14}")
    for kernel, cls, want, got in rows:
        mark = "" if want == got else "   <-- differs"
        short = kernel if len(kernel) <= 44 else kernel[:41] + "..."
        print(f"  {short:<44} {cls:<18} {want if want is not None else '-':>14} {got:>14}{mark}")
    for kernel, n in sorted(launches.items()):
        if kernel in expected:
            print(f"  launched from the host: {n} {kernel}")
    failures = []
    print(f"  {exact_line(per_class, exact)}")
    same = results(bare) == results(out) and bool(results(bare))
    print(f"  results identical: {'yes' if same else 'NO'}")
    print(f"  {modules_line(modules)}")
    for d in details:
        print(f"    {d}")
    if not exact or not all(exact):
        failures.append(f"{name}: {exact_line(per_class, exact)}")
    if not same:
        failures.append(f"{name}: results differ under egpu (or none printed)")
        for a, b in zip(results(bare), results(out)):
            if a != b:
                print(f"    bare: {a}\n    egpu: {b}")
    return failures


def cuda_programs(work):
    """[(name, command, env)]: device_bytes.cu built with nvcc in each flavour."""
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    source = os.path.join(HERE, "device_bytes.cu")
    builds = {"static": [], "shared": ["-cudart", "shared"],
              "plain": ["-cudart", "shared", "-Xfatbin", "-compress=false"]}
    exes, failures = {}, []
    for flavour, flags in builds.items():
        exe = os.path.join(work, f"device_bytes-{flavour}")
        b = subprocess.run([nvcc, "-O2", "-arch=sm_90", *flags, source, "-o", exe],
                           capture_output=True, text=True)
        if b.returncode != 0:
            failures.append(f"nvcc {flavour}: {b.stderr.strip()[-400:]}")
        else:
            exes[flavour] = exe
    programs = []
    for flavour, loading in (("static", "LAZY"), ("static", "EAGER"), ("shared", "LAZY"),
                             ("shared", "EAGER"), ("plain", "LAZY")):
        if flavour in exes:
            label = "uncompressed-fatbin" if flavour == "plain" else f"{flavour}-runtime"
            programs.append((f"cuda-c-{label}-{loading.lower()}", [exes[flavour]],
                             {"CUDA_MODULE_LOADING": loading}))
    if "shared" in exes:
        programs.append(("cuda-graph", [exes["shared"], "graphs"], {}))
    # The driver API's every way to load a module, from a fat binary of the same kernels.
    fatbin = os.path.join(work, "device_bytes.fatbin")
    loads = os.path.join(work, "driver_loads")
    for what, command in (("fatbin", [nvcc, "-fatbin", "-arch=sm_90", source, "-o", fatbin]),
                          ("driver_loads", [nvcc, "-O2", "-arch=sm_90",
                                            os.path.join(HERE, "driver_loads.cu"), "-o", loads,
                                            "-lcuda"])):
        b = subprocess.run(command, capture_output=True, text=True)
        if b.returncode != 0:
            failures.append(f"nvcc {what}: {b.stderr.strip()[-400:]}")
            return programs, failures
    programs.append(("cuda-driver-loads", [loads, fatbin], {}))
    return programs, failures


def coverage_programs(work):
    """[(name, command, env)] of every program of the check (Triton's kernels, torch.compile's
    with its caches emptied, the CUDA C flavours), and the failures building them."""
    python = sys.executable or "python3"
    programs = [(f"triton-{k}", [python, os.path.join(HERE, "bench_kernels.py"), "--launches",
                                 "3", "--only", k], {}) for k in TRITON]
    caches = {"TORCHINDUCTOR_CACHE_DIR": os.path.join(work, "inductor-cache"),
              "TRITON_CACHE_DIR": os.path.join(work, "triton-cache")}
    for d in caches.values():
        shutil.rmtree(d, ignore_errors=True)
    programs.append(("torch-compile", [python, os.path.join(HERE, "inductor.py")], caches))
    cuda, failures = cuda_programs(work)
    return programs + cuda, failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--egpu")
    ap.add_argument("--pack", help="libkernel_bytes.so")
    ap.add_argument("--work", default="/tmp/egpu-device-programs")
    ap.add_argument("--only", default="", help="programs whose name contains this")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if not (args.egpu and args.pack):
        ap.error("--egpu and --pack are needed")
    args.egpu, args.pack = os.path.abspath(args.egpu), os.path.abspath(args.pack)
    os.makedirs(args.work, exist_ok=True)
    programs, failures = coverage_programs(args.work)
    verdict = []
    for name, command, env in programs:
        if args.only and args.only not in name:
            continue
        try:
            got = check_program(name, command, args, env)
        except subprocess.TimeoutExpired:
            got = [f"{name}: timed out"]
        verdict.append((name, "ok" if not got else "FAILED"))
        failures += got
    print("\n=== device probes in programs")
    for name, status in verdict:
        print(f"  {name:<36} {status}")
    for f in failures:
        print(f"  failure: {f}")
    return 1 if failures else 0


def self_test():
    out = """kernel add name add_kernel id 0x1 ms 0.1 launches 4 grid 8 num_warps 4
 threads_per_launch 1024 bytes_loaded_per_launch 800 bytes_stored_per_launch 400
 bytes_async_per_launch 0 atomic_bytes_per_launch 0 sum 1.5 hash ab check ok
expect bytes _Z9histogramPKjPj load 40 store 0 atomic 40 async 0
expect bytes triton_tem_fused_mm_0 runs 2 read 64 store 32 atomic 0 block_m 64 block_n 64
results ok add 1
""".replace("\n ", " ")
    want = expected_bytes(out)
    assert want["add_kernel"] == {"load": 3200, "store": 1600, "atomic": 0, "async copy": 0}, want
    assert want["_Z9histogramPKjPj"]["atomic"] == 40
    assert want["triton_tem_fused_mm_0"]["read"] == 64
    assert results(out) == ["name add_kernel sum 1.5 hash ab check ok", "results ok add 1"]
    maps = collections.Counter({("LOADED", "add_kernel"): 3200, ("STORED", "add_kernel"): 1600,
                                ("LOADED", str(kernel_id("_Z9histogramPKjPj"))): 40,
                                ("ATOMIC", "_Z9histogramPKjPj"): 40,
                                ("ASYNC", "triton_tem_fused_mm_0"): 64,
                                ("STORED", "triton_tem_fused_mm_0"): 31})
    rows, per_class, exact = verdicts(want, maps)
    line = exact_line(per_class, exact)
    assert line == ("device bytes exact: 2/3 kernels (load 2/2, store 1/2, atomic 1/1, "
                    "async copy 1/1)"), line
    path = "/tmp/egpu-device-check-self-test"
    with open(path + ".1", "w") as f:
        f.write("modules instrumented: 3, not instrumentable: 2 (no PTX: 1, refused by the driver"
                ": 1)\nnot instrumentable: no PTX: a cubin\nkernel 5 4 add_kernel\n"
                "map LOADED add_kernel 7\n")
    with open(path + ".2", "w") as f:
        f.write("modules instrumented: 1, not instrumentable: 1 (no PTX: 1)\n")
    maps, modules, details, launches = summaries(path)
    assert modules_line(modules) == ("modules instrumented: 4, not instrumentable: 3 (no PTX: 2, "
                                     "refused by the driver: 1)"), modules
    assert details == ["not instrumentable: no PTX: a cubin"] and launches["add_kernel"] == 4, details
    assert maps[("LOADED", "add_kernel")] == 7
    for p in glob.glob(path + ".*"):
        os.remove(p)
    print("device_check self-test: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
