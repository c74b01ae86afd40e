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
/// shards (or a map host code does not write while kernels run).
#[derive(Debug)]
pub struct HostMappedMap<'g> {
    // Declared first, so dropped first: the memory is unmapped while `raw` still holds it.
    mapping: HostMapping<'g>,
    raw: RawMap,
    /// Where the map starts in the mapped pages.
    offset: u64,
}

impl<'g> HostMappedMap<'g> {
    /// Maps `raw`'s memory into `gpu`.
    pub fn new(gpu: &'g Gpu, raw: &RawMap) -> Result<HostMappedMap<'g>, DriverError> {
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
        Ok(HostMappedMap { offset: (start - first) as u64, mapping, raw: raw.clone() })
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
