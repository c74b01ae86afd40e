#!/usr/bin/env bash
# Embedding egpu, on the GPU machine (issue 26): what the CPU tests cannot show.
#
#     egpu-capi/tests/gpu/check.sh EGPU PRELOAD CAPI_DIR OBJECT
#
# EGPU: the `egpu` binary; PRELOAD: libegpu_preload.so; CAPI_DIR: the folder of
# libegpu_capi.so; OBJECT: tests/elf/global_bytes.c built by clang (`clang -O2 -g -target bpf -c
# -I include`). Needs nvcc (CUDA 13) and a GPU.
#
# 1. Global data on the GPU: device_bytes.cu (egpu-preload's CUDA C program of known traffic)
#    bare and under `egpu run --probes OBJECT`; results identical, and the object's `.data`
#    (SCALED, 1000 at first, on top of which every load adds its bytes times SCALE, 3, of
#    `.rodata`) equal to 1000 + 3 x BYTES (the loads' bytes in an array map), BYTES equal to
#    the program's own load and async-copy bytes, `.bss` (accesses) above 0.
# 2. The C ABI's CUDA events: cuda_events.cu, linked against libegpu_capi.so, refuses to attach
#    without the preloaded library, and under `egpu run` counts its kernels' blocks through it.
#
# Prints a verdict line per check and `embedding on the GPU: ok`, or exits 1.
set -uo pipefail
[ $# -eq 4 ] || { sed -n 4,8p "$0" >&2; exit 2; }
egpu=$1 preload=$2 capi=$3 object=$4
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/egpu-capi-gpu.XXXXXX")
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
failed=0
fail() { echo "FAILED: $*"; failed=1; }

"$nvcc" -O2 -arch=sm_90 "$root/egpu-preload/tests/programs/device_bytes.cu" -o "$work/db" \
    || fail "nvcc device_bytes.cu"
"$work/db" > "$work/bare.out" 2>&1 || fail "device_bytes bare"
EGPU_PRELOAD=$preload timeout 300 "$egpu" run --probes "$object" --summary "$work/sum" \
    -- "$work/db" > "$work/egpu.out" 2>&1 || fail "device_bytes under egpu run"
python3 - "$work" <<'PY' || failed=1
import glob, sys
work = sys.argv[1]
maps = {}
for path in glob.glob(f"{work}/sum.*"):
    for line in open(path):
        w = line.split()
        if len(w) >= 4 and w[0] == "map" and w[-1].isdigit():
            maps[w[1]] = maps.get(w[1], 0) + int(w[-1])
want = 0
for line in open(f"{work}/egpu.out"):
    w = line.split()
    if w[:2] == ["expect", "bytes"]:
        want += int(w[w.index("load") + 1]) + int(w[w.index("async") + 1])
results = [open(f"{work}/{r}.out").read().split("\n")[0] for r in ("bare", "egpu")]
b, s, rodata, a = (maps.get(k) for k in ("BYTES", ".data", ".rodata", ".bss"))
print(f"global data on the GPU: BYTES {b} (the program's loads and async copies: {want}), "
      f".data {s} (1000 + 3 x BYTES: {1000 + 3 * (b or 0)}), .rodata {rodata}, .bss {a}")
ok = b == want and s == 1000 + 3 * b and rodata == 3 and (a or 0) > 0
same = results[0] == results[1] and results[0].startswith("results ok")
print(f"results identical: {'yes' if same else 'no: ' + ' / '.join(results)}")
sys.exit(0 if ok and same else 1)
PY

"$nvcc" -O2 -arch=sm_90 -std=c++20 -I "$root/egpu-capi/include" "$here/cuda_events.cu" \
    -L "$capi" -legpu_capi -o "$work/ce" || fail "nvcc cuda_events.cu"
LD_LIBRARY_PATH=$capi "$work/ce" > "$work/ce-bare.out" 2>&1
[ $? -eq 2 ] || fail "cuda_events without the preloaded library: $(cat "$work/ce-bare.out")"
LD_LIBRARY_PATH=$capi EGPU_PRELOAD=$preload timeout 120 "$egpu" run -- "$work/ce" \
    || fail "cuda_events under egpu run"

rm -rf "$work"
[ $failed -eq 0 ] && echo "embedding on the GPU: ok"
exit $failed
