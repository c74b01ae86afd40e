//! The device of the current CUDA context, for the `device` field of every host context: asked
//! of the driver (`cuCtxGetDevice`) once per context and kept in a small lock-free table keyed
//! by the context's handle, so that a launch pays two driver-free loads for it after the first
//! (plus `cuCtxGetCurrent`, a thread-local read in the driver). It is filled only when the
//! probes read the word that holds it ([`fill`]); a context destroyed is forgotten
//! ([`forget`]), since the driver may give its handle to a context on another device.
//!
//! Beside it, each device the program uses ([`used`]: a primary context retained, a context
//! made, a context's device asked) is labelled once with what the driver says of it, its UUID
//! (`cuDeviceGetUuid_v2`, else `cuDeviceGetUuid`) and name (`cuDeviceGetName`), kept here for
//! `egpu mem`'s recording and written to the built-in `devices` map, which the summary,
//! `egpu maps` and the metrics read ([`egpu::host::builtin::DeviceLabel`]).

use std::ffi::{c_char, c_int};
use std::mem::offset_of;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use egpu::ebpf::MemcpyCtx;
use egpu::host::builtin::Builtin;

use super::event::Event;
use crate::real::Hook;
use crate::{CuResult, Handle};

/// How many contexts the table keeps; a program with more asks the driver for the others on
/// every event (correct, only slower).
const SLOTS: usize = 32;

/// A slot's context handle (0: free) and its device + 1 (0: not written yet).
struct Slot {
    context: AtomicUsize,
    device: AtomicUsize,
}

static TABLE: [Slot; SLOTS] =
    [const { Slot { context: AtomicUsize::new(0), device: AtomicUsize::new(0) } }; SLOTS];

/// Fills `ctx.device` with the current context's device when the probes read its word (`words`,
/// [`egpu::host::HostProbes::context_words`]).
#[inline(always)]
pub(super) fn fill<C: Event>(ctx: &mut C, words: u16) {
    if words & (1 << (C::DEVICE / 8)) != 0 {
        *ctx.device() = current_device();
    }
}

/// The current context's device: 0 when there is no current context or the driver does not
/// say (a program that never made one runs on device 0).
#[cold]
#[inline(never)]
fn current_device() -> u32 {
    current().unwrap_or(0)
}

/// The current context's device, from the table (asked of the driver the first time): `None`
/// when there is no current context or the driver does not say.
pub(crate) fn current() -> Option<u32> {
    let context = crate::device::current_context()?;
    device_of(context as usize, ask)
}

/// The device of `context` from the table, else from `ask` (then kept, where a slot is free, and
/// the device labelled: [`used`]); `None` when `ask` does not say.
fn device_of(context: usize, ask: impl FnOnce() -> Option<u32>) -> Option<u32> {
    for slot in &TABLE {
        match slot.context.load(Ordering::Acquire) {
            c if c == context => match slot.device.load(Ordering::Acquire) {
                0 => break, // being written: ask, as if it were not there
                d => return Some((d - 1) as u32),
            },
            0 => break, // slots are taken in order: the rest are free
            _ => {}
        }
    }
    let device = ask()?;
    used(device as c_int);
    for slot in &TABLE {
        let taken = slot.context.compare_exchange(0, context, Ordering::AcqRel, Ordering::Acquire);
        match taken {
            Ok(_) => {
                slot.device.store(device as usize + 1, Ordering::Release);
                break;
            }
            Err(c) if c == context => break, // another thread keeps it
            Err(_) => {}
        }
    }
    Some(device)
}

/// A copy between devices, `ctx`, with its source's and destination's devices (`devices`:
/// source, destination) when the probes read their word.
pub(super) fn peer(
    mut ctx: MemcpyCtx,
    words: u16,
    devices: impl FnOnce() -> (u32, u32),
) -> MemcpyCtx {
    if words & (1 << (offset_of!(MemcpyCtx, src_device) / 8)) != 0 {
        (ctx.src_device, ctx.dst_device) = devices();
    }
    ctx
}

/// The device of `context`, a handle the program passed (current or not): from the table, else
/// asked of the driver with `context` pushed for the question; 0 when the driver does not say.
pub(super) fn of_context(context: Handle) -> u32 {
    if context.is_null() {
        return 0;
    }
    let device = device_of(context as usize, || {
        let push = crate::device::CTX_PUSH.get_or_ask()?;
        let pop = crate::device::CTX_POP.get_or_ask()?;
        // SAFETY: the driver's functions; the context pushed is popped again.
        if unsafe { push(context) } != 0 {
            return None;
        }
        let device = ask();
        let mut popped: Handle = std::ptr::null_mut();
        // SAFETY: as above; the driver writes one handle.
        unsafe { pop(&mut popped) };
        device
    });
    device.unwrap_or(0)
}

/// The current context's device, asked of the driver.
fn ask() -> Option<u32> {
    let get = crate::device::CTX_GET_DEVICE.get_or_ask()?;
    let mut device: c_int = -1;
    // SAFETY: the driver writes one device.
    let asked = unsafe { get(&mut device) };
    (asked == 0 && device >= 0).then_some(device as u32)
}

/// What a `cuCtxDestroy` of `context` takes down; `context` forgotten first.
pub(super) fn destroyed(context: Handle) -> crate::device::Teardown {
    forget(context);
    crate::device::Teardown::Context(context)
}

/// Forgets `context` (destroyed): its slot keeps the handle no longer, so that a context made
/// later with the same handle is asked about afresh. Its slot stays taken (as a tombstone, with
/// no device), which keeps the table's order: lookups pass over it.
fn forget(context: Handle) {
    for slot in &TABLE {
        if slot.context.load(Ordering::Acquire) == context as usize {
            slot.device.store(0, Ordering::Release);
            slot.context.store(usize::MAX, Ordering::Release);
        }
    }
}

type NameFn = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> CuResult;
type UuidFn = unsafe extern "C" fn(*mut [u8; 16], c_int) -> CuResult;
static DEVICE_NAME: Hook<NameFn> = Hook::new(c"cuDeviceGetName", std::ptr::null_mut);
static DEVICE_UUID_V2: Hook<UuidFn> = Hook::new(c"cuDeviceGetUuid_v2", std::ptr::null_mut);
static DEVICE_UUID: Hook<UuidFn> = Hook::new(c"cuDeviceGetUuid", std::ptr::null_mut);

/// A device the program used, labelled: its ordinal, UUID (`None`: the driver did not say) and
/// name (empty: the driver did not say).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Label {
    pub(crate) index: u32,
    pub(crate) uuid: Option<[u8; 16]>,
    pub(crate) name: String,
}

/// The devices used so far, each labelled once, in the order they were first used.
static LABELS: Mutex<Vec<Label>> = Mutex::new(Vec::new());
/// The first device used, + 1 (0: none yet); and how many have been.
static FIRST: AtomicUsize = AtomicUsize::new(0);
static USED: AtomicUsize = AtomicUsize::new(0);

fn labels() -> MutexGuard<'static, Vec<Label>> {
    LABELS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The lock on the labels, held across `fork` (the library's other locks are).
pub(crate) fn fork_guard() -> Box<dyn std::any::Any> {
    Box::new(labels())
}

/// The program used `device` (retained its primary context, made a context on it, or a
/// context's device was asked): the first time, it is labelled ([`label_of`]) and written to
/// the built-in `devices` map (when the built-in maps are set up; else [`publish`] writes it
/// when they are). A negative ordinal is none.
pub(crate) fn used(device: c_int) {
    let Ok(index) = u32::try_from(device) else { return };
    if labels().iter().any(|l| l.index == index) {
        return;
    }
    // Asked without the lock: another thread may label it meanwhile, and the first one kept.
    let label = label_of(index, device);
    {
        let mut all = labels();
        if all.iter().any(|l| l.index == index) {
            return;
        }
        all.push(label.clone());
        if FIRST
            .compare_exchange(0, index as usize + 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            super::functions::changed();
        }
        USED.store(all.len(), Ordering::Release);
    }
    crate::defaults::with_builtin(|b| b.record_device(label.index, label.uuid, &label.name));
    // A second device: the launches' device may need their callers (`functions`).
    super::functions::check();
}

/// The first device the program used, if any.
pub(crate) fn first_used() -> Option<u32> {
    FIRST.load(Ordering::Acquire).checked_sub(1).map(|d| d as u32)
}

/// How many devices the program used.
pub(crate) fn used_count() -> usize {
    USED.load(Ordering::Acquire)
}

/// Writes every device labelled so far to `builtin` (made just now: at set-up, again in a
/// fork's child).
pub(crate) fn publish(builtin: &Builtin) {
    for l in labels().iter() {
        builtin.record_device(l.index, l.uuid, &l.name);
    }
}

/// The devices labelled so far, by ordinal.
pub(crate) fn used_devices() -> Vec<Label> {
    let mut all = labels().clone();
    all.sort_by_key(|l| l.index);
    all
}

/// The label of `device` (`index`), asked of the driver now.
fn label_of(index: u32, device: c_int) -> Label {
    let mut uuid = None;
    for hook in [&DEVICE_UUID_V2, &DEVICE_UUID] {
        let Some(get) = hook.get_or_ask() else { continue };
        let mut bytes = [0u8; 16];
        // SAFETY: the driver writes one `CUuuid`, 16 bytes.
        if unsafe { get(&mut bytes, device) } == 0 {
            uuid = Some(bytes);
            break;
        }
    }
    let mut name = String::new();
    if let Some(get) = DEVICE_NAME.get_or_ask() {
        let mut buf = [0 as c_char; 256];
        // SAFETY: the driver writes at most `len` bytes, the buffer's all but its last.
        if unsafe { get(buf.as_mut_ptr(), buf.len() as c_int - 1, device) } == 0 {
            // SAFETY: NUL-terminated within the buffer: its last byte is never written.
            let s = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
            name = s.to_string_lossy().into_owned();
        }
    }
    Label { index, uuid, name }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_context_is_asked_about_once_and_forgotten_when_destroyed() {
        let asks = std::cell::Cell::new(0);
        let asks = &asks;
        let ask = |d| {
            move || {
                asks.set(asks.get() + 1);
                Some(d)
            }
        };
        let (a, b) = (0x7e57_0001_usize, 0x7e57_0002_usize);
        assert_eq!(device_of(a, ask(0)), Some(0));
        assert_eq!(device_of(b, ask(1)), Some(1));
        assert_eq!(device_of(a, ask(9)), Some(0));
        assert_eq!(device_of(b, ask(9)), Some(1));
        assert_eq!(asks.get(), 2);
        forget(b as Handle);
        assert_eq!(device_of(b, ask(3)), Some(3));
        assert_eq!(device_of(b, ask(9)), Some(3));
        assert_eq!(asks.get(), 3);
        // A context whose device the driver does not say is not kept.
        let c = 0x7e57_0003_usize;
        assert_eq!(device_of(c, || None), None);
        assert_eq!(device_of(c, ask(2)), Some(2));
        // Each device asked about is labelled once (no driver here: no UUID, no name).
        let labelled: Vec<u32> = used_devices().iter().map(|l| l.index).collect();
        assert_eq!(labelled, [0, 1, 2, 3]);
        used(-1);
        used(1);
        assert_eq!(used_devices().len(), 4);
        assert_eq!(used_devices()[1], Label { index: 1, uuid: None, name: String::new() });
    }
}
