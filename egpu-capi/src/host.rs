//! Host events in process: a probe set that programs attach to, and that the caller fires with
//! the context of each event it sees.

use std::sync::Mutex;

use bytemuck::Pod;
use egpu_ebpf::{
    AllocCtx, AttachPoint, HostEvent, LaunchCtx, MemcpyCtx, ModuleLoadCtx, Phase, SyncCtx,
    context_tag,
};
use egpu_host::{AttachError, HostContext, HostProbes, ProbeId};
use egpu_maps::RawMap;

use crate::error::{
    EGPU_BAD_ARGUMENT, EGPU_BAD_SIZE, EGPU_LOAD, EGPU_NOT_FOUND, EGPU_NULL_ARGUMENT, Failure,
    Result, egpu_status, fail, guard,
};
use crate::ffi::{self, Kind};
use crate::maps::{MapHandle, egpu_map};
use crate::program::{ProgramHandle, egpu_program};

/// A set of probes on host events, which the caller fires (`egpu_probes_fire`) with each
/// event's context. Attaching, detaching and firing are safe from any thread at once: each
/// thread that fires runs the probes itself, in VMs of its own, loaded from the same verified
/// programs, on the same maps.
#[derive(Debug)]
pub struct egpu_probes {
    _opaque: [u8; 0],
}

/// The host events (CUDA API calls), numbered as the contexts' tag words number them.
#[repr(u32)]
#[derive(Clone, Copy, Debug)]
pub enum egpu_host_event {
    /// A kernel launch: `struct egpu_launch_ctx` (egpu.h).
    EGPU_EVENT_LAUNCH = 1,
    /// A memory copy or set: `struct egpu_memcpy_ctx`.
    EGPU_EVENT_MEMCPY = 2,
    /// An allocation or free: `struct egpu_alloc_ctx`.
    EGPU_EVENT_ALLOC = 3,
    /// A synchronisation: `struct egpu_sync_ctx`.
    EGPU_EVENT_SYNC = 4,
    /// A module load: `struct egpu_module_load_ctx`.
    EGPU_EVENT_MODULE_LOAD = 5,
}

/// Before or after the call.
#[repr(u32)]
#[derive(Clone, Copy, Debug)]
pub enum egpu_phase {
    /// Before the call (`host::launch`, `host::launch::enter`).
    EGPU_PHASE_ENTER = 0,
    /// After it (`host::launch::exit`).
    EGPU_PHASE_EXIT = 1,
}

pub(crate) struct ProbesHandle {
    set: HostProbes,
    /// The ids handed out, with the set's.
    attached: Mutex<(u64, Vec<(u64, ProbeId)>)>,
}

impl Kind for ProbesHandle {
    type Opaque = egpu_probes;
    const NAME: &'static str = "egpu_probes";
    const MAGIC: u64 = ffi::KINDS[4].0;
}

pub(crate) fn event(number: u32) -> Result<HostEvent> {
    Ok(match number {
        1 => HostEvent::Launch,
        2 => HostEvent::Memcpy,
        3 => HostEvent::Alloc,
        4 => HostEvent::Sync,
        5 => HostEvent::ModuleLoad,
        n => {
            return fail(
                EGPU_BAD_ARGUMENT,
                format!("event {n} is none of 1 to 5 (egpu_host_event)"),
            );
        }
    })
}

pub(crate) fn phase(number: u32) -> Result<Phase> {
    match number {
        0 => Ok(Phase::Enter),
        1 => Ok(Phase::Exit),
        n => fail(EGPU_BAD_ARGUMENT, format!("phase {n} is neither 0 (enter) nor 1 (exit)")),
    }
}

/// Checks that `maps` fit the table of `program`, a host program, and gives their maps.
pub(crate) fn host_maps(p: &ProgramHandle, maps: &[&MapHandle]) -> Result<Vec<RawMap>> {
    let attach = p.program().attach_point();
    if !matches!(attach, AttachPoint::Host(..)) {
        return fail(EGPU_LOAD, format!("{}: {attach} is not a host attach point", p.name()));
    }
    let table = p.program().maps().len();
    if maps.len() != table {
        return fail(
            EGPU_LOAD,
            format!("{}: its map table has {table} maps; {} were given", p.name(), maps.len()),
        );
    }
    Ok(maps.iter().map(|m| m.raw().clone()).collect())
}

/// Makes an empty probe set.
///
/// # Safety
/// `out` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_probes_new(out: *mut *mut egpu_probes) -> egpu_status {
    guard(|| {
        if out.is_null() {
            return fail(EGPU_NULL_ARGUMENT, "`out` is null");
        }
        let handle = ProbesHandle { set: HostProbes::new(), attached: Mutex::new((1, Vec::new())) };
        // SAFETY: checked not null; the caller's promise that it is writable.
        unsafe { ffi::put(out, ffi::new_handle(handle), "out") }
    })
}

/// Attaches `program` (a host program: `host::EVENT` or `host::EVENT::exit`), verified first
/// if it was not, with entry `n` of its map table bound to `maps[n]` (`map_count` is the
/// table's length); the attachment's id (not 0) through `id`. It is loaded on the CPU now, so a
/// program the CPU cannot run is refused here (`EGPU_LOAD`), not when an event comes.
///
/// # Safety
/// `probes` and `program` are null or live handles; `maps` is null or valid for `map_count`
/// pointers, each null or a live map handle; `id` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_probes_attach(
    probes: *const egpu_probes,
    program: *const egpu_program,
    maps: *const *const egpu_map,
    map_count: usize,
    id: *mut u64,
) -> egpu_status {
    guard(|| {
        // SAFETY: the caller's promises.
        let (s, p, bound) = unsafe {
            (
                ffi::handle::<ProbesHandle>(probes, "probes")?,
                ffi::handle::<ProgramHandle>(program, "program")?,
                ffi::handles::<MapHandle>(maps, map_count, "maps")?,
            )
        };
        if id.is_null() {
            return fail(EGPU_NULL_ARGUMENT, "`id` is null");
        }
        let raw = host_maps(p, &bound)?;
        let verified = p.verified()?;
        let probe = s.set.attach(&verified, &raw).map_err(|e| {
            let e = match e {
                AttachError::Load(e) => e.to_string(),
                e => e.to_string(),
            };
            Failure::new(EGPU_LOAD, format!("{}: {e}", p.name()))
        })?;
        let mut attached = s.attached.lock().unwrap_or_else(|p| p.into_inner());
        let ours = attached.0;
        attached.0 += 1;
        attached.1.push((ours, probe));
        // SAFETY: checked not null; the caller's promise that it is writable.
        unsafe { ffi::put(id, ours, "id") }
    })
}

/// Detaches attachment `id`: events fired after this returns do not run it. `EGPU_NOT_FOUND`
/// when it is not attached.
///
/// # Safety
/// `probes` is null or a live probe set.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_probes_detach(probes: *const egpu_probes, id: u64) -> egpu_status {
    guard(|| {
        // SAFETY: the caller's promise.
        let s = unsafe { ffi::handle::<ProbesHandle>(probes, "probes") }?;
        let mut attached = s.attached.lock().unwrap_or_else(|p| p.into_inner());
        let Some(at) = attached.1.iter().position(|(ours, _)| *ours == id) else {
            return fail(EGPU_NOT_FOUND, format!("no attachment {id}"));
        };
        let (_, probe) = attached.1.remove(at);
        s.set.detach(probe);
        Ok(())
    })
}

/// Reads a context of type `C` from `bytes` (its exact size), fills a zero tag word, and
/// refuses a tag of another event or revision.
fn context<C: HostContext>(bytes: &[u8], tag: impl Fn(&mut C) -> &mut u32) -> Result<C> {
    let expected = size_of::<C>();
    if bytes.len() != expected {
        return fail(
            EGPU_BAD_SIZE,
            format!(
                "the {:?} context is {expected} bytes in this egpu; {} were given",
                C::EVENT,
                bytes.len()
            ),
        );
    }
    let mut ctx: C = bytemuck::pod_read_unaligned(bytes);
    let want = context_tag(C::EVENT);
    match *tag(&mut ctx) {
        0 => *tag(&mut ctx) = want,
        t if t == want => {}
        t => {
            return fail(
                EGPU_BAD_ARGUMENT,
                format!("the context's tag is {t:#x}; a {:?} context's is {want:#x}", C::EVENT),
            );
        }
    }
    Ok(ctx)
}

fn fire_as<C: HostContext + Pod>(
    set: &HostProbes,
    phase: Phase,
    bytes: &[u8],
    tag: impl Fn(&mut C) -> &mut u32,
) -> Result<()> {
    let mut ctx = context::<C>(bytes, tag)?;
    set.fire(phase, &mut ctx);
    Ok(())
}

/// Runs every probe attached to `event` (an `egpu_host_event`) at `phase` (an `egpu_phase`), on
/// this thread, now, with the `ctx_length` bytes at `ctx` as the context: the event's struct of
/// egpu.h (`struct egpu_launch_ctx` for a launch), whose size `ctx_length` must be
/// (`EGPU_BAD_SIZE` otherwise). A zero `tag` word is filled in; a tag of another event is
/// `EGPU_BAD_ARGUMENT`. Probes do not write host contexts. A probe that faults is counted
/// (`egpu_probes_get_health`), not reported: the event goes on.
///
/// # Safety
/// `probes` is null or a live probe set; `ctx` is null or valid for `ctx_length` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_probes_fire(
    probes: *const egpu_probes,
    event: u32,
    phase: u32,
    ctx: *const u8,
    ctx_length: usize,
) -> egpu_status {
    guard(|| {
        // SAFETY: the caller's promises.
        let (s, bytes) = unsafe {
            (ffi::handle::<ProbesHandle>(probes, "probes")?, ffi::bytes(ctx, ctx_length, "ctx")?)
        };
        let (event, phase) = (self::event(event)?, self::phase(phase)?);
        if bytes.is_empty() {
            return fail(EGPU_NULL_ARGUMENT, "`ctx` is null or empty");
        }
        match event {
            HostEvent::Launch => fire_as::<LaunchCtx>(&s.set, phase, bytes, |c| &mut c.tag),
            HostEvent::Memcpy => fire_as::<MemcpyCtx>(&s.set, phase, bytes, |c| &mut c.tag),
            HostEvent::Alloc => fire_as::<AllocCtx>(&s.set, phase, bytes, |c| &mut c.tag),
            HostEvent::Sync => fire_as::<SyncCtx>(&s.set, phase, bytes, |c| &mut c.tag),
            HostEvent::ModuleLoad => fire_as::<ModuleLoadCtx>(&s.set, phase, bytes, |c| &mut c.tag),
        }
    })
}

/// The size of `event`'s context in this egpu (0 for a number that is no event): what
/// `egpu_probes_fire` takes as `ctx_length`.
#[unsafe(no_mangle)]
pub extern "C" fn egpu_context_size(event: u32) -> usize {
    crate::error::guard_value(0, || {
        let event = self::event(event)?;
        Ok(AttachPoint::Host(event, Phase::Enter).context_size())
    })
}

/// The tag word of `event`'s context (`0xEC`, the context revision, the event), as
/// `egpu_probes_fire` fills a zero one in; 0 for a number that is no event.
#[unsafe(no_mangle)]
pub extern "C" fn egpu_context_tag(event: u32) -> u32 {
    crate::error::guard_value(0, || Ok(context_tag(self::event(event)?)))
}

/// What a probe set's probes have done.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct egpu_probes_health {
    /// `sizeof(egpu_probes_health)`, set by the caller.
    pub size: usize,
    /// Probe runs that completed.
    pub runs: u64,
    /// Probe runs that faulted (the event went on).
    pub faults: u64,
    /// Programs refused at attach.
    pub rejected: u64,
}

// SAFETY: `#[repr(C)]`, starts with its size; written, never read.
unsafe impl ffi::SizedStruct for egpu_probes_health {
    const NAME: &'static str = "egpu_probes_health";
}

/// What the set's probes have done so far, into `health` (whose `size` the caller sets).
///
/// # Safety
/// `probes` is null or a live probe set; `health` is null or valid for `health->size` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_probes_get_health(
    probes: *const egpu_probes,
    health: *mut egpu_probes_health,
) -> egpu_status {
    guard(|| {
        // SAFETY: the caller's promise.
        let s = unsafe { ffi::handle::<ProbesHandle>(probes, "probes") }?;
        let h = s.set.health();
        let value =
            egpu_probes_health { size: 0, runs: h.runs, faults: h.faults, rejected: h.rejected };
        // SAFETY: the caller's promise.
        unsafe { ffi::write(health, value, "health") }
    })
}

/// Frees a probe set (null: nothing), detaching its probes. No thread may be firing it.
///
/// # Safety
/// `probes` is null or a live probe set, not used after.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_probes_free(probes: *mut egpu_probes) {
    // SAFETY: the caller's promise.
    guard(|| unsafe { ffi::free_handle::<ProbesHandle>(probes, "probes") });
}
