//! The device of the current CUDA context, for the `device` field of every host context: asked
//! of the driver (`cuCtxGetDevice`) once per context and kept in a small lock-free table keyed
//! by the context's handle, so that a launch pays two driver-free loads for it after the first
//! (plus `cuCtxGetCurrent`, a thread-local read in the driver). It is filled only when the
//! probes read the word that holds it ([`fill`]); a context destroyed is forgotten
//! ([`forget`]), since the driver may give its handle to a context on another device.

use std::ffi::c_int;
use std::mem::offset_of;
use std::sync::atomic::{AtomicUsize, Ordering};

use egpu::ebpf::MemcpyCtx;

use super::event::Event;
use crate::Handle;

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
    let Some(context) = crate::device::current_context() else { return 0 };
    device_of(context as usize, ask)
}

/// The device of `context` from the table, else from `ask` (then kept, where a slot is free).
fn device_of(context: usize, ask: impl FnOnce() -> Option<u32>) -> u32 {
    for slot in &TABLE {
        match slot.context.load(Ordering::Acquire) {
            c if c == context => match slot.device.load(Ordering::Acquire) {
                0 => break, // being written: ask, as if it were not there
                d => return (d - 1) as u32,
            },
            0 => break, // slots are taken in order: the rest are free
            _ => {}
        }
    }
    let Some(device) = ask() else { return 0 };
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
    device
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
    device_of(context as usize, || {
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
    })
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
        assert_eq!(device_of(a, ask(0)), 0);
        assert_eq!(device_of(b, ask(1)), 1);
        assert_eq!(device_of(a, ask(9)), 0);
        assert_eq!(device_of(b, ask(9)), 1);
        assert_eq!(asks.get(), 2);
        forget(b as Handle);
        assert_eq!(device_of(b, ask(3)), 3);
        assert_eq!(device_of(b, ask(9)), 3);
        assert_eq!(asks.get(), 3);
    }
}
