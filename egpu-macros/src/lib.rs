//! Procedural macros of egpu: `#[egpu::probe]`, which compiles a Rust function into a probe.
//!
//! This crate is a thin shell: `lib.rs` turns tokens into `expand` or a compile error. The
//! compiler's stages live in their own modules:
//!
//! | module | stage |
//! |---|---|
//! | `args` | the attribute's arguments: the attach point, the `crate = PATH` option |
//! | `probe` | the attribute and the signature; the items the macro emits |
//! | `lower` | the body, lowered to Rust code that builds the probe's IR when it runs |
//! | `twin` | the body, kept as a native function with the IR's arithmetic |
//! | `helper` | `#[egpu::helper]`: functions probes call, inlined |
//!
//! Every construct the compiler does not support is an error at the user's token, all of them
//! reported at once.
#![deny(missing_docs)]

mod args;
mod helper;
mod lower;
mod probe;
mod twin;

use proc_macro::TokenStream;

/// Compiles a Rust function into an eBPF probe for an attach point:
/// `#[egpu::probe(host::launch)]`, `#[egpu::probe(device::global_load)]`, `#[egpu::probe(user)]`.
///
/// The function stays callable as native Rust (its *twin*, with the probe's arithmetic), and
/// `name::probe()` gives the [`Probe`](../egpu/probe/struct.Probe.html): its program, maps and
/// a CPU VM to run it. The book's Probe Rust chapter lists what the body may contain.
///
/// # Options
///
/// Options follow the attach point, separated by commas.
///
/// `crate = PATH` is the path by which the generated code names egpu: `::egpu` unless given (as
/// serde's `#[serde(crate = "..")]`, but a path, without quotes). A crate beneath egpu's facade,
/// such as `egpu-host`, cannot name `egpu`: it names a module that re-exports what the generated
/// code uses, as `egpu` does, from the crates it depends on:
///
/// ```ignore
/// mod egpu_root {
///     pub(crate) use egpu_ebpf as ebpf; // `PATH::ebpf::AttachPoint`
///     pub(crate) use egpu_probe as probe; // `PATH::probe::{Probe, BuildError}`
///     pub(crate) mod __private {
///         pub(crate) use egpu_probe::build as probe; // the builder the lowered body calls
///         pub(crate) use egpu_probe::twin; // the twin's arithmetic
///     }
/// }
///
/// #[egpu_macros::probe(host::launch, crate = crate::egpu_root)]
/// fn count_launches(ctx: &LaunchCtx) {
///     LAUNCHES.fetch_add(&ctx.kernel_id, 1);
/// }
/// ```
///
/// The helpers such a probe calls take the same option: `#[egpu_macros::helper(crate = PATH)]`.
#[proc_macro_attribute]
pub fn probe(attr: TokenStream, item: TokenStream) -> TokenStream {
    probe::expand(attr.into(), item.into()).unwrap_or_else(syn::Error::into_compile_error).into()
}

/// Marks a function that probes may call: it is inlined into each probe that calls it, and
/// stays callable as native Rust. Its arguments and result are integers or `bool`s; it returns
/// its tail expression (no early `return`) and cannot call itself.
///
/// Its one option is the probe's `crate = PATH` (see [`macro@probe`]), the path by which the
/// generated code names egpu: `#[egpu_macros::helper(crate = crate::egpu_root)]`.
#[proc_macro_attribute]
pub fn helper(attr: TokenStream, item: TokenStream) -> TokenStream {
    helper::expand(attr.into(), item.into()).unwrap_or_else(syn::Error::into_compile_error).into()
}
