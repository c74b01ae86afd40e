//! egpu's C ABI: probes loaded, verified, run on the CPU VM, attached to host events and
//! injected into PTX, and their maps, from C, C++, Python (`ctypes`) or anything that calls C.
//!
//! Built as `libegpu_capi.so` and `libegpu_capi.a`; its header, `include/egpu_capi.h` beside
//! this crate, is generated from these sources by cbindgen and checked in (a test keeps the two
//! equal: `EGPU_BLESS=1 cargo test -p egpu-capi --test header` writes it). Contexts of host
//! events are the structs of egpu's probe header, `include/egpu.h` at the workspace's root
//! (`struct egpu_launch_ctx`, …), which C programs include beside it.
//!
//! | module | handles | what it does |
//! |---|---|---|
//! | `program` | `egpu_program`, `egpu_object` | programs from bytecode or assembly (attach point and map table as text), or from an eBPF ELF object, a pack's text or a file; verified once; described, disassembled |
//! | `vm` | `egpu_vm` | the CPU VM: a program loaded with its maps, run over a context buffer, `r0` back |
//! | `maps` | `egpu_map` | maps in process or shared memory, opened by name, looked up, updated, deleted by key bytes, arrays by index, keys listed, rings drained |
//! | `host` | `egpu_probes` | host events in process: programs attached to a probe set, fired with the context the caller passes |
//! | `cuda` | (ids) | the CUDA events of this process when the preloaded library is loaded: programs attached through its `egpu_preload_attach` |
//! | `ptx` | `egpu_ptx_result` | a PTX module instrumented with device probes bound to their maps' device addresses: the PTX and the table of sites |
//! | `error` | | `egpu_status`, `egpu_last_error` |
//!
//! # The rules of the boundary
//!
//! - **Errors are codes with messages.** Every fallible function returns an `egpu_status`;
//!   the message of a failure is the calling thread's `egpu_last_error()` (valid until the
//!   thread's next call into the library) or copied by `egpu_last_error_copy`. A verification
//!   failure's message is the verifier's, which names the instruction (`instruction 2
//!   \`ldxdw %r0, [%r2+0]\`: …`) and the registers it reads.
//! - **Every struct that crosses carries its size.** Each starts with `size_t size`, which the
//!   caller sets to `sizeof` the struct: a size smaller than this library's struct is
//!   `EGPU_BAD_SIZE` with the size expected; a larger one (a caller built against a newer
//!   header) is taken, the fields this library knows read or written. Arrays of them are
//!   strided by their first element's size. Context buffers and values are checked against the
//!   exact sizes they must have.
//! - **Nothing unwinds across it, nothing aborts on a bad argument.** Every entry point runs
//!   its body under `catch_unwind` (a panic is `EGPU_PANIC`, a bug in egpu); null pointers are
//!   `EGPU_NULL_ARGUMENT`; lengths, counts and enum-like numbers are checked before use (enums
//!   cross as `uint32_t`, never as Rust enums, so no value a caller passes is undefined
//!   behaviour). Each handle starts with a tag of its kind, so a handle of the wrong kind (easy
//!   in Python, where every handle is a `c_void_p`) is `EGPU_BAD_ARGUMENT`. A handle used after
//!   its `_free`, or a pointer that was never a handle, is, as in any C library, undefined
//!   behaviour (the tag is cleared when a handle is freed, which often turns such a use into
//!   `EGPU_BAD_ARGUMENT`, but nothing can promise it).
//! - **Handles are made and freed here.** Each kind has its `_free`, which takes null.
//!   Freeing one never invalidates another: a VM or an attachment keeps its program's verified
//!   form and its maps alive; a map's memory lives until its last holder goes.
//!
//! # Threads
//!
//! | handle | from several threads |
//! |---|---|
//! | `egpu_program`, `egpu_object`, `egpu_ptx_result` | yes: immutable (a program's one verification is under a lock) |
//! | `egpu_map` | yes, at once: lookups, updates and deletes are lock-free and atomic per 32- or 64-bit word, as for probes |
//! | `egpu_probes` | yes, at once: each thread that fires runs the probes in VMs of its own (rbpf's VMs are per thread), loaded from the same verified programs, on the same maps |
//! | `egpu_vm` | no: it belongs to the thread that made it (rbpf's VMs are neither `Send` nor `Sync`); calls from another thread are `EGPU_WRONG_THREAD`, and `egpu_vm_free` there leaves it allocated. Make one VM per thread over shared maps |
//!
//! The last error is per thread.
//!
//! # Design
//!
//! - **Why this crate is here and depends on what it does.** It is the one crate with a C
//!   surface, kept out of the libraries so that their APIs stay Rust's; it names the crates
//!   beneath the facade (`egpu-ebpf`, `egpu-maps`, `egpu-vm`, `egpu-host`, `egpu-ptx`), not the
//!   facade, so that no proc-macro or Probe Rust compiler is linked in for nothing. The PTX work
//!   takes `egpu-ptx` alone (no driver); `egpu-host` (packs, ELF objects, probe sets) brings
//!   `egpu-device` with it, whose CUDA crate loads the driver at run time only, so the library
//!   needs no CUDA to build, load or run.
//! - **Two copies of egpu in one process.** The preloaded library (`libegpu_preload.so`)
//!   carries its own egpu, with its own probe set and verifier; nothing of this library's
//!   reaches it by Rust. So `egpu_cuda_attach` sends it a pack's text (the one format both
//!   copies read) through a C entry point it exports, found with `dlsym(RTLD_DEFAULT, …)`,
//!   with the maps named by their shared-memory objects; it opens them, and the caller reads
//!   them through its own handles: both sides update one memory.
//! - **Byte-level maps.** C knows a map by its sizes only, so this library reads maps through
//!   `egpu_maps::RawMap`'s byte-level calls (`keys`, `read_shards`, `drain_records`), which copy
//!   with the layout's atomic word reads rather than hand out pointers into live memory.
//! - **The header is cbindgen's.** Written from these sources (the items each module exports),
//!   so the header and the ABI cannot drift apart without the drift test failing.
#![deny(missing_docs)]
#![allow(non_camel_case_types, reason = "C names: egpu_map, egpu_status, …")]

mod cuda;
mod error;
mod ffi;
mod host;
mod maps;
mod program;
mod ptx;
mod vm;

#[cfg(test)]
mod tests;

pub use cuda::*;
pub use error::*;
pub use host::*;
pub use maps::*;
pub use program::*;
pub use ptx::*;
pub use vm::*;

/// The version of this ABI: `EGPU_ABI_VERSION` of the header a program was built with, which
/// `egpu_abi_version()` returns for the library loaded. Bumped when a function or struct changes
/// other than by growing (a struct that grows keeps its version: its `size` tells).
pub const EGPU_ABI_VERSION: u32 = 1;

/// The ABI version of the library loaded (`EGPU_ABI_VERSION` when it matches the header).
#[unsafe(no_mangle)]
pub extern "C" fn egpu_abi_version() -> u32 {
    EGPU_ABI_VERSION
}

/// egpu's version, as `"0.1.0"`: a static NUL-terminated string.
#[unsafe(no_mangle)]
pub extern "C" fn egpu_version() -> *const std::ffi::c_char {
    static VERSION: &std::ffi::CStr = match std::ffi::CStr::from_bytes_with_nul(
        concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes(),
    ) {
        Ok(v) => v,
        Err(_) => c"?",
    };
    VERSION.as_ptr()
}
