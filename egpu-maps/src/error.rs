//! Errors of map creation, opening and operations.

use std::io;

use egpu_ebpf::MapKind;
use thiserror::Error;

/// Why a map could not be created, opened or updated.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum MapError {
    /// The kind, sizes, capacity or shard counts make no valid map, or a header's derived fields
    /// disagree with them.
    #[error("invalid map geometry: {reason}")]
    Geometry {
        /// What is wrong.
        reason: String,
    },
    /// A capacity (an array's length, a ring's records) of 0 or over
    /// [`MAX_CAPACITY`](crate::layout::MAX_CAPACITY).
    #[error("a map's capacity must be 1 to {max}, not {capacity}")]
    Capacity {
        /// The capacity asked for.
        capacity: u32,
        /// The largest capacity, [`MAX_CAPACITY`](crate::layout::MAX_CAPACITY).
        max: u32,
    },
    /// A key or value (a ring's record) larger than
    /// [`MAX_ITEM_BYTES`](crate::layout::MAX_ITEM_BYTES).
    #[error("a map's {what} has {size} bytes; the layout allows {max} at most")]
    TooLarge {
        /// `key`, `value` or `record`.
        what: &'static str,
        /// Its size in bytes.
        size: u32,
        /// The largest size, [`MAX_ITEM_BYTES`](crate::layout::MAX_ITEM_BYTES).
        max: u32,
    },
    /// A key or value type aligned to more than 8 bytes: map memory is laid out in 8-byte words.
    #[error("a map's key and value types align to 8 bytes at most; this one aligns to {align}")]
    Alignment {
        /// The type's alignment in bytes.
        align: u32,
    },
    /// A region is shorter than its header and slots need.
    #[error("the map region has {len} bytes; its header and slots need {need}")]
    TooShort {
        /// Bytes available.
        len: usize,
        /// Bytes needed.
        need: u64,
    },
    /// The region does not start with the map magic.
    #[error("not an egpu map: the magic is {found:#018x}")]
    BadMagic {
        /// The first 8 bytes, little endian.
        found: u64,
    },
    /// The layout version is not the one this crate reads.
    #[error("the map has layout version {found}; this egpu reads version {expected}")]
    Version {
        /// The region's version.
        found: u32,
        /// This crate's.
        expected: u32,
    },
    /// The header names a kind this crate does not know.
    #[error("the map has unknown kind {found}")]
    UnknownKind {
        /// The kind number.
        found: u32,
    },
    /// The map opened is not of the kind or types asked for.
    #[error("the map is a {found} map with {found_key}-byte keys and {found_value}-byte values; \
             a {expected} map with {expected_key}-byte keys and {expected_value}-byte values was \
             expected", found = found.name(), expected = expected.name())]
    Mismatch {
        /// The region's kind.
        found: MapKind,
        /// Its key size.
        found_key: u32,
        /// Its value size.
        found_value: u32,
        /// The kind asked for.
        expected: MapKind,
        /// The key size asked for.
        expected_key: u32,
        /// The value size asked for.
        expected_value: u32,
    },
    /// A shared map's name is not usable.
    #[error("bad map name `{name}`: {reason}")]
    Name {
        /// The name.
        name: String,
        /// Why.
        reason: String,
    },
    /// The shared-memory object exists but its creator has not finished laying the map out
    /// (its size or its magic is not written yet): try again shortly.
    #[error("shared map `{name}` is still being created")]
    NotReady {
        /// The name.
        name: String,
    },
    /// A shared map is not closed to other users.
    #[error("refusing shared map `{name}`: {reason}")]
    Permissions {
        /// The name.
        name: String,
        /// Why.
        reason: String,
    },
    /// A system call failed. The message ends with the system's reason (`File exists (os error
    /// 17)`), which is also the error's source.
    #[error("{op} failed for map `{name}`: {source}")]
    Io {
        /// The call.
        op: &'static str,
        /// The map's name.
        name: String,
        /// The system's error.
        #[source]
        source: io::Error,
    },
    /// The shard already holds `capacity` entries, or no slot is free: nothing was changed.
    #[error("the map is full ({capacity} entries)")]
    Full {
        /// The capacity.
        capacity: u32,
    },
    /// An insert that must not replace found the key present.
    #[error("the key is already present")]
    Exists,
    /// An update that must replace found no entry, or a removal found nothing to remove.
    #[error("the key is not present")]
    NotFound,
    /// An array index past the end.
    #[error("index {index} is past the end of the array ({len} entries)")]
    Index {
        /// The index.
        index: u32,
        /// The array's length.
        len: u32,
    },
    /// A shard number past the map's shards.
    #[error("shard {shard} does not exist: the map has {shards} shards")]
    Shard {
        /// The shard asked for.
        shard: u32,
        /// The map's shards.
        shards: u32,
    },
    /// A field offset that is not a whole, aligned word of the value.
    #[error(
        "a {size}-byte word at offset {offset} is not an aligned field of a {value_size}-byte value"
    )]
    Field {
        /// The offset asked for.
        offset: usize,
        /// The word's size.
        size: usize,
        /// The value size.
        value_size: u32,
    },
    /// The operation does not apply to this kind of map.
    #[error("{op} does not apply to a {kind} map", kind = kind.name())]
    Unsupported {
        /// The operation.
        op: &'static str,
        /// The kind.
        kind: MapKind,
    },
    /// Unknown update flags.
    #[error("unknown update flags {0:#x}")]
    Flags(u64),
    /// The map has no shard for host writers.
    #[error("the map has no host shard (it was created for device writers only)")]
    NoHostShard,
    /// A ring record longer than the ring's record size.
    #[error("a {len}-byte record does not fit the ring's {size}-byte records")]
    RecordSize {
        /// The record's length.
        len: usize,
        /// The ring's record size.
        size: u32,
    },
    /// The ring is full: the record was dropped and counted.
    #[error("the ring is full; the record was dropped")]
    RingFull,
    /// Another live process (or another consumer in this one) consumes the ring.
    #[error("process {pid} already consumes this ring")]
    ConsumerBusy {
        /// The consumer's process id.
        pid: u32,
    },
}

impl MapError {
    /// The negative Linux error number eBPF helpers return for this error.
    pub fn errno(&self) -> i64 {
        -i64::from(match self {
            MapError::Full { .. }
            | MapError::Index { .. }
            | MapError::RecordSize { .. }
            | MapError::TooLarge { .. } => libc::E2BIG,
            MapError::Exists => libc::EEXIST,
            MapError::NotFound => libc::ENOENT,
            MapError::RingFull => libc::EAGAIN,
            _ => libc::EINVAL,
        })
    }
}
