//! Why a program cannot be translated.

use egpu_ebpf::AttachPoint;

/// Why a program cannot be translated. Reported when a probe is attached, before any kernel
/// runs it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TranslateError {
    /// The program calls a helper the GPU does not provide (yet).
    #[error("instruction {pc}: helper {id} ({name}) is not available on the GPU")]
    Helper {
        /// The call's slot.
        pc: usize,
        /// The helper number.
        id: u32,
        /// Its name, where the table has it.
        name: &'static str,
    },
    /// The program references a map, and device maps are not bound by this translation.
    #[error("instruction {pc}: map `{name}` has no device binding")]
    Map {
        /// The `lddw`'s slot.
        pc: usize,
        /// The map's name.
        name: String,
    },
    /// A map the GPU cannot use this way (its kind, or a per-CPU map without device shards).
    #[error("instruction {pc}: map `{name}`: {why}")]
    MapUse {
        /// The instruction's slot.
        pc: usize,
        /// The map's name.
        name: String,
        /// Why.
        why: String,
    },
    /// A `callx` whose helper differs between paths.
    #[error("instruction {pc}: `callx` calls different helpers on different paths")]
    VaryingCallx {
        /// The call's slot.
        pc: usize,
    },
    /// The context given does not fit the program's attach point.
    #[error("the program attaches to {attach}, which does not take a {given} context")]
    Context {
        /// The program's attach point.
        attach: AttachPoint,
        /// What was given.
        given: &'static str,
    },
    /// The kernel name is not a PTX identifier (or takes the translation's own names, `e_…`).
    #[error(
        "`{0}` cannot name a kernel: use letters, digits, `_` and `$`, not starting with a digit or `e_`"
    )]
    KernelName(String),
    /// The prefix is not a PTX identifier.
    #[error("`{0}` is not a valid prefix: use letters, digits and `_`, starting with a letter")]
    Prefix(String),
}
