#!/usr/bin/env bash
# build.sh: builds candle_observed (examples/candle, a crate of its own outside egpu's workspace)
# in release mode, with candle's CUDA kernels compiled by nvcc for compute capability 90.
#
#     examples/candle/build.sh          prints the binary's path on stdout, and nothing else
#
# What it sets up first, each step skipped when already done:
#   1. nvcc, ptxas and the CUDA runtime of the pinned PyPI wheels (scripts/cuda-tools).
#   2. CCCL's headers (libcu++: <nv/target>, <cuda/std/limits>), which candle-kernels' .cu files
#      include and those wheels lack: nvidia-cuda-cccl 13.0, `pip install --target
#      examples/candle/target/cccl`, given to nvcc through NVCC_APPEND_FLAGS.
#   3. A copy of cudarc with one check of its build script changed, in
#      examples/candle/target/patched/ (Cargo.toml's [patch.crates-io] names it). candle asks
#      for cudarc's `dynamic-linking`, egpu for `dynamic-loading`; cargo unifies one cudarc with
#      both, whose code then loads the driver dynamically (it tests `dynamic-loading` only) but
#      whose build script panics on the pair and would link libcuda, cuBLAS, cuRAND and NVRTC.
#      The copy's build script lets `dynamic-loading` win: no panic, no link directives. The
#      copy is made from cargo's own download of that cudarc version (fetched if missing).
# Then `cargo build --release --locked` with CUDA_COMPUTE_CAP=90 (cudaforge, candle-kernels'
# build tool, makes it sm_90a) and NVCC pointing at the wheels' nvcc.
#
# Environment: CARGO (default cargo), PYTHON (default python3), CARGO_HOME, CUDA_COMPUTE_CAP
# (default 90), CARGO_BUILD_JOBS as cargo reads it.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
CARGO=${CARGO:-cargo}
PYTHON=${PYTHON:-python3}
CCCL_PIN=nvidia-cuda-cccl==13.0.85
say() { printf 'candle build: %s\n' "$*" >&2; }

# 1. The CUDA tools.
ptxas=$("$root/scripts/cuda-tools")
tools=$(cd "$(dirname "$ptxas")/.." && pwd)

# 2. CCCL's headers.
cccl="$here/target/cccl"
if [[ ! -f "$cccl/nvidia/cu13/include/nv/target" ]]; then
    say "installing $CCCL_PIN into $cccl"
    rm -rf "$cccl.partial"
    "$PYTHON" -m pip install --quiet --disable-pip-version-check --no-deps \
        --target "$cccl.partial" "$CCCL_PIN" >&2
    rm -rf "$cccl"
    mv "$cccl.partial" "$cccl"
fi
include="$cccl/nvidia/cu13/include"

# 3. The patched cudarc: its version from the path Cargo.toml's [patch.crates-io] names.
patched_rel=$(sed -n 's/^cudarc = { path = "\(target\/patched\/cudarc-[0-9.]*\)" }$/\1/p' \
    "$here/Cargo.toml")
[[ -n "$patched_rel" ]] || { say "Cargo.toml names no target/patched/cudarc-VERSION"; exit 1; }
version=${patched_rel##*/cudarc-}
patched="$here/$patched_rel"
if [[ ! -f "$patched/.egpu-patched" ]]; then
    cache=${CARGO_HOME:-$HOME/.cargo}/registry/cache
    find_crate() { find "$cache" -name "cudarc-$version.crate" 2>/dev/null | head -1; }
    crate=$(find_crate)
    if [[ -z "$crate" ]]; then
        say "fetching cudarc $version"
        fetch="$here/target/fetch-cudarc"
        mkdir -p "$fetch/src"
        : >"$fetch/src/lib.rs"
        cat >"$fetch/Cargo.toml" <<EOF
[package]
name = "fetch-cudarc"
version = "0.0.0"
edition = "2021"

[dependencies]
cudarc = { version = "=$version", default-features = false, features = ["driver", "dynamic-loading", "cuda-13000"] }

[workspace]
EOF
        "$CARGO" fetch --manifest-path "$fetch/Cargo.toml" >&2
        crate=$(find_crate)
        [[ -n "$crate" ]] || { say "cargo fetched no cudarc-$version.crate into $cache"; exit 1; }
    fi
    say "patching a copy of $crate"
    rm -rf "$patched"
    mkdir -p "$(dirname "$patched")"
    tar -xzf "$crate" -C "$(dirname "$patched")"
    "$PYTHON" - "$patched/build.rs" <<'PY'
import sys
path = sys.argv[1]
text = open(path).read()
panic = ('    #[cfg(all(feature = "dynamic-loading", feature = "dynamic-linking"))]\n'
         '    panic!("Both `dynamic-loading` and `dynamic-linking` features are active, this is a bug");\n')
link = '    #[cfg(feature = "dynamic-linking")]\n    dynamic_linking(major, minor);\n'
if text.count(panic) != 1 or text.count(link) != 1:
    sys.exit(f"{path}: not the build script this patch was written for (cudarc 0.19)")
text = text.replace(panic, "").replace(link, (
    '    #[cfg(all(feature = "dynamic-linking", not(feature = "dynamic-loading")))]\n'
    '    dynamic_linking(major, minor);\n'))
open(path, "w").write(text)
PY
    touch "$patched/.egpu-patched"
fi

# 4. The build.
export PATH="$tools/bin:$PATH"
export NVCC="$tools/bin/nvcc"
export CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-90}
export NVCC_APPEND_FLAGS="-I$include -I$include/cccl"
say "cargo build --release --locked (CUDA_COMPUTE_CAP=$CUDA_COMPUTE_CAP, nvcc $NVCC)"
# Its own target folder, whatever CARGO_TARGET_DIR says (the bundle takes the binary from here).
"$CARGO" build --release --locked --manifest-path "$here/Cargo.toml" --target-dir "$here/target" >&2
echo "$here/target/release/candle_observed"
