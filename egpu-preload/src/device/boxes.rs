//! The bytes of the tensor maps' boxes, where instrumented kernels look them up
//! ([`egpu::device::inject::tensor_maps`]).
//!
//! The process keeps one [`BoxTable`]: each map the program encodes through an interposed
//! encoder (or changes with `cuTensorMapReplaceAddress`) is recorded there with its box's bytes
//! ([`record`]). Each context that loads instrumented modules has a copy of it in GPU memory
//! ([`DeviceTable`], made with the context's parts and uploaded whole then), whose address the
//! injector bakes into the modules. A map recorded after that is copied to every context's table
//! at once, the one slot it changed, through the context's own stream (egpu's, non-blocking),
//! and waited for: the kernel the program launches next finds it. While a stream capture is under
//! way nothing is copied (a call of egpu's could invalidate the capture): the tables are marked
//! stale, and copied whole at the next record or module load outside a capture.
//!
//! Locks: the table's is held neither while the driver is called nor while the parts' lock is
//! taken; wherever both are held, the parts' was taken first (a slot's bytes are read under
//! both, so that the last copy made of a slot is of its latest bytes).

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use egpu::device::inject::tensor_maps::{BoxTable, MAP_BYTES, SLOT_BYTES, TABLE_BYTES};

use crate::Handle;
use crate::events::{ALLOC, HTOD, HTOD_ASYNC, STREAM_SYNC};

/// The process's table (made at the first use).
static TABLE: Mutex<Option<BoxTable>> = Mutex::new(None);
/// Maps recorded with their box's bytes, and maps whose box's bytes were unknown.
static RECORDED: AtomicU64 = AtomicU64::new(0);
static UNKNOWN: AtomicU64 = AtomicU64::new(0);
/// Whether a context's table missed a change (during a capture, or when a copy failed).
static STALE: AtomicBool = AtomicBool::new(false);

/// The lock on the process's table (also held across `fork`, after the parts').
pub(super) fn lock() -> MutexGuard<'static, Option<BoxTable>> {
    TABLE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Records that copies of the tensor map whose 128 bytes are `map` move `bytes` bytes (`None`:
/// unknown, only counted), and brings the contexts' tables up to date.
pub(crate) fn record(map: &[u8; MAP_BYTES], bytes: Option<u32>) {
    let slot = match bytes {
        Some(bytes) => {
            RECORDED.fetch_add(1, Ordering::Relaxed);
            lock().get_or_insert_with(BoxTable::new).record(map, bytes)
        }
        None => {
            UNKNOWN.fetch_add(1, Ordering::Relaxed);
            None
        }
    };
    if slot.is_some() || STALE.load(Ordering::Relaxed) {
        super::parts::update_tables(slot);
    }
}

/// The bytes recorded for the tensor map whose 128 bytes are `map`, if any.
pub(crate) fn bytes_of(map: &[u8; MAP_BYTES]) -> Option<u32> {
    lock().as_ref().and_then(|t| t.bytes_of(map))
}

/// A context's table in GPU memory.
pub(super) struct DeviceTable {
    /// Its address.
    pub(super) address: u64,
    /// Whether it missed a change: copied whole at the next chance.
    stale: bool,
}

/// A context's table with what copying to it takes: the context and egpu's stream in it.
pub(super) struct InContext<'a> {
    pub(super) context: Handle,
    pub(super) stream: Handle,
    pub(super) table: &'a mut DeviceTable,
}

/// What to copy to a table.
enum Copy {
    Whole,
    Slot(usize),
}

impl DeviceTable {
    /// Makes a table in the current context, holding the process's table as it is now (the
    /// caller holds the parts' lock).
    pub(super) fn make() -> Result<DeviceTable, String> {
        let alloc = ALLOC.get_or_ask().ok_or("the driver lacks cuMemAlloc")?;
        let upload = HTOD.get_or_ask().ok_or("the driver lacks cuMemcpyHtoD")?;
        let bytes = whole();
        let mut address = 0u64;
        // SAFETY: the driver writes one address.
        super::parts::cu(unsafe { alloc(&mut address, TABLE_BYTES) }, "cuMemAlloc")?;
        // SAFETY: `TABLE_BYTES` bytes from `bytes` to the memory just allocated, of that size.
        let result = unsafe { upload(address, bytes.as_ptr().cast(), bytes.len()) };
        super::parts::cu(result, "cuMemcpyHtoD")?;
        Ok(DeviceTable { address, stale: false })
    }
}

/// The process's table as its bytes in GPU memory.
fn whole() -> Vec<u8> {
    lock().as_ref().map_or_else(|| vec![0; TABLE_BYTES], BoxTable::to_bytes)
}

/// Brings `tables` (every context's of this process; the caller holds the parts' lock) up to
/// date: the stale ones copied whole, and slot `slot`, if any, copied to the others; during a
/// stream capture (`capturing`) nothing is copied and, when a slot changed, all are stale.
pub(super) fn update<'a>(
    tables: impl Iterator<Item = InContext<'a>>,
    slot: Option<usize>,
    capturing: bool,
) {
    let mut stale = false;
    for t in tables {
        if capturing {
            t.table.stale |= slot.is_some();
            stale |= t.table.stale;
            continue;
        }
        let what = match (t.table.stale, slot) {
            (true, _) => Copy::Whole,
            (false, Some(slot)) => Copy::Slot(slot),
            (false, None) => continue,
        };
        t.table.stale = copy(&t, what).is_err();
        stale |= t.table.stale;
    }
    STALE.store(stale, Ordering::Relaxed);
}

/// Copies `what` of the process's table to `t`'s, through egpu's stream in its context, and
/// waits for the copy (not for the program's work).
fn copy(t: &InContext<'_>, what: Copy) -> Result<(), String> {
    use super::parts::{cu, in_context};
    let missing = |name: &str| format!("the driver lacks {name}");
    let upload = HTOD_ASYNC.get_or_ask().ok_or_else(|| missing("cuMemcpyHtoDAsync"))?;
    let wait = STREAM_SYNC.get_or_ask().ok_or_else(|| missing("cuStreamSynchronize"))?;
    let (at, bytes) = match what {
        Copy::Whole => (0, whole()),
        Copy::Slot(slot) => {
            let bytes = lock().as_ref().map_or([0; SLOT_BYTES], |table| table.slot_bytes(slot));
            (slot * SLOT_BYTES, bytes.to_vec())
        }
    };
    let device = t.table.address + at as u64;
    let stream = t.stream;
    in_context(t.context, || {
        // SAFETY: `bytes` (alive until the stream is synchronised below) to the table, which
        // has room for them at `at`; then egpu's own stream waited for.
        cu(
            unsafe { upload(device, bytes.as_ptr().cast::<c_void>(), bytes.len(), stream) },
            "cuMemcpyHtoDAsync",
        )
        .and_then(|()| cu(unsafe { wait(stream) }, "cuStreamSynchronize"))
    })
}

/// The summary's line on the tensor maps, when any was encoded.
pub(super) fn summary() -> String {
    let (recorded, unknown) = (RECORDED.load(Ordering::Relaxed), UNKNOWN.load(Ordering::Relaxed));
    if recorded + unknown == 0 {
        return String::new();
    }
    format!("tensor maps recorded {recorded}, box bytes unknown for {unknown}\n")
}
