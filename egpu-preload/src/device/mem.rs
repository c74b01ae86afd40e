//! `egpu mem`'s recording: when `EGPU_MEM_OUT` names a folder, the process writes what the
//! built-in sets' maps hold ([`egpu::host::mem::Recording`]) to `<folder>/<pid>.egpumem` when it
//! exits, after the device parts are merged, beside the kernels it launched and the device it
//! ran on (the first whose context got map parts, asked of the driver then; device 0 when none
//! did).

use std::collections::BTreeMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, OnceLock};

use egpu::device::inject::Injection;
use egpu::host::builtin::{Builtin, TimingCount};
use egpu::host::mem::{self, EventTiming, Header, Recording, Seen, Set};

use super::UserProbes;
use crate::CuResult;
use crate::real::Hook;

type VersionFn = unsafe extern "C" fn(*mut c_int) -> CuResult;
type AttributeFn = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> CuResult;
static DRIVER_VERSION: Hook<VersionFn> = Hook::new(c"cuDriverGetVersion", std::ptr::null_mut);
static ATTRIBUTE: Hook<AttributeFn> = Hook::new(c"cuDeviceGetAttribute", std::ptr::null_mut);

/// `CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`, `..._MEMORY_CLOCK_RATE` (kHz),
/// `..._GLOBAL_MEMORY_BUS_WIDTH` (bits).
const SMS: c_int = 16;
const MEMORY_CLOCK_KHZ: c_int = 36;
const BUS_BITS: c_int = 37;

/// The device of the first context given map parts.
static DEVICE: AtomicI32 = AtomicI32::new(-1);
/// The header, made when that context got its parts: at exit the driver may be shut down
/// already (the shared CUDA runtime shuts it down before the process's last handlers run).
static HEADER: OnceLock<Header> = OnceLock::new();

/// The PTX line of each access site of the kernels instrumented, and what it does, by kernel id
/// and site index.
static LINES: Mutex<BTreeMap<(u64, u32), SiteLine>> = Mutex::new(BTreeMap::new());

/// A site's PTX line, and what it does (`load`, `store`, `atomic`).
type SiteLine = (u32, &'static str);

/// Registers per thread and local memory per thread (bytes) of each kernel launched, by kernel
/// id, as the driver loaded it (instrumented, where it is): `cuFuncGetAttribute` at the first
/// launch of each function.
static LOADED: Mutex<BTreeMap<u64, (u32, u32)>> = Mutex::new(BTreeMap::new());

/// `CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES`, `CU_FUNC_ATTRIBUTE_NUM_REGS`.
const LOCAL_SIZE_BYTES: c_int = 3;
const NUM_REGS: c_int = 4;

/// Remembers what the driver says of the registers and local memory of `f` (of kernel `id`),
/// the function a launch runs, when the process records: once per function, where its kernel
/// id is first resolved.
pub(crate) fn remember_loaded(id: u64, f: crate::Handle) {
    if id == 0 || std::env::var_os("EGPU_MEM_OUT").is_none() {
        return;
    }
    let log = crate::log_enabled("mem");
    let Some(get) = crate::real::FUNC_GET_ATTRIBUTE.get_or_ask() else {
        if log {
            eprintln!("egpu: kernel {id:#x}: the driver has no cuFuncGetAttribute");
        }
        return;
    };
    let mut launched = super::libraries::launched(f);
    // The runtime launches a library's kernel handle (`CUkernel`), which cuFuncGetAttribute
    // does not take: its function in the current context does.
    let mut function: crate::Handle = std::ptr::null_mut();
    if let Some(of_kernel) = crate::events::KERNEL_GET_FUNCTION.get_or_ask() {
        let mut probe: c_int = 0;
        // SAFETY: the driver's function, with a place to write and the handle launched.
        let is_function = unsafe { get(&mut probe, NUM_REGS, launched) } == 0;
        // SAFETY: the driver's function, with a place for one handle and the handle launched.
        let found = !is_function && unsafe { of_kernel(&mut function, launched) } == 0;
        if found && !function.is_null() {
            launched = function;
        }
    }
    let attribute = |which: c_int| {
        let mut value: c_int = 0;
        // SAFETY: the driver's function, with a place for the value and a function handle
        // the program launches.
        let result = unsafe { get(&mut value, which, launched) };
        if result != 0 && log {
            eprintln!(
                "egpu: kernel {id:#x}: cuFuncGetAttribute({which}) of {launched:?} (launched as \
                 {f:?}): error {result}"
            );
        }
        (result == 0).then(|| u32::try_from(value).unwrap_or(0))
    };
    if let (Some(registers), Some(local)) = (attribute(NUM_REGS), attribute(LOCAL_SIZE_BYTES)) {
        LOADED.lock().unwrap_or_else(|p| p.into_inner()).insert(id, (registers, local));
    }
}

/// Remembers where the access sites of an instrumented module are in its PTX.
pub(super) fn remember_sites(injection: &Injection) {
    if std::env::var_os("EGPU_MEM_OUT").is_none() {
        return;
    }
    let mut lines = LINES.lock().unwrap_or_else(|p| p.into_inner());
    lines.extend(mem::site_lines(injection));
}

/// A context on `device` got map parts.
pub(super) fn saw_device(device: c_int) {
    if device >= 0
        && DEVICE.compare_exchange(-1, device, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    {
        let _ = HEADER.set(header());
    }
    super::timeline::start();
}

/// This process's command line.
fn command() -> String {
    std::fs::read("/proc/self/cmdline")
        .map(|b| String::from_utf8_lossy(&b).trim_end_matches('\0').replace('\0', " "))
        .unwrap_or_default()
}

/// The header's device fields, asked of the driver (empty where it does not answer).
fn header() -> Header {
    let device = DEVICE.load(Ordering::Relaxed).max(0);
    let mut h = Header {
        format: mem::record::FORMAT.into(),
        version: mem::record::VERSION,
        egpu: mem::egpu_build(),
        pid: std::process::id(),
        command: command(),
        ..Header::default()
    };
    if let Some(version) = DRIVER_VERSION.get_or_ask() {
        let mut v: c_int = 0;
        // SAFETY: the driver writes one int.
        if unsafe { version(&mut v) } == 0 {
            h.driver = format!("{}.{}", v / 1000, v % 1000 / 10);
        }
    }
    // The device's name, as labelled when it was first used (asked of the driver then: the
    // parts' context's device was, before its parts were made).
    let labels = crate::events::devices::used_devices();
    if let Some(label) = labels.iter().find(|l| u32::try_from(device).ok() == Some(l.index)) {
        h.device = label.name.clone();
    }
    if let Some(attribute) = ATTRIBUTE.get_or_ask() {
        let get = |a: c_int| {
            let mut v: c_int = 0;
            // SAFETY: the driver writes one int.
            if unsafe { attribute(&mut v, a, device) } == 0 { v.max(0) } else { 0 }
        };
        h.sms = get(SMS) as u32;
        // Double data rate: two transfers per clock.
        h.peak_bytes_per_second =
            get(MEMORY_CLOCK_KHZ) as f64 * 1e3 * 2.0 * get(BUS_BITS) as f64 / 8.0;
    }
    h
}

/// Writes the recording when `EGPU_MEM_OUT` asks for one.
pub(crate) fn write(user: &UserProbes, names: &Builtin) {
    let Some(folder) = std::env::var_os("EGPU_MEM_OUT").filter(|f| !f.is_empty()) else { return };
    let mut header = HEADER.get().cloned().unwrap_or_else(header);
    // Every device the process used, labelled when first used (the driver may be gone now).
    header.devices = crate::events::devices::used_devices()
        .into_iter()
        .map(|l| egpu::host::builtin::DeviceLabel {
            index: l.index,
            uuid: l.uuid.as_ref().map(egpu::host::builtin::uuid_text).unwrap_or_default(),
            name: l.name,
        })
        .collect();
    // A child made by `fork` inherits its parent's header: this process's own.
    (header.pid, header.command) = (std::process::id(), command());
    let has = |name: &str| user.maps.iter().any(|(n, _)| n == name);
    header.sets = Set::ALL.iter().filter(|s| has(s.map())).map(|s| s.name().to_owned()).collect();
    // The page size the pack counts by, which `egpu mem run` says.
    header.page_bytes = std::env::var("EGPU_MEM_PAGE_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|_| has(Set::Pages.map()))
        .unwrap_or(0);
    let kernels = super::KERNELS.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let lines = LINES.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let seen = Seen {
        launched: &names.kernels_launched(),
        instrumented: &|id| kernels.binary_search(&id).is_ok(),
        name: &|id| names.name(id),
        site: &|kernel, site| lines.get(&(kernel, site)).copied(),
    };
    let mut recording = Recording::collect(header, &user.maps, &seen);
    // What each kernel moved on each device, when the probes ran on two or more.
    let own = super::parts::own_maps();
    let mut devices: Vec<u32> = own.iter().map(|(d, _, _)| *d).collect();
    devices.sort_unstable();
    devices.dedup();
    if devices.len() > 1 {
        for device in devices {
            let maps: Vec<(String, egpu::maps::RawMap)> = own
                .iter()
                .filter(|(d, _, _)| *d == device)
                .map(|(_, name, map)| (name.clone(), map.clone()))
                .collect();
            recording.add_device_traffic(device, &maps, &seen);
        }
    }
    if has(Set::Allocs.map()) {
        super::allocs::reported(&super::cupti::finish());
        recording.header.um_reports = super::allocs::um_reports();
        recording.allocations = super::allocs::records();
        if let Some((_, touches)) = user.maps.iter().find(|(n, _)| n == "FIRST_TOUCH") {
            recording.first_touches =
                mem::managed::first_touches(touches.clone(), &recording.allocations);
        }
    }
    super::timeline::finish(&mut recording, &user.maps);
    if let (Some(t), Some(s)) = (recording.header.timeline.as_mut(), user.sampled.as_ref()) {
        t.turns = s.sample.turns;
    }
    for k in recording.kernels.iter_mut().filter(|k| !k.instrumented) {
        k.unselected = !super::kernels::chosen(&k.name);
    }
    let loaded = LOADED.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let machine = super::images::machine_registers();
    for k in recording.kernels.iter_mut() {
        if let Some(&(registers, local)) = loaded.get(&egpu::ebpf::kernel_id(&k.name)) {
            (k.registers, k.local_bytes) = (registers, local);
        }
        k.machine_registers = machine.get(&k.name).copied().unwrap_or(0);
    }
    if crate::kernel_times::enabled() {
        let times: Vec<(u64, u64, u64)> =
            names.kernel_times().into_iter().map(|(id, t)| (id, t.count, t.sum_ns)).collect();
        let count = |what| names.timing_count(what);
        let counts = EventTiming {
            timed: count(TimingCount::Timed),
            captured: count(TimingCount::Captured),
            pool_full: count(TimingCount::PoolFull),
            failed: count(TimingCount::Failed),
            lost: count(TimingCount::Lost),
        };
        recording.add_event_times(&times, counts, &seen);
    }
    let path = std::path::Path::new(&folder).join(format!("{}.egpumem", std::process::id()));
    if let Err(e) = std::fs::write(&path, recording.to_jsonl()) {
        eprintln!("egpu: writing {}: {e}", path.display());
    }
}
