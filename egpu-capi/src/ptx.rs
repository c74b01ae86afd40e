//! Instrumenting a PTX module: device probes translated to PTX and spliced into its kernels at
//! their attach points, with each map bound to its device address and layout. Text in, text
//! out: no driver and no GPU here (the caller loads the PTX and copies the maps).

use std::ffi::{CString, c_char};

use egpu_ebpf::{DeviceEvent, MapKind};
use egpu_maps::layout::Geometry;
use egpu_ptx::inject::{DeviceProbe, Injection, Kernels, inject};
use egpu_ptx::ptx::PtxModule;
use egpu_ptx::translate::DeviceMap;

use crate::error::{
    EGPU_BAD_SIZE, EGPU_NOT_FOUND, EGPU_NULL_ARGUMENT, EGPU_PTX, Failure, Result, egpu_status,
    fail, guard,
};
use crate::ffi::{self, Kind};
use crate::maps::map_failure;
use crate::program::{ProgramHandle, egpu_program};

/// An instrumented module: its PTX and its sites. Made by `egpu_ptx_instrument`, freed by
/// `egpu_ptx_result_free`; immutable, usable from any thread.
#[derive(Debug)]
pub struct egpu_ptx_result {
    _opaque: [u8; 0],
}

/// The device events (`egpu_ptx_site::event`).
#[repr(u32)]
#[derive(Clone, Copy, Debug)]
pub enum egpu_device_event {
    /// Each thread entering a kernel.
    EGPU_DEVICE_KERNEL_ENTRY = 0,
    /// Each thread leaving a kernel.
    EGPU_DEVICE_KERNEL_EXIT = 1,
    /// Each read of global memory.
    EGPU_DEVICE_GLOBAL_LOAD = 2,
    /// Each write of global memory.
    EGPU_DEVICE_GLOBAL_STORE = 3,
    /// Each atomic on global memory.
    EGPU_DEVICE_GLOBAL_ATOMIC = 4,
}

/// Where one map of a device probe's table lives on the GPU, and its layout there.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct egpu_device_map {
    /// `sizeof(egpu_device_map)`; every element of an array of them has the same.
    pub size: usize,
    /// The device address of the map's first byte.
    pub address: u64,
    /// Its kind: an `egpu_map_kind`.
    pub kind: u32,
    /// Key size in bytes.
    pub key_size: u32,
    /// Value (record) size in bytes.
    pub value_size: u32,
    /// Entries per shard, or a ring's records.
    pub capacity: u32,
    /// Host shards of its layout.
    pub cpu_shards: u32,
    /// Device (SM) shards of its layout.
    pub sm_shards: u32,
    /// 1 when the map is pinned host memory mapped into the GPU that the host reads while
    /// kernels run (system-scope atomics), else 0.
    pub live: u32,
}

// SAFETY: `#[repr(C)]`, starts with its size; the kind is checked where read.
unsafe impl ffi::SizedStruct for egpu_device_map {
    const NAME: &'static str = "egpu_device_map";
}

/// A device probe to inject: a program attached to a device event, and its maps.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct egpu_device_probe {
    /// `sizeof(egpu_device_probe)`; every element of an array of them has the same.
    pub size: usize,
    /// The program (`device::…`), verified first if it was not.
    pub program: *const egpu_program,
    /// Its map table's places on the GPU, `map_count` of them (the table's length).
    pub maps: *const egpu_device_map,
    /// The number of `maps`.
    pub map_count: usize,
}

// SAFETY: `#[repr(C)]`, starts with its size; pointers are checked where read.
unsafe impl ffi::SizedStruct for egpu_device_probe {
    const NAME: &'static str = "egpu_device_probe";
}

/// What to instrument.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct egpu_ptx_request {
    /// `sizeof(egpu_ptx_request)`.
    pub size: usize,
    /// The module's PTX text, NUL-terminated.
    pub ptx: *const c_char,
    /// The probes, `probe_count` of them.
    pub probes: *const egpu_device_probe,
    /// The number of `probes`.
    pub probe_count: usize,
    /// The kernels to instrument, by mangled name (`kernel_count` of them); null and 0: all.
    pub kernels: *const *const c_char,
    /// The number of `kernels`.
    pub kernel_count: usize,
}

// SAFETY: `#[repr(C)]`, starts with its size; pointers are checked where read.
unsafe impl ffi::SizedStruct for egpu_ptx_request {
    const NAME: &'static str = "egpu_ptx_request";
}

/// Reads an array of `count` structs of a sized family, each as long as the first says.
///
/// # Safety
/// `ptr` is null or valid for `count` elements of the size the first one's `size` says.
unsafe fn read_array<T: ffi::SizedStruct>(
    ptr: *const T,
    count: usize,
    what: &str,
) -> Result<Vec<T>> {
    if count == 0 {
        return Ok(Vec::new());
    }
    if ptr.is_null() {
        return fail(EGPU_NULL_ARGUMENT, format!("`{what}` is null with a count of {count}"));
    }
    if count > (1 << 16) {
        return fail(EGPU_BAD_SIZE, format!("`{what}`'s count {count} is not a count"));
    }
    // SAFETY: the caller's promise: the first element is there. Its size, checked by `read`,
    // is every element's stride.
    unsafe { ffi::read(ptr, &format!("{what}[0]")) }?;
    // SAFETY: as above.
    let stride = unsafe { ptr.cast::<usize>().read_unaligned() };
    (0..count)
        .map(|i| {
            // SAFETY: element `i` lies `i × stride` bytes on (the caller's promise).
            let element = unsafe { ptr.cast::<u8>().add(i * stride).cast::<T>() };
            // SAFETY: as above.
            let size = unsafe { element.cast::<usize>().read_unaligned() };
            if size != stride {
                return fail(
                    EGPU_BAD_SIZE,
                    format!("`{what}[{i}].size` is {size}; `{what}[0].size` is {stride}"),
                );
            }
            // SAFETY: as above.
            unsafe { ffi::read(element, &format!("{what}[{i}]")) }
        })
        .collect()
}

struct Site {
    function: CString,
    line: usize,
    event: u32,
    bytes: u32,
    class: u32,
    index: u32,
}

pub(crate) struct PtxResult {
    ptx: CString,
    sites: Vec<Site>,
    memory_instructions: usize,
    observed: usize,
    unobserved: usize,
}

impl Kind for PtxResult {
    type Opaque = egpu_ptx_result;
    const NAME: &'static str = "egpu_ptx_result";
    const MAGIC: u64 = ffi::KINDS[5].0;
}

fn device_event(e: DeviceEvent) -> u32 {
    match e {
        DeviceEvent::KernelEntry => 0,
        DeviceEvent::KernelExit => 1,
        DeviceEvent::GlobalLoad => 2,
        DeviceEvent::GlobalStore => 3,
        DeviceEvent::GlobalAtomic => 4,
    }
}

fn binding(m: &egpu_device_map, what: &str) -> Result<DeviceMap> {
    let Some(kind) = MapKind::from_linux(m.kind) else {
        return fail(
            crate::error::EGPU_BAD_ARGUMENT,
            format!("{what}.kind {} is no egpu_map_kind", m.kind),
        );
    };
    let geometry =
        Geometry::new(kind, m.key_size, m.value_size, m.capacity, m.cpu_shards, m.sm_shards)
            .map_err(map_failure)?;
    Ok(DeviceMap { addr: m.address, geometry, live: m.live != 0, spread: 0, drained: false })
}

/// Instruments the module `request->ptx` with the probes of `request` (each a device program
/// with its maps' device addresses and layouts) in the kernels it names (all when none): the
/// instrumented PTX and the table of sites through `out`. A probe the GPU cannot run, PTX egpu
/// cannot read or a 32-bit module is `EGPU_PTX` with why; a kernel named that the module lacks
/// `EGPU_NOT_FOUND`; a program refused by the verifier `EGPU_VERIFY`.
///
/// # Safety
/// `request` is null or a valid request whose pointers are valid for their counts (each
/// program a live program handle); `out` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_ptx_instrument(
    request: *const egpu_ptx_request,
    out: *mut *mut egpu_ptx_result,
) -> egpu_status {
    guard(|| {
        // SAFETY: the caller's promises, for the request and what it points at.
        let r = unsafe { ffi::read(request, "request") }?;
        // SAFETY: as above.
        let ptx = unsafe { ffi::text(r.ptx, "request->ptx") }?;
        // SAFETY: as above.
        let probes = unsafe { read_array(r.probes, r.probe_count, "request->probes") }?;
        let mut kernels = Vec::new();
        if r.kernel_count > 0 {
            if r.kernels.is_null() {
                return fail(EGPU_NULL_ARGUMENT, "`request->kernels` is null with a count");
            }
            for i in 0..r.kernel_count {
                // SAFETY: `kernel_count` pointers (the caller's promise), each a C string.
                let k = unsafe { ffi::text(*r.kernels.add(i), &format!("request->kernels[{i}]")) }?;
                kernels.push(k);
            }
        }
        if out.is_null() {
            return fail(EGPU_NULL_ARGUMENT, "`out` is null");
        }
        let mut loaded = Vec::new();
        for (i, probe) in probes.iter().enumerate() {
            let what = format!("request->probes[{i}]");
            // SAFETY: the caller's promise.
            let p =
                unsafe { ffi::handle::<ProgramHandle>(probe.program, &format!("{what}.program")) }?;
            // SAFETY: the caller's promise.
            let maps = unsafe { read_array(probe.maps, probe.map_count, &format!("{what}.maps")) }?;
            let table = p.program().maps().len();
            if maps.len() != table {
                return fail(
                    crate::error::EGPU_BAD_ARGUMENT,
                    format!("{what}: its map table has {table} maps; {} were given", maps.len()),
                );
            }
            let bindings = maps
                .iter()
                .enumerate()
                .map(|(m, d)| binding(d, &format!("{what}.maps[{m}]")))
                .collect::<Result<Vec<_>>>()?;
            loaded.push((p.verified()?, bindings));
        }
        let selection = if kernels.is_empty() { Kernels::All } else { Kernels::Named(&kernels) };
        let device: Vec<DeviceProbe<'_>> = loaded
            .iter()
            .map(|(v, maps)| DeviceProbe { program: v, kernels: selection, maps })
            .collect();
        let injected = inject(ptx, &device).map_err(|e| Failure::new(EGPU_PTX, e.to_string()))?;
        let module = PtxModule::parse(ptx).map_err(|e| Failure::new(EGPU_PTX, e.to_string()))?;
        let names: Vec<&str> = module.entries().map(|f| f.name.as_str()).collect();
        if let Some(missing) = kernels.iter().find(|k| !names.contains(k)) {
            return fail(
                EGPU_NOT_FOUND,
                format!("the module has no kernel `{missing}` (its kernels: {names:?})"),
            );
        }
        let result = result(injected);
        // SAFETY: checked not null; the caller's promise that it is writable.
        unsafe { ffi::put(out, ffi::new_handle(result), "out") }
    })
}

fn result(i: Injection) -> PtxResult {
    let c = |s: &str| CString::new(s.replace('\0', " ")).unwrap_or_default();
    PtxResult {
        ptx: c(&i.ptx),
        sites: i
            .sites
            .iter()
            .map(|s| Site {
                function: c(&s.function),
                line: s.line,
                event: device_event(s.event),
                bytes: s.size,
                class: s.class,
                index: s.index,
            })
            .collect(),
        memory_instructions: i.memory_instructions,
        observed: i.observed,
        unobserved: i.unobserved.len(),
    }
}

/// The instrumented PTX, NUL-terminated (belongs to the result); null for a null or bad
/// handle (with the thread's last error).
///
/// # Safety
/// `result` is null or a live result handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_ptx_result_text(result: *const egpu_ptx_result) -> *const c_char {
    crate::error::guard_value(std::ptr::null(), || {
        // SAFETY: the caller's promise.
        Ok(unsafe { ffi::handle::<PtxResult>(result, "result") }?.ptx.as_ptr())
    })
}

/// What an instrumentation covered.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct egpu_ptx_summary {
    /// `sizeof(egpu_ptx_summary)`, set by the caller.
    pub size: usize,
    /// The sites: places a probe was injected (`egpu_ptx_result_site`).
    pub sites: usize,
    /// The module's global memory instructions.
    pub memory_instructions: usize,
    /// Those that fire an attach point.
    pub observed: usize,
    /// Those that do not (texture, surface, multimem, `wmma`, …).
    pub unobserved: usize,
}

// SAFETY: `#[repr(C)]`, starts with its size; written, never read.
unsafe impl ffi::SizedStruct for egpu_ptx_summary {
    const NAME: &'static str = "egpu_ptx_summary";
}

/// Summarises the instrumentation into `summary`, whose `size` the caller sets.
///
/// # Safety
/// `result` is null or a live result handle; `summary` is null or valid for `summary->size`
/// bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_ptx_result_summary(
    result: *const egpu_ptx_result,
    summary: *mut egpu_ptx_summary,
) -> egpu_status {
    guard(|| {
        // SAFETY: the caller's promise.
        let r = unsafe { ffi::handle::<PtxResult>(result, "result") }?;
        let value = egpu_ptx_summary {
            size: 0,
            sites: r.sites.len(),
            memory_instructions: r.memory_instructions,
            observed: r.observed,
            unobserved: r.unobserved,
        };
        // SAFETY: the caller's promise.
        unsafe { ffi::write(summary, value, "summary") }
    })
}

/// One site of an instrumented module.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct egpu_ptx_site {
    /// `sizeof(egpu_ptx_site)`, set by the caller.
    pub size: usize,
    /// The kernel or device function (belongs to the result).
    pub function: *const c_char,
    /// The line of the original instruction in the module given (of the body's `{` for kernel
    /// entry), from 1.
    pub line: usize,
    /// The attach point: an `egpu_device_event`.
    pub event: u32,
    /// Bytes the access moves when known when instrumenting, else 0.
    pub bytes: u32,
    /// The access's class (`MemAccessCtx::class`: 0 loads and stores, 1 atomics, 2 `cp.async`,
    /// 3 bulk copies, 4 tensor copies, 5 tensor map writes).
    pub class: u32,
    /// The access's index among its function's observed accesses (the context's `site`).
    pub index: u32,
}

// SAFETY: `#[repr(C)]`, starts with its size; written, never read.
unsafe impl ffi::SizedStruct for egpu_ptx_site {
    const NAME: &'static str = "egpu_ptx_site";
}

/// Describes site `index` into `site` (whose `size` the caller sets); `EGPU_NOT_FOUND` past
/// the last.
///
/// # Safety
/// `result` is null or a live result handle; `site` is null or valid for `site->size` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_ptx_result_site(
    result: *const egpu_ptx_result,
    index: usize,
    site: *mut egpu_ptx_site,
) -> egpu_status {
    guard(|| {
        // SAFETY: the caller's promise.
        let r = unsafe { ffi::handle::<PtxResult>(result, "result") }?;
        let Some(s) = r.sites.get(index) else {
            return fail(EGPU_NOT_FOUND, format!("{} sites, no {index}", r.sites.len()));
        };
        let value = egpu_ptx_site {
            size: 0,
            function: s.function.as_ptr(),
            line: s.line,
            event: s.event,
            bytes: s.bytes,
            class: s.class,
            index: s.index,
        };
        // SAFETY: the caller's promise.
        unsafe { ffi::write(site, value, "site") }
    })
}

/// Frees a result (null: nothing).
///
/// # Safety
/// `result` is null or a live result handle, not used after.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_ptx_result_free(result: *mut egpu_ptx_result) {
    // SAFETY: the caller's promise.
    guard(|| unsafe { ffi::free_handle::<PtxResult>(result, "result") });
}
