//! Loading modules through egpu and launching their kernels, instrumented.
//!
//! An [`Instrumenter`] holds the device probes attached to a GPU. [`Instrumenter::load`] loads a
//! module's PTX as it is and, next to it, instrumented with the probes; [`ProbedModule::launch`]
//! launches the instrumented kernel, or the original one when
//!
//! - the probes are paused ([`Instrumenter::pause`]; [`resume`](Instrumenter::resume) to
//!   instrument again),
//! - the launch is not sampled ([`Instrumenter::sample_every`]: every Nth launch of a kernel is
//!   instrumented, the first one included),
//! - the instrumented module could not be made or loaded (the injector's error on this module's
//!   PTX, or the JIT's error with its log), or a launch of the instrumented kernel failed for
//!   lack of registers (`CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES`): egpu then says why once, on
//!   standard error and in [`ProbedModule::fallback`] or [`ProbedModule::kernel_fallback`], and
//!   the program runs on, uninstrumented.
//!
//! A probe is a [`Verified`] program, verified once wherever it came from. It is translated once
//! when attached ([`Instrumenter::attach`], the same verb and shape as the host's
//! `HostProbes::attach`), so a probe the GPU cannot run is refused there, before any kernel runs
//! with it. Modules loaded before an attach or a detach keep the probes they were loaded with.
//!
//! Instrumented modules are cached by a 64-bit hash of their content (the original PTX, the
//! probes' bytecode and attach points, the kernels they select and their maps' bindings), so
//! loading the same module again with the same probes costs one hash and no JIT.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};

use egpu_ebpf::verifier::Verified;

use crate::cuda::{Arg, Gpu, JitError, Kernel, Module};
use crate::driver::DriverError;
use crate::inject::{
    Coverage, DeviceProbe, InjectError, InjectOptions, Injection, Kernels, Sample, WarpSampling,
    inject_with,
};
use crate::raw::Stream;
use crate::tensor_maps::TensorMaps;
use crate::translate::{Context, DeviceMap, Options, translate};
use egpu_ebpf::{AttachPoint, DeviceEvent};

/// A probe attached to kernels, owned by an [`Instrumenter`].
#[derive(Clone, Debug)]
struct Attached {
    id: DeviceProbeId,
    /// The verified program; its attach point says where it runs.
    program: Verified,
    /// The kernels it attaches to, by mangled name; empty for all kernels.
    kernels: Vec<String>,
    /// The device side of each map of its map table, in order.
    maps: Vec<DeviceMap>,
    /// The warps it runs in ([`Instrumenter::attach_sampled`]).
    sample: Sample,
}

/// Names a probe attached to an [`Instrumenter`], for [`Instrumenter::detach`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceProbeId(u64);

/// Why an instrumented module or kernel is not used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Fallback {
    /// The injector refused the module or a probe.
    #[error("the module could not be instrumented: {0}")]
    Inject(String),
    /// The driver's JIT refused the instrumented module.
    #[error("the instrumented module did not load: {0}")]
    Load(JitError),
    /// A launch of the instrumented kernel failed for lack of resources.
    #[error("kernel `{kernel}` could not launch instrumented: {error}")]
    Launch {
        /// The kernel.
        kernel: String,
        /// The driver's error.
        error: DriverError,
    },
}

/// Device probes attached to a GPU, and the modules instrumented with them.
pub struct Instrumenter<'g> {
    pub(crate) gpu: &'g Gpu,
    probes: Vec<Attached>,
    next_id: u64,
    paused: AtomicBool,
    every: AtomicU64,
    cache: Mutex<HashMap<u64, Arc<Loaded<'g>>>>,
    /// Launches of each kernel, by name, over every module loaded through this instrumenter.
    launched: Mutex<HashMap<String, u64>>,
    /// Where tensor copies look their bytes up.
    tensor_maps: Option<&'g TensorMaps<'g>>,
    /// The SMs' rated clock, which probes' waits count cycles by (`None`: unknown).
    sm_clock_khz: Option<u32>,
}

impl std::fmt::Debug for Instrumenter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instrumenter")
            .field("probes", &self.probes.len())
            .field("paused", &self.paused.load(Relaxed))
            .field("every", &self.every.load(Relaxed))
            .finish_non_exhaustive()
    }
}

/// An instrumented module, with what the injector did to it (its coverage kept apart, for
/// [`ProbedModule::coverage`]), or why there is none.
type Loaded<'g> = Result<(Module<'g>, Coverage, Injection), Fallback>;

/// A module loaded through an [`Instrumenter`]: the original, and the instrumented one where
/// there is one.
pub struct ProbedModule<'i, 'g> {
    instrumenter: &'i Instrumenter<'g>,
    original: Module<'g>,
    instrumented: Arc<Loaded<'g>>,
    launches: Mutex<HashMap<String, u64>>,
    /// Kernels whose instrumented launch failed, with why.
    failed: Mutex<HashMap<String, Fallback>>,
    warned: AtomicBool,
}

impl std::fmt::Debug for ProbedModule<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbedModule")
            .field("instrumented", &self.instrumented.is_ok())
            .finish_non_exhaustive()
    }
}

/// How a launch ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ran {
    /// The instrumented kernel ran.
    Instrumented,
    /// The original kernel ran.
    Original,
}

/// The 64-bit FNV-1a hash of byte strings, each preceded by its length.
fn content_hash<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in (part.len() as u64).to_le_bytes().iter().chain(part) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

impl<'g> Instrumenter<'g> {
    /// An instrumenter for the modules `gpu` will load through it, with no probe attached yet.
    pub fn new(gpu: &'g Gpu) -> Instrumenter<'g> {
        Instrumenter {
            gpu,
            probes: Vec::new(),
            next_id: 0,
            paused: AtomicBool::new(false),
            every: AtomicU64::new(1),
            cache: Mutex::new(HashMap::new()),
            launched: Mutex::new(HashMap::new()),
            tensor_maps: None,
            sm_clock_khz: gpu.info().ok().map(|i| i.sm_clock_khz).filter(|&k| k > 0),
        }
    }

    /// Has the tensor copies of the modules loaded from now on take their bytes from `maps`
    /// (without a table, their `size` is 0).
    pub fn tensor_maps(&mut self, maps: &'g TensorMaps<'g>) {
        self.tensor_maps = Some(maps);
    }

    /// Attaches a verified program to the kernels named (mangled names; empty for every kernel)
    /// of the modules loaded from now on, at the device attach point the program names, with
    /// entry `n` of its map table bound to `maps[n]`.
    ///
    /// The probe is translated once here, so a probe that cannot run on the GPU (a helper the
    /// GPU lacks, a map without a binding or with one that does not match it, a host attach
    /// point) is refused now, with the reason, before any kernel runs with it.
    pub fn attach(
        &mut self,
        verified: &Verified,
        maps: &[DeviceMap],
        kernels: &[&str],
    ) -> Result<DeviceProbeId, InjectError> {
        let probe = self.probes.len();
        let context = match verified.program().attach_point() {
            AttachPoint::Device(DeviceEvent::KernelEntry | DeviceEvent::KernelExit) => {
                Context::Kernel { kernel_id: 0 }
            }
            AttachPoint::Device(e) => {
                Context::load_store(0, "%egpu_addr".into(), 4, 0, e != DeviceEvent::GlobalLoad)
            }
            attach => return Err(InjectError::NotDevice { probe, attach }),
        };
        let mut options = Options::new("egpu", context);
        options.maps = maps.to_vec();
        translate(verified, &options).map_err(|error| InjectError::Translate { probe, error })?;
        let id = DeviceProbeId(self.next_id);
        self.next_id += 1;
        self.probes.push(Attached {
            id,
            program: verified.clone(),
            kernels: kernels.iter().map(|k| (*k).to_owned()).collect(),
            maps: maps.to_vec(),
            sample: Sample::EVERY,
        });
        Ok(id)
    }

    /// [`attach`](Self::attach), the probe running in the warps `sample` says only (the
    /// injector's [`WarpSampling`]): refused when a probe attached before runs in others.
    pub fn attach_sampled(
        &mut self,
        verified: &Verified,
        maps: &[DeviceMap],
        kernels: &[&str],
        sample: Sample,
    ) -> Result<DeviceProbeId, InjectError> {
        let samples = self.probes.iter().map(|p| p.sample).chain([sample]);
        WarpSampling::of(samples).map_err(InjectError::Sampling)?;
        let id = self.attach(verified, maps, kernels)?;
        if let Some(p) = self.probes.last_mut() {
            p.sample = sample;
        }
        Ok(id)
    }

    /// Detaches a probe from the modules loaded from now on. False when it was not attached.
    pub fn detach(&mut self, id: DeviceProbeId) -> bool {
        let before = self.probes.len();
        self.probes.retain(|p| p.id != id);
        self.probes.len() != before
    }

    /// Later launches run the original kernels.
    pub fn pause(&self) {
        self.paused.store(true, Relaxed);
    }

    /// Later launches run instrumented again (as sampled).
    pub fn resume(&self) {
        self.paused.store(false, Relaxed);
    }

    /// Instruments every `n`th launch of each kernel (1: every launch; 0 counts as 1).
    pub fn sample_every(&self, n: u64) {
        self.every.store(n.max(1), Relaxed);
    }

    /// Instrumented modules in the cache (including those that failed, with why).
    pub fn cached(&self) -> usize {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Launches of each kernel over every module loaded through this instrumenter, instrumented
    /// or not, by kernel name (sorted).
    pub fn launched(&self) -> Vec<(String, u64)> {
        let launched = self.launched.lock().unwrap_or_else(PoisonError::into_inner);
        let mut counts: Vec<(String, u64)> =
            launched.iter().map(|(k, n)| (k.clone(), *n)).collect();
        counts.sort();
        counts
    }

    /// The key of `ptx` instrumented with this instrumenter's probes.
    fn key(&self, ptx: &str) -> u64 {
        let table = self.tensor_maps.map_or(0, TensorMaps::device_ptr);
        let mut parts: Vec<Vec<u8>> = vec![ptx.as_bytes().to_vec(), table.to_le_bytes().to_vec()];
        for p in &self.probes {
            parts.push(p.program.program().to_bytes());
            parts.push(p.program.program().attach_point().to_string().into_bytes());
            parts.push(p.kernels.join("\n").into_bytes());
            for m in &p.maps {
                parts.push(format!("{:x} {:?} {}", m.addr, m.geometry, m.live).into_bytes());
            }
        }
        content_hash(parts.iter().map(Vec::as_slice))
    }

    /// Loads `ptx`, as it is and instrumented. Fails only when the original does not load.
    pub fn load<'i>(&'i self, ptx: &str) -> Result<ProbedModule<'i, 'g>, JitError> {
        let original = self.gpu.load_ptx(ptx)?;
        let key = self.key(ptx);
        let cached = self.cache.lock().unwrap_or_else(PoisonError::into_inner).get(&key).cloned();
        let instrumented = match cached {
            Some(loaded) => loaded,
            None => {
                let loaded = Arc::new(self.instrument(ptx));
                self.cache
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(key, Arc::clone(&loaded));
                loaded
            }
        };
        Ok(ProbedModule {
            instrumenter: self,
            original,
            instrumented,
            launches: Mutex::new(HashMap::new()),
            failed: Mutex::new(HashMap::new()),
            warned: AtomicBool::new(false),
        })
    }

    /// `ptx` instrumented with the attached probes, not loaded: the PTX with what the injector
    /// did (kernels, sites, coverage), for a program that loads modules through another
    /// wrapper (its raw handles: [`crate::raw`]; cudarc: the `cudarc-interop` feature). The
    /// instrumented kernels take the parameters the originals take: nothing is passed to them
    /// per launch (`launch_id` is `%gridid`), so a launch is the same call.
    ///
    /// # Errors
    ///
    /// The injector's: PTX it cannot read, a probe it cannot place.
    pub fn instrument_ptx(&self, ptx: &str) -> Result<Injection, InjectError> {
        let names: Vec<Vec<&str>> =
            self.probes.iter().map(|p| p.kernels.iter().map(String::as_str).collect()).collect();
        let probes: Vec<DeviceProbe<'_>> = self
            .probes
            .iter()
            .zip(&names)
            .map(|(p, names)| DeviceProbe {
                program: &p.program,
                kernels: if names.is_empty() { Kernels::All } else { Kernels::Named(names) },
                maps: &p.maps,
            })
            .collect();
        // One sampling for all, as `attach_sampled` checked.
        let sampled = WarpSampling::of(self.probes.iter().map(|p| p.sample)).ok().flatten();
        let options = InjectOptions {
            tensor_boxes: self.tensor_maps.map(TensorMaps::device_ptr),
            sampled,
            sm_clock_khz: self.sm_clock_khz,
            ..InjectOptions::default()
        };
        inject_with(ptx, &probes, &options)
    }

    fn instrument(&self, ptx: &str) -> Loaded<'g> {
        let injected = self.instrument_ptx(ptx).map_err(|e| Fallback::Inject(e.to_string()))?;
        let module = self.gpu.load_ptx(&injected.ptx).map_err(Fallback::Load)?;
        Ok((module, injected.coverage(), injected))
    }

    /// Counts a launch of kernel `name`, in `module`'s counts and this instrumenter's: the
    /// kernel's launches in `module` before it (from 0).
    pub(crate) fn note_launch(&self, module: &Mutex<HashMap<String, u64>>, name: &str) -> u64 {
        let n = {
            let mut launches = module.lock().unwrap_or_else(PoisonError::into_inner);
            let n = launches.entry(name.to_owned()).or_insert(0);
            *n += 1;
            *n - 1
        };
        let mut all = self.launched.lock().unwrap_or_else(PoisonError::into_inner);
        *all.entry(name.to_owned()).or_insert(0) += 1;
        n
    }

    /// Whether a kernel's launch number `n` (from 0, in its module) runs instrumented: probes
    /// attached, not paused, and sampled (`n % every == 0`).
    pub(crate) fn wants(&self, n: u64) -> bool {
        let every = self.every.load(Relaxed);
        !self.paused.load(Relaxed) && n.is_multiple_of(every) && !self.probes.is_empty()
    }
}

impl ProbedModule<'_, '_> {
    /// How many of the module's global memory instructions the probes observe (`observed` of
    /// `memory_instructions`, and the others with why); `None` when it runs uninstrumented.
    pub fn coverage(&self) -> Option<&Coverage> {
        self.instrumented.as_ref().as_ref().ok().map(|(_, coverage, _)| coverage)
    }

    /// What the injector did to the module (its PTX, kernels and sites); `None` when it runs
    /// uninstrumented.
    pub fn injection(&self) -> Option<&Injection> {
        self.instrumented.as_ref().as_ref().ok().map(|(_, _, injection)| injection)
    }

    /// Why the module runs uninstrumented, if it does.
    pub fn fallback(&self) -> Option<Fallback> {
        self.instrumented.as_ref().as_ref().err().cloned()
    }

    /// Why kernel `name` runs uninstrumented, if it does.
    pub fn kernel_fallback(&self, name: &str) -> Option<Fallback> {
        let failed = self.failed.lock().unwrap_or_else(PoisonError::into_inner);
        failed.get(name).cloned().or_else(|| self.fallback())
    }

    fn warn_once(&self, why: &Fallback) {
        if !self.warned.swap(true, Relaxed) {
            eprintln!("egpu: running uninstrumented: {why}");
        }
    }

    /// Launches kernel `name` and waits for it: instrumented when the probes are not paused, the
    /// launch is sampled and the instrumented kernel is usable, else the original.
    pub fn launch(
        &self,
        name: &str,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        args: &[Arg<'_>],
    ) -> Result<Ran, DriverError> {
        self.launch_with(None, name, grid, block, args)
    }

    /// [`launch`](Self::launch) on `stream` (another wrapper's, through [`Stream::from_raw`]),
    /// without waiting: the stream's [`synchronize`](Stream::synchronize) waits for it, after
    /// which the probes' maps can be read back. A launch that fails for lack of registers
    /// instrumented is made again with the original kernel, as [`launch`](Self::launch) does.
    pub fn launch_on(
        &self,
        stream: &Stream<'_>,
        name: &str,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        args: &[Arg<'_>],
    ) -> Result<Ran, DriverError> {
        self.launch_with(Some(stream), name, grid, block, args)
    }

    fn launch_with(
        &self,
        stream: Option<&Stream<'_>>,
        name: &str,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        args: &[Arg<'_>],
    ) -> Result<Ran, DriverError> {
        let gpu = self.instrumenter.gpu;
        let run = |kernel: &Kernel<'_>| match stream {
            Some(stream) => gpu.launch_on(stream, kernel, grid, block, args),
            None => gpu.launch(kernel, grid, block, args),
        };
        let wanted = self.instrumenter.wants(self.instrumenter.note_launch(&self.launches, name));
        let usable = match self.instrumented.as_ref() {
            Ok((module, ..)) if wanted && self.kernel_fallback(name).is_none() => Some(module),
            Err(why) if wanted => {
                self.warn_once(why);
                None
            }
            _ => None,
        };
        if let Some(module) = usable {
            let kernel = module.kernel(name)?;
            match run(&kernel) {
                Ok(()) => return Ok(Ran::Instrumented),
                Err(error) if out_of_resources(&error) => {
                    let why = Fallback::Launch { kernel: name.to_owned(), error };
                    self.warn_once(&why);
                    self.failed
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(name.to_owned(), why);
                }
                Err(error) => return Err(error),
            }
        }
        let kernel = self.original.kernel(name)?;
        run(&kernel)?;
        Ok(Ran::Original)
    }
}

/// A launch that failed for lack of registers or threads per block
/// (`CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES`). Instrumentation adds no shared memory, so no other
/// error can come from it.
pub(crate) fn out_of_resources(error: &DriverError) -> bool {
    matches!(error.code(), Some(701))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_hash_separates_parts() {
        let a = content_hash([b"ab".as_slice(), b"c".as_slice()]);
        let b = content_hash([b"a".as_slice(), b"bc".as_slice()]);
        assert_ne!(a, b);
        assert_eq!(a, content_hash([b"ab".as_slice(), b"c".as_slice()]));
    }

    #[test]
    fn out_of_resources_is_701_only() {
        let e = |code| DriverError::Call { call: "cuLaunchKernel", code, name: String::new() };
        assert!(out_of_resources(&e(701)));
        assert!(!out_of_resources(&e(1)));
        assert!(!out_of_resources(&e(700)));
    }
}
