//! Map declarations: the entries of a program's map table.
//!
//! A program refers to map number `n` of its table with `lddw rX, map[n]` (`src = 5`, Linux's
//! `BPF_PSEUDO_MAP_IDX`). Each backend resolves the reference to the map's memory when it loads
//! the program. The memory layout of each kind is defined by `egpu-maps`.

use std::fmt;

/// The kind of a map. The numbers are Linux's `bpf_map_type`, so ELF objects built for Linux
/// declare their maps with the same values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
#[non_exhaustive]
pub enum MapKind {
    /// Fixed-capacity hash map (`BPF_MAP_TYPE_HASH`).
    #[doc(alias = "BPF_MAP_TYPE_HASH")]
    Hash = 1,
    /// Fixed-length array indexed by a `u32` (`BPF_MAP_TYPE_ARRAY`).
    #[doc(alias = "BPF_MAP_TYPE_ARRAY")]
    Array = 2,
    /// Hash map with one value per CPU and per SM (`BPF_MAP_TYPE_PERCPU_HASH`).
    #[doc(alias = "BPF_MAP_TYPE_PERCPU_HASH")]
    PerCpuHash = 5,
    /// Array with one value per CPU and per SM (`BPF_MAP_TYPE_PERCPU_ARRAY`).
    #[doc(alias = "BPF_MAP_TYPE_PERCPU_ARRAY")]
    PerCpuArray = 6,
    /// Multi-producer ring buffer of records (`BPF_MAP_TYPE_RINGBUF`).
    #[doc(alias = "BPF_MAP_TYPE_RINGBUF")]
    RingBuf = 27,
}

impl MapKind {
    /// The kind with Linux number `n`, if egpu supports it.
    pub const fn from_linux(n: u32) -> Option<MapKind> {
        Some(match n {
            1 => MapKind::Hash,
            2 => MapKind::Array,
            5 => MapKind::PerCpuHash,
            6 => MapKind::PerCpuArray,
            27 => MapKind::RingBuf,
            _ => return None,
        })
    }
}

impl MapKind {
    /// The kind's name in egpu's text forms: `hash`, `array`, `percpu_hash`, `percpu_array`,
    /// `ringbuf`.
    pub const fn name(self) -> &'static str {
        match self {
            MapKind::Hash => "hash",
            MapKind::Array => "array",
            MapKind::PerCpuHash => "percpu_hash",
            MapKind::PerCpuArray => "percpu_array",
            MapKind::RingBuf => "ringbuf",
        }
    }

    /// The kind named `name` (see [`MapKind::name`]).
    pub fn from_name(name: &str) -> Option<MapKind> {
        [MapKind::Hash, MapKind::Array, MapKind::PerCpuHash, MapKind::PerCpuArray, MapKind::RingBuf]
            .into_iter()
            .find(|k| k.name() == name)
    }
}

/// One entry of a program's map table: what the program expects of the map.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MapDef {
    /// The map's name, used to bind it and in messages.
    pub name: String,
    /// Its kind.
    pub kind: MapKind,
    /// Key size in bytes (4 for arrays, 0 for ring buffers).
    pub key_size: u32,
    /// Value size in bytes; for a ring buffer, the size of its records (egpu's rings hold
    /// fixed-size records).
    pub value_size: u32,
    /// Capacity: entries (per shard, for per-CPU kinds), or records of a ring buffer. Linux
    /// and aya call it `max_entries`; `egpu_maps::layout::Geometry` calls it `capacity` too.
    #[doc(alias = "max_entries")]
    pub capacity: u32,
}

impl fmt::Display for MapDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({:?}, key {} B, value {} B, {} entries)",
            self.name, self.kind, self.key_size, self.value_size, self.capacity
        )
    }
}
