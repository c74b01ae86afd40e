//! Typed maps whose memory has one layout, read and updated in place by host Rust code, the CPU
//! VM, GPU threads and other processes.
//!
//! | type | eBPF kind | what it is |
//! |---|---|---|
//! | [`HashMap<K, V>`] | `BPF_MAP_TYPE_HASH` | fixed capacity, lock-free open addressing |
//! | [`Array<V>`] | `BPF_MAP_TYPE_ARRAY` | fixed length, indexed by `u32`, zero to start |
//! | [`PerCpuHashMap<K, V>`] | `BPF_MAP_TYPE_PERCPU_HASH` | one hash table per CPU and per SM |
//! | [`PerCpuArray<V>`] | `BPF_MAP_TYPE_PERCPU_ARRAY` | one array per CPU and per SM |
//! | [`RingBuf<T>`] | `BPF_MAP_TYPE_RINGBUF` | fixed-size records, many producers, one consumer |
//! | [`RawMap`] | any | an open map known only by its header, for engines and tracers |
//!
//! Keys and values are `Pod` types (`bytemuck`), aligned to 8 bytes at most. A map is one block
//! of memory laid out as [`layout`] defines, the ABI every side follows. It lives in process
//! memory, in shared memory that other processes open by name (their key and value sizes
//! checked against the header), or in memory given as a pointer and length (pinned host memory
//! mapped into the GPU, for example): see [`Placement`] and [`RawMap::from_raw_parts`].
//!
//! A typed map can be a `static`. Its constructor is a `const fn` that only describes the map;
//! the memory is created, in its placement, the first time the map is used:
//!
//! ```
//! use egpu_maps::HashMap;
//!
//! static BYTES_BY_KERNEL: HashMap<u64, u64> = HashMap::with_capacity(4096);
//!
//! BYTES_BY_KERNEL.fetch_add(&0xfeed, 4096)?;
//! assert_eq!(BYTES_BY_KERNEL.get(&0xfeed), Some(4096));
//! # Ok::<(), egpu_maps::MapError>(())
//! ```
//!
//! # Maps that cannot exist
//! A capacity (an array's length, a ring's records) of 0 or over [`layout::MAX_CAPACITY`], a
//! key or value (record) over [`layout::MAX_ITEM_BYTES`] (64 KiB) or of no bytes, a type
//! aligned to more than 8 bytes, no shard or over [`layout::MAX_SHARDS`] on a side, a bad
//! shared-memory name: the `const` constructors refuse these, so a `static` that asks for one
//! does not compile, and the error, at the `static`, names the limit:
//!
//! ```compile_fail,E0080
//! static EMPTY: egpu_maps::HashMap<u64, u64> = egpu_maps::HashMap::with_capacity(0);
//! ```
//!
//! Key and value types that make no map fail the build wherever a `const` constructor is
//! called; a capacity that is wrong only at run time panics there. The other constructors
//! (`create`, `from_raw`, `open_shared`, [`RawMap::create`] with a [`layout::Geometry`] made by
//! hand) return the [`MapError`] ([`MapError::Capacity`], [`MapError::TooLarge`],
//! [`MapError::Alignment`], [`MapError::Geometry`]). Methods that return a `Result` return the
//! error of creating the memory on first use (a shared-memory name already taken, say); the
//! others (`HashMap::get`, `len`, …) panic on it, as [`HashMap::raw`] says, and a map made with
//! `create` never fails that way.
//!
//! # Concurrency
//! - Inserts, updates and removals are lock-free (compare-and-swap on a slot's state word); an
//!   insert waits only for another insert of a key with the same hash tag to finish its few
//!   stores. Racing inserts of one key make one entry. A full map refuses an insert with
//!   [`MapError::Full`] and keeps every entry it had.
//! - Atomicity is per 32- or 64-bit word. A reader may see a value of several words half
//!   written; [`Word`] gives atomic `fetch_add`, `fetch_or`, `swap` and `compare_exchange` on one
//!   word of a value.
//! - **One writing side per word.** CPU and GPU atomics on the same word of mapped host memory
//!   lose updates (measured on the H200 machine), so a word is written by host code or by device
//!   code, never both at once. Per-CPU maps give host threads and streaming multiprocessors
//!   separate shards, and readers combine them.
//! - A process that dies in the middle of an insert or of a ring reservation leaves a slot
//!   marked with its process id: readers skip it, and the next writer (or the ring's consumer)
//!   that meets it finds the process gone and reclaims the slot.
#![deny(missing_docs)]

mod array;
mod cell;
mod error;
mod hash_map;
mod hash_table;
pub mod layout;
pub mod merge;
mod raw;
mod raw_bytes;
mod region;
mod ring;
mod ring_buf;
mod word;

pub use array::{Array, PerCpuArray};
pub use cell::{Placement, Shards};
pub use egpu_ebpf::MapKind;
pub use error::MapError;
pub use hash_map::{HashMap, PerCpuHashMap};
pub use raw::{RawMap, UpdateFlags, cpu_count};
pub use region::unlink_shared;
pub use ring_buf::{Consumer, Reserved, RingBuf};
pub use word::{AtomicWord, Integer, PerShard, Word, field_offset};

#[cfg(test)]
mod tests;
