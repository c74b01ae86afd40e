//! The far tier in process: a program that loads its own PTX through egpu emulates the slower
//! tier in its kernels, with no preloaded library (`examples/cxl_chase.rs` measures the waits
//! with it).
//!
//! ```no_run
//! use egpu_device::cuda::Gpu;
//! use egpu_host::cxl::{CxlSession, Lookup, Policy, Tier};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let ptx = "";
//! let gpu = Gpu::open(0)?;
//! let cxl = CxlSession::new(&gpu, &[])?;
//! let module = cxl.load_ptx(ptx)?; // every load, store and atomic asks the tier
//! cxl.set(&Tier::resolve(&Policy::All, &[], Lookup::Ranges, 200)?)?; // all memory 200 ns away
//! # Ok(())
//! # }
//! ```

use egpu_device::cuda::{Gpu, JitError};
use egpu_device::driver::DriverError;
use egpu_device::inject::InjectError;
use egpu_device::instrument::{Instrumenter, ProbedModule};
use egpu_device::maps::DeviceMapBuffer;
use egpu_device::translate::DeviceMap;
use egpu_maps::MapError;

use super::{Tier, TierError, far_access, far_access_capped};

/// Why a [`CxlSession`] could not be made, load a module or take a tier.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CxlError {
    /// A probe or its maps could not be built.
    #[error("the far tier's probes: {0}")]
    Probe(String),
    /// A map's copy in GPU memory could not be made or written.
    #[error("the far tier's maps on the GPU: {0}")]
    Driver(#[from] DriverError),
    /// A probe could not be attached.
    #[error("attaching the far tier's probes: {0}")]
    Attach(#[from] InjectError),
    /// A module could not be loaded.
    #[error(transparent)]
    Jit(#[from] JitError),
    /// The tier could not be written into its maps.
    #[error(transparent)]
    Tier(#[from] TierError),
}

impl From<MapError> for CxlError {
    fn from(e: MapError) -> CxlError {
        CxlError::Probe(e.to_string())
    }
}

/// The far tier's probes attached to the modules loaded through it, its maps in GPU memory.
/// The tier's maps are the process's (statics of `egpu-host`): sessions share one tier, the
/// last [`set`](Self::set)'s, as each copies it to its own maps' copies.
pub struct CxlSession<'g> {
    /// The tier's maps' copies, one per map (`TIER`, `FAR_RANGES`, `FAR_PAGES`).
    buffers: Vec<DeviceMapBuffer<'g>>,
    instrumenter: Instrumenter<'g>,
}

impl std::fmt::Debug for CxlSession<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CxlSession").field("maps", &self.buffers.len()).finish_non_exhaustive()
    }
}

impl<'g> CxlSession<'g> {
    /// The far tier's probes (loads, stores, atomics) attached to the kernels named in
    /// `kernels` (every kernel when empty), with no memory far until [`set`](Self::set).
    pub fn new(gpu: &'g Gpu, kernels: &[&str]) -> Result<CxlSession<'g>, CxlError> {
        Self::with_probes(gpu, kernels, far_access())
    }

    /// As [`new`](Self::new), with the probes that keep a tier's bandwidth cap
    /// ([`Tier::with_bandwidth`]) as well as its Δ.
    pub fn capped(gpu: &'g Gpu, kernels: &[&str]) -> Result<CxlSession<'g>, CxlError> {
        Self::with_probes(gpu, kernels, far_access_capped())
    }

    fn with_probes(
        gpu: &'g Gpu,
        kernels: &[&str],
        probes: [&'static egpu_probe::Probe; 3],
    ) -> Result<CxlSession<'g>, CxlError> {
        Tier::resolve(&super::Policy::None, &[], super::Lookup::Ranges, 0)?.write()?;
        // One copy per map, whichever probe names it first; each probe's table bound to them.
        let mut owners: Vec<usize> = Vec::new();
        let mut buffers: Vec<DeviceMapBuffer<'g>> = Vec::new();
        let mut tables: Vec<Vec<DeviceMap>> = Vec::new();
        for p in probes {
            let mut table = Vec::new();
            for raw in p.maps().map_err(|e| CxlError::Probe(e.to_string()))? {
                let at = raw.memory().0.as_ptr() as usize;
                let i = match owners.iter().position(|&o| o == at) {
                    Some(i) => i,
                    None => {
                        owners.push(at);
                        buffers.push(DeviceMapBuffer::upload(gpu, raw)?);
                        buffers.len() - 1
                    }
                };
                table.push(buffers[i].binding());
            }
            tables.push(table);
        }
        let mut instrumenter = Instrumenter::new(gpu);
        for (p, table) in probes.iter().zip(&tables) {
            let verified = p.verified().map_err(|e| CxlError::Probe(e.to_string()))?;
            instrumenter.attach(verified, table, kernels)?;
        }
        Ok(CxlSession { buffers, instrumenter })
    }

    /// Makes `tier` the far memory of the kernels launched from now on: written into the
    /// tier's maps, then copied to their copies in GPU memory. No kernel of the session may run
    /// meanwhile.
    pub fn set(&self, tier: &Tier) -> Result<(), CxlError> {
        tier.write()?;
        for b in &self.buffers {
            b.upload_device_shards()?;
        }
        Ok(())
    }

    /// Loads `ptx`, as it is and instrumented with the tier's probes.
    pub fn load_ptx<'s>(&'s self, ptx: &str) -> Result<ProbedModule<'s, 'g>, CxlError> {
        Ok(self.instrumenter.load(ptx)?)
    }

    /// The instrumenter the modules are loaded through.
    pub fn instrumenter(&self) -> &Instrumenter<'g> {
        &self.instrumenter
    }
}
