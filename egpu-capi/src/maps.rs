//! Maps: made in process memory or in shared memory under a name, opened by name from another
//! process, read and updated by key bytes, arrays by index, hash maps' keys listed, rings
//! drained.

use std::borrow::Cow;
use std::ffi::{CString, c_char};

use egpu_ebpf::MapKind;
use egpu_maps::layout::Geometry;
use egpu_maps::{MapError, Placement, RawMap, UpdateFlags};

use crate::error::{
    EGPU_BAD_ARGUMENT, EGPU_BUFFER_TOO_SMALL, EGPU_MAP, EGPU_NOT_FOUND, EGPU_NULL_ARGUMENT,
    Failure, Result, egpu_status, fail, guard,
};
use crate::ffi::{self, Kind};
use crate::program::{ProgramHandle, egpu_program};

/// A map: one block of memory in egpu's layout, shared by every VM and probe set it is bound
/// to, by other handles of it, and (in shared memory) by other processes. Made by
/// `egpu_map_create`, `egpu_map_create_for`, `egpu_map_open` or `egpu_vm_map`; freed by
/// `egpu_map_free` (the memory lives while any handle, VM or attachment holds it; a shared
/// object is removed when the map that created it goes). Every operation is atomic per 32- or
/// 64-bit word and lock-free: usable from any thread, by several at once.
#[derive(Debug)]
pub struct egpu_map {
    _opaque: [u8; 0],
}

/// The kinds of maps, Linux's numbers (`egpu_map_desc::kind`, `egpu_map_info::kind`).
#[repr(u32)]
#[derive(Clone, Copy, Debug)]
pub enum egpu_map_kind {
    /// A hash map of fixed capacity (`BPF_MAP_TYPE_HASH`).
    EGPU_MAP_HASH = 1,
    /// An array indexed by a 4-byte index (`BPF_MAP_TYPE_ARRAY`).
    EGPU_MAP_ARRAY = 2,
    /// A hash map with a table per CPU and per SM (`BPF_MAP_TYPE_PERCPU_HASH`).
    EGPU_MAP_PERCPU_HASH = 5,
    /// An array per CPU and per SM (`BPF_MAP_TYPE_PERCPU_ARRAY`).
    EGPU_MAP_PERCPU_ARRAY = 6,
    /// A ring buffer of fixed-size records (`BPF_MAP_TYPE_RINGBUF`).
    EGPU_MAP_RINGBUF = 27,
}

/// How `egpu_map_update` treats an existing entry: Linux's `BPF_ANY`, `BPF_NOEXIST`,
/// `BPF_EXIST`.
#[repr(u32)]
#[derive(Clone, Copy, Debug)]
pub enum egpu_update {
    /// Insert or replace.
    EGPU_UPDATE_ANY = 0,
    /// Insert only: an existing key is `EGPU_MAP`.
    EGPU_UPDATE_NOEXIST = 1,
    /// Replace only: a missing key is `EGPU_NOT_FOUND`.
    EGPU_UPDATE_EXIST = 2,
}

pub(crate) struct MapHandle {
    raw: RawMap,
    shared: CString,
}

impl Kind for MapHandle {
    type Opaque = egpu_map;
    const NAME: &'static str = "egpu_map";
    const MAGIC: u64 = ffi::KINDS[3].0;
}

impl MapHandle {
    pub(crate) fn raw(&self) -> &RawMap {
        &self.raw
    }
}

/// A new map handle of `raw`, through `out` (freed again when `out` is null).
///
/// # Safety
/// `out` is null or writable.
pub(crate) unsafe fn put_map(raw: RawMap, out: *mut *mut egpu_map) -> Result<()> {
    if out.is_null() {
        return fail(EGPU_NULL_ARGUMENT, "`out` is null");
    }
    let shared = CString::new(raw.shared_name().unwrap_or("")).unwrap_or_default();
    // SAFETY: checked not null; the caller's promise that it is writable.
    unsafe { ffi::put(out, ffi::new_handle(MapHandle { raw, shared }), "out") }
}

pub(crate) fn map_failure(e: MapError) -> Failure {
    match e {
        MapError::NotFound => Failure::new(EGPU_NOT_FOUND, e.to_string()),
        e => Failure::new(EGPU_MAP, e.to_string()),
    }
}

/// What a new map is (`egpu_map_create`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct egpu_map_desc {
    /// `sizeof(egpu_map_desc)`.
    pub size: usize,
    /// Its kind: an `egpu_map_kind`.
    pub kind: u32,
    /// Key size in bytes: 4 for arrays, 0 for ring buffers, 1 to 65536 for hash maps.
    pub key_size: u32,
    /// Value size in bytes (a ring buffer's record size), 1 to 65536.
    pub value_size: u32,
    /// Entries (per shard for per-CPU kinds), or a ring's records.
    pub capacity: u32,
    /// Host shards: 0 for the default (one per logical CPU for per-CPU kinds, else 1).
    pub cpu_shards: u32,
    /// Device (SM) shards: 0 for none.
    pub sm_shards: u32,
    /// Null for process memory; else the name of a POSIX shared-memory object to create
    /// (`egpu-…`, no `/`), which other processes open with `egpu_map_open`. It is removed when
    /// the last handle of this map is freed.
    pub shared_name: *const c_char,
}

// SAFETY: `#[repr(C)]`, starts with its size; the kind and the name are checked where read.
unsafe impl ffi::SizedStruct for egpu_map_desc {
    const NAME: &'static str = "egpu_map_desc";
}

const KINDS: [u32; 5] = [1, 2, 5, 6, 27];

fn placement(name: Option<&str>) -> Placement {
    name.map_or(Placement::Process, |n| Placement::Shared(Cow::Owned(n.to_owned())))
}

/// Creates a map as `desc` says; `EGPU_MAP` with the reason when it cannot exist (a capacity
/// of 0, a key size a kind does not take, a shared name already taken).
///
/// # Safety
/// `desc` is null or a valid descriptor; `out` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_map_create(
    desc: *const egpu_map_desc,
    out: *mut *mut egpu_map,
) -> egpu_status {
    guard(|| {
        // SAFETY: the caller's promise.
        let d = unsafe { ffi::read(desc, "desc") }?;
        ffi::check_one_of(d.kind, &KINDS, "desc->kind")?;
        // SAFETY: the caller's promise.
        let name = unsafe { ffi::optional_text(d.shared_name, "desc->shared_name") }?;
        let kind = MapKind::from_linux(d.kind).expect("checked above");
        let cpu = match (d.cpu_shards, kind) {
            (0, MapKind::PerCpuArray | MapKind::PerCpuHash) => egpu_maps::cpu_count(),
            (0, _) if d.sm_shards == 0 => 1,
            (n, _) => n,
        };
        let g = Geometry::new(kind, d.key_size, d.value_size, d.capacity, cpu, d.sm_shards)
            .map_err(map_failure)?;
        if out.is_null() {
            return fail(EGPU_NULL_ARGUMENT, "`out` is null");
        }
        let raw = RawMap::create(g, &placement(name)).map_err(map_failure)?;
        // SAFETY: the caller's promise.
        unsafe { put_map(raw, out) }
    })
}

/// Creates a map for entry `index` of the program's map table: its kind, sizes and capacity,
/// with the layout its object gave (or the CPU VM's default shards), in process memory
/// (`shared_name` null) or shared memory under `shared_name`; a map of an ELF object's global
/// data (`.rodata`, `.data`) starts with its contents.
///
/// # Safety
/// `program` is null or a live program handle; `shared_name` is null or a NUL-terminated
/// string; `out` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_map_create_for(
    program: *const egpu_program,
    index: usize,
    shared_name: *const c_char,
    out: *mut *mut egpu_map,
) -> egpu_status {
    guard(|| {
        // SAFETY: the caller's promises.
        let (p, name) = unsafe {
            (
                ffi::handle::<ProgramHandle>(program, "program")?,
                ffi::optional_text(shared_name, "shared_name")?,
            )
        };
        let g = p.layout(index)?;
        if out.is_null() {
            return fail(EGPU_NULL_ARGUMENT, "`out` is null");
        }
        let raw = RawMap::create(g, &placement(name)).map_err(map_failure)?;
        p.fill(index, &raw)?;
        // SAFETY: the caller's promise.
        unsafe { put_map(raw, out) }
    })
}

/// Opens the map another process (or this one) created in shared memory as `name`, checking
/// its header; `EGPU_MAP` when there is none or it is not a map.
///
/// # Safety
/// `name` is null or a NUL-terminated string; `out` is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_map_open(
    name: *const c_char,
    out: *mut *mut egpu_map,
) -> egpu_status {
    guard(|| {
        // SAFETY: the caller's promise.
        let name = unsafe { ffi::text(name, "name") }?;
        if out.is_null() {
            return fail(EGPU_NULL_ARGUMENT, "`out` is null");
        }
        let raw = RawMap::open_shared(name).map_err(map_failure)?;
        // SAFETY: the caller's promise.
        unsafe { put_map(raw, out) }
    })
}

/// What `egpu_map_get_info` tells of a map.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct egpu_map_info {
    /// `sizeof(egpu_map_info)`, set by the caller.
    pub size: usize,
    /// Its kind: an `egpu_map_kind`.
    pub kind: u32,
    /// Key size in bytes.
    pub key_size: u32,
    /// Value (record) size in bytes.
    pub value_size: u32,
    /// Entries per shard, or a ring's records.
    pub capacity: u32,
    /// Host shards.
    pub cpu_shards: u32,
    /// Device shards.
    pub sm_shards: u32,
    /// Live entries of a hash map (over shards), an array's capacity, a ring's records not yet
    /// consumed.
    pub entries: u64,
    /// Inserts refused because the map was full, or records a full ring dropped.
    pub refused: u64,
    /// The shared-memory name, or an empty string for a map in process memory (belongs to the
    /// handle).
    pub shared_name: *const c_char,
}

// SAFETY: `#[repr(C)]`, starts with its size; written, never read.
unsafe impl ffi::SizedStruct for egpu_map_info {
    const NAME: &'static str = "egpu_map_info";
}

/// Describes the map into `info`, whose `size` the caller sets.
///
/// # Safety
/// `map` is null or a live map handle; `info` is null or valid for `info->size` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_map_get_info(
    map: *const egpu_map,
    info: *mut egpu_map_info,
) -> egpu_status {
    guard(|| {
        // SAFETY: the caller's promise.
        let m = unsafe { ffi::handle::<MapHandle>(map, "map") }?;
        let g = m.raw.geometry();
        let value = egpu_map_info {
            size: 0,
            kind: g.kind as u32,
            key_size: g.key_size,
            value_size: g.value_size,
            capacity: g.capacity,
            cpu_shards: g.cpu_shards,
            sm_shards: g.sm_shards,
            entries: m.raw.len(),
            refused: m.raw.refused(),
            shared_name: m.shared.as_ptr(),
        };
        // SAFETY: the caller's promise.
        unsafe { ffi::write(info, value, "info") }
    })
}

/// Copies `key`'s value into `values`: `value_size × (cpu_shards + sm_shards)` bytes, each
/// shard's value in turn (host shards first), so `value_size` bytes for the kinds of one
/// shard, and for per-CPU kinds every shard's, zeros where a shard lacks the key (sum them for
/// a count). `EGPU_NOT_FOUND` when no shard has the key (an array index past the end).
///
/// # Safety
/// `map` is null or a live map handle; `key` and `values` are null or valid for their lengths.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_map_lookup(
    map: *const egpu_map,
    key: *const u8,
    key_length: usize,
    values: *mut u8,
    values_length: usize,
) -> egpu_status {
    guard(|| {
        // SAFETY: the caller's promises.
        let (m, key, out) = unsafe {
            (
                ffi::handle::<MapHandle>(map, "map")?,
                ffi::bytes(key, key_length, "key")?,
                ffi::bytes_mut(values, values_length, "values")?,
            )
        };
        match m.raw.read_shards(key, out).map_err(map_failure)? {
            true => Ok(()),
            false => fail(EGPU_NOT_FOUND, "no such key"),
        }
    })
}

/// Stores `value` (`value_size` bytes) under `key` (`key_size` bytes) in this thread's host
/// shard, as `flags` (an `egpu_update`) says. A full hash map is `EGPU_MAP`.
///
/// # Safety
/// `map` is null or a live map handle; `key` and `value` are null or valid for their lengths.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_map_update(
    map: *const egpu_map,
    key: *const u8,
    key_length: usize,
    value: *const u8,
    value_length: usize,
    flags: u32,
) -> egpu_status {
    guard(|| {
        // SAFETY: the caller's promises.
        let (m, key, value) = unsafe {
            (
                ffi::handle::<MapHandle>(map, "map")?,
                ffi::bytes(key, key_length, "key")?,
                ffi::bytes(value, value_length, "value")?,
            )
        };
        let flags = UpdateFlags::from_linux(u64::from(flags))
            .map_err(|e| Failure::new(EGPU_BAD_ARGUMENT, format!("flags: {e}")))?;
        m.raw.update(key, value, flags).map_err(map_failure)
    })
}

/// Removes `key` from a hash map (this thread's host shard of a per-CPU one);
/// `EGPU_NOT_FOUND` when it was not there.
///
/// # Safety
/// `map` is null or a live map handle; `key` is null or valid for `key_length` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_map_delete(
    map: *const egpu_map,
    key: *const u8,
    key_length: usize,
) -> egpu_status {
    guard(|| {
        // SAFETY: the caller's promises.
        let (m, key) =
            unsafe { (ffi::handle::<MapHandle>(map, "map")?, ffi::bytes(key, key_length, "key")?) };
        m.raw.delete(key).map_err(map_failure)
    })
}

/// An array's element `index`, as `egpu_map_lookup` with the index as key.
///
/// # Safety
/// As for `egpu_map_lookup`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_map_array_get(
    map: *const egpu_map,
    index: u32,
    values: *mut u8,
    values_length: usize,
) -> egpu_status {
    let key = index.to_le_bytes();
    // SAFETY: forwarded; the key is ours.
    unsafe { egpu_map_lookup(map, key.as_ptr(), 4, values, values_length) }
}

/// Sets an array's element `index` in this thread's host shard, as `egpu_map_update` with the
/// index as key.
///
/// # Safety
/// As for `egpu_map_update`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_map_array_set(
    map: *const egpu_map,
    index: u32,
    value: *const u8,
    value_length: usize,
) -> egpu_status {
    let key = index.to_le_bytes();
    // SAFETY: forwarded; the key is ours.
    unsafe { egpu_map_update(map, key.as_ptr(), 4, value, value_length, 0) }
}

/// Copies the map's keys, `key_size` bytes each, one after another into `keys` (`length`
/// bytes), and their number through `count`: a hash map's live keys (each once, over shards;
/// entries inserted meanwhile may be missed), an array's indices. When they do not fit,
/// `EGPU_BUFFER_TOO_SMALL` with the number through `count` and nothing copied: call with a null
/// buffer and 0 to ask. A ring buffer has no keys (`EGPU_MAP`).
///
/// # Safety
/// `map` is null or a live map handle; `keys` is null or valid for `length` bytes; `count` is
/// null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_map_keys(
    map: *const egpu_map,
    keys: *mut u8,
    length: usize,
    count: *mut usize,
) -> egpu_status {
    guard(|| {
        // SAFETY: the caller's promise.
        let m = unsafe { ffi::handle::<MapHandle>(map, "map") }?;
        if count.is_null() {
            return fail(EGPU_NULL_ARGUMENT, "`count` is null");
        }
        let all = m.raw.keys().map_err(map_failure)?;
        // SAFETY: checked not null; the caller's promise that it is writable.
        unsafe { ffi::put(count, all.len(), "count") }?;
        let size = m.raw.geometry().key_size as usize;
        let need = all.len() * size;
        if length < need {
            return fail(
                EGPU_BUFFER_TOO_SMALL,
                format!(
                    "{} keys of {size} bytes take {need} bytes; the buffer has {length}",
                    all.len()
                ),
            );
        }
        // SAFETY: the caller's promise.
        let out = unsafe { ffi::bytes_mut(keys, length, "keys") }?;
        for (slot, key) in out.chunks_exact_mut(size.max(1)).zip(&all) {
            slot.copy_from_slice(key);
        }
        Ok(())
    })
}

/// Consumes a ring buffer's committed records, oldest first, into `records` (`length` bytes,
/// whole records of `value_size` bytes: as many as fit), their number through `count`.
/// `EGPU_MAP` when another consumer holds the ring or the map is not a ring.
///
/// # Safety
/// `map` is null or a live map handle; `records` is null or valid for `length` bytes; `count`
/// is null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_map_drain(
    map: *const egpu_map,
    records: *mut u8,
    length: usize,
    count: *mut usize,
) -> egpu_status {
    guard(|| {
        // SAFETY: the caller's promises.
        let (m, out) = unsafe {
            (ffi::handle::<MapHandle>(map, "map")?, ffi::bytes_mut(records, length, "records")?)
        };
        if count.is_null() {
            return fail(EGPU_NULL_ARGUMENT, "`count` is null");
        }
        let n = m.raw.drain_records(out).map_err(map_failure)?;
        // SAFETY: checked not null; the caller's promise that it is writable.
        unsafe { ffi::put(count, n, "count") }
    })
}

/// Frees a map handle (null: nothing). The memory stays while VMs, attachments or other
/// handles hold the map.
///
/// # Safety
/// `map` is null or a live map handle, not used after.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn egpu_map_free(map: *mut egpu_map) {
    // SAFETY: the caller's promise.
    guard(|| unsafe { ffi::free_handle::<MapHandle>(map, "map") });
}
