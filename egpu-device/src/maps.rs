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

use egpu_maps::RawMap;

use crate::cuda::{DeviceBuffer, Gpu};
use crate::driver::DriverError;
use crate::translate::DeviceMap;

/// A host map's copy in GPU memory.
#[derive(Debug)]
pub struct DeviceMapBuffer<'g> {
    raw: RawMap,
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
        Ok(DeviceMapBuffer { raw: raw.clone(), buffer })
    }

    /// What the translation needs: the device address and the geometry.
    pub fn binding(&self) -> DeviceMap {
        DeviceMap { addr: self.buffer.device_ptr(), geometry: *self.raw.geometry() }
    }

    /// Copies the device's bytes back into the host map. Host code must not update the map
    /// while this runs (it would be overwritten).
    pub fn download(&self) -> Result<(), DriverError> {
        let (ptr, len) = self.raw.memory();
        // SAFETY: the map's memory is `len` writable bytes while `raw` lives, and the caller
        // keeps host writers away during the copy.
        unsafe { self.buffer.read_raw(ptr.as_ptr(), len) }
    }

    /// The host map.
    pub fn raw(&self) -> &RawMap {
        &self.raw
    }
}
