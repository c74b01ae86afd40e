//! Device maps: the GPU side of `egpu-maps`, on the same layout.
//!
//! A map that device probes write is placed in GPU memory, where updates from many threads are
//! fastest, as a copy of a host map ([`DeviceMapBuffer`]): [`upload`](DeviceMapBuffer::upload)
//! copies the host map's bytes (header and slots) to the GPU, the translated probes update them
//! there ([`binding`](DeviceMapBuffer::binding) gives the translation the address and
//! geometry), and [`download`](DeviceMapBuffer::download) copies them back into the host map,
//! so that every reader of `egpu-maps` (typed maps, `RawMap`, other processes that opened a
//! shared map) sees the device's updates. The layout and the hash are the same on both sides, so
//! nothing is converted.
//!
//! Device updates are complete when the kernel that made them has finished, which
//! [`Gpu::launch`](crate::cuda::Gpu::launch) waits for: a download after a launch sees all of
//! them.

use egpu_maps::layout::Geometry;
use egpu_maps::merge::{DevicePart, Merged};
use egpu_maps::{MapKind, RawMap};

use crate::cuda::{DeviceBuffer, Gpu, HostMapping};
use crate::driver::DriverError;
use crate::translate::DeviceMap;

/// A map's memory in GPU memory: the copy of a host map, or a map that lives on the GPU only.
#[derive(Debug)]
pub struct DeviceMapBuffer<'g> {
    raw: Option<RawMap>,
    geometry: Geometry,
    buffer: DeviceBuffer<'g>,
}

impl<'g> DeviceMapBuffer<'g> {
    /// Allocates GPU memory for `raw` and copies its bytes there.
    pub fn upload(gpu: &'g Gpu, raw: &RawMap) -> Result<DeviceMapBuffer<'g>, DriverError> {
        let (ptr, len) = raw.memory();
        let buffer = gpu.alloc(len)?;
        // SAFETY: the map's memory is `len` readable bytes while `raw` lives; the driver copies
        // it without Rust references, so other sides' atomic updates meanwhile are only seen
        // or not (a snapshot).
        unsafe { buffer.write_raw(ptr.as_ptr(), len)? };
        Ok(DeviceMapBuffer { raw: Some(raw.clone()), geometry: *raw.geometry(), buffer })
    }

    /// [`upload`](Self::upload) into device memory the caller provides (another wrapper's,
    /// through [`DeviceBuffer::from_raw`]; a cudarc slice's with the `cudarc-interop`
    /// feature): it must hold the whole map.
    ///
    /// # Errors
    ///
    /// `CUDA_ERROR_INVALID_VALUE` when `buffer` is smaller than the map; the copy's error.
    pub fn upload_into(
        buffer: DeviceBuffer<'g>,
        raw: &RawMap,
    ) -> Result<DeviceMapBuffer<'g>, DriverError> {
        let (ptr, len) = raw.memory();
        // SAFETY: the map's memory is `len` readable bytes while `raw` lives (a snapshot, as in
        // `upload`); `write_raw` refuses a buffer shorter than `len`.
        unsafe { buffer.write_raw(ptr.as_ptr(), len)? };
        Ok(DeviceMapBuffer { raw: Some(raw.clone()), geometry: *raw.geometry(), buffer })
    }

    /// An empty map of `geometry` in GPU memory only (a trace ring too large to keep a host
    /// copy of, for example): its header and counters can be read ([`counter`](Self::counter)),
    /// not downloaded.
    pub fn on_device(gpu: &'g Gpu, geometry: Geometry) -> Result<DeviceMapBuffer<'g>, DriverError> {
        let buffer = gpu.alloc(geometry.total_bytes as usize)?;
        let map = DeviceMapBuffer { raw: None, geometry, buffer };
        map.clear()?;
        Ok(map)
    }

    /// Empties the device copy: every byte zero, then the header (with this process as the
    /// creator).
    pub fn clear(&self) -> Result<(), DriverError> {
        self.buffer.zero()?;
        self.buffer.write(&self.geometry.header_bytes(std::process::id()))
    }

    /// What the translation needs: the device address and the geometry.
    pub fn binding(&self) -> DeviceMap {
        DeviceMap {
            addr: self.buffer.device_ptr(),
            geometry: self.geometry,
            live: false,
            spread: 0,
            drained: false,
        }
    }

    /// The 8-byte counter at byte `offset` of shard `shard`'s header (see
    /// [`egpu_maps::layout::shard`]: entries or ring head, refused inserts or dropped records,
    /// ring tail), read from the GPU.
    pub fn counter(&self, shard: u32, offset: usize) -> Result<u64, DriverError> {
        let mut word = [0u8; 8];
        let at = self.geometry.shard_offset(shard) + offset;
        // SAFETY: `word` is 8 writable bytes.
        unsafe { self.buffer.read_raw_at(at, word.as_mut_ptr(), 8)? };
        Ok(u64::from_le_bytes(word))
    }

    /// Copies what the device writes back into the host map: every shard, or for a per-CPU map
    /// (or a ring buffer with SM rings) only its SM shards, so that host shards keep what host
    /// code wrote meanwhile. Host code
    /// must not write the copied shards while this runs. Nothing to do for a map that lives on
    /// the GPU only.
    pub fn download(&self) -> Result<(), DriverError> {
        let Some(raw) = &self.raw else { return Ok(()) };
        let (ptr, len) = raw.memory();
        let g = &self.geometry;
        let from = self.device_shards();
        // SAFETY: the map's memory is `len` writable bytes while `raw` lives, `from <= len`, and
        // the caller keeps host writers of these shards away during the copy.
        unsafe { self.buffer.read_raw_at(from, ptr.as_ptr().add(from), len - from)? };
        if g.kind == MapKind::RingBuf {
            // Device producers write records only: publish those of the tickets they took.
            let first = if g.sm_shards > 0 { g.cpu_shards } else { 0 };
            for shard in first..g.shards() {
                // A ring and a shard in range: nothing to refuse.
                let _ = raw.commit_written_records(shard);
            }
        }
        Ok(())
    }

    /// Copies the host map's shards that [`download`](Self::download) copies back to the GPU:
    /// after host code consumed a downloaded ring's records, so that the device sees the ring's
    /// new `tail` and the slots freed, and its producers write there again. No kernel may write
    /// the map while this runs. Nothing to do for a map that lives on the GPU only.
    pub fn upload_device_shards(&self) -> Result<(), DriverError> {
        let Some(raw) = &self.raw else { return Ok(()) };
        let (ptr, len) = raw.memory();
        let from = self.device_shards();
        // SAFETY: the map's memory is `len` readable bytes while `raw` lives and `from <= len`;
        // the caller keeps kernels away from the device copy during the copy.
        unsafe { self.buffer.write_raw_at(from, ptr.as_ptr().add(from), len - from) }
    }

    /// Where the shards device threads write start: a per-CPU map's (or a ring's with SM rings)
    /// SM shards, or the one shard of the other maps.
    fn device_shards(&self) -> usize {
        let g = &self.geometry;
        if matches!(g.kind, MapKind::PerCpuArray | MapKind::PerCpuHash)
            || (g.kind == MapKind::RingBuf && g.sm_shards > 0)
        {
            g.shard_offset(g.cpu_shards)
        } else {
            g.shard_offset(0)
        }
    }

    /// The host map, when there is one.
    pub fn raw(&self) -> Option<&RawMap> {
        self.raw.as_ref()
    }

    /// The map's geometry (kind, sizes, capacity, shards).
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }
}

/// A host map whose memory is pinned and mapped into the GPU: device probes update it in place,
/// live for the host and for other processes (a map in shared memory included), with every
/// device write crossing the bus. One writing side per word: device probes write the map's SM
/// shards (or a map host code does not write while kernels run). One GPU: two GPUs' atomics on
/// one word of mapped host memory are not atomic with each other, so a map mapped into one GPU
/// is refused to another ([`DriverError::MappedIntoAnotherGpu`]) while this value lives; kernels
/// on several GPUs update a map through a part per GPU ([`MappedParts`]).
#[derive(Debug)]
pub struct HostMappedMap<'g> {
    // Declared first, so dropped first: the memory is unmapped while `raw` still holds it.
    mapping: HostMapping<'g>,
    raw: RawMap,
    /// Where the map starts in the mapped pages.
    offset: u64,
    /// The GPU (device ordinal) it is mapped into.
    gpu: i32,
}

/// The maps mapped into a GPU in this process ([`HostMappedMap`]): their memory's start and end,
/// the GPU, and how many values map them there.
static MAPPED: std::sync::Mutex<Vec<(usize, usize, i32, u32)>> = std::sync::Mutex::new(Vec::new());

fn mapped() -> std::sync::MutexGuard<'static, Vec<(usize, usize, i32, u32)>> {
    MAPPED.lock().unwrap_or_else(|p| p.into_inner())
}

impl<'g> HostMappedMap<'g> {
    /// Maps `raw`'s memory into `gpu`.
    ///
    /// # Errors
    ///
    /// [`DriverError::MappedIntoAnotherGpu`] when (part of) the map's memory is mapped into
    /// another GPU by a live `HostMappedMap`; the driver's errors.
    pub fn new(gpu: &'g Gpu, raw: &RawMap) -> Result<HostMappedMap<'g>, DriverError> {
        let (ptr, len) = raw.memory();
        let span = (ptr.as_ptr() as usize, ptr.as_ptr() as usize + len);
        {
            let mut all = mapped();
            let elsewhere =
                |e: &&(usize, usize, i32, u32)| e.0 < span.1 && span.0 < e.1 && e.2 != gpu.ordinal;
            if let Some(other) = all.iter().find(elsewhere) {
                return Err(DriverError::MappedIntoAnotherGpu { gpu: gpu.ordinal, other: other.2 });
            }
            match all.iter_mut().find(|e| (e.0, e.1, e.2) == (span.0, span.1, gpu.ordinal)) {
                Some(e) => e.3 += 1,
                None => all.push((span.0, span.1, gpu.ordinal, 1)),
            }
        }
        match Self::map(gpu, raw) {
            Ok(map) => Ok(map),
            Err(e) => {
                forget(span, gpu.ordinal);
                Err(e)
            }
        }
    }

    fn map(gpu: &'g Gpu, raw: &RawMap) -> Result<HostMappedMap<'g>, DriverError> {
        let (ptr, len) = raw.memory();
        // The driver maps whole pages: register the pages that hold the map (they are mapped,
        // since the map is in them), and find the map inside them.
        // SAFETY: sysconf has no preconditions.
        let page =
            usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(1);
        let start = ptr.as_ptr() as usize;
        let first = start - start % page;
        let end = (start + len).next_multiple_of(page);
        // SAFETY: those pages live as long as a clone of `raw` does; this value keeps one, and
        // drops its mapping before it.
        let mapping =
            unsafe { gpu.map_host(ptr.as_ptr().wrapping_sub(start - first), end - first)? };
        let offset = (start - first) as u64;
        Ok(HostMappedMap { offset, mapping, raw: raw.clone(), gpu: gpu.ordinal })
    }

    /// What the translation needs: the device address and the geometry.
    pub fn binding(&self) -> DeviceMap {
        DeviceMap {
            addr: self.mapping.device_ptr() + self.offset,
            geometry: *self.raw.geometry(),
            live: true,
            spread: 0,
            drained: false,
        }
    }

    /// The host map.
    pub fn raw(&self) -> &RawMap {
        &self.raw
    }
}

impl Drop for HostMappedMap<'_> {
    fn drop(&mut self) {
        let (ptr, len) = self.raw.memory();
        forget((ptr.as_ptr() as usize, ptr.as_ptr() as usize + len), self.gpu);
    }
}

/// One mapping of `span` into `gpu` gone.
fn forget(span: (usize, usize), gpu: i32) {
    let mut all = mapped();
    if let Some(at) = all.iter().position(|e| (e.0, e.1, e.2) == (span.0, span.1, gpu)) {
        all[at].3 -= 1;
        if all[at].3 == 0 {
            all.remove(at);
        }
    }
}

/// A host map that kernels on several GPUs of one process update: each GPU gets a part of its
/// own, a map of the same geometry in this process's memory pinned and mapped into that GPU
/// alone ([`HostMappedMap`]), which its probes update ([`binding`](Self::binding));
/// [`merge`](Self::merge) adds what each part changed since the last merge into the map, on the
/// host, as the preloaded library merges its device parts (`egpu_maps::merge::DevicePart`:
/// value words add their growth, hash entries are published once seen whole, rings are
/// drained), so that the map holds the sum over the GPUs and each part what its GPU did. One
/// GPU's atomics never touch another's words (issue 29). The map is up to date after a merge,
/// not live; a merge after the kernels are done (`settled`) is exact.
#[derive(Debug)]
pub struct MappedParts<'g> {
    raw: RawMap,
    parts: Vec<MappedPart<'g>>,
}

/// A GPU's part of a [`MappedParts`].
#[derive(Debug)]
struct MappedPart<'g> {
    gpu: i32,
    mapped: HostMappedMap<'g>,
    merger: DevicePart,
}

/// Why a [`MappedParts`] could not be made or merged.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MappedPartsError {
    /// A part's memory could not be mapped into its GPU.
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// The map has no device part of its kind (see `egpu_maps::merge::DevicePart::new`), a
    /// part's memory could not be made, or a merge failed.
    #[error(transparent)]
    Map(#[from] egpu_maps::MapError),
    /// The same GPU was given twice.
    #[error("GPU {gpu} was given twice: one part per GPU")]
    SameGpuTwice {
        /// Its device ordinal.
        gpu: i32,
    },
}

impl<'g> MappedParts<'g> {
    /// A part of `raw` for each of `gpus`, each made empty and mapped into its GPU.
    pub fn new(raw: &RawMap, gpus: &[&'g Gpu]) -> Result<MappedParts<'g>, MappedPartsError> {
        let geometry = *raw.geometry();
        let mut parts: Vec<MappedPart<'g>> = Vec::new();
        for gpu in gpus {
            if parts.iter().any(|p| p.gpu == gpu.ordinal) {
                return Err(MappedPartsError::SameGpuTwice { gpu: gpu.ordinal });
            }
            let merger = DevicePart::new(&geometry)?;
            let memory = RawMap::create(geometry, &egpu_maps::Placement::Process)?;
            let mapped = HostMappedMap::new(gpu, &memory)?;
            parts.push(MappedPart { gpu: gpu.ordinal, mapped, merger });
        }
        Ok(MappedParts { raw: raw.clone(), parts })
    }

    /// What `gpu`'s translation needs: its part's address there and the geometry; `None` for a
    /// GPU that has no part.
    pub fn binding(&self, gpu: &Gpu) -> Option<DeviceMap> {
        self.parts.iter().find(|p| p.gpu == gpu.ordinal).map(|p| p.mapped.binding())
    }

    /// Adds what each part changed since the last merge into the map. `settled`: no kernel
    /// updates a part now, so hash entries are published at once. The counts of what was
    /// merged, summed over the parts.
    pub fn merge(&mut self, settled: bool) -> Result<Merged, MappedPartsError> {
        let mut all = Merged::default();
        for part in &mut self.parts {
            let snapshot = snapshot(part.mapped.raw(), part.merger.range());
            let m = part.merger.merge(&snapshot, &self.raw, settled)?;
            all.words += m.words;
            all.published += m.published;
            all.removed += m.removed;
            all.deferred += m.deferred;
            all.refused += m.refused;
            all.records += m.records;
        }
        Ok(all)
    }

    /// `gpu`'s part: what its kernels did (rings aside, which a merge drains into the map).
    pub fn part(&self, gpu: &Gpu) -> Option<&RawMap> {
        self.parts.iter().find(|p| p.gpu == gpu.ordinal).map(|p| p.mapped.raw())
    }

    /// The map the parts merge into.
    pub fn raw(&self) -> &RawMap {
        &self.raw
    }
}

/// The bytes of `map` in `range` (whole words), read word by word with atomic loads, as the GPU
/// may write them meanwhile.
fn snapshot(map: &RawMap, range: std::ops::Range<usize>) -> Vec<u8> {
    let (ptr, len) = map.memory();
    let mut bytes = Vec::with_capacity(range.len());
    for at in range.step_by(8).filter(|at| at + 8 <= len) {
        // SAFETY: the map's memory is `len` bytes, 8-aligned, live while `map` is; a word of it
        // is only ever touched atomically (egpu_maps's rule), which this load is.
        let word = unsafe { &*ptr.as_ptr().add(at).cast::<std::sync::atomic::AtomicU64>() };
        bytes.extend_from_slice(&word.load(std::sync::atomic::Ordering::Acquire).to_le_bytes());
    }
    bytes
}
