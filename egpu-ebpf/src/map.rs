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
        KINDS.into_iter().find(|k| k.name() == name)
    }
}

/// Every kind egpu supports, in the order messages list them.
const KINDS: [MapKind; 5] =
    [MapKind::Hash, MapKind::Array, MapKind::PerCpuHash, MapKind::PerCpuArray, MapKind::RingBuf];

/// The kinds' names, for messages: `hash, array, percpu_hash, percpu_array, ringbuf`.
fn kind_names() -> String {
    KINDS.map(MapKind::name).join(", ")
}

/// One entry of a program's map table: what the program expects of the map.
///
/// Its text form, wherever a person types one (`egpu --map`, the verifier suite's `# map:`
/// headers, probe packs' `map` lines), is `NAME=KIND:KEY:VALUE:CAPACITY`: what
/// [`Display`](fmt::Display) writes and [`FromStr`](std::str::FromStr) reads.
///
/// ```
/// use egpu_ebpf::{MapDef, MapKind};
///
/// let def: MapDef = "counts=hash:8:8:1024".parse()?;
/// assert_eq!((def.kind, def.key_size, def.value_size, def.capacity), (MapKind::Hash, 8, 8, 1024));
/// assert_eq!(def.to_string(), "counts=hash:8:8:1024");
/// # Ok::<(), egpu_ebpf::map::ParseMapDefError>(())
/// ```
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

/// `NAME=KIND:KEY:VALUE:CAPACITY`, as [`MapDef::from_str`](std::str::FromStr::from_str) reads
/// it back.
impl fmt::Display for MapDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let MapDef { name, kind, key_size, value_size, capacity } = self;
        write!(f, "{name}={}:{key_size}:{value_size}:{capacity}", kind.name())
    }
}

/// Why a map declaration is not `NAME=KIND:KEY:VALUE:CAPACITY`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseMapDefError {
    /// No `=` after the name.
    #[error("expected NAME=KIND:KEY:VALUE:CAPACITY, not `{0}`")]
    NoName(String),
    /// The name is empty, or more than one word.
    #[error("a map's name is one word, not `{0}`")]
    BadName(String),
    /// What follows `NAME=` is not four fields separated by `:`.
    #[error("expected KIND:KEY:VALUE:CAPACITY after the name, not `{0}`")]
    Fields(String),
    /// The kind is none of [`MapKind::name`]'s.
    #[error("no map kind `{0}`: the kind is one of {kinds}", kinds = kind_names())]
    Kind(String),
    /// The key size, value size or capacity is not a number.
    #[error("the {field} `{text}` is not a number (sizes and capacity are numbers)")]
    Number {
        /// Which: `key size`, `value size` or `capacity`.
        field: &'static str,
        /// What stands in its place.
        text: String,
    },
}

impl std::str::FromStr for MapDef {
    type Err = ParseMapDefError;

    /// Reads `NAME=KIND:KEY:VALUE:CAPACITY` (what [`Display`](fmt::Display) writes): the name
    /// (one word, no `=`), the kind's [name](MapKind::name), the key and value sizes in bytes
    /// and the capacity, in decimal. Whether the kind takes those sizes is for
    /// [`Program::new`](crate::Program::new) and the map's layout to say.
    fn from_str(s: &str) -> Result<MapDef, ParseMapDefError> {
        let (name, rest) = s.split_once('=').ok_or_else(|| ParseMapDefError::NoName(s.into()))?;
        if name.is_empty() || name.contains(char::is_whitespace) {
            return Err(ParseMapDefError::BadName(name.into()));
        }
        let [kind, key, value, capacity] = rest.split(':').collect::<Vec<_>>()[..] else {
            return Err(ParseMapDefError::Fields(rest.into()));
        };
        let kind = MapKind::from_name(kind).ok_or_else(|| ParseMapDefError::Kind(kind.into()))?;
        let number = |field, text: &str| {
            text.parse::<u32>().map_err(|_| ParseMapDefError::Number { field, text: text.into() })
        };
        Ok(MapDef {
            name: name.into(),
            kind,
            key_size: number("key size", key)?,
            value_size: number("value size", value)?,
            capacity: number("capacity", capacity)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declarations_read_back_as_written() {
        for kind in KINDS {
            let def = MapDef {
                name: "COUNTS_2".into(),
                kind,
                key_size: 8,
                value_size: 16,
                capacity: u32::MAX,
            };
            let text = def.to_string();
            assert_eq!(text, format!("COUNTS_2={}:8:16:4294967295", kind.name()));
            assert_eq!(text.parse::<MapDef>(), Ok(def));
        }
        let def: MapDef = "events=ringbuf:0:32:128".parse().expect("parses");
        assert_eq!(
            def,
            MapDef {
                name: "events".into(),
                kind: MapKind::RingBuf,
                key_size: 0,
                value_size: 32,
                capacity: 128
            }
        );
    }

    #[test]
    fn malformed_declarations_say_what_is_wrong() {
        use ParseMapDefError::*;
        let number = |field, text: &str| Number { field, text: text.into() };
        let cases = [
            ("", NoName("".into()), "expected NAME=KIND:KEY:VALUE:CAPACITY, not ``"),
            ("counts", NoName("counts".into()), "expected NAME=KIND:KEY:VALUE:CAPACITY"),
            ("counts hash 8 8 64", NoName("counts hash 8 8 64".into()), "not `counts hash"),
            ("=hash:8:8:64", BadName("".into()), "a map's name is one word, not ``"),
            ("my counts=hash:8:8:64", BadName("my counts".into()), "one word, not `my counts`"),
            ("counts=", Fields("".into()), "expected KIND:KEY:VALUE:CAPACITY after the name"),
            ("counts=hash:8:8", Fields("hash:8:8".into()), "not `hash:8:8`"),
            ("counts=hash:8:8:64:1", Fields("hash:8:8:64:1".into()), "not `hash:8:8:64:1`"),
            ("counts=hash 8 8 64", Fields("hash 8 8 64".into()), "after the name"),
            (
                "counts=lru:8:8:64",
                Kind("lru".into()),
                "no map kind `lru`: the kind is one of hash, array, percpu_hash, percpu_array, \
                 ringbuf",
            ),
            ("counts=Hash:8:8:64", Kind("Hash".into()), "no map kind `Hash`"),
            ("counts=:8:8:64", Kind("".into()), "no map kind ``"),
            ("counts=hash:x:8:64", number("key size", "x"), "the key size `x` is not a number"),
            ("counts=hash:8::64", number("value size", ""), "the value size `` is not a number"),
            ("counts=hash:8:8:-1", number("capacity", "-1"), "the capacity `-1` is not a number"),
            (
                "counts=hash:8:8:4294967296",
                number("capacity", "4294967296"),
                "(sizes and capacity are numbers)",
            ),
            ("counts=hash:8: 8:64", number("value size", " 8"), "the value size ` 8`"),
            ("counts=hash:0x8:8:64", number("key size", "0x8"), "the key size `0x8`"),
        ];
        for (text, error, message) in cases {
            let got = text.parse::<MapDef>().expect_err(text);
            assert_eq!(got, error, "{text}");
            assert!(got.to_string().contains(message), "{text}: {got} should say {message:?}");
        }
    }
}
