//! The CPU side of the helper table, egpu's internal helpers, and the per-run state they share.
//!
//! Helpers are plain Rust functions with rbpf's signature. The interpreter calls them directly.
//! rbpf's JIT calls them with the stack 8 bytes off the 16-byte alignment the x86-64 ABI
//! requires (its frame is 5 pushes, 512 bytes and a return address deep), which code using
//! aligned SSE moves would fault on; so the JIT gets, for each helper, a small trampoline that
//! realigns the stack before calling it.

use std::cell::Cell;
use std::ptr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use egpu_ebpf::helpers::id;
use egpu_ebpf::{AtomicOp, Size};
use egpu_maps::{RawMap, UpdateFlags};

/// rbpf's helper signature.
pub(crate) type Helper = fn(u64, u64, u64, u64, u64) -> u64;

/// What went wrong inside a helper during a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// An atomic operation on memory outside the stack and the context.
    OutOfBounds {
        /// The address.
        addr: u64,
        /// Bytes accessed.
        size: u32,
    },
    /// An atomic operation on an address not aligned to its size.
    Misaligned {
        /// The address.
        addr: u64,
        /// Bytes accessed.
        size: u32,
    },
    /// `callx` with a number that names no helper bound to the VM.
    BadCallx,
}

/// Memory a run may touch through helpers, and the first fault a helper met. Interpreter runs
/// set one up, so that atomics are checked like every other access there; JIT runs do not, and
/// helpers trust the verifier's proof.
#[derive(Debug)]
pub(crate) struct RunState<'a> {
    pub(crate) ctx: (u64, u64),
    pub(crate) stack: (u64, u64),
    pub(crate) maps: &'a [(u64, u64)],
    pub(crate) fault: Cell<Option<Fault>>,
}

thread_local! {
    static CURRENT: Cell<*const RunState<'static>> = const { Cell::new(ptr::null()) };
}

/// Makes `state` the current run's state on this thread until dropped (runs may nest).
pub(crate) struct Current {
    prev: *const RunState<'static>,
}

impl Current {
    pub(crate) fn enter(state: &RunState<'_>) -> Current {
        // The lifetime is erased: the guard is dropped before `state` (see `Vm::run_checked`).
        let p = (state as *const RunState<'_>).cast::<RunState<'static>>();
        Current { prev: CURRENT.replace(p) }
    }
}

impl Drop for Current {
    fn drop(&mut self) {
        CURRENT.set(self.prev);
    }
}

/// Calls `f` with the current run's state; `None` outside a checked run.
fn with_run<R>(f: impl FnOnce(&RunState<'_>) -> R) -> Option<R> {
    let p = CURRENT.get();
    // SAFETY: `CURRENT` is only non-null while a `Current` guard for a live `RunState` exists on
    // this thread, and the guard restores the previous value when the run ends.
    unsafe { p.as_ref() }.map(f)
}

fn fault(f: Fault) {
    with_run(|run| {
        if run.fault.get().is_none() {
            run.fault.set(Some(f));
        }
    });
}

/// In a checked (interpreter) run, checks that `size` bytes at `addr` lie in the stack, the
/// context or a bound map and are aligned. Outside one (the JIT), the verifier's proof stands.
fn checked(addr: u64, size: u32) -> bool {
    let inside =
        |(lo, hi): (u64, u64)| addr >= lo && addr.checked_add(size.into()).is_some_and(|e| e <= hi);
    let ok =
        with_run(|run| inside(run.stack) || inside(run.ctx) || run.maps.iter().any(|&m| inside(m)))
            .unwrap_or(true);
    if !ok {
        fault(Fault::OutOfBounds { addr, size });
        return false;
    }
    if !addr.is_multiple_of(u64::from(size)) {
        fault(Fault::Misaligned { addr, size });
        return false;
    }
    true
}

// ---------------------------------------------------------------------------------------------
// Helpers of the table.

fn ktime_get_ns(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}

fn get_prandom_u32(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    thread_local! {
        static STATE: Cell<u64> = Cell::new(
            // SAFETY: gettid takes no arguments and cannot fail.
            (ktime_get_ns(0, 0, 0, 0, 0) ^ (unsafe { libc::gettid() } as u64).rotate_left(32)) | 1,
        );
    }
    STATE.with(|s| {
        // xorshift64*
        let mut x = s.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s.set(x);
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32 as u64
    })
}

fn get_smp_processor_id(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    // SAFETY: sched_getcpu takes no arguments and has no preconditions.
    let cpu = unsafe { libc::sched_getcpu() };
    cpu.max(0) as u64
}

fn get_current_pid_tgid(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    // SAFETY: getpid and gettid take no arguments and cannot fail.
    let (pid, tid) = unsafe { (libc::getpid(), libc::gettid()) };
    ((pid as u64) << 32) | tid as u32 as u64
}

fn warp_lanes(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    1
}

fn warp_leader(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    1
}

fn warp_peers(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    1
}

fn warp_stride(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    0
}

/// The clock waits count on: `CLOCK_MONOTONIC` in ns, as `bpf_ktime_get_ns`.
fn clock(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    ktime_get_ns(0, 0, 0, 0, 0)
}

/// Spins until `ns` nanoseconds of `CLOCK_MONOTONIC` (at most
/// [`MAX_DELAY_NS`](egpu_ebpf::helpers::MAX_DELAY_NS), which the verifier proved; the bound
/// holds for a program run unverified too) have passed since `since` (`egpu_clock`'s; 0: the
/// call); the nanoseconds since then.
fn delay_ns(ns: u64, since: u64, _: u64, _: u64, _: u64) -> u64 {
    let ns = ns.min(egpu_ebpf::helpers::MAX_DELAY_NS);
    let start = if since == 0 { ktime_get_ns(0, 0, 0, 0, 0) } else { since };
    loop {
        let passed = ktime_get_ns(0, 0, 0, 0, 0).wrapping_sub(start);
        if passed >= ns {
            return passed;
        }
        std::hint::spin_loop();
    }
}

/// The 32-byte sectors that `size` bytes at `addr` touch (at least 1): a warp of one lane.
fn warp_sectors(addr: u64, size: u64, _: u64, _: u64, _: u64) -> u64 {
    let last = addr.saturating_add(size.max(1) - 1);
    (last >> 5) - (addr >> 5) + 1
}

/// The helpers' computations, for native code (`egpu::helpers`, a probe's twin).
pub mod native {
    /// Time in ns: `CLOCK_MONOTONIC`.
    pub fn ktime_ns() -> u64 {
        super::ktime_get_ns(0, 0, 0, 0, 0)
    }
    /// The CPU the calling thread runs on.
    pub fn cpu_id() -> u32 {
        super::get_smp_processor_id(0, 0, 0, 0, 0) as u32
    }
    /// A pseudo-random `u32` from a per-thread generator.
    pub fn prandom_u32() -> u32 {
        super::get_prandom_u32(0, 0, 0, 0, 0) as u32
    }
    /// The lanes of the warp running the call: 1 on the CPU.
    pub fn warp_lanes() -> u32 {
        super::warp_lanes(0, 0, 0, 0, 0) as u32
    }
    /// Whether this lane leads the warp: always on the CPU.
    pub fn warp_leader() -> bool {
        super::warp_leader(0, 0, 0, 0, 0) != 0
    }
    /// The 32-byte sectors that `size` bytes at `addr` touch.
    pub fn warp_sectors(addr: u64, size: u32) -> u32 {
        super::warp_sectors(addr, u64::from(size), 0, 0, 0) as u32
    }
    /// How many lanes have `value`, in the lowest of them: 1 on the CPU.
    pub fn warp_peers(value: u64) -> u32 {
        super::warp_peers(value, 0, 0, 0, 0) as u32
    }
    /// The bytes between consecutive lanes' addresses (`u64::MAX`: no one stride): 0 on the
    /// CPU, a lane alone.
    pub fn warp_stride(addr: u64) -> u64 {
        super::warp_stride(addr, 0, 0, 0, 0)
    }
    /// Waits `ns` nanoseconds (at most [`MAX_DELAY_NS`](egpu_ebpf::helpers::MAX_DELAY_NS)),
    /// spinning; the nanoseconds that passed.
    pub fn delay_ns(ns: u64) -> u64 {
        super::delay_ns(ns, 0, 0, 0, 0)
    }
    /// Waits until `ns` nanoseconds (at most
    /// [`MAX_DELAY_NS`](egpu_ebpf::helpers::MAX_DELAY_NS)) have passed since `since`, a value
    /// of [`clock`] (0: the call), spinning; the nanoseconds since then.
    pub fn delay_ns_since(since: u64, ns: u64) -> u64 {
        super::delay_ns(ns, since, 0, 0, 0)
    }
    /// The clock waits count on (`egpu_clock`): `CLOCK_MONOTONIC` in ns.
    pub fn clock() -> u64 {
        super::clock(0, 0, 0, 0, 0)
    }
}

// Map helpers. Their first argument is the address of the VM's `RawMap` for the map (what the
// legalised `lddw rX, map[n]` loads); the verifier proved that it is one, and that key, value and
// record pointers address as many readable bytes as the map's sizes (or `size`) say.

/// The map a map helper was given.
///
/// # Safety
/// `map` must be what legalised code loads for a map reference: the address of a `RawMap` the
/// VM owns for as long as it runs the program.
unsafe fn bound_map<'a>(map: u64) -> &'a RawMap {
    // SAFETY: forwarded to the caller.
    unsafe { &*(map as *const RawMap) }
}

/// # Safety
/// `ptr` must address `len` readable bytes for the call.
unsafe fn bytes<'a>(ptr: u64, len: usize) -> &'a [u8] {
    // SAFETY: forwarded to the caller.
    unsafe { std::slice::from_raw_parts(ptr as *const u8, len) }
}

fn map_lookup_elem(map: u64, key: u64, _: u64, _: u64, _: u64) -> u64 {
    // SAFETY: see the section's comment: the verifier typed r1 as a map reference and r2 as a
    // pointer to `key_size` readable bytes.
    let map = unsafe { bound_map(map) };
    // SAFETY: as above.
    let key = unsafe { bytes(key, map.geometry().key_size as usize) };
    match map.lookup(key) {
        Ok(Some(value)) => value.as_ptr() as u64,
        _ => 0,
    }
}

fn map_update_elem(map: u64, key: u64, value: u64, flags: u64, _: u64) -> u64 {
    // SAFETY: as for `map_lookup_elem`; r3 points at `value_size` readable bytes.
    let map = unsafe { bound_map(map) };
    let g = map.geometry();
    // SAFETY: as above.
    let (key, value) =
        unsafe { (bytes(key, g.key_size as usize), bytes(value, g.value_size as usize)) };
    let result = UpdateFlags::from_linux(flags).and_then(|flags| map.update(key, value, flags));
    result.map_or_else(|e| e.errno() as u64, |()| 0)
}

fn map_delete_elem(map: u64, key: u64, _: u64, _: u64, _: u64) -> u64 {
    // SAFETY: as for `map_lookup_elem`.
    let map = unsafe { bound_map(map) };
    // SAFETY: as above.
    let key = unsafe { bytes(key, map.geometry().key_size as usize) };
    map.delete(key).map_or_else(|e| e.errno() as u64, |()| 0)
}

fn ringbuf_output(ring: u64, data: u64, size: u64, _flags: u64, _: u64) -> u64 {
    // SAFETY: as for `map_lookup_elem`: r1 is a ring buffer, r2 points at `size` readable
    // bytes, with `size` bounded by the verifier.
    let ring = unsafe { bound_map(ring) };
    // SAFETY: as above.
    let data = unsafe { bytes(data, size as usize) };
    ring.output(data).map_or_else(|e| e.errno() as u64, |()| 0)
}

/// `egpu_ringbuf_output_warp`: on the CPU a warp is one lane, which writes its record.
fn ringbuf_output_warp(ring: u64, data: u64, size: u64, flags: u64, _: u64) -> u64 {
    ringbuf_output(ring, data, size, flags, 0)
}

// ---------------------------------------------------------------------------------------------
// Internal helpers, called only by legalised code. Their numbers are outside the table, so a
// program that calls one itself is refused when it is loaded.

/// First number of the internal helpers.
const INTERNAL_BASE: u32 = 0x7fff_0000;
/// Whether `id` is one of the internal helpers, which need the run's state.
pub(crate) fn is_internal(id: u32) -> bool {
    id >= INTERNAL_BASE
}

/// Called by legalised `callx` when the register names no bound helper.
pub(crate) const BAD_CALLX: u32 = INTERNAL_BASE;

/// The internal helper implementing an atomic operation of the given size. Its arguments are
/// the address, the operand and (for `cmpxchg`) the expected value; it returns the old value.
pub(crate) fn atomic_helper(op: AtomicOp, size: Size) -> u32 {
    let op = match op {
        AtomicOp::Add => 0,
        AtomicOp::Or => 1,
        AtomicOp::And => 2,
        AtomicOp::Xor => 3,
        AtomicOp::Xchg => 4,
        AtomicOp::CmpXchg => 5,
    };
    INTERNAL_BASE + 1 + 2 * op + u32::from(size == Size::DW)
}

fn bad_callx(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    fault(Fault::BadCallx);
    0
}

macro_rules! atomic_helpers {
    ($($name32:ident, $name64:ident => |$a:ident, $v:ident, $e:ident| $body:expr;)*) => {
        $(
            fn $name32(addr: u64, val: u64, expected: u64, _: u64, _: u64) -> u64 {
                if !checked(addr, 4) {
                    return 0;
                }
                // SAFETY: `checked` proved the 4 bytes at `addr` lie in the run's stack or
                // context, which are live and writable for the whole run, and are aligned.
                let $a = unsafe { AtomicU32::from_ptr(addr as *mut u32) };
                let ($v, $e) = (val as u32, expected as u32);
                u64::from($body)
            }
            fn $name64(addr: u64, val: u64, expected: u64, _: u64, _: u64) -> u64 {
                if !checked(addr, 8) {
                    return 0;
                }
                // SAFETY: as above, for 8 bytes.
                let $a = unsafe { AtomicU64::from_ptr(addr as *mut u64) };
                let ($v, $e) = (val, expected);
                $body
            }
        )*
    };
}

atomic_helpers! {
    add32, add64 => |a, v, _e| a.fetch_add(v, Ordering::SeqCst);
    or32, or64 => |a, v, _e| a.fetch_or(v, Ordering::SeqCst);
    and32, and64 => |a, v, _e| a.fetch_and(v, Ordering::SeqCst);
    xor32, xor64 => |a, v, _e| a.fetch_xor(v, Ordering::SeqCst);
    xchg32, xchg64 => |a, v, _e| a.swap(v, Ordering::SeqCst);
    cmpxchg32, cmpxchg64 => |a, v, e| match a.compare_exchange(e, v, Ordering::SeqCst, Ordering::SeqCst) {
        Ok(old) | Err(old) => old,
    };
}

/// One helper bound to a VM: its number, the function the interpreter calls and the entry point
/// the JIT calls.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Binding {
    pub(crate) id: u32,
    pub(crate) interp: Helper,
    pub(crate) jit: Helper,
}

/// Declares the helpers bound to every VM: for each, the JIT entry is a trampoline that aligns
/// the stack to 16 bytes and calls a System V shim of the Rust function.
macro_rules! bindings {
    ($($([$attr:meta])? $name:ident: $id:expr,)*) => {
        /// Every helper bound to a VM: those of the table, then the internal ones.
        pub(crate) fn bindings() -> Vec<Binding> {
            vec![$($(#[$attr])? Binding { id: $id, interp: $name, jit: jit_entry::$name() },)*]
        }

        /// The numbers of the table's helpers a program may call.
        pub(crate) fn callable() -> Vec<u32> {
            let mut ids = vec![$($(#[$attr])? $id,)*];
            ids.retain(|&id| id < INTERNAL_BASE || cfg!(test) && id == ALIGNMENT_PROBE);
            ids
        }

        mod sysv {
            $(
                $(#[$attr])?
                pub(super) extern "sysv64" fn $name(a: u64, b: u64, c: u64, d: u64, e: u64) -> u64 {
                    super::$name(a, b, c, d, e)
                }
            )*
        }

        mod jit_entry {
            use super::Helper;
            $(
                $(#[$attr])?
                pub(super) fn $name() -> Helper {
                    #[cfg(target_arch = "x86_64")]
                    {
                        #[unsafe(naked)]
                        unsafe extern "sysv64" fn trampoline() {
                            core::arch::naked_asm!(
                                "push rbp",
                                "mov rbp, rsp",
                                "and rsp, -16",
                                "call {f}",
                                "mov rsp, rbp",
                                "pop rbp",
                                "ret",
                                f = sym super::sysv::$name,
                            )
                        }
                        // SAFETY: only rbpf's JIT calls this pointer, with the System V
                        // convention the trampoline and its shim follow (arguments in rdi, rsi,
                        // rdx, rcx, r8, result in rax); rbpf just stores it as a `Helper`.
                        unsafe { std::mem::transmute::<unsafe extern "sysv64" fn(), Helper>(trampoline) }
                    }
                    #[cfg(not(target_arch = "x86_64"))]
                    {
                        super::$name
                    }
                }
            )*
        }
    };
}

bindings! {
    map_lookup_elem: id::MAP_LOOKUP_ELEM,
    map_update_elem: id::MAP_UPDATE_ELEM,
    map_delete_elem: id::MAP_DELETE_ELEM,
    ringbuf_output: id::RINGBUF_OUTPUT,
    ringbuf_output_warp: id::RINGBUF_OUTPUT_WARP,
    ktime_get_ns: id::KTIME_GET_NS,
    get_prandom_u32: id::GET_PRANDOM_U32,
    get_smp_processor_id: id::GET_SMP_PROCESSOR_ID,
    get_current_pid_tgid: id::GET_CURRENT_PID_TGID,
    warp_lanes: id::WARP_LANES,
    warp_leader: id::WARP_LEADER,
    warp_sectors: id::WARP_SECTORS,
    warp_peers: id::WARP_PEERS,
    warp_stride: id::WARP_STRIDE,
    delay_ns: id::DELAY_NS,
    clock: id::CLOCK,
    bad_callx: BAD_CALLX,
    add32: atomic_helper(AtomicOp::Add, Size::W),
    add64: atomic_helper(AtomicOp::Add, Size::DW),
    or32: atomic_helper(AtomicOp::Or, Size::W),
    or64: atomic_helper(AtomicOp::Or, Size::DW),
    and32: atomic_helper(AtomicOp::And, Size::W),
    and64: atomic_helper(AtomicOp::And, Size::DW),
    xor32: atomic_helper(AtomicOp::Xor, Size::W),
    xor64: atomic_helper(AtomicOp::Xor, Size::DW),
    xchg32: atomic_helper(AtomicOp::Xchg, Size::W),
    xchg64: atomic_helper(AtomicOp::Xchg, Size::DW),
    cmpxchg32: atomic_helper(AtomicOp::CmpXchg, Size::W),
    cmpxchg64: atomic_helper(AtomicOp::CmpXchg, Size::DW),
    [cfg(test)] alignment_probe: ALIGNMENT_PROBE,
}

/// A helper for tests: the misalignment, modulo 16, of a 16-byte-aligned local. The compiler
/// places such a local assuming the ABI's stack alignment, so a misaligned call shows here.
#[cfg(test)]
pub(crate) const ALIGNMENT_PROBE: u32 = INTERNAL_BASE + 0x100;

#[cfg(test)]
fn alignment_probe(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    #[repr(align(16))]
    struct Aligned(#[expect(dead_code, reason = "only its address matters")] [u8; 16]);
    let local = Aligned([0; 16]);
    (std::hint::black_box(&local) as *const Aligned as u64) % 16
}

#[cfg(not(test))]
const ALIGNMENT_PROBE: u32 = u32::MAX;

#[cfg(test)]
mod tests {
    use super::native;

    /// On the CPU a thread is a warp of one lane: it leads, alone, and its access's sectors are
    /// the 32-byte sectors it spans (at least 1, for 0 bytes too, and never past the top).
    #[test]
    fn a_thread_is_a_warp_of_one_lane() {
        assert_eq!(native::warp_lanes(), 1);
        assert!(native::warp_leader());
        let cases = [(0, 4, 1), (28, 4, 1), (30, 4, 2), (0, 32, 1), (0, 33, 2), (64, 128, 4)];
        for (addr, size, sectors) in cases {
            assert_eq!(native::warp_sectors(addr, size), sectors, "{size} bytes at {addr}");
        }
        assert_eq!(native::warp_sectors(96, 0), 1);
        assert_eq!(native::warp_peers(u64::MAX), 1);
        assert_eq!(native::warp_stride(u64::MAX), 0);
        // A wait of at least what was asked, and never over the bound.
        assert!(native::delay_ns(20_000) >= 20_000);
        let start = std::time::Instant::now();
        assert!(native::delay_ns(u64::MAX) >= egpu_ebpf::helpers::MAX_DELAY_NS);
        assert!(start.elapsed() < std::time::Duration::from_millis(500), "bounded");
        assert_eq!(native::warp_sectors(u64::MAX - 1, 16), 1);
    }
}
