//! The tensor maps a program encodes, so that its tensor copies' probes see their bytes.
//!
//! A tensor copy's bytes are its tensor map's box, which the map's opaque encoding hides (see
//! [`egpu_ptx::inject::tensor_maps`]). Under the preloaded library, the encoders are interposed
//! and every map is recorded on its own. A program that instruments its own modules
//! ([`Instrumenter`](crate::instrument::Instrumenter)) records the maps it encodes in a
//! [`TensorMaps`] table in GPU memory, and hands the table to the instrumenter
//! ([`Instrumenter::tensor_maps`](crate::instrument::Instrumenter::tensor_maps)):
//!
//! ```no_run
//! # use egpu_device::cuda::Gpu;
//! # use egpu_device::instrument::Instrumenter;
//! # use egpu_device::tensor_maps::TensorMaps;
//! # fn encode() -> [u8; 128] { [0; 128] }
//! let gpu = Gpu::open(0)?;
//! let maps = TensorMaps::new(&gpu)?;
//! let mut instrumenter = Instrumenter::new(&gpu);
//! instrumenter.tensor_maps(&maps);
//! // Before a launch that passes it: a map cuTensorMapEncodeTiled encoded, f32, box 64 × 32.
//! let map: [u8; 128] = encode();
//! maps.record_tiled(&map, 7, &[64, 32], &[1, 1])?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use egpu_ptx::inject::tensor_maps::{
    BoxTable, MAP_BYTES, SLOT_BYTES, TABLE_BYTES, im2col_box_bytes, tiled_box_bytes,
};

use std::sync::{Mutex, PoisonError};

use crate::cuda::{DeviceBuffer, Gpu};
use crate::driver::DriverError;

/// Why a map was not recorded.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The box's bytes cannot be worked out from the encoding's arguments (a data type of
    /// packed sub-byte elements or one the driver does not define, a stride of 0, dimensions that
    /// disagree).
    #[error("the box's bytes are unknown for these arguments")]
    Unknown,
    /// Copying the slot to the GPU failed.
    #[error(transparent)]
    Driver(#[from] DriverError),
}

/// A table of tensor maps' box bytes in GPU memory, and its host copy. Maps can be recorded
/// at any time (through a shared reference): a kernel launched after the record finds them.
pub struct TensorMaps<'g> {
    table: Mutex<BoxTable>,
    device: DeviceBuffer<'g>,
}

impl std::fmt::Debug for TensorMaps<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorMaps").field("device", &self.device.device_ptr()).finish()
    }
}

impl<'g> TensorMaps<'g> {
    /// An empty table in `gpu`'s memory.
    pub fn new(gpu: &'g Gpu) -> Result<TensorMaps<'g>, DriverError> {
        let device = gpu.alloc(TABLE_BYTES)?; // zeroed: every slot empty
        Ok(TensorMaps { table: Mutex::new(BoxTable::new()), device })
    }

    /// The table's device address (what the injector bakes into the kernels).
    pub fn device_ptr(&self) -> u64 {
        self.device.device_ptr()
    }

    /// Records that copies of `map` move `bytes` bytes, in the host copy and on the GPU.
    pub fn record(&self, map: &[u8; MAP_BYTES], bytes: u32) -> Result<(), DriverError> {
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = table.record(map, bytes) {
            let data = table.slot_bytes(slot);
            // SAFETY: `data` is readable for its length; the slot is within the table.
            unsafe { self.device.write_raw_at(slot * SLOT_BYTES, data.as_ptr(), data.len()) }?;
        }
        Ok(())
    }

    /// Records a map `cuTensorMapEncodeTiled` encoded with data type `data_type`
    /// (`CUtensorMapDataType`), box `box_dim` and element strides `element_strides` (the rank's
    /// entries of each).
    pub fn record_tiled(
        &self,
        map: &[u8; MAP_BYTES],
        data_type: u32,
        box_dim: &[u32],
        element_strides: &[u32],
    ) -> Result<(), RecordError> {
        let bytes =
            tiled_box_bytes(data_type, box_dim, element_strides).ok_or(RecordError::Unknown)?;
        Ok(self.record(map, bytes)?)
    }

    /// Records a map `cuTensorMapEncodeIm2col` encoded with data type `data_type`, `channels`
    /// channels per pixel and `pixels` pixels per column.
    pub fn record_im2col(
        &self,
        map: &[u8; MAP_BYTES],
        data_type: u32,
        channels: u32,
        pixels: u32,
    ) -> Result<(), RecordError> {
        let bytes = im2col_box_bytes(data_type, channels, pixels).ok_or(RecordError::Unknown)?;
        Ok(self.record(map, bytes)?)
    }

    /// The bytes recorded for `map`, as a kernel finds them.
    pub fn bytes_of(&self, map: &[u8; MAP_BYTES]) -> Option<u32> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner).bytes_of(map)
    }
}
