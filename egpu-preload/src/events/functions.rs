//! Each launched function's device, for a launch's `device` found where the probes run rather
//! than on the launch's way (`egpu::host::HostProbes::resolve_launch_devices`): a launch
//! context's `device` lies past its first 64 bytes, the one queue line a launch takes when its
//! probes read nothing further, so the caller does not fill it; the probes' worker writes
//! [`launch_device`] of the launch's function there instead.
//!
//! A `CUfunction` belongs to one context, and a context to one device: the table keeps each
//! function's device from the moment the program found it (`cuModuleGetFunction`,
//! `cuKernelGetFunction`, an instrumented library's function made in a context), or, for a
//! function found otherwise, from its first launch (the current context's then, on the way that
//! names it). A `CUkernel` (`cuLibraryGetKernel`: what the CUDA runtime launches) belongs to no
//! context: launched in whichever is current, it runs on that context's device. So is a graph
//! launch, which names no function. Those are on the first device the process used, which is
//! right while it has used one device; once it has used two and launched either kind (a
//! `CUkernel` found, a stream capture begun, a graph launched), the callers fill the device
//! from then on ([`egpu::host::HostProbes::launch_devices_from_callers`]), as they do for a
//! probe that reads past it: exact, at the cost of the launch's second queue line and the
//! current context's device (issue 29).

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::Handle;

/// What the table knows of a function handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bound {
    /// A `CUfunction`, of a context on this device.
    Device(u32),
    /// A `CUkernel`: launched in any context.
    AnyContext,
}

/// Function handles and their devices.
static TABLE: Mutex<Option<HashMap<usize, Bound>>> = Mutex::new(None);
/// Whether a launch may name no function of one context: a `CUkernel` was found, or a graph
/// made or launched.
static UNBOUND: AtomicBool = AtomicBool::new(false);
/// Whether the callers fill the launches' device now ([`check`]).
static BY_CALLERS: AtomicBool = AtomicBool::new(false);

fn table() -> MutexGuard<'static, Option<HashMap<usize, Bound>>> {
    TABLE.lock().unwrap_or_else(|p| p.into_inner())
}

/// The lock on the table, held across `fork`.
pub(crate) fn fork_guard() -> Box<dyn std::any::Any> {
    Box::new(table())
}

/// Bumped whenever an answer of [`launch_device`] may change (a function bound, the first
/// device used), so that a thread's last answer is known good.
static GENERATION: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The last function this thread asked about, its device, and the generation then (the
    /// probes' worker asks about one function after another, mostly the same).
    static LAST: Cell<(u64, u32, u64)> = const { Cell::new((0, 0, u64::MAX)) };
}

/// The device of a launch of `function` (0 for a graph launch), as the probes' worker asks:
/// the function's own, else the first device the process used (0 when none is known).
pub(crate) fn launch_device(function: u64) -> u32 {
    let generation = GENERATION.load(Ordering::Acquire);
    if let Ok((f, device, seen)) = LAST.try_with(Cell::get)
        && f == function
        && seen == generation
    {
        return device;
    }
    let bound = table().as_ref().and_then(|t| t.get(&(function as usize)).copied());
    let device = match bound {
        Some(Bound::Device(d)) => d,
        _ => super::devices::first_used().unwrap_or(0),
    };
    let _ = LAST.try_with(|last| last.set((function, device, generation)));
    device
}

/// What [`launch_device`] answers may have changed.
pub(crate) fn changed() {
    GENERATION.fetch_add(1, Ordering::AcqRel);
}

/// `f`, a function the program found in the current context: on that context's device.
pub(crate) fn found(f: Handle) {
    if f.is_null() {
        return;
    }
    if let Some(device) = super::devices::current() {
        bind(f, Bound::Device(device), true);
    }
}

/// `kernel`, a `CUkernel` the program found: launched in any context.
pub(crate) fn found_kernel(kernel: Handle) {
    if !kernel.is_null() {
        bind(kernel, Bound::AnyContext, true);
    }
}

/// At the first launch of `f` this process named (`kernel` when the driver named it as a
/// `CUkernel`): kept, unless the table knew it already.
pub(crate) fn first_launch(f: Handle, kernel: bool) {
    if f.is_null() || table().as_ref().is_some_and(|t| t.contains_key(&(f as usize))) {
        return;
    }
    if kernel {
        bind(f, Bound::AnyContext, false);
    } else if let Some(device) = super::devices::current() {
        bind(f, Bound::Device(device), false);
    }
}

/// A stream capture begun or a graph launched: a launch that names no function.
#[inline]
pub(crate) fn graphs() {
    if !UNBOUND.load(Ordering::Relaxed) {
        unbound();
    }
}

#[cold]
#[inline(never)]
fn unbound() {
    UNBOUND.store(true, Ordering::Release);
    check();
}

fn bind(f: Handle, bound: Bound, replace: bool) {
    {
        let mut table = table();
        let table = table.get_or_insert_with(HashMap::new);
        if replace {
            table.insert(f as usize, bound);
        } else {
            table.entry(f as usize).or_insert(bound);
        }
        changed();
    }
    if bound == Bound::AnyContext {
        unbound();
    }
}

/// Once the process has used two devices and may launch in a way that names no one context's
/// function: the callers fill the launches' device from then on.
pub(crate) fn check() {
    if !UNBOUND.load(Ordering::Acquire)
        || super::devices::used_count() < 2
        || BY_CALLERS.swap(true, Ordering::AcqRel)
    {
        return;
    }
    egpu::host::global().launch_devices_from_callers();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn functions_keep_their_devices_and_kernels_fall_back_to_the_first_device() {
        let f = |n: usize| n as Handle;
        bind(f(0x7e57_0010), Bound::Device(1), true);
        bind(f(0x7e57_0011), Bound::Device(0), true);
        assert_eq!(launch_device(0x7e57_0010), 1);
        assert_eq!(launch_device(0x7e57_0011), 0);
        // A first launch does not replace what the program's lookup said.
        first_launch(f(0x7e57_0010), false);
        assert_eq!(launch_device(0x7e57_0010), 1);
        // Found again (the handle given to another function, in another context): replaced.
        bind(f(0x7e57_0010), Bound::Device(0), true);
        assert_eq!(launch_device(0x7e57_0010), 0);
        // Neither a kernel handle nor an unknown one has a device of its own.
        let first = super::super::devices::first_used().unwrap_or(0);
        assert_eq!(launch_device(0x7e57_0099), first);
    }
}
