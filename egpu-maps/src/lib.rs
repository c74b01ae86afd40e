//! Typed maps whose memory has one layout, read and updated in place by host Rust code, the CPU
//! VM, GPU threads and other processes.
//!
//! The map kinds, their layouts (the ABI the GPU backend and other processes rely on) and their
//! backings are built in a later step of the project (see `ARCHITECTURE.md`); programs already
//! declare maps with [`egpu_ebpf::MapDef`](../egpu_ebpf/struct.MapDef.html), and the CPU VM
//! refuses, with a typed error, programs that reference one until then.
#![deny(missing_docs)]
