"""Six Triton kernels and a saxpy, timed, with what each launch does: the program that the
zero-code benchmark (bench_preload.py, the GPU bundle's `bench` set) runs bare and under
`egpu run --probes` with the packs libkernel_bytes.so (examples/kernel_bytes.rs) and
libempty_probes.so (examples/empty_probes.rs).

    python3 bench_kernels.py [--launches 20] [--only add,softmax,...]
    python3 bench_kernels.py --latency [--repeats 20]     (under `egpu run --probes`)

Timing mode. Each kernel is launched once to compile and warm up, then `--launches` times
between two CUDA events; the time per launch is the events' elapsed time divided by the
launches. Its output is checked against PyTorch (exactly where the arithmetic is exact) and
summed (float64) and hashed (BLAKE2b of its bytes), so that runs bare and under egpu can be
compared for identical results. One line per kernel:

    kernel add name add_kernel id 0x... ms 0.0291 launches 21 grid 4096 num_warps 4
        threads_per_launch 524288 bytes_loaded_per_launch 33554432
        bytes_stored_per_launch 16777216 bytes_async_per_launch 0 tensor_loads_per_launch 0
        tensor_stores_per_launch 0 atomic_bytes_per_launch 0 atomics_per_launch 0
        sum 4194304.5 hash 9f... check ok

(on one line). `launches` counts every launch, the warm-up included: the probes' totals are
`launches` times the per-launch figures, one per map of the kernel_bytes pack. They are what
the kernel's threads do, from its grid, `num_warps` and shapes: threads = grid × num_warps ×
32; bytes loaded and stored are those of every instruction that reads or writes global memory
(`ld.global`/`st.global`, a vectorised access counting all its bytes, and `cp.async`), bytes
async those of `cp.async` alone, tensor loads and stores the TMA copies (`cp.async.bulk.tensor`,
counted) and tensor bytes loaded and stored the bytes of their boxes (which the preloaded
library records when Triton encodes the descriptors), atomic bytes and atomics those of
`atom`/`red`. A
masked-off lane moves nothing, and every shape here is a multiple of its block, so no lane is
masked off. That holds when every element of a block is held by exactly one thread, i.e. a
block has at least as many elements as threads (Triton replicates smaller tensors across
threads, and each copy loads); the program checks it, and prints `-` for a figure it cannot
know. By kernel:
- matmul: Triton 3.6 reads the tiles with `cp.async.cg` (16 bytes, `src-size` 16 or 0) into
  shared memory for sm_90 (its PTX has no `ld.global`): bytes loaded = bytes async = the tiles'
  bytes, each program's BLOCK_M × K of A and K × BLOCK_N of B once (the copies of pipeline
  stages past the K loop's end read 0 bytes; K is a multiple of BLOCK_K, so every other copy
  reads all 16); its `st.global.v4` store the output tile once.
- matmul_tma: the same product with host-side tensor descriptors
  (`triton.tools.tensor_descriptor.TensorDescriptor`): the tiles are read and C written by TMA
  copies, one thread each. A box is at most 128 bytes wide (the 128-byte swizzle of the shared
  tiles), so Triton splits a tile whose rows are wider into boxes of 128 bytes, one copy each
  (see tests/ptx/triton/triton_matmul_tma_host.ptx: 1 copy per K step for A's 128 × 64 fp16
  tile, 2 for B's 64 × 128, 4 stores for an fp32 128 × 128 C). Here, per program: K / BLOCK_K
  steps of 1 + 2 loads, and 2 stores of its fp16 C tile; the boxes' bytes are the tiles'.
  Both matmuls are MATMUL_SIZE³ fp16.
- histogram: `tl.atomic_add` becomes `atom.global`/`red.global` of 4 bytes per element.
(Checked without a GPU: Triton 3.6 compiled every kernel here for sm_90a, and the PTX's
`ld.global`/`st.global`, all `.v4.b32` under the mask's predicate, add up to these figures.)

Latency mode (only under `egpu run --probes` with the kernel_bytes pack): the time from a
kernel's end to its count showing in the shared-memory map `ENTERED`
(`/dev/shm/egpu-<pid>-u-ENTERED`, read with the reader below): (a) `sync`: launch the add
kernel, `torch.cuda.synchronize()`, then poll the map until the kernel's count includes the
launch; (b) `query`: launch, poll a CUDA event with `query()` (no synchronisation) until it is
done, then poll the map. Lines:

    latency sync n 20 median_ms 0.004 max_ms 0.020 timeouts 0 merge_lag_median_ms ...
    latency final ENTERED add_kernel expected 21495808 observed 21495808 exact yes

(`merge_lag`: the map header's DEVICE_MERGED_NS, the last merge of the device part, minus the
moment the kernel was known to have ended; `-` when the map has no device part merged.)
"""

import argparse
import hashlib
import mmap
import os
import statistics
import struct
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))

# --- the map layout (egpu-maps/src/layout.rs), for the latency mode -------------------------

MAGIC = b"egpu-map"
LAYOUT_VERSION = 2
HEADER_BYTES = 128
SHARD_HEADER_BYTES = 128
# Byte offsets of the header's fields (layout.rs, `header`).
H_VERSION, H_KIND, H_KEY_SIZE, H_VALUE_SIZE, H_CAPACITY, H_SLOTS = 8, 12, 16, 20, 24, 28
H_CPU_SHARDS, H_SM_SHARDS, H_SLOT_STRIDE, H_VALUE_OFFSET = 32, 36, 40, 44
H_SHARD_STRIDE, H_TOTAL_BYTES, H_CREATOR_PID, H_DEVICE_MERGED_NS = 48, 56, 64, 72
# Map kinds as Linux numbers them: hash and per-CPU hash.
KIND_HASH, KIND_PERCPU_HASH = 1, 5
# Hash slot states: the top 3 bits of the state word (layout.rs, `hash_state`). FULL is a live
# entry; WRITING a live entry whose value is being replaced (counters are added in place, so
# its value is still a count).
STATE_SHIFT, STATE_FULL, STATE_WRITING = 61, 3, 5


def kernel_id(name):
    """A kernel's id as egpu computes it (egpu_ebpf::kernel_id): the 64-bit FNV-1a hash of its
    (mangled) name."""
    h = 0xCBF29CE484222325
    for b in name.encode():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def hash_key(key):
    """The layout's hash of a key (layout.rs `hash_key`): a folded multiply per 8-byte word."""
    mask = (1 << 64) - 1
    h = 0x243F6A8885A308D3 ^ len(key)
    for i in range(0, len(key), 8):
        word = int.from_bytes(key[i:i + 8].ljust(8, b"\0"), "little")
        product = (h ^ word) * 0x9E3779B97F4A7C15
        h = (product & mask) ^ (product >> 64)
    return h ^ (h >> 32)


class ShmHashMap:
    """A hash map of egpu's layout (u64 values, any key size), read from its bytes: a POSIX
    shared-memory object such as /dev/shm/egpu-<pid>-u-ENTERED, or any bytes-like `buffer`.

    The header gives the geometry; every shard (a per-CPU hash map has several) is a table of
    `slots` slots of `slot_stride` bytes after a 128-byte shard header: an 8-byte state word,
    the key padded to 8 bytes, then the value at `value_offset`. A key's value is the sum over
    the shards of its live slots' values. Reads are plain 8-byte reads of aligned words, which
    is enough for counters that only grow."""

    def __init__(self, path=None, buffer=None):
        if buffer is None:
            with open(path, "rb") as f:
                buffer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self.buf = buffer
        if len(buffer) < HEADER_BYTES or bytes(buffer[:8]) != MAGIC:
            raise ValueError(f"{path or 'buffer'}: not an egpu map (yet)")
        u32 = lambda off: struct.unpack_from("<I", buffer, off)[0]
        u64 = lambda off: struct.unpack_from("<Q", buffer, off)[0]
        self.version = u32(H_VERSION)
        self.kind = u32(H_KIND)
        self.key_size, self.value_size = u32(H_KEY_SIZE), u32(H_VALUE_SIZE)
        self.capacity, self.slots = u32(H_CAPACITY), u32(H_SLOTS)
        self.shards = u32(H_CPU_SHARDS) + u32(H_SM_SHARDS)
        self.slot_stride, self.value_offset = u32(H_SLOT_STRIDE), u32(H_VALUE_OFFSET)
        self.shard_stride, self.total_bytes = u64(H_SHARD_STRIDE), u64(H_TOTAL_BYTES)
        self.creator = u32(H_CREATOR_PID)
        if self.kind not in (KIND_HASH, KIND_PERCPU_HASH) or self.value_size != 8:
            raise ValueError(f"kind {self.kind}, {self.value_size}-byte values: not a hash map "
                             "of u64 values")
        if self.version != LAYOUT_VERSION:
            print(f"note: map layout version {self.version}, this reader knows "
                  f"{LAYOUT_VERSION}", file=sys.stderr)
        if len(buffer) < self.total_bytes:
            raise ValueError(f"{len(buffer)} bytes, the header says {self.total_bytes}")
        self._cache = {}

    def merged_ns(self):
        """DEVICE_MERGED_NS: wall-clock ns of the last merge of the device part (0: none)."""
        return struct.unpack_from("<Q", self.buf, H_DEVICE_MERGED_NS)[0]

    def _slots(self):
        """(slot offset, state) of every slot of every shard."""
        for s in range(self.shards):
            base = HEADER_BYTES + s * self.shard_stride + SHARD_HEADER_BYTES
            for i in range(self.slots):
                off = base + i * self.slot_stride
                yield off, struct.unpack_from("<Q", self.buf, off)[0] >> STATE_SHIFT

    def items(self):
        """{key bytes: value summed over the shards} of the live entries."""
        out = {}
        for off, state in self._slots():
            if state in (STATE_FULL, STATE_WRITING):
                key = bytes(self.buf[off + 8:off + 8 + self.key_size])
                value = struct.unpack_from("<Q", self.buf, off + self.value_offset)[0]
                out[key] = out.get(key, 0) + value
        return out

    def value_offsets(self, key):
        """The offsets of `key`'s values, one per shard that holds it: found by a scan, then
        kept (a live slot never moves while the map is shared)."""
        want = key.ljust(self.key_size, b"\0")[:self.key_size]
        found = [off + self.value_offset for off, state in self._slots()
                 if state in (STATE_FULL, STATE_WRITING)
                 and bytes(self.buf[off + 8:off + 8 + self.key_size]) == want]
        self._cache[key] = found
        return found

    def get(self, key, rescan=False):
        """`key`'s value summed over the shards (0 when absent); `rescan` looks for slots again
        (a shard that had no entry for it may have one now)."""
        offsets = self._cache.get(key)
        if offsets is None or rescan:
            offsets = self.value_offsets(key)
        return sum(struct.unpack_from("<Q", self.buf, o)[0] for o in offsets)


# --- the kernels --------------------------------------------------------------------------


def define_kernels():
    """The Triton kernels (defined here so that `--help` and the self-test need no Triton)."""
    import triton
    import triton.language as tl

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, x + y, mask=mask)

    @triton.jit
    def softmax_kernel(out_ptr, in_ptr, stride, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(in_ptr + row * stride + cols, mask=mask, other=-float("inf"))
        num = tl.exp(x - tl.max(x, axis=0))
        tl.store(out_ptr + row * stride + cols, num / tl.sum(num, axis=0), mask=mask)

    @triton.jit
    def layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, stride, n_cols, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
        mean = tl.sum(x, axis=0) / n_cols
        d = tl.where(mask, x - mean, 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / n_cols + eps)
        w = tl.load(w_ptr + cols, mask=mask)
        b = tl.load(b_ptr + cols, mask=mask)
        tl.store(y_ptr + row * stride + cols, d * rstd * w + b, mask=mask)

    @triton.jit
    def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                      stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
        # Blocked, with programs grouped along M so that a group's tiles of B stay in L2.
        pid = tl.program_id(0)
        tiles_m = tl.cdiv(M, BLOCK_M)
        tiles_n = tl.cdiv(N, BLOCK_N)
        in_group = GROUP_M * tiles_n
        first_m = (pid // in_group) * GROUP_M
        group_m = min(tiles_m - first_m, GROUP_M)
        pid_m = first_m + (pid % in_group) % group_m
        pid_n = (pid % in_group) // group_m
        rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
        rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
        rk = tl.arange(0, BLOCK_K)
        a = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
        b = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            left = K - k * BLOCK_K
            acc = tl.dot(tl.load(a, mask=rk[None, :] < left, other=0.0),
                         tl.load(b, mask=rk[:, None] < left, other=0.0), acc)
            a += BLOCK_K * stride_ak
            b += BLOCK_K * stride_bk
        cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        tl.store(c_ptr + cm[:, None] * stride_cm + cn[None, :] * stride_cn, acc.to(tl.float16),
                 mask=(cm[:, None] < M) & (cn[None, :] < N))

    @triton.jit
    def matmul_tma_kernel(a_desc, b_desc, c_desc, M, N, K, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        # Host-side tensor descriptors (TensorDescriptor), passed as kernel parameters.
        pid = tl.program_id(0)
        tiles_n = tl.cdiv(N, BLOCK_N)
        off_m = (pid // tiles_n) * BLOCK_M
        off_n = (pid % tiles_n) * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            acc = tl.dot(a_desc.load([off_m, k * BLOCK_K]), b_desc.load([k * BLOCK_K, off_n]),
                         acc)
        c_desc.store([off_m, off_n], acc.to(tl.float16))

    @triton.jit
    def histogram_kernel(x_ptr, bins_ptr, n, NBINS: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=0.0)
        idx = tl.minimum((x * NBINS).to(tl.int32), NBINS - 1)
        tl.atomic_add(bins_ptr + idx, 1, mask=mask)

    @triton.jit
    def saxpy_kernel(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, a * x + y, mask=mask)

    return dict(add=add_kernel, softmax=softmax_kernel, layernorm=layernorm_kernel,
                matmul=matmul_kernel, matmul_tma=matmul_tma_kernel, histogram=histogram_kernel,
                saxpy=saxpy_kernel)


# The per-launch figures of a kernel line, in its order: each is what a map of the kernel_bytes
# pack counts in one launch (bench_preload.py pairs them).
FIGURES = ("bytes_loaded_per_launch", "bytes_stored_per_launch", "bytes_async_per_launch",
           "tensor_loads_per_launch", "tensor_stores_per_launch", "tensor_bytes_loaded_per_launch",
           "tensor_bytes_stored_per_launch", "atomic_bytes_per_launch", "atomics_per_launch")
# Figures counted per thread that executes an instruction: unknown (`-`) where Triton
# replicates a block across threads. TMA copies are issued by one thread, whatever the layout.
PER_THREAD = set(FIGURES) - {"tensor_loads_per_launch", "tensor_stores_per_launch",
                             "tensor_bytes_loaded_per_launch", "tensor_bytes_stored_per_launch"}


class Case:
    """One kernel's benchmark: `launch()` launches it once and returns Triton's compiled
    kernel; `grid` is the number of programs; `block_elems` the elements of the smallest tensor
    one program loads or stores (for the no-replication check); `loaded`/`stored` the bytes of
    one launch's reads and writes of global memory, every class; `figures` the other figures of
    FIGURES that are not 0; `out` the output tensor; `check(launches)` compares it with
    PyTorch."""

    def __init__(self, name, launch, grid, block_elems, loaded, stored, out, check, **figures):
        self.name, self.launch, self.grid, self.block_elems = name, launch, grid, block_elems
        self.out, self.check = out, check
        unknown = set(figures) - set(FIGURES)
        assert not unknown, unknown
        self.figures = {f: 0 for f in FIGURES}
        self.figures.update(figures, bytes_loaded_per_launch=loaded,
                            bytes_stored_per_launch=stored)


WARPS = 4  # num_warps of every kernel but the matmul


def add_case(torch, k, rand):
    n, block = 1 << 22, 1024
    x, y = rand(n), rand(n)
    out = torch.empty_like(x)
    return Case("add", lambda: k[(n // block,)](x, y, out, n, BLOCK=block, num_warps=WARPS),
                n // block, block, 2 * 4 * n, 4 * n, out, lambda _: torch.equal(out, x + y))


def softmax_case(torch, k, rand):
    rows, cols = 2048, 1024
    x = rand(rows, cols) * 8 - 4
    out = torch.empty_like(x)
    return Case("softmax", lambda: k[(rows,)](out, x, x.stride(0), cols, BLOCK=cols,
                                              num_warps=WARPS),
                rows, cols, 4 * rows * cols, 4 * rows * cols, out,
                lambda _: torch.allclose(out, torch.softmax(x, dim=1), rtol=1e-4, atol=1e-6))


def layernorm_case(torch, k, rand):
    rows, cols, eps = 2048, 1024, 1e-5
    x = rand(rows, cols) * 8 - 4
    w, b = rand(cols), rand(cols)
    out = torch.empty_like(x)
    want = lambda: torch.nn.functional.layer_norm(x, (cols,), w, b, eps)
    # Each program loads its row of x and all of w and b, and stores its row of y.
    return Case("layernorm", lambda: k[(rows,)](x, w, b, out, x.stride(0), cols, eps,
                                                BLOCK=cols, num_warps=WARPS),
                rows, cols, 4 * rows * 3 * cols, 4 * rows * cols, out,
                lambda _: torch.allclose(out, want(), rtol=1e-4, atol=1e-4))


# The matmuls' M = N = K: large enough that a launch's time is the kernel's (about 0.2 ms on the
# H200), not the launch's.
MATMUL_SIZE = 4096


def matmul_case(torch, k, rand):
    m = n = kk = MATMUL_SIZE
    bm, bn, bk, group = 128, 128, 64, 8
    a = (rand(m, kk) * 2 - 1).half()
    b = (rand(kk, n) * 2 - 1).half()
    out = torch.empty(m, n, device="cuda", dtype=torch.float16)
    grid = (m // bm) * (n // bn)
    # Read by cp.async: each program reads BLOCK_M × K of A and K × BLOCK_N of B, 2 bytes an
    # element (K is a multiple of BLOCK_K: no step is masked; the stages past the end read 0).
    tiles = grid * (bm * kk + kk * bn) * 2
    launch = lambda: k[(grid,)](
        a, b, out, m, n, kk, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
        out.stride(0), out.stride(1), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group,
        num_warps=8, num_stages=3)
    check = lambda _: torch.allclose(out.float(), a.float() @ b.float(), rtol=1e-2, atol=5e-2)
    return Case("matmul", launch, grid, min(bm * bk, bk * bn), tiles, 2 * m * n, out, check,
                bytes_async_per_launch=tiles)


TMA_BOX_BYTES = 128  # the widest row of a TMA box: the shared tiles' 128-byte swizzle


def tma_boxes(rows, cols, elem_bytes):
    """The TMA copies Triton makes of a rows × cols tile: one per 128 bytes of its rows (a box
    is also at most 256 rows)."""
    return -(-cols * elem_bytes // TMA_BOX_BYTES) * -(-rows // 256)


def matmul_tma_case(torch, k, rand):
    from triton.tools.tensor_descriptor import TensorDescriptor
    m = n = kk = MATMUL_SIZE
    bm, bn, bk = 128, 128, 64
    a = (rand(m, kk) * 2 - 1).half()
    b = (rand(kk, n) * 2 - 1).half()
    out = torch.empty(m, n, device="cuda", dtype=torch.float16)
    descs = (TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(b, [bk, bn]),
             TensorDescriptor.from_tensor(out, [bm, bn]))
    grid = (m // bm) * (n // bn)
    # Per program, K / BLOCK_K steps of A's and B's boxes, then C's once (fp16: 2 bytes). The
    # boxes of a tile move its bytes (no box reaches past the tensors: no out-of-bounds fill).
    loads = grid * (kk // bk) * (tma_boxes(bm, bk, 2) + tma_boxes(bk, bn, 2))
    stores = grid * tma_boxes(bm, bn, 2)
    loaded = grid * (kk // bk) * (bm * bk + bk * bn) * 2
    stored = grid * bm * bn * 2
    launch = lambda: k[(grid,)](*descs, m, n, kk, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                                num_warps=4, num_stages=3)
    check = lambda _: torch.allclose(out.float(), a.float() @ b.float(), rtol=1e-2, atol=5e-2)
    return Case("matmul_tma", launch, grid, bm * bn, 0, 0, out, check,
                tensor_loads_per_launch=loads, tensor_stores_per_launch=stores,
                tensor_bytes_loaded_per_launch=loaded, tensor_bytes_stored_per_launch=stored)


def histogram_case(torch, k, rand):
    n, block, nbins = 1 << 22, 1024, 256
    x = rand(n)
    bins = torch.zeros(nbins, device="cuda", dtype=torch.int32)
    ref = torch.bincount(torch.clamp((x * nbins).to(torch.int32), max=nbins - 1),
                         minlength=nbins).to(torch.int32)
    # The bins are not cleared between launches: they hold `launches` histograms.
    return Case("histogram", lambda: k[(n // block,)](x, bins, n, NBINS=nbins, BLOCK=block,
                                                      num_warps=WARPS),
                n // block, block, 4 * n, 0, bins,
                lambda launches: torch.equal(bins, ref * launches),
                atomic_bytes_per_launch=4 * n, atomics_per_launch=n)


def saxpy_case(torch, k, rand):
    n, block, alpha = 1 << 28, 1024, 2.5
    x, y = rand(n), rand(n)
    out = torch.empty_like(x)
    return Case("saxpy", lambda: k[(n // block,)](x, y, out, alpha, n, BLOCK=block,
                                                  num_warps=WARPS),
                n // block, block, 2 * 4 * n, 4 * n, out,
                lambda _: torch.allclose(out, alpha * x + y, rtol=1e-6, atol=1e-6))


CASES = dict(add=add_case, softmax=softmax_case, layernorm=layernorm_case, matmul=matmul_case,
             matmul_tma=matmul_tma_case, histogram=histogram_case, saxpy=saxpy_case)


def make_cases(torch, kernels, only):
    """The benchmarks named in `only`, in CASES's order, with their inputs (seeded, on the
    GPU; each case's launch closes over its own tensors)."""
    g = torch.Generator(device="cuda").manual_seed(17)
    rand = lambda *shape: torch.rand(*shape, device="cuda", generator=g)
    return [make(torch, kernels[name], rand) for name, make in CASES.items() if name in only]


def kernel_name(compiled, fallback):
    """The kernel's entry name (what egpu's kernel id hashes) from Triton's compiled kernel."""
    for get in (lambda c: c.name, lambda c: c.metadata.name):
        try:
            name = get(compiled)
            if isinstance(name, str) and name:
                return name
        except AttributeError:
            pass
    return fallback


def checksum(torch, t):
    """(float64 sum, BLAKE2b-128 of the bytes) of a tensor; the hash is `-` without numpy."""
    total = t.to(torch.float64).sum().item()
    try:
        data = t.detach().contiguous().cpu().view(torch.uint8).reshape(-1).numpy()
        digest = hashlib.blake2b(data, digest_size=16).hexdigest()
    except (ImportError, RuntimeError, TypeError):
        digest = "-"
    return total, digest


def fmt(n):
    return "-" if n is None else str(n)


def bench(args):
    """The timing mode: one `kernel ...` line per kernel; exits 1 when a check fails."""
    import torch
    kernels = define_kernels()
    only = args.only.split(",") if args.only else list(CASES)
    unknown = set(only) - set(CASES)
    if unknown:
        print(f"no kernel named {', '.join(sorted(unknown))}; the kernels: {', '.join(CASES)}",
              file=sys.stderr)
        return 2
    failed = 0
    for case in make_cases(torch, kernels, only):
        try:
            failed += not time_one(torch, case, args.launches)
        except Exception:  # noqa: BLE001 (a kernel that fails is reported; the rest still run)
            traceback.print_exc()
            print(f"kernel {case.name} error see-stderr", flush=True)
            failed += 1
    return 1 if failed else 0


def time_one(torch, case, timed):
    """Compiles and warms up `case`, times `timed` launches, checks and prints its line;
    whether its output is right."""
    compiled = case.launch()  # compiles, and warms up
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(timed):
        case.launch()
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end) / timed
    launches = timed + 1
    warps = compiled.metadata.num_warps
    threads = case.grid * warps * 32
    # A block with fewer elements than threads is replicated across them, and every copy
    # loads: the byte counts would not be the tensors' bytes.
    exact = case.block_elems >= warps * 32
    figures = "".join(f" {f} {fmt(v if exact or f not in PER_THREAD else None)}"
                      for f, v in case.figures.items())
    ok = bool(case.check(launches))
    total, digest = checksum(torch, case.out)
    name = kernel_name(compiled, case.name + "_kernel")
    print(f"kernel {case.name} name {name} id {kernel_id(name):#018x} ms {ms:.4f} "
          f"launches {launches} grid {case.grid} num_warps {warps} "
          f"threads_per_launch {threads}{figures}{tma_blocks(compiled)} sum {total!r} "
          f"hash {digest} check {'ok' if ok else 'WRONG'}", flush=True)
    return ok


def tma_blocks(compiled):
    """` tma_blocks 128x64,64x64,...`: the boxes of the kernel's host-side tensor descriptors
    as Triton's metadata records them (what its TMA copies move), or '' when it has none; for
    reading beside the TMA counts."""
    try:
        metas = compiled.metadata.tensordesc_meta or []
        blocks = [meta["block_size"] if isinstance(meta, dict) else meta.block_size
                  for meta in metas]
    except (AttributeError, KeyError, TypeError):
        return ""
    return " tma_blocks " + ",".join("x".join(str(d) for d in b) for b in blocks) if blocks else ""


def wait_for_map(path, seconds):
    """The map at `path`, once it exists with a valid header; None after `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            return ShmHashMap(path)
        except (OSError, ValueError):
            time.sleep(0.005)
    return None


def poll(reader, key, target, seconds):
    """Polls `key` until its value reaches `target`: (monotonic ns then, value), or (None,
    value) after `seconds`. Looks for new slots now and then (a shard may gain the key)."""
    deadline = time.monotonic_ns() + int(seconds * 1e9)
    polls = 0
    while True:
        # The known slots first (a scan takes about a millisecond), a scan now and then.
        value = reader.get(key, rescan=polls % 256 == 255)
        now = time.monotonic_ns()
        if value >= target:
            return now, value
        if now > deadline:
            return None, value
        polls += 1


def latency(args):
    """The latency mode: `latency ...` lines; exits 1 on a timeout or an inexact count."""
    import torch
    if not os.environ.get("EGPU_PROBES"):
        print("latency: not under `egpu run --probes` (EGPU_PROBES is unset)", file=sys.stderr)
        return 2
    case = make_cases(torch, define_kernels(), ["add"])[0]
    compiled = case.launch()
    torch.cuda.synchronize()
    launches = 1
    name = kernel_name(compiled, "add_kernel")
    key = kernel_id(name).to_bytes(8, "little")
    threads = case.grid * compiled.metadata.num_warps * 32
    path = f"/dev/shm/egpu-{os.getpid()}-u-ENTERED"
    reader = wait_for_map(path, args.timeout)
    if reader is None:
        print(f"latency: no map at {path} after {args.timeout} s", file=sys.stderr)
        return 1
    print(f"latency map {path} shards {reader.shards} slots {reader.slots} kernel {name} "
          f"threads_per_launch {threads}")
    # The warm-up launch's count first: the merge of a periodic copy may lag.
    seen, got = poll(reader, key, threads, args.timeout)
    if seen is None:
        print(f"latency: the warm-up launch's count never showed: ENTERED {name} is {got}, "
              f"not {threads}, after {args.timeout} s", flush=True)
        return 1
    failed = False
    event = torch.cuda.Event()
    for mode in ("sync", "query"):
        samples, lags, timeouts = [], [], 0
        for _ in range(args.repeats):
            case.launch()
            launches += 1
            if mode == "sync":
                torch.cuda.synchronize()
            else:
                event.record()
                while not event.query():
                    pass
            ended, ended_wall = time.monotonic_ns(), time.time_ns()
            seen, _ = poll(reader, key, launches * threads, args.timeout)
            if seen is None:
                timeouts += 1
                if timeouts == 3:
                    break  # the rest would wait as long
                continue
            samples.append((seen - ended) / 1e6)
            merged = reader.merged_ns()
            if merged:
                lags.append((merged - ended_wall) / 1e6)
        failed |= timeouts > 0
        med = f"{statistics.median(samples):.4f}" if samples else "-"
        top = f"{max(samples):.4f}" if samples else "-"
        lag = f"{statistics.median(lags):.4f}" if lags else "-"
        print(f"latency {mode} n {len(samples)} median_ms {med} max_ms {top} "
              f"timeouts {timeouts} merge_lag_median_ms {lag}", flush=True)
    torch.cuda.synchronize()
    want = launches * threads
    _, got = poll(reader, key, want, args.timeout)
    exact = got == want
    print(f"latency final ENTERED {name} expected {want} observed {got} "
          f"exact {'yes' if exact else 'NO'}")
    return 1 if failed or not exact else 0


def self_test():
    """The layout's hash against layout.rs's fixed values, FNV-1a, and the reader on a map
    built here; no GPU."""
    assert hash_key(b"") == 0x243F6A88A19C625B
    assert hash_key((0).to_bytes(8, "little")) == 0xFFF8B72ABE0CA1CD
    assert hash_key((7).to_bytes(8, "little")) == 0x91B33DF350F2ACEE
    assert hash_key((7).to_bytes(4, "little")) == 0x0B5AF021C29D523B
    assert hash_key(b"hello, world") == 0x107EECE97A7E1F42
    assert kernel_id("") == 0xCBF29CE484222325
    assert kernel_id("a") == 0xAF63DC4C8601EC8C  # FNV-1a's published value for "a"
    buf = fake_map({kernel_id("add_kernel"): 5, 3: 7}, shards=2)
    m = ShmHashMap(buffer=buf)
    assert m.items() == {kernel_id("add_kernel").to_bytes(8, "little"): 10,
                         (3).to_bytes(8, "little"): 14}, m.items()
    assert m.get(kernel_id("add_kernel").to_bytes(8, "little")) == 10
    assert m.get((4).to_bytes(8, "little")) == 0
    assert m.merged_ns() == 1234
    # The TMA copies of tests/ptx/triton/triton_matmul_tma_host.ptx (Triton 3.6): A's 128 × 64
    # fp16 tile in 1, B's 64 × 128 in 2 (issued by warps 0 and 1), C's 128 × 128 fp32 in 4.
    assert (tma_boxes(128, 64, 2), tma_boxes(64, 128, 2), tma_boxes(128, 128, 4)) == (1, 2, 4)
    case = Case("h", None, 4, 1024, 8, 0, None, None, atomics_per_launch=2)
    assert list(case.figures) == list(FIGURES) and case.figures["bytes_loaded_per_launch"] == 8
    assert case.figures["atomics_per_launch"] == 2 and case.figures["tensor_loads_per_launch"] == 0
    print("bench_kernels self-test: ok")
    return 0


def fake_map(entries, shards=1, capacity=16):
    """A per-CPU hash map (u64 keys and values) of `shards` shards, each holding `entries`,
    laid out as layout.rs lays it out (slots placed by the layout's hash, linear probing)."""
    slots = max(1 << (capacity - 1).bit_length(), 4) * 2
    stride, value_off = 24, 16
    shard_stride = SHARD_HEADER_BYTES + slots * stride
    total = HEADER_BYTES + shards * shard_stride
    buf = bytearray(total)
    buf[:8] = MAGIC
    for off, fmt_, v in [(H_VERSION, "<I", LAYOUT_VERSION), (H_KIND, "<I", KIND_PERCPU_HASH),
                         (H_KEY_SIZE, "<I", 8), (H_VALUE_SIZE, "<I", 8),
                         (H_CAPACITY, "<I", capacity), (H_SLOTS, "<I", slots),
                         (H_CPU_SHARDS, "<I", shards), (H_SM_SHARDS, "<I", 0),
                         (H_SLOT_STRIDE, "<I", stride), (H_VALUE_OFFSET, "<I", value_off),
                         (H_SHARD_STRIDE, "<Q", shard_stride), (H_TOTAL_BYTES, "<Q", total),
                         (H_DEVICE_MERGED_NS, "<Q", 1234)]:
        struct.pack_into(fmt_, buf, off, v)
    for s in range(shards):
        base = HEADER_BYTES + s * shard_stride + SHARD_HEADER_BYTES
        for key, value in entries.items():
            kb = key.to_bytes(8, "little")
            h = hash_key(kb)
            i = h & (slots - 1)
            while struct.unpack_from("<Q", buf, base + i * stride)[0]:
                i = (i + 1) & (slots - 1)
            off = base + i * stride
            struct.pack_into("<Q", buf, off, (STATE_FULL << STATE_SHIFT) | (h >> 32))
            buf[off + 8:off + 16] = kb
            struct.pack_into("<Q", buf, off + value_off, value)
    return bytes(buf)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--launches", type=int, default=20, help="timed launches per kernel")
    ap.add_argument("--only", default="", help="comma-separated kernels (default: all seven)")
    ap.add_argument("--latency", action="store_true", help="the latency mode (under egpu)")
    ap.add_argument("--repeats", type=int, default=20, help="latency samples per mode")
    ap.add_argument("--timeout", type=float, default=5.0, help="latency: seconds to wait")
    ap.add_argument("--self-test", action="store_true", help="check the map reader; no GPU")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    return latency(args) if args.latency else bench(args)


if __name__ == "__main__":
    sys.exit(main())
