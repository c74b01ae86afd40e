//! Unified Memory events as the driver reports them (migrations, page faults, thrashing,
//! throttling, remote maps) for `egpu mem`, from CUPTI's Activity API, opened at run time.
//! CUPTI sees what happens after [`start`] only, which must follow `cuInit`, and [`finish`] gets
//! the records of completed work (synchronize first). A process has one set of activity buffer
//! callbacks: a program using CUPTI itself (a profiler, Kineto) and egpu take each other's
//! records. CUPTI refuses the counters under MPS, on virtualized devices, on GPUs without peer
//! access to each other, and most kinds off 64-bit Linux ([`notes`]).
//!
//! Layout: `cupti_activity.h` of CUDA 13.0.1 (bindgen's output with its size and offset checks,
//! iopsystems/cupti-rs `cupti-sys/src/bindings.rs`; CUDA 11's, iree-org/iree
//! `third_party/cuda/include/cupti_activity.h`, has the same enums). Records are `__packed__,
//! aligned(8)`, back to back, each led by its 4-byte kind, sized by the kind and CUPTI's version:
//! 12.8 and later write `CUpti_ActivityUnifiedMemoryCounter3` (104 bytes, [`Counter3`]), earlier
//! ones `...Counter2`, its first 64. So CUPTI walks the buffers (`cuptiActivityGetNextRecord`)
//! and the 48 bytes both share are decoded.

use std::ffi::{CStr, CString, c_void};
use std::mem::{offset_of, transmute};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// One unified-memory event CUPTI reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct UmEvent {
    pub kind: UmKind,
    /// The virtual address the event concerns (first byte moved, page faulted), or 0.
    pub address: u64,
    /// Bytes (transfers, thrashing, remote maps); fault groups (GPU faults); CPU faults: a PC.
    pub value: u64,
    /// In ns; `end_ns` means nothing for CPU faults, thrashing and remote maps.
    pub start_ns: u64,
    pub end_ns: u64,
    /// Device ids as CUPTI gives them (the CPU is `u32::MAX`); for thrashing, `src` is a mask.
    pub src: u32,
    pub dst: u32,
}

/// What a [`UmEvent`] is (`CUpti_ActivityUnifiedMemoryCounterKind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UmKind {
    HostToDevice,
    DeviceToHost,
    CpuPageFault,
    GpuPageFault,
    Thrashing,
    Throttling,
    RemoteMap,
    DeviceToDevice,
    Other(u32),
}

/// The kinds configured, at CUPTI's number less one, with their names.
#[rustfmt::skip]
const KINDS: [(UmKind, &str); 8] = [
    (UmKind::HostToDevice, "htod"), (UmKind::DeviceToHost, "dtoh"),
    (UmKind::CpuPageFault, "cpu_fault"), (UmKind::GpuPageFault, "gpu_fault"),
    (UmKind::Thrashing, "thrashing"), (UmKind::Throttling, "throttling"),
    (UmKind::RemoteMap, "remote_map"), (UmKind::DeviceToDevice, "dtod"),
];

impl UmKind {
    fn from_raw(raw: u32) -> UmKind {
        let known = raw.checked_sub(1).and_then(|i| KINDS.get(i as usize));
        known.map_or(UmKind::Other(raw), |k| k.0)
    }

    /// The kind's short name (`other` for [`UmKind::Other`]).
    pub(crate) fn name(self) -> &'static str {
        KINDS.iter().find(|k| k.0 == self).map_or("other", |k| k.1)
    }
}

/// `CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER`, `CUPTI_SUCCESS`, `..._FLAG_FLUSH_FORCED`,
/// `..._UNIFIED_MEMORY_COUNTER_SCOPE_PROCESS_SINGLE_DEVICE` (ignored since CUDA 7.0).
const KIND_UM: u32 = 25;
const SUCCESS: u32 = 0;
const FLUSH_FORCED: u32 = 1;
const SCOPE: u32 = 1;
/// The buffers handed to CUPTI (1 MiB of 8-byte words), and the most events kept.
const BUFFER_WORDS: usize = 1 << 17;
const CAP: usize = 1_000_000;

/// `CUpti_ActivityUnifiedMemoryCounter3`; `...Counter2` is its first 64 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct Counter3 {
    kind: u32,
    counter_kind: u32,
    value: u64,
    start: u64,
    end: u64,
    address: u64,
    src_id: u32,
    dst_id: u32,
    stream_id: u32,
    process_id: u32,
    flags: u32,
    pad: u32,
    processors: [u64; 5],
}

/// `CUpti_ActivityUnifiedMemoryCounterConfig`.
#[repr(C, align(8))]
struct Config {
    scope: u32,
    kind: u32,
    device_id: u32,
    enable: u32,
}

/// The record `record` starts with, if it is a unified-memory one: its first 48 bytes, up to
/// `dst_id`, the same in `Counter2` and `Counter3`.
fn decode(record: &[u8]) -> Option<UmEvent> {
    let u32_at = |at: usize| Some(u32::from_ne_bytes(record.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_ne_bytes(record.get(at..at + 8)?.try_into().ok()?));
    u32_at(offset_of!(Counter3, kind)).filter(|&kind| kind == KIND_UM)?;
    Some(UmEvent {
        kind: UmKind::from_raw(u32_at(offset_of!(Counter3, counter_kind))?),
        address: u64_at(offset_of!(Counter3, address))?,
        value: u64_at(offset_of!(Counter3, value))?,
        start_ns: u64_at(offset_of!(Counter3, start))?,
        end_ns: u64_at(offset_of!(Counter3, end))?,
        src: u32_at(offset_of!(Counter3, src_id))?,
        dst: u32_at(offset_of!(Counter3, dst_id))?,
    })
}

/// The events of back-to-back `Counter3`s, up to one of another kind (size unknown) or cut short.
#[cfg(test)]
fn parse(buffer: &[u8]) -> Vec<UmEvent> {
    buffer.chunks_exact(size_of::<Counter3>()).map_while(decode).collect()
}

type RequestFn = unsafe extern "C" fn(*mut *mut u8, *mut usize, *mut usize);
type CompleteFn = unsafe extern "C" fn(*mut c_void, u32, *mut u8, usize, usize);
type RegisterFn = unsafe extern "C" fn(RequestFn, CompleteFn) -> u32;
type ConfigFn = unsafe extern "C" fn(*mut Config, u32) -> u32;
type KindFn = unsafe extern "C" fn(u32) -> u32;
type NextFn = unsafe extern "C" fn(*mut u8, usize, *mut *mut u8) -> u32;

/// Set by [`start`] (`NEXT` before the callbacks are registered), and what the callbacks found.
static FLUSH: Mutex<Option<KindFn>> = Mutex::new(None);
static NEXT: OnceLock<NextFn> = OnceLock::new();
static EVENTS: Mutex<Vec<UmEvent>> = Mutex::new(Vec::new());
static DROPPED: AtomicU64 = AtomicU64::new(0);
static NOTES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Starts collecting when CUPTI can be loaded: `Ok(())`, or why not (a sentence). Idempotent
/// once it succeeded; a failure may be retried (after `cuInit`, say).
pub(crate) fn start() -> Result<(), String> {
    let mut flush = FLUSH.lock().unwrap_or_else(|p| p.into_inner());
    flush.map_or_else(|| enable().map(|f| *flush = Some(f)), |_| Ok(()))
}

/// Flushes CUPTI's buffers and returns every event collected so far (drains them), or nothing
/// when never started.
pub(crate) fn finish() -> Vec<UmEvent> {
    let Some(flush) = *FLUSH.lock().unwrap_or_else(|p| p.into_inner()) else { return Vec::new() };
    // SAFETY: libcupti's cuptiActivityFlushAll (it blocks), with a flag.
    unsafe { flush(FLUSH_FORCED) };
    std::mem::take(&mut *EVENTS.lock().unwrap_or_else(|p| p.into_inner()))
}

/// Remarks on the collection: the counters CUPTI refused.
pub(crate) fn notes() -> Vec<String> {
    NOTES.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// The events CUPTI reported past the cap, not kept.
pub(crate) fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// Opens libcupti (for good: `$EGPU_CUPTI`, else the first of the usual names and places that
/// opens), registers the buffer callbacks, configures the counters (less those refused) and
/// enables their records; returns `cuptiActivityFlushAll`.
fn enable() -> Result<KindFn, String> {
    let named = std::env::var("EGPU_CUPTI").ok().filter(|p| !p.is_empty());
    let usual = ["libcupti.so", "libcupti.so.13", "libcupti.so.12"].map(String::from);
    let dirs = ["extras/CUPTI/lib64", "lib64"].map(|d| format!("/usr/local/cuda/{d}/libcupti.so"));
    let tried: Vec<String> = named.into_iter().chain(usual).chain(dirs).collect();
    let opened = tried.iter().find_map(|path| {
        let c = CString::new(path.as_str()).unwrap_or_default();
        // SAFETY: dlopen with a C string (libcupti's initializers run).
        let lib = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        (!lib.is_null()).then_some((path, lib))
    });
    let Some((path, lib)) = opened else {
        return Err(format!("libcupti could not be loaded (tried {}).", tried.join(", ")));
    };
    // The real dlsym (glibc's, found by version): this library exports its own `dlsym`, to
    // which a call of `libc::dlsym` from here would bind.
    let lookup = crate::real::dlsym().ok_or("egpu could not find the real dlsym.")?;
    let find = |name: &CStr| {
        // SAFETY: glibc's dlsym with a handle dlopen gave and a C string.
        let p = unsafe { lookup(lib, name.as_ptr()) };
        if p.is_null() { Err(format!("{path} has no {name:?}.")) } else { Ok(p) }
    };
    // SAFETY: the libcupti functions of those names have these types (`cupti_activity.h`).
    let (register, configure, activity_enable, flush) = unsafe {
        let _ = NEXT.set(transmute::<*mut c_void, NextFn>(find(c"cuptiActivityGetNextRecord")?));
        let register: RegisterFn = transmute(find(c"cuptiActivityRegisterCallbacks")?);
        let configure: ConfigFn = transmute(find(c"cuptiActivityConfigureUnifiedMemoryCounter")?);
        let enable: KindFn = transmute(find(c"cuptiActivityEnable")?);
        let flush: KindFn = transmute(find(c"cuptiActivityFlushAll")?);
        (register, configure, enable, flush)
    };
    let why = |what: &str, code| format!("{what} failed: CUptiResult {code} ({path}).");
    // SAFETY: libcupti's function, with callbacks of the types it takes.
    let code = unsafe { register(requested, completed) };
    if code != SUCCESS {
        return Err(why("cuptiActivityRegisterCallbacks", code));
    }
    let set = |kinds: &[u32]| {
        let config = |&kind: &u32| Config { scope: SCOPE, kind, device_id: 0, enable: 1 };
        let mut configs: Vec<Config> = kinds.iter().map(config).collect();
        // SAFETY: libcupti's function, with `configs.len()` configurations.
        unsafe { configure(configs.as_mut_ptr(), configs.len() as u32) }
    };
    let mut kinds: Vec<u32> = (1..=8).collect();
    let mut code = set(&kinds);
    let mut notes = NOTES.lock().unwrap_or_else(|p| p.into_inner());
    notes.clear();
    if code != SUCCESS {
        // Those CUPTI refuses alone are left out, and the others set again.
        for (k, code) in (1..=8).map(|k| (k, set(&[k]))).filter(|r| r.1 != SUCCESS) {
            notes.push(why(&format!("the {} counter", UmKind::from_raw(k).name()), code));
            kinds.retain(|&kind| kind != k);
        }
        code = if kinds.is_empty() { code } else { set(&kinds) };
    }
    if code != SUCCESS {
        return Err(why("cuptiActivityConfigureUnifiedMemoryCounter", code));
    }
    // SAFETY: libcupti's function, with an activity kind.
    match unsafe { activity_enable(KIND_UM) } {
        SUCCESS => Ok(flush),
        code => Err(why("cuptiActivityEnable(UNIFIED_MEMORY_COUNTER)", code)),
    }
}

/// CUPTI's request for a buffer: 1 MiB, 8-byte aligned, leaked until [`completed`].
unsafe extern "C" fn requested(buffer: *mut *mut u8, size: *mut usize, max_records: *mut usize) {
    let words = Box::into_raw(vec![0u64; BUFFER_WORDS].into_boxed_slice());
    // SAFETY: CUPTI's places to write.
    unsafe { (*buffer, *size, *max_records) = (words.cast(), BUFFER_WORDS * 8, 0) };
}

/// CUPTI's return of a buffer of [`requested`], `valid` bytes of records: their events are kept
/// (nothing here panics), the buffer freed.
unsafe extern "C" fn completed(_: *mut c_void, _: u32, buffer: *mut u8, _: usize, valid: usize) {
    let (Some(next), false) = (NEXT.get(), buffer.is_null()) else { return };
    // SAFETY: a buffer of ours, `valid` bytes of it written by CUPTI (and only read).
    let bytes = unsafe { std::slice::from_raw_parts(buffer, valid.min(BUFFER_WORDS * 8)) };
    // SAFETY: CUPTI's iteration over its buffer, from the record it gave last.
    let events = walk(bytes, |record| unsafe { next(buffer, bytes.len(), record) } == SUCCESS);
    let mut kept = EVENTS.lock().unwrap_or_else(|p| p.into_inner());
    let room = CAP.saturating_sub(kept.len()).min(events.len());
    DROPPED.fetch_add((events.len() - room) as u64, Ordering::Relaxed);
    kept.extend_from_slice(&events[..room]);
    let words = std::ptr::slice_from_raw_parts_mut(buffer.cast::<u64>(), BUFFER_WORDS);
    // SAFETY: the allocation `requested` leaked; CUPTI is done with it.
    drop(unsafe { Box::from_raw(words) });
}

/// The unified-memory events of `buffer`, at the records `next` finds one after the other, as
/// `cuptiActivityGetNextRecord` does (from null: the first); one outside the buffer ends the walk.
fn walk(buffer: &[u8], mut next: impl FnMut(&mut *mut u8) -> bool) -> Vec<UmEvent> {
    let (mut events, mut record) = (Vec::new(), std::ptr::null_mut());
    // Records are 8 bytes at least: a bound on the steps, whatever `next` does.
    for _ in 0..=buffer.len() / 8 {
        let at = next(&mut record).then(|| record.addr().wrapping_sub(buffer.as_ptr().addr()));
        let Some(rest) = at.and_then(|at| buffer.get(at..)) else { break };
        events.extend(decode(rest));
    }
    events
}

/// What this module relies on, as `tests/programs/cupti_layout.c` prints it from the headers.
#[cfg(test)]
const EXPECTED: &[(&str, u64)] = &[
    ("CUpti_ActivityUnifiedMemoryCounter3.sizeof", 104),
    ("CUpti_ActivityUnifiedMemoryCounter3.kind", 0),
    ("CUpti_ActivityUnifiedMemoryCounter3.counterKind", 4),
    ("CUpti_ActivityUnifiedMemoryCounter3.value", 8),
    ("CUpti_ActivityUnifiedMemoryCounter3.start", 16),
    ("CUpti_ActivityUnifiedMemoryCounter3.end", 24),
    ("CUpti_ActivityUnifiedMemoryCounter3.address", 32),
    ("CUpti_ActivityUnifiedMemoryCounter3.srcId", 40),
    ("CUpti_ActivityUnifiedMemoryCounter3.dstId", 44),
    ("CUpti_ActivityUnifiedMemoryCounter3.streamId", 48),
    ("CUpti_ActivityUnifiedMemoryCounter3.processId", 52),
    ("CUpti_ActivityUnifiedMemoryCounter3.flags", 56),
    ("CUpti_ActivityUnifiedMemoryCounter3.pad", 60),
    ("CUpti_ActivityUnifiedMemoryCounter3.processors", 64),
    ("CUpti_ActivityUnifiedMemoryCounterConfig.sizeof", 16),
    ("CUpti_ActivityUnifiedMemoryCounterConfig.scope", 0),
    ("CUpti_ActivityUnifiedMemoryCounterConfig.kind", 4),
    ("CUpti_ActivityUnifiedMemoryCounterConfig.deviceId", 8),
    ("CUpti_ActivityUnifiedMemoryCounterConfig.enable", 12),
    ("CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER", 25),
    ("CUPTI_SUCCESS", 0),
    ("CUPTI_ACTIVITY_FLAG_FLUSH_FORCED", 1),
    ("CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_SCOPE_PROCESS_SINGLE_DEVICE", 1),
    ("CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD", 1),
    ("CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH", 2),
    ("CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_CPU_PAGE_FAULT_COUNT", 3),
    ("CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT", 4),
    ("CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING", 5),
    ("CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THROTTLING", 6),
    ("CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_REMOTE_MAP", 7),
    ("CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOD", 8),
];

#[cfg(test)]
mod tests {
    use super::*;

    macro_rules! offsets {
        ($t:ty: $($f:ident),*) => { [$(offset_of!($t, $f)),*] };
    }

    #[test]
    fn the_layout_is_cupti_activity_hs() {
        let mut ours = vec![size_of::<Counter3>()];
        ours.extend(offsets!(Counter3: kind, counter_kind, value, start, end, address, src_id,
            dst_id, stream_id, process_id, flags, pad, processors));
        ours.push(size_of::<Config>());
        ours.extend(offsets!(Config: scope, kind, device_id, enable));
        ours.extend([KIND_UM, SUCCESS, FLUSH_FORCED, SCOPE].map(|v| v as usize));
        ours.extend(1..=KINDS.len());
        assert_eq!(EXPECTED.iter().map(|e| e.1 as usize).collect::<Vec<_>>(), ours);
        assert_eq!(offset_of!(Counter3, dst_id) + 4, 48);
        let named =
            (1..).zip(KINDS).all(|(raw, (k, n))| UmKind::from_raw(raw) == k && k.name() == n);
        assert!(
            named && UmKind::from_raw(9) == UmKind::Other(9) && UmKind::Other(9).name() == "other"
        );
    }

    /// An event (times made up from its value) and the bytes of its record.
    fn made(raw: u32, address: u64, value: u64) -> (UmEvent, Vec<u8>) {
        let (start_ns, end_ns, kind) = (value * 3, value * 5, UmKind::from_raw(raw));
        let e = UmEvent { kind, address, value, start_ns, end_ns, src: u32::MAX, dst: 1 };
        let mut r = Counter3 { kind: KIND_UM, value, address, ..Default::default() };
        (r.counter_kind, r.start, r.end, r.src_id, r.dst_id) =
            (raw, start_ns, end_ns, e.src, e.dst);
        let p = std::ptr::from_ref(&r).cast::<u8>();
        // SAFETY: `Counter3` is `repr(C)` without padding (104 bytes of fields), all initialized.
        (e, unsafe { std::slice::from_raw_parts(p, size_of::<Counter3>()) }.to_vec())
    }

    #[test]
    fn a_buffer_of_records_gives_their_events() {
        let made = [made(1, 0x7f00_0000_1000, 65536), made(4, 0x7f00_0020_0000, 3), made(42, 0, 9)];
        let mut buffer: Vec<u8> = made.iter().flat_map(|m| m.1.clone()).collect();
        let want = made.map(|m| m.0);
        assert_eq!(parse(&buffer), want);
        // A record cut short is left out; a record of another kind ends the buffer.
        assert_eq!(parse(&buffer[..buffer.len() - 1]), want[..2]);
        buffer.splice(104..104, [1u8, 0, 0, 0].into_iter().chain(buffer[4..104].to_vec()));
        assert_eq!(parse(&buffer), want[..1]);
        // CUPTI's walk skips it (and stops outside the buffer).
        let (p, mut at) = (buffer.as_ptr().cast_mut(), [0, 104, 208, 312, 4096, 0].into_iter());
        let walked = walk(&buffer, |r| at.next().map(|at| *r = p.wrapping_add(at)).is_some());
        assert_eq!(walked, want);
        // CUPTI before 12.8: `Counter2`, the first 64 bytes.
        assert_eq!(decode(&buffer[..64]), Some(want[0]));
        assert_eq!((decode(&buffer[..47]), parse(&[])), (None, vec![]));
    }

    #[test]
    fn garbage_never_panics() {
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || {
            state = state.wrapping_mul(0x5851_f42d_4c95_7f2d).wrapping_add(0x1405_7b7e_f767_814f);
            (state >> 33) as usize
        };
        for _ in 0..2000 {
            let len = next() % 700;
            let mut buffer: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            // Mostly records of the right kind, to get past the first.
            for at in (0..len.saturating_sub(3)).step_by(104).filter(|_| next() % 4 != 0) {
                buffer[at..at + 4].copy_from_slice(&KIND_UM.to_ne_bytes());
            }
            assert!(parse(&buffer).len() <= len / 104 && decode(&buffer).is_some() <= (len >= 48));
        }
    }

    #[test]
    fn without_libcupti_start_says_why_and_finish_has_nothing() {
        // With libcupti, it starts or, before `cuInit`, says why not (nothing runs on a GPU here).
        let why = start().err().unwrap_or_default();
        assert!(why.is_empty() || why.ends_with('.') && why.contains("libcupti"), "{why}");
        assert!(finish().is_empty() && dropped() == 0);
    }
}
