//! The user's probes (`EGPU_PROBES`), and the instrumentation of the modules a program loads.
//!
//! `EGPU_PROBES` names a probe pack ([`egpu::pack`]): its text, or a shared library made with
//! `egpu::export_probes!`. Its host probes are attached beside the built-in ones; its device
//! probes are injected into every module the program loads that carries PTX (PTX text, a cubin
//! that keeps its PTX, as Triton's do, or a fat binary: [`images`]), which is then loaded in the
//! module's place, so the program launches instrumented kernels without knowing. The maps live in shared memory as
//! `egpu-<pid>-u-<MAP>`, live for `egpu maps PID`; the maps device probes use have a part in GPU
//! memory in each context ([`parts`]), which the probes update at GPU speed and egpu merges into
//! the shared map while they run. Each such context also keeps the bytes of the tensor maps'
//! boxes the program encoded ([`boxes`]), where the instrumented tensor copies look them up.
//!
//! Nothing here may take the program down: a pack that cannot be read is reported once and
//! left out; a module that cannot be instrumented, or whose instrumented form the driver
//! refuses, is loaded as it came (and counted, with the reason, in the summary).

pub(crate) mod allocs;
pub(crate) mod boxes;
mod caches;
pub(crate) mod cupti;
mod images;
mod kernels;
pub(crate) mod launch_tags;
pub(crate) mod libraries;
pub(crate) mod mem;
mod parts;
mod timeline;

use std::ffi::CString;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use egpu::device::inject::{
    DeviceProbe, InjectOptions, Injection, Kernels, WarpSampling, inject_with,
};
use egpu::device::translate::{DeviceMap, adds_only, reads_only};
use egpu::ebpf::verifier::Verified;
use egpu::ebpf::{AttachPoint, MapKind};
use egpu::host::builtin;
use egpu::maps::layout::Geometry;
use egpu::maps::{Placement, RawMap};
use egpu::pack::Pack;

use crate::CuResult;
pub(crate) use images::{Refusal, ptx_in, ptx_of};
pub(crate) use parts::synced;
pub(crate) use parts::{CTX_GET_DEVICE, CTX_POP, CTX_PUSH, current_context, period};
pub(crate) use parts::{Teardown, finish, fork_guard, merging, teardown};

/// The pack `EGPU_PROBES` names, read once per program image (a forked child keeps it).
fn pack() -> Option<&'static Pack> {
    static PACK: OnceLock<Option<Pack>> = OnceLock::new();
    PACK.get_or_init(|| {
        let path = std::env::var_os("EGPU_PROBES").filter(|p| !p.is_empty())?;
        match Pack::load(std::path::Path::new(&path)) {
            Ok(pack) => Some(pack),
            Err(e) => {
                eprintln!("egpu: EGPU_PROBES: {e}; running with the built-in probes only");
                None
            }
        }
    })
    .as_ref()
}

/// A process's user probes: their maps, and the device probes verified.
pub(crate) struct UserProbes {
    /// Every map, by name, in shared memory (or this process's memory).
    maps: Vec<(String, RawMap)>,
    /// Host probes: each program with its maps, to attach.
    pub(crate) host: Vec<(Verified, Vec<RawMap>)>,
    /// Device probes: each verified, with the indices of its maps in `maps`.
    device: Vec<(Verified, Vec<usize>)>,
    /// The indices of the maps device probes use, each once, with the per-SM copies of its
    /// slots its device part has (0: none), and whether the part mirrors the host map (the
    /// device probes only read it: host code writes it, and the part is refreshed).
    on_device: Vec<(usize, u32, bool)>,
    /// The device probes that run in one warp in N only (the pack's `warps` lines).
    sampled: Option<WarpSampling>,
}

/// Per-SM copies of the slots of a map that device probes only add to: one per SM up to
/// [`MOST_COPIES`] (each SM adds to copy `%smid % copies`), fewer where the slots are large, so
/// that a map's copies take at most [`COPIES_BYTES`], but at least [`FEWEST_COPIES`].
/// `EGPU_SPREAD` sets the number for every map (a power of two up to 1024; 0: none). A GPU's
/// adds to one counter then go to many addresses, not one, where they would queue (the add
/// kernel of the zero-code benchmark: 3.8× its time with one copy), and few land on one line of
/// L2: measured on the H200, the `counts` set took a one-element-per-thread saxpy 1.69× its
/// time with 16 copies, 1.54× with 128 (and with 1024: the H200 has 132 SMs); a
/// torch.compile'd transformer block's elementwise add kernel took 3.4× with 16, 1.4× with 128
/// (two runs, whose autotuned kernels differ).
fn copies(geometry: &Geometry) -> u32 {
    static SPREAD: OnceLock<Option<u32>> = OnceLock::new();
    let set = *SPREAD.get_or_init(|| {
        let n = std::env::var("EGPU_SPREAD").ok().and_then(|v| v.parse::<u32>().ok());
        n.map(|n| n.min(1024))
    });
    set.unwrap_or_else(|| default_copies(geometry))
}

/// [`copies`] when `EGPU_SPREAD` is not set.
fn default_copies(geometry: &Geometry) -> u32 {
    let slots = u64::from(geometry.slots) * u64::from(geometry.slot_stride);
    let fit = (COPIES_BYTES / slots.max(1)).clamp(1, u64::from(MOST_COPIES)) as u32;
    // The largest power of two that fits.
    (1 << fit.ilog2()).max(FEWEST_COPIES)
}

/// The most per-SM copies a map gets by default ([`copies`]): one per SM of an H200 but 4.
const MOST_COPIES: u32 = 128;
/// The fewest per-SM copies a map spread gets by default (the `pages` map's 1 MiB of slots).
const FEWEST_COPIES: u32 = 16;
/// The bytes a map's per-SM copies may take by default, per context (the `counts` set's maps
/// have 128 copies within it, 36 MiB in all; each merge copies them to the host).
const COPIES_BYTES: u64 = 16 << 20;

/// The per-SM copies map `m` gets: [`copies`] when every device probe that uses it only adds to
/// its values (`adds`, each probe's [`adds_only`]), else 0.
fn spread(device: &[(Verified, Vec<usize>)], adds: &[Vec<bool>], m: usize, g: &Geometry) -> u32 {
    let n = copies(g);
    if only(device, adds, m) && n.is_power_of_two() { n } else { 0 }
}

/// Whether every device probe that uses map `m` says so of it in `says` (each probe's verdicts
/// on its own table: [`adds_only`], [`reads_only`]).
fn only(device: &[(Verified, Vec<usize>)], says: &[Vec<bool>], m: usize) -> bool {
    device.iter().zip(says).all(|((_, indices), says)| {
        indices.iter().enumerate().all(|(local, &map)| map != m || says[local])
    })
}

/// Modules instrumented, and modules loaded as they came (with the user's device probes).
static INSTRUMENTED: AtomicU64 = AtomicU64::new(0);
static NOT_INSTRUMENTABLE: AtomicU64 = AtomicU64::new(0);
/// Why modules were not instrumented: by kind, how many; and each distinct detail once.
static KINDS: Mutex<Vec<(Why, u64)>> = Mutex::new(Vec::new());
static DETAILS: Mutex<Vec<(Why, String)>> = Mutex::new(Vec::new());

/// The kinds of reason a module is loaded as it came, as the summary names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Why {
    /// The image carries no PTX (machine code only), nor does any cache keep it.
    NoPtx,
    /// The image (a cubin, a fat binary, PTX text) could not be read.
    Unreadable,
    /// The PTX could not be instrumented.
    Instrumenting,
    /// The maps' GPU memory could not be made ready in the module's context.
    Maps,
    /// The driver refused the instrumented PTX.
    Driver,
}

impl Why {
    fn name(self) -> &'static str {
        match self {
            Why::NoPtx => "no PTX",
            Why::Unreadable => "unreadable image",
            Why::Instrumenting => "not instrumentable PTX",
            Why::Maps => "no maps in the context",
            Why::Driver => "refused by the driver",
        }
    }
}

/// The ids of the kernels of the modules instrumented, sorted.
static KERNELS: Mutex<Vec<u64>> = Mutex::new(Vec::new());
/// Over the modules instrumented: their global memory instructions (M), those observed (N).
static MEMORY_INSTRUCTIONS: AtomicU64 = AtomicU64::new(0);
static OBSERVED: AtomicU64 = AtomicU64::new(0);
/// The global memory instructions not observed, by opcode and why, with how many.
static UNOBSERVED: Mutex<Vec<(String, &'static str, u64)>> = Mutex::new(Vec::new());

/// Adds an instrumented module's coverage to the summary's.
fn count_coverage(injection: &Injection) {
    MEMORY_INSTRUCTIONS.fetch_add(injection.memory_instructions as u64, Ordering::Relaxed);
    OBSERVED.fetch_add(injection.observed as u64, Ordering::Relaxed);
    let mut unobserved = UNOBSERVED.lock().unwrap_or_else(|p| p.into_inner());
    for u in &injection.unobserved {
        let same = unobserved.iter().position(|(op, why, _)| *op == u.opcode && *why == u.reason);
        match same {
            Some(i) => unobserved[i].2 += 1,
            None if unobserved.len() < 32 => unobserved.push((u.opcode.clone(), u.reason, 1)),
            None => {}
        }
    }
}

/// Remembers the kernels of a module instrumented (those `selected`, when only some were), by
/// id, and their names.
fn remember_kernels(injection: &Injection, selected: Option<&[String]>) {
    let mut new = Vec::new();
    {
        let mut kernels = KERNELS.lock().unwrap_or_else(|p| p.into_inner());
        let chosen = |name: &String| selected.is_none_or(|s| s.contains(name));
        for name in injection.kernels.iter().filter(|n| chosen(n)) {
            let id = egpu::ebpf::kernel_id(name);
            if let Err(at) = kernels.binary_search(&id) {
                kernels.insert(at, id);
                new.push(name);
            }
        }
    }
    // With KERNELS released: the exit takes the process's state, then KERNELS.
    new.into_iter().for_each(|name| crate::defaults::record_kernel_name(name));
}

/// The summary's line of the kernels launched that ran uninstrumented (their modules were not
/// instrumented, or never seen loaded): how many of those launched, and the most launched.
fn uninstrumented_line(names: &builtin::Builtin) -> String {
    const SHOWN: usize = 6;
    let kernels = KERNELS.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let launched = names.kernels_launched();
    let mut missed: Vec<&(u64, u64, String)> =
        launched.iter().filter(|(id, _, _)| kernels.binary_search(id).is_err()).collect();
    missed.sort_by_key(|(id, n, _)| (std::cmp::Reverse(*n), *id));
    let mut line =
        format!("kernels launched uninstrumented: {} of {}", missed.len(), launched.len());
    if !missed.is_empty() {
        let shown: Vec<String> = missed
            .iter()
            .take(SHOWN)
            .map(|(id, n, name)| match name.is_empty() {
                true => format!("{id:#018x} ×{n}"),
                false => format!("{name} ×{n}"),
            })
            .collect();
        let more = missed.len().saturating_sub(SHOWN);
        let more = if more > 0 { format!(", and {more} more") } else { String::new() };
        line.push_str(&format!(" ({}{more})", shown.join(", ")));
    }
    line.push('\n');
    line
}

/// Counts a module loaded as it came, and why.
pub(crate) fn refused(why: Why, detail: String) {
    NOT_INSTRUMENTABLE.fetch_add(1, Ordering::Relaxed);
    if crate::log_enabled("modules") {
        eprintln!("egpu: a module loaded uninstrumented: {}: {detail}", why.name());
    }
    let mut kinds = KINDS.lock().unwrap_or_else(|p| p.into_inner());
    match kinds.iter_mut().find(|(w, _)| *w == why) {
        Some((_, n)) => *n += 1,
        None => kinds.push((why, 1)),
    }
    drop(kinds);
    let mut details = DETAILS.lock().unwrap_or_else(|p| p.into_inner());
    if !details.iter().any(|(w, d)| *w == why && *d == detail) && details.len() < 16 {
        details.push((why, detail));
    }
}

impl UserProbes {
    /// Process `pid`'s user probes, from the pack (`None` when there is none); maps in shared
    /// memory when `shared`.
    pub(crate) fn set_up(pid: u32, shared: bool) -> Option<UserProbes> {
        let pack = pack()?;
        let mut maps: Vec<(String, RawMap)> = Vec::new();
        let mut host = Vec::new();
        let mut device = Vec::new();
        let mut samples = Vec::new();
        for probe in pack.probes() {
            let mut indices = Vec::new();
            let table = probe.program.program().maps().iter().zip(&probe.maps).enumerate();
            for (i, (def, geometry)) in table {
                let index = match maps.iter().position(|(n, _)| *n == def.name) {
                    Some(i) if maps[i].1.geometry() == geometry => i,
                    Some(_) => {
                        eprintln!(
                            "egpu: EGPU_PROBES: map {} is declared twice with different layouts; \
                             probe {} left out",
                            def.name, probe.name
                        );
                        indices.clear();
                        break;
                    }
                    None => {
                        let raw = create(pid, &def.name, *geometry, shared)?;
                        // Global data's first contents.
                        if let Err(e) = probe.fill(i, &raw) {
                            eprintln!("egpu: EGPU_PROBES: map {}'s first contents: {e}", def.name);
                        }
                        maps.push((def.name.clone(), raw));
                        maps.len() - 1
                    }
                };
                indices.push(index);
            }
            if indices.len() != probe.maps.len() {
                continue;
            }
            // Verified once, when the pack was read.
            match probe.program.program().attach_point() {
                AttachPoint::Device(_) => {
                    device.push((probe.program.clone(), indices));
                    samples.push(probe.sample);
                }
                _ => {
                    let bound = indices.iter().map(|&i| maps[i].1.clone()).collect();
                    host.push((probe.program.clone(), bound));
                }
            }
        }
        let sampled = match WarpSampling::of(samples.iter().copied()) {
            Ok(sampled) => sampled,
            Err(why) => {
                eprintln!("egpu: EGPU_PROBES: {why}; the sampled probes left out");
                let mut s = samples.iter();
                device.retain(|_| s.next().is_some_and(|s| !s.is_sampled()));
                None
            }
        };
        let mut used: Vec<usize> = device.iter().flat_map(|(_, i)| i.iter().copied()).collect();
        used.sort_unstable();
        used.dedup();
        let adds: Vec<Vec<bool>> = device.iter().map(|(program, _)| adds_only(program)).collect();
        let reads: Vec<Vec<bool>> = device.iter().map(|(program, _)| reads_only(program)).collect();
        let on_device = used
            .into_iter()
            .map(|m| {
                let copies = spread(&device, &adds, m, maps[m].1.geometry());
                (m, copies, copies == 0 && only(&device, &reads, m))
            })
            .collect();
        Some(UserProbes { maps, host, device, on_device, sampled })
    }

    /// The map named `name`, when the pack has one.
    pub(crate) fn map(&self, name: &str) -> Option<&RawMap> {
        self.maps.iter().find(|(n, _)| n == name).map(|(_, m)| m)
    }

    /// Whether there are device probes to inject.
    pub(crate) fn on_device(&self) -> bool {
        !self.device.is_empty()
    }

    /// The PTX to load instead of a module whose PTX is `ptx`, instrumented with the device
    /// probes bound to their maps' parts in the current context, its tensor copies to the
    /// context's table of boxes; `None` when there are none, or it could not be instrumented
    /// (counted, with the reason).
    pub(crate) fn instrument(&self, ptx: &str) -> Option<CString> {
        if self.device.is_empty() {
            return None;
        }
        // `EGPU_KERNELS`: a module none of whose kernels it picks is loaded as it came.
        let selected = kernels::selected(ptx);
        if selected.as_ref().is_some_and(|s| s.is_empty()) {
            return None;
        }
        let names: Vec<&str> = selected.iter().flatten().map(String::as_str).collect();
        let kernels = match &selected {
            Some(_) => Kernels::Named(&names),
            None => Kernels::All,
        };
        let (addresses, table) = match parts::addresses(&self.maps, &self.on_device) {
            Ok(a) => a,
            Err(reason) => {
                refused(Why::Maps, reason);
                return None;
            }
        };
        let bindings: Vec<Vec<DeviceMap>> = self
            .device
            .iter()
            .map(|(_, indices)| {
                indices
                    .iter()
                    .map(|&i| DeviceMap {
                        addr: addresses[i],
                        geometry: *self.maps[i].1.geometry(),
                        live: false,
                        spread: self.on_device.iter().find(|u| u.0 == i).map_or(0, |u| u.1),
                        // Rings are drained while kernels run (`parts`).
                        drained: self.maps[i].1.kind() == MapKind::RingBuf,
                    })
                    .collect()
            })
            .collect();
        let probes: Vec<DeviceProbe<'_>> = self
            .device
            .iter()
            .zip(&bindings)
            .map(|((program, _), maps)| DeviceProbe { program, kernels, maps })
            .collect();
        // Where sampled probes give a kernel two copies, the registers are bound by default:
        // what does not fit spills in the sampled warps' copy (`EGPU_MAXNREG=1`: every kernel).
        let options = InjectOptions {
            tensor_boxes: Some(table),
            registers: images::machine_registers(),
            bound_sampled_only: !images::bounded(),
            sampled: self.sampled.clone(),
            sm_clock_khz: images::sm_clock_khz(),
            defer_misses: images::defer_misses(),
            // The launch's tag where probes read it: this library fills it (`launch_tags`).
            launch_tags: true,
        };
        let injected = inject_with(ptx, &probes, &options);
        if crate::log_enabled("modules") {
            dump(ptx, injected.as_ref().ok().map(|i| i.ptx.as_str()));
        }
        if let Ok(injection) = &injected {
            count_coverage(injection);
            remember_kernels(injection, selected.as_deref());
            mem::remember_sites(injection);
        }
        match injected {
            Ok(injection) => match CString::new(injection.ptx) {
                Ok(text) => {
                    launch_tags::pending(&injection.launch_params);
                    Some(text)
                }
                Err(_) => {
                    refused(Why::Instrumenting, "the instrumented PTX holds a NUL byte".into());
                    None
                }
            },
            Err(e) => {
                refused(Why::Instrumenting, e.to_string());
                None
            }
        }
    }

    /// Counts the driver's answer to a load of instrumented PTX: loaded, or refused (the caller
    /// then loads the original image).
    pub(crate) fn loaded(&self, result: CuResult) {
        launch_tags::loaded(result);
        if result == 0 {
            INSTRUMENTED.fetch_add(1, Ordering::Relaxed);
        } else {
            refused(Why::Driver, format!("CUresult {result} for the instrumented PTX"));
        }
    }
}

/// Before a stream capture begins: the maps' parts made in the current context, so that a module
/// loaded during the capture (the runtime's lazy loading of a kernel's module at its first
/// launch, captured) finds them; they cannot be made during it.
pub(crate) fn before_capture() {
    if let Some(user) = crate::defaults::user().filter(|u| u.on_device())
        && let Err(reason) = parts::addresses(&user.maps, &user.on_device)
        && crate::log_enabled("modules")
    {
        eprintln!("egpu: before a capture: {reason}");
    }
}

/// With `EGPU_LOG=modules`: writes a module's PTX, and its instrumented form, to files in the
/// temporary directory, and says where.
fn dump(original: &str, instrumented: Option<&str>) {
    static MODULES: AtomicU64 = AtomicU64::new(0);
    let n = MODULES.fetch_add(1, Ordering::Relaxed);
    let base = std::env::temp_dir().join(format!("egpu-{}-module-{n}", std::process::id()));
    let original_path = base.with_extension("ptx");
    let _ = std::fs::write(&original_path, original);
    let mut said = format!("egpu: module {n}: {}", original_path.display());
    if let Some(text) = instrumented {
        let path = base.with_extension("probed.ptx");
        let _ = std::fs::write(&path, text);
        said.push_str(&format!(", instrumented: {}", path.display()));
    }
    eprintln!("{said}");
}

/// Creates map `name` of process `pid`.
fn create(
    pid: u32,
    name: &str,
    geometry: egpu::maps::layout::Geometry,
    shared: bool,
) -> Option<RawMap> {
    if shared {
        let object = builtin::user_map_name(pid, name);
        let _ = egpu::maps::unlink_shared(&object);
        if let Ok(raw) = RawMap::create(geometry, &Placement::Shared(object.into())) {
            return Some(raw);
        }
    }
    RawMap::create(geometry, &Placement::Process).ok()
}

/// The summary's lines for the user's probes: modules instrumented and not (with why), and
/// what their maps hold.
pub(crate) fn summary(user: &UserProbes, names: &builtin::Builtin) -> String {
    let mut text = format!(
        "modules instrumented: {}, not instrumentable: {}",
        INSTRUMENTED.load(Ordering::Relaxed),
        NOT_INSTRUMENTABLE.load(Ordering::Relaxed)
    );
    let kinds = KINDS.lock().unwrap_or_else(|p| p.into_inner()).clone();
    if !kinds.is_empty() {
        let each: Vec<String> = kinds.iter().map(|(w, n)| format!("{}: {n}", w.name())).collect();
        text.push_str(&format!(" ({})", each.join(", ")));
    }
    text.push('\n');
    for (why, detail) in DETAILS.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        text.push_str(&format!("not instrumentable: {}: {detail}\n", why.name()));
    }
    if user.on_device() {
        text.push_str(&uninstrumented_line(names));
    }
    text.push_str(&format!(
        "observed {} of {} global memory instructions\n",
        OBSERVED.load(Ordering::Relaxed),
        MEMORY_INSTRUCTIONS.load(Ordering::Relaxed)
    ));
    for (opcode, why, n) in UNOBSERVED.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        text.push_str(&format!("not observed: {n} `{opcode}`: {why}\n"));
    }
    text.push_str(&parts::summary());
    text.push_str(&boxes::summary());
    // Each device's own values after the map's, for a map on two devices or more.
    text.push_str(&names.render_maps_on(&user.maps, &parts::own_maps()));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `counts`' maps (1,024 kernels, values of 48, 32 and 16 bytes) get a copy per SM;
    /// `pages`' map (16,384 pages) the fewest; a small one 128; none more than 16 MiB of copies
    /// unless at the floor.
    #[test]
    fn default_copies_by_the_bytes_of_a_map_s_slots() {
        let hash = |capacity: u32, value: u32| {
            Geometry::new(MapKind::Hash, 8, value, capacity, 1, 0).expect("a geometry")
        };
        for value in [48, 32, 16] {
            assert_eq!(default_copies(&hash(1024, value)), 128, "{value}-byte values");
        }
        let pages = Geometry::new(MapKind::Hash, 16, 8, 1 << 14, 1, 0).expect("a geometry");
        assert_eq!(default_copies(&pages), 16);
        assert_eq!(default_copies(&hash(8, 8)), 128);
        let between = hash(8192, 8);
        let n = default_copies(&between);
        assert!(n.is_power_of_two() && (16..=128).contains(&n), "{n}");
        let bytes = u64::from(between.slots) * u64::from(between.slot_stride) * u64::from(n);
        assert!(bytes <= COPIES_BYTES, "{bytes}");
    }
}
