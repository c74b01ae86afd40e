//! What the injector gives back: the instrumented module, its sites, and its coverage.

use egpu_ebpf::DeviceEvent;

use crate::ptx::MemClass;

/// A place where a probe was injected (or, for an access of a run of accesses, whose size its
/// probe, at the run's last access, counts).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    /// The kernel or device function.
    pub function: String,
    /// The line of the original instruction (or of the body's `{` for kernel entry).
    pub line: usize,
    /// The attach point.
    pub event: DeviceEvent,
    /// Bytes accessed, when known when instrumenting (0 for kernel entry and exit, and for
    /// accesses whose size is known at run time only).
    pub size: u32,
    /// The access's class ([`MemAccessCtx::class`](egpu_ebpf::MemAccessCtx::class); 0 for
    /// kernel entry and exit).
    pub class: u32,
    /// The access's index among the function's observed accesses (`MemAccessCtx::site`).
    pub index: u32,
}

/// An instrumented module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Injection {
    /// The instrumented PTX.
    pub ptx: String,
    /// Where probes were injected, in order.
    pub sites: Vec<Site>,
    /// The global memory instructions of the module's functions, by the PTX ISA's table
    /// ([`crate::ptx::memops`]): M in `observed N of M`.
    pub memory_instructions: usize,
    /// Those for which egpu fires an attach point, probes attached or not: N.
    pub observed: usize,
    /// The others, with why.
    pub unobserved: Vec<Unobserved>,
    /// Observed accesses that no attached probe covers (the probes attach to other events, or
    /// to other kernels), in order.
    pub uncovered: Vec<Site>,
    /// Hints about global memory that move no data (`prefetch`, `discard`, `applypriority`),
    /// which are not global memory instructions.
    pub hints: usize,
    /// Runs of accesses whose probes run once, at the run's last access, with the run's total
    /// size (`runs.rs`).
    pub runs: usize,
    /// The accesses of those runs.
    pub in_runs: usize,
    /// Accesses at which some probe runs as register adds (`summaries.rs`).
    pub summarized: usize,
    /// The module's kernels (`.entry` functions), by name, in order.
    pub kernels: Vec<String>,
    /// The kernels given the launch's tag as a parameter more
    /// ([`InjectOptions::launch_tags`](super::InjectOptions::launch_tags)), and where it is, in
    /// order.
    pub launch_params: Vec<super::LaunchParam>,
}

/// How much of a module's global memory instructions egpu observes: [`Injection`]'s counts
/// without its PTX and sites.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Coverage {
    /// The module's global memory instructions (M).
    pub memory_instructions: usize,
    /// Those egpu fires an attach point for (N).
    pub observed: usize,
    /// The others, with why.
    pub unobserved: Vec<Unobserved>,
    /// Hints that move no data.
    pub hints: usize,
}

impl Injection {
    /// The module's coverage.
    pub fn coverage(&self) -> Coverage {
        Coverage {
            memory_instructions: self.memory_instructions,
            observed: self.observed,
            unobserved: self.unobserved.clone(),
            hints: self.hints,
        }
    }
}

/// A global memory instruction that egpu does not observe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unobserved {
    /// The kernel or device function.
    pub function: String,
    /// The instruction's line.
    pub line: usize,
    /// Its opcode, with qualifiers.
    pub opcode: String,
    /// Its class.
    pub class: MemClass,
    /// Why it is not observed.
    pub reason: &'static str,
}
