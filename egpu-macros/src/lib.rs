//! Procedural macros of egpu: `#[egpu::probe]`, which compiles a Rust function into a probe.
//!
//! This crate is a thin shell: `lib.rs` turns tokens into `expand` or a compile error. The
//! compiler's stages live in their own modules:
//!
//! | module | stage |
//! |---|---|
//! | `probe` | the attribute and the signature; the items the macro emits |
//! | `lower` | the body, lowered to Rust code that builds the probe's IR when it runs |
//! | `twin` | the body, kept as a native function with the IR's arithmetic |
//! | `helper` | `#[egpu::helper]`: functions probes call, inlined |
//!
//! Every construct the compiler does not support is an error at the user's token, all of them
//! reported at once.
#![deny(missing_docs)]

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
#[proc_macro_attribute]
pub fn probe(attr: TokenStream, item: TokenStream) -> TokenStream {
    probe::expand(attr.into(), item.into()).unwrap_or_else(syn::Error::into_compile_error).into()
}

/// Marks a function that probes may call: it is inlined into each probe that calls it, and
/// stays callable as native Rust. Its arguments and result are integers or `bool`s; it returns
/// its tail expression (no early `return`) and cannot call itself.
#[proc_macro_attribute]
pub fn helper(attr: TokenStream, item: TokenStream) -> TokenStream {
    helper::expand(attr.into(), item.into()).unwrap_or_else(syn::Error::into_compile_error).into()
}
