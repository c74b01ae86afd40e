#!/usr/bin/env python3
"""egpu's C ABI from Python, through ctypes alone: a probe from assembly, verified (and an unsafe
one refused, with the instruction named), run on the CPU VM over a map made here, a host probe
fired on kernel launches described here, and the errors bad arguments get. Prints
`python example: ok`, or what went wrong and exits 1.

Usage: python3 examples/python/egpu_example.py [path/to/libegpu_capi.so]
(default: target/debug/libegpu_capi.so, which `cargo build -p egpu-capi` makes).
"""

import ctypes
import os
import struct
import sys
from ctypes import POINTER, byref, c_char_p, c_int, c_size_t, c_uint32, c_uint64, c_void_p

# egpu_status (egpu_capi.h).
OK, NULL_ARGUMENT, BAD_SIZE, BAD_ARGUMENT, BAD_PROGRAM, VERIFY = 0, 1, 2, 3, 4, 5
NOT_FOUND = 9
MAP_HASH, MAP_ARRAY = 1, 2
EVENT_LAUNCH, PHASE_ENTER = 1, 0


class ProgramDesc(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("name", c_char_p), ("attach", c_char_p), ("maps", c_char_p)]


class ProgramInfo(ctypes.Structure):
    _fields_ = [
        ("size", c_size_t),
        ("name", c_char_p),
        ("attach", c_char_p),
        ("context_size", c_size_t),
        ("instructions", c_size_t),
        ("maps", c_size_t),
        ("host", c_uint32),
        ("device", c_uint32),
        ("verified", c_uint32),
    ]


class MapDesc(ctypes.Structure):
    _fields_ = [
        ("size", c_size_t),
        ("kind", c_uint32),
        ("key_size", c_uint32),
        ("value_size", c_uint32),
        ("capacity", c_uint32),
        ("cpu_shards", c_uint32),
        ("sm_shards", c_uint32),
        ("shared_name", c_char_p),
    ]


class ProbesHealth(ctypes.Structure):
    _fields_ = [("size", c_size_t), ("runs", c_uint64), ("faults", c_uint64), ("rejected", c_uint64)]


# counts[ctx.key] += ctx.amount, on a context of two 32-bit words; returns the amount.
COUNT = b"""
    ldxw %r6, [%r1+4]
    ldxw %r2, [%r1+0]
    stxw [%r10-4], %r2
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -4
    call 1
    jeq %r0, 0, +1
    lock add [%r0+0], %r6
    mov %r0, %r6
    exit
"""

# The same without the null check: refused at instruction 7.
UNSAFE = b"""
    ldxw %r2, [%r1+0]
    stxw [%r10-4], %r2
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -4
    call 1
    ldxdw %r0, [%r0+0]
    exit
"""

# On each launch: launches[kernel_id % 8] += 1.
LAUNCHES = b"""
    ldxdw %r2, [%r1+0]
    and %r2, 7
    stxw [%r10-4], %r2
    lddw %r1, map[0]
    mov %r2, %r10
    add %r2, -4
    call 1
    jeq %r0, 0, +2
    mov %r1, 1
    lock add [%r0+0], %r1
    mov %r0, 0
    exit
"""


class Failed(Exception):
    pass


def load(path):
    lib = ctypes.CDLL(path)
    handle = c_void_p
    sigs = {
        "egpu_abi_version": ([], c_uint32),
        "egpu_version": ([], c_char_p),
        "egpu_last_error": ([], c_char_p),
        "egpu_status_name": ([c_int], c_char_p),
        "egpu_program_from_assembly": ([POINTER(ProgramDesc), c_char_p, POINTER(handle)], c_int),
        "egpu_program_from_bytecode": (
            [POINTER(ProgramDesc), c_char_p, c_size_t, POINTER(handle)],
            c_int,
        ),
        "egpu_program_verify": ([handle], c_int),
        "egpu_program_get_info": ([handle, POINTER(ProgramInfo)], c_int),
        "egpu_program_free": ([handle], None),
        "egpu_object_from_elf": ([c_char_p, c_size_t, POINTER(handle)], c_int),
        "egpu_object_from_pack": ([c_char_p, c_size_t, POINTER(handle)], c_int),
        "egpu_map_create": ([POINTER(MapDesc), POINTER(handle)], c_int),
        "egpu_map_create_for": ([handle, c_size_t, c_char_p, POINTER(handle)], c_int),
        "egpu_map_lookup": ([handle, c_char_p, c_size_t, c_char_p, c_size_t], c_int),
        "egpu_map_update": ([handle, c_char_p, c_size_t, c_char_p, c_size_t, c_uint32], c_int),
        "egpu_map_array_get": ([handle, c_uint32, c_char_p, c_size_t], c_int),
        "egpu_map_keys": ([handle, c_char_p, c_size_t, POINTER(c_size_t)], c_int),
        "egpu_map_free": ([handle], None),
        "egpu_vm_new": ([handle, POINTER(handle), c_size_t, POINTER(handle)], c_int),
        "egpu_vm_run": ([handle, c_char_p, c_size_t, POINTER(c_uint64)], c_int),
        "egpu_vm_free": ([handle], None),
        "egpu_probes_new": ([POINTER(handle)], c_int),
        "egpu_probes_attach": ([handle, handle, POINTER(handle), c_size_t, POINTER(c_uint64)], c_int),
        "egpu_probes_fire": ([handle, c_uint32, c_uint32, c_char_p, c_size_t], c_int),
        "egpu_probes_get_health": ([handle, POINTER(ProbesHealth)], c_int),
        "egpu_probes_free": ([handle], None),
        "egpu_context_size": ([c_uint32], c_size_t),
        "egpu_context_tag": ([c_uint32], c_uint32),
    }
    for name, (args, res) in sigs.items():
        f = getattr(lib, name)
        f.argtypes = args
        f.restype = res
    return lib


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default = os.path.join(here, "..", "..", "target", "debug", "libegpu_capi.so")
    lib = load(sys.argv[1] if len(sys.argv) > 1 else default)
    last = lambda: (lib.egpu_last_error() or b"").decode()

    def ok(status, what):
        if status != OK:
            name = lib.egpu_status_name(status).decode()
            raise Failed(f"{what}: {name}: {last()}")

    def expect(status, want, what):
        if status != want:
            got = lib.egpu_status_name(status).decode()
            raise Failed(f"{what}: {got}, not {lib.egpu_status_name(want).decode()}: {last()}")

    def check(cond, what):
        if not cond:
            raise Failed(what)

    print(f"egpu {lib.egpu_version().decode()}, ABI {lib.egpu_abi_version()}")
    handles = []  # (free, handle), freed at the end

    def keep(free, h):
        handles.append((free, h))
        return h

    try:
        # A program from assembly, verified; its info.
        desc = ProgramDesc(ctypes.sizeof(ProgramDesc), b"count", b"user(8)", b"counts=hash:4:8:64")
        count = c_void_p()
        ok(lib.egpu_program_from_assembly(byref(desc), COUNT, byref(count)), "assemble count")
        keep(lib.egpu_program_free, count)
        ok(lib.egpu_program_verify(count), "verify count")
        info = ProgramInfo(size=ctypes.sizeof(ProgramInfo))
        ok(lib.egpu_program_get_info(count, byref(info)), "info")
        check(info.verified == 1 and info.context_size == 8, "count's info")
        check(info.attach == b"user(8 bytes)", f"attach point {info.attach!r}")

        # The unsafe one is refused, naming the instruction.
        desc.name = b"unsafe"
        unsafe = c_void_p()
        ok(lib.egpu_program_from_assembly(byref(desc), UNSAFE, byref(unsafe)), "assemble unsafe")
        keep(lib.egpu_program_free, unsafe)
        expect(lib.egpu_program_verify(unsafe), VERIFY, "verify unsafe")
        check("instruction 7 `ldxdw %r0, [%r0]`" in last(), f"the refusal: {last()}")
        print("refused:", last().splitlines()[0])

        # A map, bound to the program, filled by runs over a few contexts.
        mdesc = MapDesc(size=ctypes.sizeof(MapDesc), kind=MAP_HASH, key_size=4, value_size=8, capacity=64)
        counts = c_void_p()
        ok(lib.egpu_map_create(byref(mdesc), byref(counts)), "create counts")
        keep(lib.egpu_map_free, counts)
        for key in (1, 2, 3):
            k, v = struct.pack("<I", key), struct.pack("<Q", 0)
            ok(lib.egpu_map_update(counts, k, 4, v, 8, 1), f"insert {key}")
        vm = c_void_p()
        bound = (c_void_p * 1)(counts)
        ok(lib.egpu_vm_new(count, bound, 1, byref(vm)), "load count")
        keep(lib.egpu_vm_free, vm)
        for key, amount in [(1, 10), (2, 20), (1, 5), (3, 7), (9, 1)]:
            ctx = ctypes.create_string_buffer(struct.pack("<II", key, amount), 8)
            r0 = c_uint64()
            ok(lib.egpu_vm_run(vm, ctx, 8, byref(r0)), "run")
            check(r0.value == amount, f"r0 {r0.value}, not {amount}")
        value = ctypes.create_string_buffer(8)
        for key, want in [(1, 15), (2, 20), (3, 7)]:
            ok(lib.egpu_map_lookup(counts, struct.pack("<I", key), 4, value, 8), f"lookup {key}")
            got = struct.unpack("<Q", value.raw)[0]
            check(got == want, f"counts[{key}] is {got}, not {want}")
        expect(lib.egpu_map_lookup(counts, struct.pack("<I", 9), 4, value, 8), NOT_FOUND, "key 9")
        n = c_size_t()
        keys = ctypes.create_string_buffer(12)
        ok(lib.egpu_map_keys(counts, keys, 12, byref(n)), "keys")
        check(sorted(struct.unpack("<3I", keys.raw)) == [1, 2, 3], "keys 1, 2, 3")
        print("counts: 1 -> 15, 2 -> 20, 3 -> 7")

        # A host probe on launches, fired with contexts built here (egpu.h's egpu_launch_ctx:
        # kernel_id at 0, grid at 40).
        desc = ProgramDesc(ctypes.sizeof(ProgramDesc), b"launches", b"host::launch", b"launches=array:4:8:8")
        launches = c_void_p()
        ok(lib.egpu_program_from_assembly(byref(desc), LAUNCHES, byref(launches)), "assemble launches")
        keep(lib.egpu_program_free, launches)
        per_kernel = c_void_p()
        ok(lib.egpu_map_create_for(launches, 0, None, byref(per_kernel)), "map for launches")
        keep(lib.egpu_map_free, per_kernel)
        probes = c_void_p()
        ok(lib.egpu_probes_new(byref(probes)), "probe set")
        keep(lib.egpu_probes_free, probes)
        attachment = c_uint64()
        bound = (c_void_p * 1)(per_kernel)
        ok(lib.egpu_probes_attach(probes, launches, bound, 1, byref(attachment)), "attach")
        size = lib.egpu_context_size(EVENT_LAUNCH)
        check(size == 128, f"a launch context is {size} bytes")
        for kernel in [1, 2, 2, 5, 2, 9]:
            ctx = bytearray(size)
            struct.pack_into("<Q", ctx, 0, kernel)
            struct.pack_into("<III", ctx, 40, 4, 1, 1)
            ok(lib.egpu_probes_fire(probes, EVENT_LAUNCH, PHASE_ENTER, bytes(ctx), size), "fire")
        counted = []
        for i in range(8):
            ok(lib.egpu_map_array_get(per_kernel, i, value, 8), f"launches[{i}]")
            counted.append(struct.unpack("<Q", value.raw)[0])
        check(counted == [0, 2, 3, 0, 0, 1, 0, 0], f"launches per kernel: {counted}")
        health = ProbesHealth(size=ctypes.sizeof(ProbesHealth))
        ok(lib.egpu_probes_get_health(probes, byref(health)), "health")
        check(health.runs == 6 and health.faults == 0, "six runs")
        print("launches per kernel % 8:", counted)

        # Bad arguments: error codes, not crashes.
        small = ProgramDesc(ctypes.sizeof(ProgramDesc) - 8, b"count", b"user(8)", None)
        out = c_void_p()
        expect(lib.egpu_program_from_assembly(byref(small), COUNT, byref(out)), BAD_SIZE, "small desc")
        check("sizeof(egpu_program_desc)" in last(), f"the size message: {last()}")
        expect(lib.egpu_program_from_assembly(None, COUNT, byref(out)), NULL_ARGUMENT, "null desc")
        expect(lib.egpu_vm_run(None, None, 0, None), NULL_ARGUMENT, "null VM")
        expect(lib.egpu_map_lookup(counts, None, 4, value, 8), NULL_ARGUMENT, "null key")
        expect(lib.egpu_map_lookup(counts, struct.pack("<H", 1), 2, value, 8), 8, "2-byte key")
        expect(lib.egpu_probes_fire(probes, EVENT_LAUNCH, PHASE_ENTER, b"\0" * 16, 16), BAD_SIZE, "short ctx")
        expect(lib.egpu_probes_fire(probes, 77, PHASE_ENTER, b"\0" * 128, 128), BAD_ARGUMENT, "event 77")
        expect(lib.egpu_vm_run(counts, None, 0, byref(c_uint64())), BAD_ARGUMENT, "a map as a VM")
        check("egpu_map" in last(), f"names the handle's kind: {last()}")
        garbage = bytes(range(200, 232))
        expect(lib.egpu_object_from_elf(garbage, len(garbage), byref(out)), BAD_PROGRAM, "not ELF")
        expect(lib.egpu_object_from_pack(garbage, len(garbage), byref(out)), BAD_PROGRAM, "no pack")
        expect(lib.egpu_program_from_bytecode(byref(desc), garbage, 13, byref(out)), BAD_PROGRAM, "13 B")
        lib.egpu_map_free(None)
        print("bad arguments: error codes, no crash")
    except Failed as e:
        print(f"python example: {e}", file=sys.stderr)
        return 1
    finally:
        for free, h in reversed(handles):
            free(h)
    print("python example: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
