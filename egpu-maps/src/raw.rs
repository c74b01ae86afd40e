//! [`RawMap`]: a map of any kind, typed only by its header. Engines (the CPU VM, the GPU
//! backend) and tracers that do not know a map's Rust types use it; the typed maps are thin
//! wrappers around it.

use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use egpu_ebpf::MapKind;

use crate::hash_table::Table;
use crate::layout::Geometry;
use crate::region::Region;
use crate::ring::{Next, Ring};
use crate::{MapError, Placement};

/// How an update treats an existing entry: Linux's `BPF_ANY`, `BPF_NOEXIST`, `BPF_EXIST`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum UpdateFlags {
    /// Insert or replace.
    #[default]
    Any,
    /// Insert only; an existing key is [`MapError::Exists`].
    NoExist,
    /// Replace only; a missing key is [`MapError::NotFound`].
    Exist,
}

impl UpdateFlags {
    /// The flags of Linux's number (0, 1 or 2).
    pub fn from_linux(flags: u64) -> Result<UpdateFlags, MapError> {
        match flags {
            0 => Ok(UpdateFlags::Any),
            1 => Ok(UpdateFlags::NoExist),
            2 => Ok(UpdateFlags::Exist),
            other => Err(MapError::Flags(other)),
        }
    }
}

struct Inner {
    region: Region,
    geometry: Geometry,
}

/// An open map of any kind. Cloning it is cheap and shares the memory, which lives until the
/// last clone is dropped (a shared-memory map's name is then removed, if this handle created
/// it).
#[derive(Clone)]
pub struct RawMap(Arc<Inner>);

impl fmt::Debug for RawMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawMap")
            .field("geometry", &self.0.geometry)
            .field("shared_name", &self.shared_name())
            .finish_non_exhaustive()
    }
}

/// The shard of the CPU this thread runs on, among `shards`.
pub(crate) fn cpu_shard(shards: u32) -> u32 {
    // SAFETY: sched_getcpu has no preconditions.
    let cpu = unsafe { libc::sched_getcpu() };
    u32::try_from(cpu).unwrap_or(0) % shards.max(1)
}

/// The number of logical CPUs of this machine, the default count of host shards.
pub fn cpu_count() -> u32 {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
    u32::try_from(n).unwrap_or(1).clamp(1, crate::layout::MAX_SHARDS)
}

impl RawMap {
    /// Creates an empty map of `geometry` in `placement`. A geometry [`Geometry::new`] would
    /// not make is refused ([`Geometry::validate`]).
    pub fn create(geometry: Geometry, placement: &Placement) -> Result<RawMap, MapError> {
        geometry.validate()?;
        let region = match placement {
            Placement::Process => Region::anonymous(&geometry)?,
            Placement::Shared(name) => Region::create_shared(name, &geometry)?,
        };
        Ok(RawMap(Arc::new(Inner { region, geometry })))
    }

    /// Opens the map another process created in shared memory as `name`, checking its header.
    pub fn open_shared(name: &str) -> Result<RawMap, MapError> {
        let (region, geometry) = Region::open_shared(name)?;
        Ok(RawMap(Arc::new(Inner { region, geometry })))
    }

    /// Opens the map already laid out in `len` bytes at `ptr`, checking its header.
    ///
    /// # Safety
    /// `ptr` must be valid for reads and writes of `len` bytes for as long as the map and its
    /// clones live, and be accessed by others only atomically, following the layout.
    pub unsafe fn from_raw_parts(ptr: NonNull<u8>, len: usize) -> Result<RawMap, MapError> {
        // SAFETY: forwarded to the caller.
        let (region, geometry) = unsafe { Region::external(ptr, len, None)? };
        Ok(RawMap(Arc::new(Inner { region, geometry })))
    }

    /// Lays out an empty map of `geometry` in `len` bytes at `ptr` (pinned host memory, for
    /// example), zeroing them, and opens it. A geometry [`Geometry::new`] would not make is
    /// refused ([`Geometry::validate`]).
    ///
    /// # Safety
    /// As for [`RawMap::from_raw_parts`]; nobody else may use the memory while it is formatted.
    pub unsafe fn format_raw_parts(
        ptr: NonNull<u8>,
        len: usize,
        geometry: Geometry,
    ) -> Result<RawMap, MapError> {
        geometry.validate()?;
        // SAFETY: forwarded to the caller.
        let (region, geometry) = unsafe { Region::external(ptr, len, Some(&geometry))? };
        Ok(RawMap(Arc::new(Inner { region, geometry })))
    }

    /// The map's geometry, from its header.
    pub fn geometry(&self) -> &Geometry {
        &self.0.geometry
    }

    /// The map's kind.
    pub fn kind(&self) -> MapKind {
        self.0.geometry.kind
    }

    /// The map's memory: its first byte and length. It stays valid while this map lives.
    pub fn memory(&self) -> (NonNull<u8>, usize) {
        (NonNull::new(self.0.region.base()).expect("regions are never null"), self.0.region.len())
    }

    /// The shared-memory name, for a map in shared memory.
    pub fn shared_name(&self) -> Option<&str> {
        self.0.region.shared_name()
    }

    /// Checks that the map is of `kind` with these key and value sizes.
    pub fn expect(&self, kind: MapKind, key_size: u32, value_size: u32) -> Result<(), MapError> {
        let g = &self.0.geometry;
        if g.kind == kind && g.key_size == key_size && g.value_size == value_size {
            return Ok(());
        }
        Err(MapError::Mismatch {
            found: g.kind,
            found_key: g.key_size,
            found_value: g.value_size,
            expected: kind,
            expected_key: key_size,
            expected_value: value_size,
        })
    }

    pub(crate) fn region(&self) -> &Region {
        &self.0.region
    }

    /// The shard host writers on this CPU use.
    pub(crate) fn host_shard(&self) -> Result<u32, MapError> {
        let g = &self.0.geometry;
        match g.cpu_shards {
            0 => Err(MapError::NoHostShard),
            1 => Ok(0),
            n => Ok(cpu_shard(n)),
        }
    }

    pub(crate) fn table(&self, shard: u32) -> Table<'_> {
        Table::new(&self.0.region, &self.0.geometry, shard)
    }

    pub(crate) fn ring(&self, shard: u32) -> Ring<'_> {
        Ring::new(&self.0.region, &self.0.geometry, shard)
    }

    /// Byte offset of array element `index` of `shard`.
    pub(crate) fn element(&self, shard: u32, index: u32) -> Result<usize, MapError> {
        let g = &self.0.geometry;
        if index >= g.capacity {
            return Err(MapError::Index { index, len: g.capacity });
        }
        Ok(g.slot_offset(shard, index))
    }

    fn array_index(&self, key: &[u8]) -> Result<u32, MapError> {
        let bytes: [u8; 4] = key.get(..4).and_then(|k| k.try_into().ok()).ok_or_else(|| {
            MapError::Geometry { reason: format!("an array key is 4 bytes, not {}", key.len()) }
        })?;
        Ok(u32::from_le_bytes(bytes))
    }

    fn check_key(&self, key: &[u8]) -> Result<(), MapError> {
        let size = self.0.geometry.key_size as usize;
        if key.len() != size {
            return Err(MapError::Geometry {
                reason: format!("the key is {} bytes; the map's keys are {size}", key.len()),
            });
        }
        Ok(())
    }

    /// Where the value of `key` lies in this thread's host shard (`bpf_map_lookup_elem`). The
    /// pointer stays valid while the map lives; the entry may be removed and its slot reused
    /// meanwhile.
    pub fn lookup(&self, key: &[u8]) -> Result<Option<NonNull<u8>>, MapError> {
        self.check_key(key)?;
        let shard = self.host_shard()?;
        let off = match self.kind() {
            MapKind::Hash | MapKind::PerCpuHash => {
                let table = self.table(shard);
                match table.find(key) {
                    Some((i, _)) => table.value_offset(i),
                    None => return Ok(None),
                }
            }
            MapKind::Array | MapKind::PerCpuArray => {
                match self.element(shard, self.array_index(key)?) {
                    Ok(off) => off,
                    Err(_) => return Ok(None),
                }
            }
            kind => return Err(MapError::Unsupported { op: "lookup", kind }),
        };
        // SAFETY: the offset lies inside the region (checked geometry).
        Ok(NonNull::new(unsafe { self.0.region.base().add(off) }))
    }

    /// Stores `value` under `key` in this thread's host shard (`bpf_map_update_elem`).
    pub fn update(&self, key: &[u8], value: &[u8], flags: UpdateFlags) -> Result<(), MapError> {
        self.check_key(key)?;
        let size = self.0.geometry.value_size as usize;
        if value.len() != size {
            return Err(MapError::Geometry {
                reason: format!("the value is {} bytes; the map's values are {size}", value.len()),
            });
        }
        let shard = self.host_shard()?;
        match self.kind() {
            MapKind::Hash | MapKind::PerCpuHash => {
                self.table(shard).update(key, Some(value), flags).map(drop)
            }
            MapKind::Array | MapKind::PerCpuArray => {
                let off = self.element(shard, self.array_index(key)?)?;
                if flags == UpdateFlags::NoExist {
                    return Err(MapError::Exists);
                }
                self.0.region.write_bytes(off, value);
                Ok(())
            }
            kind => Err(MapError::Unsupported { op: "update", kind }),
        }
    }

    /// Removes `key` (`bpf_map_delete_elem`): from this thread's host shard for a per-CPU hash.
    pub fn delete(&self, key: &[u8]) -> Result<(), MapError> {
        self.check_key(key)?;
        match self.kind() {
            MapKind::Hash | MapKind::PerCpuHash => {
                if self.table(self.host_shard()?).remove(key) {
                    Ok(())
                } else {
                    Err(MapError::NotFound)
                }
            }
            kind => Err(MapError::Unsupported { op: "delete", kind }),
        }
    }

    /// Copies `record` into this thread's host ring (`bpf_ringbuf_output`); shorter records are
    /// zero-padded. A full ring drops it, counts the drop, and says so.
    pub fn output(&self, record: &[u8]) -> Result<(), MapError> {
        let g = &self.0.geometry;
        if g.kind != MapKind::RingBuf {
            return Err(MapError::Unsupported { op: "output", kind: g.kind });
        }
        if record.len() > g.value_size as usize {
            return Err(MapError::RecordSize { len: record.len(), size: g.value_size });
        }
        let ring = self.ring(self.host_shard()?);
        let ticket = ring.reserve().ok_or(MapError::RingFull)?;
        ring.write(ticket, record);
        ring.commit(ticket);
        Ok(())
    }

    /// Publishes the records that device producers wrote into ring `shard` of this ring buffer,
    /// and returns how many it published.
    ///
    /// Probes on the GPU write a ring in GPU memory that is read after the kernel while nobody
    /// consumes it: they take tickets by atomic adds on the shard's head ([`LEN_OR_HEAD`]), drop
    /// and count (in [`REFUSED`]) the tickets at or past `tail + capacity`, and write the records
    /// only, without their sequence words. Once the kernel has completed and the shard's bytes
    /// are copied into this map, this call makes them readable: for every ticket `t` from the
    /// shard's tail up to its head (at most `tail + capacity`), a slot whose sequence word is
    /// free for lap `t / capacity` is marked committed for that lap, owned by
    /// [`DEVICE_OWNER`], with release ordering. The consumer
    /// ([`RingBuf::consumer`](crate::RingBuf::consumer)) then reads them in ticket order, as any
    /// committed records. (A ring drained while kernels run is published by the device a group
    /// at a time, and read by [`crate::merge`].)
    ///
    /// A head past `tail + capacity` is brought back to that limit first. Slots that host
    /// producers reserved, committed or discarded, and slots already committed, are left as they
    /// are: calling it again commits nothing more, and on a ring that only host producers write
    /// it commits nothing. Call it while no device writes the shard.
    ///
    /// [`LEN_OR_HEAD`]: crate::layout::shard::LEN_OR_HEAD
    /// [`REFUSED`]: crate::layout::shard::REFUSED
    /// [`DEVICE_OWNER`]: crate::layout::DEVICE_OWNER
    ///
    /// # Errors
    /// [`MapError::Unsupported`] for a map that is not a ring buffer, [`MapError::Shard`] for a
    /// shard the map does not have.
    pub fn commit_written_records(&self, shard: u32) -> Result<u64, MapError> {
        let g = &self.0.geometry;
        if g.kind != MapKind::RingBuf {
            return Err(MapError::Unsupported { op: "commit_written_records", kind: g.kind });
        }
        if shard >= g.shards() {
            return Err(MapError::Shard { shard, shards: g.shards() });
        }
        Ok(self.ring(shard).commit_written())
    }

    /// Copies out the next record of any ring into `out` (the record size long), for a consumer
    /// that holds the role; `start` is the ring to try first, updated to the one read.
    pub(crate) fn next_record(&self, start: &mut u32, out: &mut [u8]) -> bool {
        let shards = self.0.geometry.shards();
        for k in 0..shards {
            let s = (*start + k) % shards;
            if let Next::Record = self.ring(s).next(out) {
                *start = s;
                return true;
            }
        }
        false
    }

    /// Live entries of a hash map (summed over shards), or the capacity of an array.
    pub fn len(&self) -> u64 {
        let g = &self.0.geometry;
        match g.kind {
            MapKind::Hash | MapKind::PerCpuHash => {
                (0..g.shards()).map(|s| self.table(s).len()).sum()
            }
            MapKind::RingBuf => (0..g.shards()).map(|s| self.ring(s).pending()).sum(),
            _ => u64::from(g.capacity),
        }
    }

    /// Whether [`RawMap::len`] is 0.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reclaims what writers that died left in a hash map (slots claimed by an insert or a
    /// replacement never finished) and corrects its entry counts, as a tracer opening the map of
    /// a crashed process may want to. Writers may go on meanwhile. Other kinds have nothing to
    /// repair (a ring's consumer skips dead producers' records by itself).
    pub fn repair(&self) {
        let g = &self.0.geometry;
        if matches!(g.kind, MapKind::Hash | MapKind::PerCpuHash) {
            (0..g.shards()).for_each(|s| self.table(s).repair());
        }
    }

    /// When a device part was last merged into the map ([`crate::merge`]), in nanoseconds since
    /// the Unix epoch; `None` when none has been.
    pub fn device_merged_ns(&self) -> Option<u64> {
        Some(
            self.0
                .region
                .word(crate::layout::header::DEVICE_MERGED_NS)
                .load(std::sync::atomic::Ordering::Relaxed),
        )
        .filter(|&t| t != 0)
    }

    /// Inserts refused because the map was full (hash maps), or records dropped because the
    /// ring was full (ring buffers), over all shards.
    pub fn refused(&self) -> u64 {
        let g = &self.0.geometry;
        match g.kind {
            MapKind::Hash | MapKind::PerCpuHash => {
                (0..g.shards()).map(|s| self.table(s).refused()).sum()
            }
            MapKind::RingBuf => (0..g.shards()).map(|s| self.ring(s).drops()).sum(),
            _ => 0,
        }
    }
}
