//! What egpu's own tests, benches and examples share. **For this workspace's tests only**: it is
//! not part of egpu's API, is not published, and may change with any commit.
//!
//! - [`Rng`]: the one seeded generator of the tests, so that a run can be reproduced
//!   (`EGPU_SEED`, printed by [`Rng::from_env`]) and a fixed seed always generates the same
//!   programs. [`splitmix64`] and [`xorshift64star`] are its two sequences, one step at a time.
//! - [`Golden`] and [`compare_golden`]: generated text compared with a file kept in the
//!   repository, rewritten under `EGPU_BLESS=1`, and a line diff when they differ.
//! - Paths found at run time ([`workspace_root`], [`workspace_path`]; the conformance suite through
//!   `egpu_ebpf::conformance::suite_dir(&workspace_root())`): test
//!   binaries also run on another machine, from a copy of the working tree, where the folders
//!   compiled in with `env!("CARGO_MANIFEST_DIR")` do not exist.
//!
//! - [`require_clang`] and [`bpf_object`]: the C probes of `tests/elf` built by clang.
//!
//! It depends on `std` alone, so every crate of the workspace can take it as a
//! `[dev-dependencies]` entry (`egpu-test-support.workspace = true`) without a cycle.

mod clang;
mod golden;
mod paths;
mod rng;

pub use clang::{bpf_object, require_clang};
pub use golden::{Golden, blessing, compare_golden, line_diff};
pub use paths::{files_with_extension, read_workspace_file, workspace_path, workspace_root};
pub use rng::{Algorithm, Rng, seed_from_env, splitmix64, xorshift64star};
