//! A process's built-in maps filled by the built-in probes, for the exporters' tests: egpu-host's
//! one fixture.

use egpu::host::builtin::Builtin;

/// Made-up pid 4242's maps in process memory, filled by the built-in probes
/// (`egpu::host::builtin::sample::filled`).
pub(crate) fn filled() -> Builtin {
    egpu::host::builtin::sample::filled().1
}
