"""Triton kernels whose PTX touches global memory in every way Triton emits on sm_90, run and
checked on the GPU, with each kernel's PTX and its launch written out as a corpus for egpu's
PTX tests (issue 20: device probes at every instruction that touches global memory).

    python3 triton_corpus.py [OUTDIR] [--only NAME,...]     (on the GPU machine; OUTDIR: $OUT)
    python3 triton_corpus.py --self-test                     (no GPU, no Triton: the PTX counter)

Each kernel is compiled and launched once, its result compared with PyTorch, and its PTX
(`compiled.asm["ptx"]` of the kernel handle the launch returns) written to OUTDIR/<name>.ptx.
OUTDIR/shapes.json records, per kernel: the launch (grid, num_warps, num_stages, threads), the
arguments (shape, dtype, strides), the bytes each class of instruction moves in one launch as
worked out from the shapes (`expected_bytes`), the PTX's instruction counts (`ptx_counts`), and
whether the result matched. A kernel that fails is recorded with its error and the others still
run. The last lines printed are a table, one line per kernel.

The kernels (all shapes multiples of their blocks, so no lane is masked off):
- triton_matmul_cp_async: C = A @ B, A and B 512 × 512 fp16, C fp32, blocks of 128 × 128 × 64,
  `tl.load` of the tiles in a K loop with num_stages=3: Triton pipelines those loads with
  `cp.async.cg` (16 bytes) into shared memory, whose src-size is a register (`selp` 16 or 0:
  copies of the pipeline's stages past K read nothing), so bytes must be read at run time.
  Other (num_stages, num_warps) are tried when the PTX has no `cp.async`, and the one used is
  recorded. Triton 3.6 on the H200: num_stages=3, num_warps=4 gives 48 cp.async.cg.
- triton_matmul_tma: the same with device-side tensor descriptors (`tl.make_tensor_descriptor`,
  or `tl._experimental_make_tensor_descriptor` where that is what exists; their workspace comes
  from `triton.set_allocator`): the tiles are read and C written with `cp.async.bulk.tensor`.
  Each program builds its 3 descriptors in shared memory (`tensormap.replace`) and copies them
  to the workspace in global memory (`tensormap.cp_fenceproxy.global`, 128 bytes each).
- triton_matmul_tma_host: the same with host-side descriptors
  (`triton.tools.tensor_descriptor.TensorDescriptor`), passed as kernel parameters.
- triton_histogram: 1 Mi int32 values in [0, 256) counted into 256 int32 bins with
  `tl.atomic_add` (`atom.global` or `red.global`, 4 bytes each).
- triton_add: an elementwise add of two 1 Mi fp32 vectors (`ld.global`/`st.global` only).

Bytes per launch, by class (`expected_bytes`): `ld_global`, `st_global` (what the threads'
ld.global/st.global move, vector accesses counted whole), `cp_async` (bytes read from global by
cp.async), `bulk` (non-tensor cp.async.bulk), `tensor_load`/`tensor_store` (cp.async.bulk.tensor
boxes, global to shared and back), `atomic` (operand size × atomics), `tensormap_global`
(device-side descriptors copied to global memory). For the matmuls they assume
the class the kernel is meant to use; `ptx_counts` says what the PTX really has.

PTX counts are of instructions (comments dropped, a leading `@%p`/`@!%p` guard ignored):
`cp.async` = cp.async.ca/.cg copies (not commit/wait); `cp.async.bulk` = non-tensor bulk copies
and bulk reductions (cp.reduce.async.bulk); `cp.async.bulk.tensor` = tensor copies and
reductions; `atom`, `red`, `ld.global` (ld.global.nc included), `st.global`; and, beside them,
`ldu`, `prefetch`, `tensormap.cp_fenceproxy` (a 128-byte descriptor copied from shared to
global memory), `tensormap.replace` (on shared memory), `fence.proxy.tensormap` (on a global
descriptor; moves nothing) and generic `ld`/`st` (no state space: may touch global memory).

Triton targets sm_90a on an H200: the PTX says `.target sm_90a` and needs `ptxas -arch=sm_90a`.
"""

import argparse
import json
import math
import os
import re
import sys
import traceback

# --------------------------------------------------------------------------------------------
# PTX instruction counts (no Triton needed)
# --------------------------------------------------------------------------------------------

COLUMNS = ["cp.async", "cp.async.bulk", "cp.async.bulk.tensor", "atom", "red", "ld.global",
           "st.global"]
EXTRA = ["ldu", "prefetch", "tensormap.cp_fenceproxy", "tensormap.replace",
         "fence.proxy.tensormap", "ld.generic", "st.generic"]
SPACES = {"global", "shared", "local", "param", "const", "tex"}
GUARD = re.compile(r"^@!?%\w+\s+")


def opcodes(ptx):
    """The opcode of every instruction line of `ptx` (labels, directives and braces skipped)."""
    for line in ptx.splitlines():
        line = line.split("//", 1)[0].strip()
        line = GUARD.sub("", line)
        if not line or line[0] in "{}.$" or line.endswith(":"):
            continue
        yield line.split(None, 1)[0].rstrip(";")


def count_classes(ptx):
    counts = dict.fromkeys(COLUMNS + EXTRA, 0)
    for op in opcodes(ptx):
        parts = op.split(".")
        if op.startswith(("cp.async.ca.", "cp.async.cg.")):
            counts["cp.async"] += 1
        elif op.startswith(("cp.async.bulk.tensor.", "cp.reduce.async.bulk.tensor.")):
            counts["cp.async.bulk.tensor"] += 1
        elif op.startswith("cp.async.bulk.prefetch"):
            counts["prefetch"] += 1
        elif op.startswith(("cp.async.bulk.", "cp.reduce.async.bulk.")) and not op.startswith(
                ("cp.async.bulk.commit_group", "cp.async.bulk.wait_group")):
            counts["cp.async.bulk"] += 1
        elif parts[0] == "atom":
            counts["atom"] += 1
        elif parts[0] == "red":
            counts["red"] += 1
        elif op.startswith("ld.global"):
            counts["ld.global"] += 1
        elif op.startswith("st.global"):
            counts["st.global"] += 1
        elif parts[0] == "ldu":
            counts["ldu"] += 1
        elif parts[0] == "prefetch" or parts[0] == "prefetchu":
            counts["prefetch"] += 1
        elif op.startswith("tensormap.cp_fenceproxy"):
            counts["tensormap.cp_fenceproxy"] += 1
        elif op.startswith("tensormap.replace"):
            counts["tensormap.replace"] += 1
        elif op.startswith("fence.proxy.tensormap"):
            counts["fence.proxy.tensormap"] += 1
        elif parts[0] in ("ld", "st") and not SPACES.intersection(parts[1:]):
            counts[parts[0] + ".generic"] += 1
    return counts


def self_test():
    ptx = """
    .visible .entry k(
    {
    $L__BB0_1:
        // begin inline asm
        @%p1 ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];
        @!%p2 st.global.b32 [ %rd2 + 0 ], { %r5 };
        ld.global.nc.u32 %r6, [%rd3];   // st.global in a comment
        cp.async.cg.shared.global [ %r7 + 0 ], [ %rd4 + 0 ], 0x10, %r8;
        cp.async.ca.shared.global [%r7], [%rd4], 4, 4;
        cp.async.commit_group;
        cp.async.wait_group 0x1;
        cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r1],
            [%rd1, {%r2, %r3}], [%r4];
        cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%rd1, {%r2, %r3}], [%r4];
        cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r1], [%rd1], %r2, [%r3];
        cp.reduce.async.bulk.global.shared::cta.bulk_group.add.u32 [%rd1], [%r1], %r2;
        cp.async.bulk.commit_group;
        cp.async.bulk.wait_group.read 0;
        @%p3 atom.global.gpu.acq_rel.add.u32 %r9, [ %rd5 + 0 ], %r10;
        red.global.add.u32 [%rd5], 1;
        atom.add.u32 %r1, [%rd6], %r2;
        ld.shared.u32 %r1, [%r2];
        ld.param.u64 %rd1, [k_param_0];
        ld.u32 %r1, [%rd7];
        st.volatile.u32 [%rd7], %r1;
        ldu.global.u32 %r1, [%rd1];
        prefetch.global.L2 [%rd1];
        tensormap.replace.tile.global_address.shared::cta.b1024.b64 [%r1], %rd1;
        tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned
            [%rd1], [%r1], 0x80;
        @%p1 fence.proxy.tensormap::generic.acquire.gpu [ %rd1 + 0 ], 0x80;
        mbarrier.try_wait.parity.shared::cta.b64 %p1, [%r1], 0;
        ret;
    }
    """
    want = {"cp.async": 2, "cp.async.bulk": 2, "cp.async.bulk.tensor": 2, "atom": 2, "red": 1,
            "ld.global": 2, "st.global": 1, "ldu": 1, "prefetch": 1, "tensormap.cp_fenceproxy": 1,
            "tensormap.replace": 1, "fence.proxy.tensormap": 1,
            "ld.generic": 1, "st.generic": 1}
    got = count_classes(ptx)
    if got != want:
        print(f"self-test FAILED: counted {got}, expected {want}")
        return 1
    print(f"self-test ok: {got}")
    return 0


# --------------------------------------------------------------------------------------------
# The kernels
# --------------------------------------------------------------------------------------------

try:
    import torch
    import triton
    import triton.language as tl
    IMPORT_ERROR = None
except Exception as e:  # reported by main(); --self-test needs neither
    torch = triton = tl = None
    IMPORT_ERROR = e

if triton is not None:

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, x + y, mask=mask)

    @triton.jit
    def histogram_kernel(x_ptr, bins_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=0)
        tl.atomic_add(bins_ptr + x, 1, mask=mask)

    @triton.jit
    def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                      stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr):
        # Unmasked: M, N and K are multiples of the blocks.
        pid = tl.program_id(0)
        tiles_n = tl.cdiv(N, BLOCK_N)
        pid_m = pid // tiles_n
        pid_n = pid % tiles_n
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        rk = tl.arange(0, BLOCK_K)
        a = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
        b = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for _ in range(0, tl.cdiv(K, BLOCK_K)):
            acc = tl.dot(tl.load(a), tl.load(b), acc)
            a += BLOCK_K * stride_ak
            b += BLOCK_K * stride_bk
        tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc)

    @triton.jit
    def matmul_tma_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        # Row-major A (M × K), B (K × N), C (M × N); device-side descriptors.
        a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1],
                                           block_shape=[BLOCK_M, BLOCK_K])
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1],
                                           block_shape=[BLOCK_K, BLOCK_N])
        c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1],
                                           block_shape=[BLOCK_M, BLOCK_N])
        pid = tl.program_id(0)
        tiles_n = tl.cdiv(N, BLOCK_N)
        off_m = (pid // tiles_n) * BLOCK_M
        off_n = (pid % tiles_n) * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            acc = tl.dot(a_desc.load([off_m, k * BLOCK_K]), b_desc.load([k * BLOCK_K, off_n]),
                         acc)
        c_desc.store([off_m, off_n], acc)

    @triton.jit
    def matmul_tma_experimental_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr,
                                       BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        # The same, for a Triton whose device-side descriptors are still experimental (compiled
        # only when tl.make_tensor_descriptor is missing).
        a_desc = tl._experimental_make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1],
                                                         block_shape=[BLOCK_M, BLOCK_K])
        b_desc = tl._experimental_make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1],
                                                         block_shape=[BLOCK_K, BLOCK_N])
        c_desc = tl._experimental_make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1],
                                                         block_shape=[BLOCK_M, BLOCK_N])
        pid = tl.program_id(0)
        tiles_n = tl.cdiv(N, BLOCK_N)
        off_m = (pid // tiles_n) * BLOCK_M
        off_n = (pid % tiles_n) * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            acc = tl.dot(a_desc.load([off_m, k * BLOCK_K]), b_desc.load([k * BLOCK_K, off_n]),
                         acc)
        c_desc.store([off_m, off_n], acc)

    @triton.jit
    def matmul_tma_host_kernel(a_desc, b_desc, c_desc, M, N, K, BLOCK_M: tl.constexpr,
                               BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        # Host-side descriptors (TensorDescriptor), passed as kernel parameters.
        pid = tl.program_id(0)
        tiles_n = tl.cdiv(N, BLOCK_N)
        off_m = (pid // tiles_n) * BLOCK_M
        off_n = (pid % tiles_n) * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            acc = tl.dot(a_desc.load([off_m, k * BLOCK_K]), b_desc.load([k * BLOCK_K, off_n]),
                         acc)
        c_desc.store([off_m, off_n], acc)


# --------------------------------------------------------------------------------------------
# The cases: each launches its kernel once and returns what shapes.json records
# --------------------------------------------------------------------------------------------

def tensor_arg(name, t):
    return {"name": name, "kind": "tensor", "shape": list(t.shape), "dtype": str(t.dtype),
            "strides": list(t.stride()), "bytes": t.numel() * t.element_size()}


def scalar_arg(name, v):
    return {"name": name, "kind": type(v).__name__, "value": v}


def no_bytes():
    return dict(ld_global=0, st_global=0, cp_async=0, bulk=0, tensor_load=0, tensor_store=0,
                atomic=0, tensormap_global=0)


def seeded():
    return torch.Generator(device="cuda").manual_seed(20)


def case_add():
    n, block, warps = 1 << 20, 1024, 4
    g = seeded()
    x = torch.rand(n, device="cuda", generator=g)
    y = torch.rand(n, device="cuda", generator=g)
    out = torch.empty_like(x)
    grid = (n // block,)
    k = add_kernel[grid](x, y, out, n, BLOCK=block, num_warps=warps)
    torch.cuda.synchronize()
    expected = no_bytes()
    expected.update(ld_global=2 * 4 * n, st_global=4 * n)
    return dict(compiled=k, matched=torch.equal(out, x + y), grid=list(grid),
                num_warps=warps, num_stages=None, constexprs=dict(BLOCK=block),
                args=[tensor_arg("x", x), tensor_arg("y", y), tensor_arg("out", out),
                      scalar_arg("n", n)],
                expected=expected,
                how="each of the n // BLOCK programs loads BLOCK floats of x and of y and "
                    "stores BLOCK floats of out")


def case_histogram():
    n, block, nbins, warps = 1 << 20, 1024, 256, 4
    x = torch.randint(0, nbins, (n,), device="cuda", dtype=torch.int32, generator=seeded())
    bins = torch.zeros(nbins, device="cuda", dtype=torch.int32)
    grid = (n // block,)
    k = histogram_kernel[grid](x, bins, n, BLOCK=block, num_warps=warps)
    torch.cuda.synchronize()
    want = torch.bincount(x.long(), minlength=nbins).to(torch.int32)
    expected = no_bytes()
    expected.update(ld_global=4 * n, atomic=4 * n)
    return dict(compiled=k, matched=torch.equal(bins, want), grid=list(grid),
                num_warps=warps, num_stages=None, constexprs=dict(BLOCK=block),
                args=[tensor_arg("x", x), tensor_arg("bins", bins), scalar_arg("n", n)],
                expected=expected, atomics=n,
                how="each program loads BLOCK int32 values and adds 1 to the bin of each with "
                    "a 4-byte atomic: n atomics in all")


M = N = K = 512
BM, BN, BK = 128, 128, 64


def matmul_inputs():
    g = seeded()
    a = (torch.rand(M, K, device="cuda", generator=g) * 2 - 1).half()
    b = (torch.rand(K, N, device="cuda", generator=g) * 2 - 1).half()
    c = torch.empty(M, N, device="cuda", dtype=torch.float32)
    return a, b, c


def matmul_matched(a, b, c):
    return torch.allclose(c, a.float() @ b.float(), rtol=1e-2, atol=5e-2)


def matmul_tiles_bytes():
    # Each program reads BM × K of A and K × BN of B, fp16; C is written once, fp32.
    programs = (M // BM) * (N // BN)
    return programs, programs * (BM * K + K * BN) * 2, M * N * 4


MATMUL_HOW = (f"{M}x{K} @ {K}x{N} fp16 -> fp32, blocks {BM}x{BN}x{BK}: each of the "
              f"(M/{BM})*(N/{BN}) programs reads its {BM}x{K} rows of A and {K}x{BN} columns of "
              f"B in K/{BK} steps ((BM*BK + BK*BN)*2 bytes a step) and writes its {BM}x{BN} "
              f"tile of C once (4 bytes an element)")


def case_matmul_cp_async():
    a, b, c = matmul_inputs()
    programs, tiles, out_bytes = matmul_tiles_bytes()
    grid = (programs,)
    tried = []
    # (num_stages, num_warps): the first whose PTX has cp.async is kept.
    for stages, warps in [(3, 4), (3, 8), (4, 4), (2, 4), (4, 8)]:
        c.zero_()
        k = matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0),
                                b.stride(1), c.stride(0), c.stride(1), BLOCK_M=BM, BLOCK_N=BN,
                                BLOCK_K=BK, num_warps=warps, num_stages=stages)
        torch.cuda.synchronize()
        n = count_classes(k.asm["ptx"])["cp.async"]
        tried.append(f"num_stages={stages} num_warps={warps}: {n} cp.async")
        if n:
            break
    else:
        print(f"  triton_matmul_cp_async: no configuration gave cp.async ({'; '.join(tried)}); "
              f"keeping the last", file=sys.stderr)
    expected = no_bytes()
    expected.update(cp_async=tiles, st_global=out_bytes)
    return dict(compiled=k, matched=matmul_matched(a, b, c), grid=list(grid), num_warps=warps,
                num_stages=stages, constexprs=dict(BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK),
                args=[tensor_arg("a", a), tensor_arg("b", b), tensor_arg("c", c)]
                + [scalar_arg(s, v) for s, v in [("M", M), ("N", N), ("K", K)]],
                expected=expected, tried=tried,
                how=MATMUL_HOW + "; the tiles through cp.async (assumed), C with st.global")


def alloc_workspace(size, alignment, stream):
    # Device-side tensor descriptors' global workspace (triton.set_allocator).
    return torch.empty(size, device="cuda", dtype=torch.int8)


def case_matmul_tma():
    a, b, c = matmul_inputs()
    programs, tiles, out_bytes = matmul_tiles_bytes()
    grid = (programs,)
    if not hasattr(triton, "set_allocator"):
        raise RuntimeError("this Triton has no triton.set_allocator")
    triton.set_allocator(alloc_workspace)
    if hasattr(tl, "make_tensor_descriptor"):
        kernel, api = matmul_tma_kernel, "tl.make_tensor_descriptor"
    elif hasattr(tl, "_experimental_make_tensor_descriptor"):
        kernel, api = matmul_tma_experimental_kernel, "tl._experimental_make_tensor_descriptor"
    else:
        raise RuntimeError("this Triton has neither tl.make_tensor_descriptor nor "
                           "tl._experimental_make_tensor_descriptor")
    stages, warps = 3, 4
    k = kernel[grid](a, b, c, M, N, K, BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, num_warps=warps,
                     num_stages=stages)
    torch.cuda.synchronize()
    expected = no_bytes()
    expected.update(tensor_load=tiles, tensor_store=out_bytes, tensormap_global=programs * 3 * 128)
    return dict(compiled=k, matched=matmul_matched(a, b, c), grid=list(grid), num_warps=warps,
                num_stages=stages, constexprs=dict(BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK),
                args=[tensor_arg("a", a), tensor_arg("b", b), tensor_arg("c", c)]
                + [scalar_arg(s, v) for s, v in [("M", M), ("N", N), ("K", K)]],
                expected=expected, api=api,
                how=MATMUL_HOW + f"; device-side descriptors ({api}): boxes of {BM}x{BK} (A), "
                    f"{BK}x{BN} (B) loaded and {BM}x{BN} (C) stored by cp.async.bulk.tensor; "
                    "each program also writes its 3 descriptors (built in shared memory with "
                    "tensormap.replace) to the allocator's workspace in global memory with "
                    "tensormap.cp_fenceproxy.global (128 bytes each: tensormap_global)")


def case_matmul_tma_host():
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor
    except ImportError as e:
        raise RuntimeError(f"no host-side TensorDescriptor in this Triton: {e}")
    a, b, c = matmul_inputs()
    programs, tiles, out_bytes = matmul_tiles_bytes()
    grid = (programs,)
    a_desc = TensorDescriptor.from_tensor(a, [BM, BK])
    b_desc = TensorDescriptor.from_tensor(b, [BK, BN])
    c_desc = TensorDescriptor.from_tensor(c, [BM, BN])
    stages, warps = 3, 4
    k = matmul_tma_host_kernel[grid](a_desc, b_desc, c_desc, M, N, K, BLOCK_M=BM, BLOCK_N=BN,
                                     BLOCK_K=BK, num_warps=warps, num_stages=stages)
    torch.cuda.synchronize()
    expected = no_bytes()
    expected.update(tensor_load=tiles, tensor_store=out_bytes)
    desc = lambda name, t, box: dict(tensor_arg(name, t), kind="TensorDescriptor",
                                     block_shape=box)
    return dict(compiled=k, matched=matmul_matched(a, b, c), grid=list(grid), num_warps=warps,
                num_stages=stages, constexprs=dict(BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK),
                args=[desc("a_desc", a, [BM, BK]), desc("b_desc", b, [BK, BN]),
                      desc("c_desc", c, [BM, BN])]
                + [scalar_arg(s, v) for s, v in [("M", M), ("N", N), ("K", K)]],
                expected=expected, api="triton.tools.tensor_descriptor.TensorDescriptor",
                how=MATMUL_HOW + "; host-side descriptors (kernel parameters): boxes loaded and "
                    "stored by cp.async.bulk.tensor")


# In this order so that a kernel that breaks the CUDA context (device-side descriptors are the
# likeliest) costs the fewest others; `--only` runs one alone.
CASES = {
    "triton_add": (case_add, ("ld.global", "st.global")),
    "triton_histogram": (case_histogram, ("atom", "red")),
    "triton_matmul_cp_async": (case_matmul_cp_async, "cp.async"),
    "triton_matmul_tma_host": (case_matmul_tma_host, "cp.async.bulk.tensor"),
    "triton_matmul_tma": (case_matmul_tma, "cp.async.bulk.tensor"),
}


def kernel_name(compiled):
    for get in (lambda c: c.name, lambda c: c.metadata.name):
        try:
            return str(get(compiled))
        except Exception:
            pass
    return None


def run_case(name, make, wanted, outdir):
    """Runs one case; returns its shapes.json record (with `error` when it failed)."""
    record = {"name": name}
    try:
        got = make()
        compiled = got.pop("compiled")
        ptx = compiled.asm["ptx"]
        path = os.path.join(outdir, f"{name}.ptx")
        with open(path, "w") as f:
            f.write(ptx)
        counts = count_classes(ptx)
        wanted = (wanted,) if isinstance(wanted, str) else wanted
        target = re.search(r"^\.target\s+(\S+)", ptx, re.M)
        record.update(
            kernel=kernel_name(compiled), ptx=os.path.basename(path),
            ptx_target=target.group(1) if target else None, ptx_lines=ptx.count("\n"),
            matched=bool(got.pop("matched")), ptx_counts=counts,
            ptx_has_wanted_class=any(counts[w] for w in wanted), wanted_class=list(wanted),
            threads_per_program=got["num_warps"] * 32,
            programs=math.prod(got["grid"]),
            expected_bytes=got.pop("expected"), **got)
    except Exception as e:
        traceback.print_exc()
        record.update(error=f"{type(e).__name__}: {e}".strip())
    return record


def summary_line(r):
    if "error" in r:
        return f"{r['name']:<24} ERROR {r['error'].splitlines()[0][:200]}"
    c = r["ptx_counts"]
    cols = " ".join(f"{k}={c[k]}" for k in COLUMNS)
    extra = " ".join(f"{k}={c[k]}" for k in EXTRA if c[k])
    flag = "" if r["ptx_has_wanted_class"] else f" (no {'/'.join(r['wanted_class'])} in PTX!)"
    return (f"{r['name']:<24} {'matched' if r['matched'] else 'MISMATCH'} {cols}"
            f"{' ' + extra if extra else ''}{flag}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir", nargs="?", default=os.environ.get("OUT"),
                        help="where the .ptx files and shapes.json go (default: $OUT)")
    parser.add_argument("--only", help="comma-separated kernel names: " + ", ".join(CASES))
    parser.add_argument("--self-test", action="store_true",
                        help="check the PTX counter on a built-in snippet (no GPU needed)")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    if not args.outdir:
        parser.error("no output folder: give OUTDIR or set $OUT")
    if IMPORT_ERROR is not None:
        print(f"error: Triton and PyTorch are needed: {IMPORT_ERROR}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("error: no CUDA device visible to PyTorch", file=sys.stderr)
        return 2
    only = set(args.only.split(",")) if args.only else set(CASES)
    unknown = only - set(CASES)
    if unknown:
        parser.error(f"unknown kernels {sorted(unknown)}; known: {', '.join(CASES)}")
    os.makedirs(args.outdir, exist_ok=True)
    props = torch.cuda.get_device_properties(0)
    print(f"triton {triton.__version__}, torch {torch.__version__}, {props.name} "
          f"(sm_{props.major}{props.minor}); writing to {args.outdir}")
    records = [run_case(name, make, wanted, args.outdir)
               for name, (make, wanted) in CASES.items() if name in only]
    shapes = {"triton": triton.__version__, "torch": torch.__version__, "device": props.name,
              "capability": f"{props.major}.{props.minor}",
              "bytes_classes": list(no_bytes()), "count_columns": COLUMNS + EXTRA,
              "kernels": {r["name"]: r for r in records}}
    with open(os.path.join(args.outdir, "shapes.json"), "w") as f:
        json.dump(shapes, f, indent=2, default=str)
        f.write("\n")
    print(f"\nwrote {sum('error' not in r for r in records)} PTX files and shapes.json "
          f"to {args.outdir}")
    for r in records:
        print(summary_line(r))
    bad = [r for r in records
           if "error" in r or not r["matched"] or not r["ptx_has_wanted_class"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
