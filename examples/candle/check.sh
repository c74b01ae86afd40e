#!/usr/bin/env bash
# candle observed, on the GPU machine (issue 27): what examples/candle shows there.
#
#     examples/candle/check.sh EGPU PRELOAD PACK BIN
#
# EGPU: the `egpu` binary; PRELOAD: libegpu_preload.so; PACK: the `kernel_bytes` example's
# probe pack (libkernel_bytes.so); BIN: candle_observed (examples/candle/build.sh). Needs a GPU
# and CUDA 13's libraries (cuBLAS, the runtime) in /usr/local/cuda/lib64 or on the loader path.
#
# 1. In process: BIN with no argument (its own checks: exact counts per kernel, results
#    identical, the overhead of the instrumented kernels against the same kernels bare).
# 2. Under `egpu run --probes PACK`: `BIN --plain` bare and under egpu run, ROUNDS times each
#    in alternation; per kernel, the pack's LOADED, STORED, ENTERED (threads that started) and
#    the launches in the summary equal to what BIN says the kernels must do (its `expect`
#    lines); the output's digest equal in every run, and to the in-process run's; steps/s of
#    the bare and the observed runs, median over the rounds, and their ratio.
#
# Prints a table of verdicts last and `candle observed: ok`, or exits 1.
set -uo pipefail
[ $# -eq 4 ] || { sed -n 4,8p "$0" >&2; exit 2; }
egpu=$1 preload=$2 pack=$3 bin=$4
work=$(mktemp -d "${TMPDIR:-/tmp}/egpu-candle.XXXXXX")
rounds=${EGPU_CANDLE_ROUNDS:-3}
steps=${EGPU_CANDLE_STEPS:-100}
export EGPU_REQUIRE_GPU=1
# cuBLAS and cuRAND (which cudarc opens by name) and the CUDA runtime (linked by
# candle-kernels): the toolkit's, else those of the Python wheels (PyTorch's nvidia packages).
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    if [ -d "$d" ]; then export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
done
wheels=$(python3 -c 'import glob, os, nvidia
print(":".join(sorted({os.path.dirname(p) for d in nvidia.__path__
                      for p in glob.glob(d + "/**/libcublas.so*", recursive=True)})))' 2>/dev/null)
if [ -n "$wheels" ]; then export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$wheels"; fi
echo "=== LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
failed=0

echo "=== candle observed in process"
timeout 300 "$bin" > "$work/inproc.out" 2>&1
echo "in-process exit $?" >> "$work/inproc.out"
cat "$work/inproc.out"

for r in $(seq 1 "$rounds"); do
    for variant in bare egpu; do
        # Alternate which goes first.
        if [ $((r % 2)) -eq 0 ]; then variant=$([ "$variant" = bare ] && echo egpu || echo bare); fi
        echo "=== round $r: $variant"
        if [ "$variant" = bare ]; then
            timeout 300 "$bin" --plain --steps "$steps" > "$work/bare.$r.out" 2>&1
            echo "exit $?" >> "$work/bare.$r.out"
            tail -2 "$work/bare.$r.out"
        else
            EGPU_PRELOAD=$preload timeout 300 "$egpu" run --probes "$pack" \
                --summary "$work/summary.$r" -- "$bin" --plain --steps "$steps" \
                > "$work/egpu.$r.out" 2>&1
            echo "exit $?" >> "$work/egpu.$r.out"
            tail -2 "$work/egpu.$r.out"
        fi
    done
done

python3 - "$work" "$rounds" <<'PY' || failed=1
import glob, re, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
checks = []
def check(name, ok, detail=""):
    checks.append((name, bool(ok), detail))

inproc = open(f"{work}/inproc.out").read()
check("in process: every check exact, exit 0",
      "in-process exit 0" in inproc and re.search(r"(\d+) of \1 checks exact", inproc),
      (re.search(r"in process: (\d+ of \d+ checks exact)", inproc) or [None, "?"])[1])
digests = {"in process": (re.search(r"output digest: (\w+)", inproc) or [None, None])[1]}
overhead = re.search(r"overhead: ([\d.]+)x", inproc)

def field(text, key):
    m = re.search(key + r"\s*([\d.]+)", text)
    return float(m.group(1)) if m else None

sps = {"bare": [], "egpu": []}
for r in range(1, rounds + 1):
    for variant in ("bare", "egpu"):
        out = open(f"{work}/{variant}.{r}.out").read()
        check(f"round {r} {variant}: exit 0", "\nexit 0" in out)
        digests[f"round {r} {variant}"] = (re.search(r"output digest: (\w+)", out) or [None, None])[1]
        if (v := field(out, "steps/s:")) is not None:
            sps[variant].append(v)
    # The pack's maps and the launches, against the kernels' expectations.
    out = open(f"{work}/egpu.{r}.out").read()
    expect = {}
    for line in out.splitlines():
        w = line.split()
        if w[:1] == ["expect"] and len(w) == 12:
            expect[w[1]] = dict(zip(w[2::2], map(int, w[3::2])))
    maps, launches, modules = {}, {}, ""
    for path in glob.glob(f"{work}/summary.{r}.*"):
        for line in open(path):
            w = line.split()
            if len(w) >= 4 and w[0] == "map" and w[-1].isdigit():
                key = (w[1], " ".join(w[2:-1]))
                maps[key] = maps.get(key, 0) + int(w[-1])
            elif len(w) >= 4 and w[0] == "kernel" and w[2].isdigit():
                name = " ".join(w[3:])
                launches[name] = launches.get(name, 0) + int(w[2])
            elif line.startswith("modules instrumented"):
                modules = line.strip()
    check(f"round {r}: candle's kernels expected", len(expect) == 5, ", ".join(sorted(expect)))
    for kernel, e in sorted(expect.items()):
        # A map's key is the kernel's name, or its id where the name is not known.
        keys = (kernel, str(e["id"]), f"{e['id']:#x}", f"{e['id']:#018x}")
        def count(m):
            found = [maps[(m, k)] for k in keys if (m, k) in maps]
            return sum(found) if found else None
        got = {"launches": launches.get(kernel), "threads": count("ENTERED"),
               "loaded": count("LOADED"), "stored": count("STORED")}
        want = {k: e[k] for k in got}
        check(f"round {r}: {kernel} under egpu run", got == want,
              " ".join(f"{k} {got[k]}" + ("" if got[k] == want[k] else f" (expected {want[k]})")
                       for k in got))
    if r == 1:
        print(f"round 1, the summary: {modules}")

ref = digests["in process"]
same = ref is not None and all(d == ref for d in digests.values())
check("results identical (in process, bare, under egpu run)", same,
      ", ".join(f"{k} {v}" for k, v in digests.items() if v != ref) or f"digest {ref}")
bare, observed = (statistics.median(sps[v]) if sps[v] else None for v in ("bare", "egpu"))
print()
print(f"in process: overhead {overhead.group(1) if overhead else '?'}x "
      "(candle's kernels instrumented against the same kernels bare, one process)")
if bare and observed:
    print(f"under egpu run --probes: bare {bare:.1f} steps/s, observed {observed:.1f} steps/s, "
          f"overhead {bare / observed:.2f}x (median of {rounds} rounds, processes alternated)")
print(f"results identical: {'yes' if same else 'no'}")
print()
for name, ok, detail in checks:
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}")
failed = sum(not ok for _, ok, _ in checks)
print(f"candle observed: {len(checks) - failed} of {len(checks)} checks exact")
sys.exit(1 if failed else 0)
PY

rm -rf "$work"
[ $failed -eq 0 ] && echo "candle observed: ok"
exit $failed
