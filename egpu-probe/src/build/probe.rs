//! [`Probe`], the handle `#[egpu::probe]` gives users, which builds, compiles and verifies its
//! probe once; [`BuildError`] and [`ProbeError`]; and [`attach_point`], the attach point a probe names.

use std::fmt;
use std::sync::OnceLock;

use egpu_ebpf::verifier::{Verified, verify};
use egpu_ebpf::{AttachPoint, Program};
use egpu_maps::RawMap;
use thiserror::Error;

use super::record;
use crate::ir::{ProbeIr, Ty};
use crate::{CompileError, Refusal, SourceMap, compile_mapped};

/// Why a probe could not be built.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The attach point named in `#[egpu::probe(..)]` is unknown.
    #[error("{0}")]
    Attach(String),
    /// A context field expression that does not pick a field of the context.
    #[error("a context access does not name a field of the context")]
    Field,
    /// A loop bound that does not fit in 32 bits.
    #[error("a loop runs {count} times, more than a probe may")]
    Loop {
        /// The bound.
        count: u64,
    },
    /// An atomic operation on a type without one.
    #[error("no atomic add on `{}` values: use u32, u64, i32 or i64", .0.name())]
    Atomic(Ty),
    /// Helpers call each other in a cycle (or more than 16 deep).
    #[error("helper `{0}` is inlined more than 16 deep: helpers cannot call each other in a cycle")]
    Recursion(String),
    /// A `print!` with more arguments than a record holds.
    #[error("`print!` takes at most 6 arguments, not {0}")]
    Print(usize),
    /// A map could not be created.
    #[error("a map of the probe could not be created: {0}")]
    Map(String),
    /// The code generator refused the probe.
    #[error(transparent)]
    Compile(#[from] CompileError),
    /// The verifier refused the generated program: a loop or branches too many for it, or
    /// else a bug in the code generator. The refusal names the Rust source.
    #[error("{0}")]
    Verify(Box<Refusal>),
}

/// A probe compiled from a Rust function by `#[egpu::probe]`: its program and maps are built
/// the first time they are asked for.
pub struct Probe {
    name: &'static str,
    build: fn(),
    attach: fn() -> Result<AttachPoint, BuildError>,
    built: OnceLock<Result<Built, BuildError>>,
}

struct Built {
    verified: Verified,
    maps: Vec<RawMap>,
    ir: ProbeIr,
    source: SourceMap,
}

impl fmt::Debug for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Probe").field("name", &self.name).finish_non_exhaustive()
    }
}

impl Probe {
    /// A probe built by `build` (generated code) for the attach point `attach` gives.
    #[doc(hidden)]
    pub const fn new(
        name: &'static str,
        attach: fn() -> Result<AttachPoint, BuildError>,
        build: fn(),
    ) -> Probe {
        Probe { name, build, attach, built: OnceLock::new() }
    }

    /// The probe function's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    fn built(&self) -> Result<&Built, BuildError> {
        self.built.get_or_init(|| self.make()).as_ref().map_err(Clone::clone)
    }

    fn make(&self) -> Result<Built, BuildError> {
        let attach = (self.attach)()?;
        let (ir, maps) = record(attach, self.build)?;
        let (program, source) = compile_mapped(&ir)?;
        let verified = verify(&program)
            .map_err(|e| BuildError::Verify(Box::new(Refusal::new(self.name, e, &source))))?;
        Ok(Built { verified, maps, ir, source })
    }

    /// The eBPF program, compiled and verified (once, the first time the probe is used): what
    /// every engine takes ([`Vm`](egpu_vm::Vm), host probe sets, the device instrumenter, packs).
    pub fn verified(&self) -> Result<&Verified, BuildError> {
        self.built().map(|b| &b.verified)
    }

    /// The eBPF program, compiled and verified.
    pub fn program(&self) -> Result<&Program, BuildError> {
        self.built().map(|b| b.verified.program())
    }

    /// The maps of the program's table, in order.
    pub fn maps(&self) -> Result<&[RawMap], BuildError> {
        self.built().map(|b| b.maps.as_slice())
    }

    /// The probe's IR.
    pub fn ir(&self) -> Result<&ProbeIr, BuildError> {
        self.built().map(|b| &b.ir)
    }

    /// Where each instruction of the program comes from in the probe's Rust source.
    pub fn source_map(&self) -> Result<&SourceMap, BuildError> {
        self.built().map(|b| &b.source)
    }

    /// A CPU VM running the probe, with its maps bound (one VM per thread).
    pub fn vm(&self) -> Result<egpu_vm::Vm, ProbeError> {
        let built = self.built()?;
        Ok(egpu_vm::Vm::with_maps(&built.verified, &built.maps, egpu_vm::EngineChoice::Auto)?)
    }

    /// A CPU VM on the engine chosen.
    pub fn vm_with(&self, choice: egpu_vm::EngineChoice) -> Result<egpu_vm::Vm, ProbeError> {
        let built = self.built()?;
        Ok(egpu_vm::Vm::with_maps(&built.verified, &built.maps, choice)?)
    }
}

/// Why a probe could not be loaded.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ProbeError {
    /// Building the probe failed.
    #[error(transparent)]
    Build(#[from] BuildError),
    /// The VM refused it.
    #[error(transparent)]
    Load(#[from] egpu_vm::LoadError),
}

/// The attach point named `spec` in `#[egpu::probe(spec)]`, with a context of type `C`: `user`
/// takes the size of `C`, `host::EVENT` means `host::EVENT::enter`.
pub fn attach_point<C>(spec: &str) -> Result<AttachPoint, BuildError> {
    let spec = spec.replace(' ', "");
    let parsed = match spec.as_str() {
        "user" => Ok(AttachPoint::User { ctx_size: size_of::<C>() as u32 }),
        s if s.starts_with("host::") && s.matches("::").count() == 1 => {
            format!("{s}::enter").parse()
        }
        s => s.parse(),
    };
    let attach = parsed.map_err(|e| BuildError::Attach(e.to_string()))?;
    if attach.context_size() != size_of::<C>() {
        return Err(BuildError::Attach(format!(
            "{attach} passes a {}-byte context; the probe takes {} bytes",
            attach.context_size(),
            size_of::<C>()
        )));
    }
    Ok(attach)
}
