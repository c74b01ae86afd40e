//! `egpu mem` from Rust, in process: a program that loads its own PTX through egpu attaches the
//! sets to its modules and reads the same [`Recording`] back, with no preloaded library.
//!
//! ```no_run
//! use egpu_device::cuda::{Arg, Gpu};
//! use egpu_host::mem::{MemSession, Set, table};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let ptx = "";
//! let gpu = Gpu::open(0)?;
//! let mem = MemSession::new(&gpu, &[Set::Counts, Set::Timing, Set::Pattern])?;
//! let module = mem.load_ptx(ptx)?; // instrumented with the sets' probes
//! let x = gpu.alloc(4 << 20)?;
//! module.launch("scale", (128, 1, 1), (256, 1, 1), &[Arg::Ptr(&x)])?;
//! let recording = mem.recording()?; // synchronises and reads the device maps back
//! println!("{}", table::render(&recording));
//! # Ok(())
//! # }
//! ```
//!
//! What it does, and where the preloaded library does the same:
//!
//! | step | here | under `egpu mem run` |
//! |---|---|---|
//! | the sets' probes | [`super::pack`], verified once when built | the same pack, read from text |
//! | their maps | one [`RawMap`] per name in this process, copied to GPU memory ([`DeviceMapBuffer`]) | in shared memory, a part in GPU memory per context, merged while kernels run |
//! | instrumenting | an [`Instrumenter`] with every probe attached | the interposed module loads |
//! | kernels, launches | the [`Injection`] of each module loaded, the instrumenter's launch counts | the same, from the interposed calls |
//! | the header | the driver, through [`Gpu::info`] | the driver, through its interposed entry points |
//! | reading back | [`MemSession::recording`]: synchronise, download, [`Recording::collect`] | at exit, after the last merge |
//!
//! A cudarc program does the same over its own context (feature `cudarc-interop`): the session
//! made on `Gpu::from_cudarc(&ctx)`, its modules loaded with `MemSession::load_cudarc`, their
//! kernels launched through cudarc's builder as `ProbedCudaFunction::launch_builder` gives it.
//!
//! The maps' device copies are bound without per-SM copies of their slots (no `spread`), so adds
//! to one counter meet at one address, as in `egpu::device`'s own examples: the figures are the
//! same, the cost on the heaviest kernels higher than under the preloaded library. The
//! `timeline` set's ring is in GPU memory too, written a claim per record (not by the batch: no
//! host thread drains it while kernels run), and drained when the session reads it back
//! ([`MemSession::drain`], [`MemSession::recording`]): each SM's ring holds
//! [`RECORDS_PER_SM`](super::timeline::RECORDS_PER_SM) records between drains, and drops and
//! counts the rest.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, PoisonError};

use egpu_device::GpuInfo;
use egpu_device::cuda::{Gpu, JitError};
use egpu_device::driver::DriverError;
use egpu_device::inject::{InjectError, Injection, Sample};
use egpu_device::instrument::{Instrumenter, ProbedModule};
use egpu_device::maps::DeviceMapBuffer;
use egpu_device::translate::DeviceMap;
use egpu_ebpf::verifier::Verified;
use egpu_ebpf::{AttachPoint, DeviceEvent, kernel_id};
use egpu_maps::{MapError, Placement, RawMap};

use super::record::{FORMAT, VERSION, kernel_hex};
use super::windows::{KEEP, Timeline};
use super::{Header, PageSize, Recording, Sampling, Seen, Set, egpu_build, pack_sampled};
use crate::pack::PackError;

/// Why a [`MemSession`] could not be made, load a module or read its recording.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MemError {
    /// A set that runs under the preloaded library only.
    #[error(
        "the `{0}` set runs under `egpu mem run` only: in process, egpu does not see the program's allocations"
    )]
    NotInProcess(Set),
    /// The sets' probes could not be put in a pack.
    #[error("the sets' probes: {0}")]
    Pack(#[from] PackError),
    /// A map of the sets could not be made.
    #[error("map `{name}`: {source}")]
    Map {
        /// The map's name.
        name: String,
        /// Why.
        #[source]
        source: MapError,
    },
    /// Two probes declare a map of one name with different layouts.
    #[error("map `{name}` is declared twice with different layouts")]
    Layout {
        /// The map's name.
        name: String,
    },
    /// The instrumenter refused a probe (the GPU cannot run it).
    #[error("probe `{probe}`: {source}")]
    Attach {
        /// The probe's name.
        probe: String,
        /// Why.
        #[source]
        source: InjectError,
    },
    /// The driver failed: GPU memory for the maps, a copy, the device's attributes.
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// The driver's JIT refused a module as the program gave it (not instrumented).
    #[error(transparent)]
    Load(#[from] JitError),
}

/// The sets' probes and maps, before any GPU: what a [`MemSession`] binds to GPU memory.
#[derive(Debug)]
pub(crate) struct Plan {
    /// The sets, each once, in [`Set::ALL`]'s order.
    pub(crate) sets: Vec<Set>,
    /// The pages the `pages` set counts by.
    pub(crate) page: PageSize,
    /// What the `timeline` set samples.
    pub(crate) sampling: Sampling,
    /// Every map of the sets, by the name the recording reads it by, each once.
    pub(crate) maps: Vec<(String, RawMap)>,
    /// The device probes: name, program, and the index in `maps` of each map of its table.
    pub(crate) probes: Vec<(String, Verified, Vec<usize>)>,
    /// The warps each probe runs in, as [`Plan::probes`].
    pub(crate) samples: Vec<Sample>,
}

impl Plan {
    /// The sets' pack, with a map in this process's memory for each map name it declares.
    pub(crate) fn new(sets: &[Set], page: PageSize, sampling: Sampling) -> Result<Plan, MemError> {
        let sets: Vec<Set> = Set::ALL.into_iter().filter(|s| sets.contains(s)).collect();
        if sets.contains(&Set::Allocs) {
            return Err(MemError::NotInProcess(Set::Allocs));
        }
        let pack = pack_sampled(&sets, page, sampling)?;
        let mut maps: Vec<(String, RawMap)> = Vec::new();
        let (mut probes, mut samples) = (Vec::new(), Vec::new());
        for probe in pack.probes() {
            let mut indices = Vec::new();
            for (def, &geometry) in probe.program.program().maps().iter().zip(&probe.maps) {
                let index = match maps.iter().position(|(name, _)| *name == def.name) {
                    Some(i) if *maps[i].1.geometry() == geometry => i,
                    Some(_) => return Err(MemError::Layout { name: def.name.clone() }),
                    None => {
                        let raw = RawMap::create(geometry, &Placement::Process)
                            .map_err(|source| MemError::Map { name: def.name.clone(), source })?;
                        maps.push((def.name.clone(), raw));
                        maps.len() - 1
                    }
                };
                indices.push(index);
            }
            // Every probe of the sets runs on the device.
            if matches!(probe.program.program().attach_point(), AttachPoint::Device(_)) {
                probes.push((probe.name.clone(), probe.program.clone(), indices));
                samples.push(probe.sample);
            }
        }
        Ok(Plan { sets, page, sampling, maps, probes, samples })
    }

    /// The index in [`Plan::maps`] of the `timeline` set's ring, when the plan has the set.
    pub(crate) fn timeline(&self) -> Option<usize> {
        self.maps.iter().position(|(name, _)| name == Set::Timeline.map())
    }

    /// An empty timeline for the plan's records, keeping a sample of [`KEEP`] of them.
    pub(crate) fn new_timeline(&self) -> Timeline {
        Timeline::new(self.sampling.n(), KEEP)
    }

    /// The timeline's windows, sample of records and drops (those counted in ring `ring` of
    /// [`Plan::maps`]) put in `recording`, the windows' length chosen per kernel.
    pub(crate) fn finish_timeline(
        &self,
        timeline: &Timeline,
        ring: usize,
        recording: &mut Recording,
    ) {
        timeline.finish_with_ring(recording, None, &self.maps[ring].1);
    }

    /// Each probe's map bindings, map `i` of [`Plan::maps`] at `addresses[i]` (its device copy).
    pub(crate) fn bindings(&self, addresses: &[u64]) -> Vec<Vec<DeviceMap>> {
        self.probes
            .iter()
            .map(|(_, _, indices)| {
                indices
                    .iter()
                    .map(|&i| DeviceMap {
                        addr: addresses.get(i).copied().unwrap_or(0),
                        geometry: *self.maps[i].1.geometry(),
                        live: false,
                        spread: 0,
                        drained: false,
                    })
                    .collect()
            })
            .collect()
    }

    /// The recording's header on `gpu` (the device fields empty without one).
    pub(crate) fn header(&self, gpu: Option<&GpuInfo>) -> Header {
        let mut header = Header {
            format: FORMAT.into(),
            version: VERSION,
            egpu: egpu_build(),
            pid: std::process::id(),
            command: std::env::args().collect::<Vec<_>>().join(" "),
            sets: self.sets.iter().map(|s| s.name().to_owned()).collect(),
            page_bytes: if self.sets.contains(&Set::Pages) { self.page.bytes() } else { 0 },
            ..Header::default()
        };
        if let Some(gpu) = gpu {
            let (major, minor) = gpu.driver_cuda_version();
            header.device = gpu.name.clone();
            header.driver = format!("{major}.{minor}");
            header.sms = gpu.sm_count;
            header.peak_bytes_per_second = gpu.peak_bytes_per_second();
        }
        header
    }
}

/// A site: its kernel's id and its index among the kernel's observed accesses.
pub type SiteKey = (u64, u32);
/// A site's PTX line, and what it does (`load`, `store`, `atomic`).
pub type SiteLine = (u32, &'static str);

/// The access sites of an instrumented module, each once (the injection lists a site per probe
/// there), by its kernel's id and its index: its PTX line and what it does (`load`, `store`,
/// `atomic`), [`Seen::site`]'s answers.
pub fn site_lines(injection: &Injection) -> Vec<(SiteKey, SiteLine)> {
    let mut sites: Vec<_> = injection
        .sites
        .iter()
        .filter_map(|s| {
            let access = match s.event {
                DeviceEvent::GlobalLoad => "load",
                DeviceEvent::GlobalStore => "store",
                DeviceEvent::GlobalAtomic => "atomic",
                _ => return None,
            };
            let line = u32::try_from(s.line).unwrap_or(u32::MAX);
            Some(((kernel_id(&s.function), s.index), (line, access)))
        })
        .collect();
    sites.sort_unstable();
    sites.dedup();
    sites
}

/// What the modules loaded were instrumented with: which kernels, their names, their sites.
#[derive(Debug, Default)]
pub(crate) struct Injected {
    /// The ids of the kernels instrumented.
    kernels: BTreeSet<u64>,
    /// Every kernel's name, by id.
    names: BTreeMap<u64, String>,
    /// The sites' PTX lines and what they do.
    sites: BTreeMap<SiteKey, SiteLine>,
}

impl Injected {
    /// Adds a module's injection; only the kernels in `selected` were instrumented, when it
    /// names any.
    pub(crate) fn add(&mut self, injection: &Injection, selected: &[String]) {
        for kernel in &injection.kernels {
            let id = kernel_id(kernel);
            self.names.insert(id, kernel.clone());
            if selected.is_empty() || selected.contains(kernel) {
                self.kernels.insert(id);
            }
        }
        self.sites.extend(site_lines(injection));
    }

    /// The recording of what `maps` hold, for the kernels launched (`launched`: name and
    /// launches).
    pub(crate) fn collect(
        &self,
        header: Header,
        maps: &[(String, RawMap)],
        launched: &[(String, u64)],
    ) -> Recording {
        let launched: Vec<(u64, u64, String)> =
            launched.iter().map(|(name, n)| (kernel_id(name), *n, name.clone())).collect();
        let seen = Seen {
            launched: &launched,
            instrumented: &|id| self.kernels.contains(&id),
            name: &|id| self.names.get(&id).cloned().unwrap_or_else(|| kernel_hex(id)),
            site: &|kernel, site| self.sites.get(&(kernel, site)).copied(),
        };
        Recording::collect(header, maps, &seen)
    }
}

/// The `egpu mem` sets attached to the modules a program loads through it, on one GPU.
///
/// Made with the sets ([`MemSession::new`]); the modules loaded with [`MemSession::load_ptx`]
/// run instrumented (every kernel, or those named to [`MemSession::with_options`]); their
/// kernels are launched as usual ([`ProbedModule::launch`]); [`MemSession::recording`] reads
/// what the sets measured so far, as `egpu mem run` records it.
pub struct MemSession<'g> {
    gpu: &'g Gpu,
    plan: Plan,
    /// The device copy of each map of `plan.maps`, in its order.
    buffers: Vec<DeviceMapBuffer<'g>>,
    instrumenter: Instrumenter<'g>,
    /// The kernels the probes attach to; empty: every kernel.
    kernels: Vec<String>,
    /// The header, asked of the driver once.
    header: Header,
    injected: Mutex<Injected>,
    /// The `timeline` set's records drained so far, with its ring's index in `plan.maps`.
    timeline: Option<(usize, Mutex<Timeline>)>,
}

impl std::fmt::Debug for MemSession<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemSession")
            .field("sets", &self.plan.sets)
            .field("kernels", &self.kernels)
            .field("instrumenter", &self.instrumenter)
            .finish_non_exhaustive()
    }
}

impl<'g> MemSession<'g> {
    /// The sets (each once; `pages` by pages of 2 MiB, `timeline` sampling one warp in 32)
    /// attached to every kernel of the modules loaded through the session.
    pub fn new(gpu: &'g Gpu, sets: &[Set]) -> Result<MemSession<'g>, MemError> {
        MemSession::with_options(gpu, sets, PageSize::default(), &[])
    }

    /// [`MemSession::new`], the `pages` set counting by pages of `page`, the probes attached to
    /// the kernels named in `kernels` only (mangled names; empty: every kernel).
    pub fn with_options(
        gpu: &'g Gpu,
        sets: &[Set],
        page: PageSize,
        kernels: &[&str],
    ) -> Result<MemSession<'g>, MemError> {
        MemSession::with_sampling(gpu, sets, page, kernels, Sampling::DEFAULT)
    }

    /// [`MemSession::with_options`], the `timeline` set sampling as `sampling` says.
    pub fn with_sampling(
        gpu: &'g Gpu,
        sets: &[Set],
        page: PageSize,
        kernels: &[&str],
        sampling: Sampling,
    ) -> Result<MemSession<'g>, MemError> {
        let plan = Plan::new(sets, page, sampling)?;
        let header = plan.header(Some(&gpu.info()?));
        let buffers = plan
            .maps
            .iter()
            .map(|(_, raw)| DeviceMapBuffer::upload(gpu, raw))
            .collect::<Result<Vec<_>, _>>()?;
        let addresses: Vec<u64> = buffers.iter().map(|b| b.binding().addr).collect();
        let mut instrumenter = Instrumenter::new(gpu);
        let bindings = plan.bindings(&addresses);
        for (((name, program, _), maps), &sample) in
            plan.probes.iter().zip(bindings).zip(&plan.samples)
        {
            instrumenter
                .attach_sampled(program, &maps, kernels, sample)
                .map_err(|source| MemError::Attach { probe: name.clone(), source })?;
        }
        let timeline = plan.timeline().map(|i| (i, Mutex::new(plan.new_timeline())));
        Ok(MemSession {
            gpu,
            plan,
            buffers,
            instrumenter,
            kernels: kernels.iter().map(|k| (*k).to_owned()).collect(),
            header,
            injected: Mutex::new(Injected::default()),
            timeline,
        })
    }

    /// The sets, each once, in [`Set::ALL`]'s order.
    pub fn sets(&self) -> &[Set] {
        &self.plan.sets
    }

    /// The instrumenter the modules are loaded through: to pause the probes, sample launches.
    pub fn instrumenter(&self) -> &Instrumenter<'g> {
        &self.instrumenter
    }

    /// Loads `ptx`, as it is and instrumented with the sets' probes. A module that cannot be
    /// instrumented runs as it came, with why ([`ProbedModule::fallback`]); its kernels are in
    /// the recording with their launches, not instrumented. Fails only when the original does
    /// not load.
    pub fn load_ptx<'s>(&'s self, ptx: &str) -> Result<ProbedModule<'s, 'g>, MemError> {
        let module = self.instrumenter.load(ptx)?;
        if let Some(injection) = module.injection() {
            self.injected
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .add(injection, &self.kernels);
        }
        Ok(module)
    }

    /// [`MemSession::load_ptx`] for a cudarc program: loads `ptx` into `context` (the
    /// session's GPU's, `Gpu::from_cudarc`) through cudarc's `load_module`, as it is and
    /// instrumented with the sets' probes; its kernels' launches through
    /// [`ProbedCudaFunction::launch_builder`](egpu_device::cudarc_interop::ProbedCudaFunction::launch_builder)
    /// are counted in the recording. Fails only when the original does not load.
    #[cfg(feature = "cudarc-interop")]
    pub fn load_cudarc<'s>(
        &'s self,
        context: &std::sync::Arc<egpu_device::cudarc_interop::CudaContext>,
        ptx: &egpu_device::cudarc_interop::Ptx,
    ) -> Result<egpu_device::cudarc_interop::ProbedCudaModule<'s, 'g>, MemError> {
        let module = self.instrumenter.load_cudarc(context, ptx)?;
        if let Some(injection) = module.injection() {
            self.injected
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .add(injection, &self.kernels);
        }
        Ok(module)
    }

    /// What the sets measured since the session began: waits for the GPU's work, copies the
    /// maps back from GPU memory and reads them ([`Recording::collect`]), beside the launches
    /// the modules loaded through the session made.
    pub fn recording(&self) -> Result<Recording, MemError> {
        self.gpu.synchronize()?;
        for (i, buffer) in self.buffers.iter().enumerate() {
            if self.timeline.as_ref().is_none_or(|(t, _)| *t != i) {
                buffer.download()?;
            }
        }
        self.drain_synchronized()?;
        let launched = self.instrumenter.launched();
        let injected = self.injected.lock().unwrap_or_else(PoisonError::into_inner);
        let mut recording = injected.collect(self.header.clone(), &self.plan.maps, &launched);
        if let Some((i, timeline)) = &self.timeline {
            let timeline = timeline.lock().unwrap_or_else(PoisonError::into_inner);
            self.plan.finish_timeline(&timeline, *i, &mut recording);
        }
        Ok(recording)
    }

    /// Moves the `timeline` set's records out of GPU memory, making room for more: waits for
    /// the GPU's work, copies the ring back, keeps its records (they reach the next
    /// [`MemSession::recording`]) and gives the ring its room again. A program that runs more
    /// than a ring holds between two recordings calls it between launches; records that find
    /// their SM's ring full are dropped and counted. Returns the records moved; 0 without the
    /// set.
    pub fn drain(&self) -> Result<u64, MemError> {
        if self.timeline.is_none() {
            return Ok(0);
        }
        self.gpu.synchronize()?;
        self.drain_synchronized()
    }

    /// [`MemSession::drain`], the GPU's work done.
    fn drain_synchronized(&self) -> Result<u64, MemError> {
        let Some((i, timeline)) = &self.timeline else { return Ok(0) };
        let (buffer, (name, raw)) = (&self.buffers[*i], &self.plan.maps[*i]);
        buffer.download()?;
        let moved = timeline
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(raw)
            .map_err(|source| MemError::Map { name: name.clone(), source })?;
        buffer.upload_device_shards()?;
        Ok(moved)
    }
}
