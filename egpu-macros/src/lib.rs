//! Procedural macros of egpu.
//!
//! This crate will hold `#[egpu::probe]`, the compiler from Probe Rust to eBPF, as a thin shell
//! over a compiler library (see `ARCHITECTURE.md`). It exports no macro yet: probes are written in
//! eBPF assembly ([`egpu_ebpf::assemble`](../egpu_ebpf/fn.assemble.html)) until the Probe Rust
//! compiler lands.
#![deny(missing_docs)]
