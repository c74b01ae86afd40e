//! Map descriptors: what a typed map is before its memory exists, and the memory once it does.
//!
//! A typed map can be a `static`: its constructor is a `const fn` that records the kind, sizes,
//! capacity, shards and placement. The memory is created, in its placement, the first time the
//! map is used or bound to a program, exactly once even when threads race to it.
//!
//! A description that can make no map (a capacity of 0, a value over 64 KiB, a type aligned to
//! 16, no shards, a bad shared-memory name) is refused by the `const` constructor itself
//! ([`MapCell::described`]): for a `static` or a `const` that is a compile error at the user's
//! initialiser, with a message that names the limit. The checks of the key and value types are
//! also constants of the constructor, so a descriptor of such types made at run time fails the
//! build too; a capacity or shard count that is wrong only at run time panics there, and the
//! constructors that are not `const` (`create`, `from_raw`, `open_shared`) return the
//! [`MapError`] instead.

use std::borrow::Cow;
use std::sync::{Mutex, OnceLock};

use egpu_ebpf::MapKind;

use crate::MapError;
use crate::layout::{Geometry, MAX_CAPACITY, MAX_ITEM_BYTES, MAX_SHARDS};
use crate::raw::{RawMap, cpu_count};

/// Where a map's memory lives.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Placement {
    /// Anonymous memory of this process (the default).
    #[default]
    Process,
    /// A POSIX shared-memory object of this name (under `/dev/shm`), readable and writable by
    /// this user only, which other processes open by name. It is removed when the map that
    /// created it is dropped.
    Shared(Cow<'static, str>),
}

/// How many shards a per-CPU map (or a ring buffer) has on each side, fixed at creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shards {
    /// Shards for host writers; `None` means one per logical CPU of the machine.
    pub cpu: Option<u32>,
    /// Shards for device writers, one per streaming multiprocessor.
    pub sm: u32,
}

impl Shards {
    /// One shard per logical CPU and none for devices: the default of per-CPU maps.
    pub const PER_CPU: Shards = Shards { cpu: None, sm: 0 };
    /// One host shard: the default of ring buffers.
    pub const ONE: Shards = Shards { cpu: Some(1), sm: 0 };

    /// `cpu` host shards and `sm` device shards.
    pub const fn new(cpu: u32, sm: u32) -> Shards {
        Shards { cpu: Some(cpu), sm }
    }

    fn host(&self) -> u32 {
        self.cpu.unwrap_or_else(cpu_count)
    }
}

/// What a typed map asks of its memory.
#[derive(Clone, Debug)]
pub(crate) struct Spec {
    pub(crate) kind: MapKind,
    pub(crate) key_size: u32,
    pub(crate) value_size: u32,
    /// The larger alignment of the key and value types.
    pub(crate) align: u32,
    pub(crate) capacity: u32,
    pub(crate) shards: Shards,
    pub(crate) placement: Placement,
}

/// The messages of the compile errors of the `const` constructors. Each names the limit (the
/// numbers are those of [`crate::layout`]; a test checks them).
pub(crate) mod refusal {
    pub(crate) const ALIGN: &str = "egpu-maps: a map's key and value types must align to 8 bytes \
        at most (`egpu_maps::layout` lays maps out in 8-byte words)";
    pub(crate) const EMPTY_KEY: &str = "egpu-maps: a hash map's key type has no bytes; keys have \
        1 to 65536 bytes (`egpu_maps::layout::MAX_ITEM_BYTES`)";
    pub(crate) const LARGE_KEY: &str = "egpu-maps: a map's key type is over 65536 bytes (64 KiB, \
        `egpu_maps::layout::MAX_ITEM_BYTES`)";
    pub(crate) const EMPTY_VALUE: &str = "egpu-maps: a map's value type (a ring buffer's record) \
        has no bytes; values have 1 to 65536 bytes (`egpu_maps::layout::MAX_ITEM_BYTES`)";
    pub(crate) const LARGE_VALUE: &str = "egpu-maps: a map's value type (a ring buffer's record) \
        is over 65536 bytes (64 KiB, `egpu_maps::layout::MAX_ITEM_BYTES`)";
    pub(crate) const NO_CAPACITY: &str = "egpu-maps: a map's capacity (an array's length, a ring \
        buffer's records) is 0; it must be 1 to 268435456 (`egpu_maps::layout::MAX_CAPACITY`)";
    pub(crate) const LARGE_CAPACITY: &str = "egpu-maps: a map's capacity (an array's length, a \
        ring buffer's records) is over 268435456 (2^28, `egpu_maps::layout::MAX_CAPACITY`)";
    pub(crate) const NO_SHARD: &str = "egpu-maps: a map needs at least one shard, and \
        `Shards::new(0, 0)` has none";
    pub(crate) const MANY_SHARDS: &str = "egpu-maps: a map has at most 4096 host shards and 4096 \
        device shards (`egpu_maps::layout::MAX_SHARDS`)";
    pub(crate) const NAME: &str = "egpu-maps: a shared map's name has 1 to 200 bytes, contains \
        no `/` and no NUL, and is not `.` or `..`";
}

/// Why key and value types of these sizes and alignments can make no map.
const fn types_problem(
    keyed: bool,
    key: (usize, usize),
    value: (usize, usize),
) -> Option<&'static str> {
    let max = MAX_ITEM_BYTES as usize;
    if key.1 > 8 || value.1 > 8 {
        Some(refusal::ALIGN)
    } else if keyed && key.0 == 0 {
        Some(refusal::EMPTY_KEY)
    } else if key.0 > max {
        Some(refusal::LARGE_KEY)
    } else if value.0 == 0 {
        Some(refusal::EMPTY_VALUE)
    } else if value.0 > max {
        Some(refusal::LARGE_VALUE)
    } else {
        None
    }
}

/// Fails the build when `K` (the key, when `KEYED`) and `V` can make no map: a constant, so a
/// descriptor made at run time of such types is refused when it is compiled, too.
const fn assert_types<K, V, const KEYED: bool>() {
    const {
        let key = (size_of::<K>(), align_of::<K>());
        if let Some(why) = types_problem(KEYED, key, (size_of::<V>(), align_of::<V>())) {
            panic!("{}", why)
        }
    }
}

/// Whether `name` is a valid shared map name ([`crate::region::shm_name`] at run time).
const fn name_ok(name: &str) -> bool {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() > 200 {
        return false;
    }
    if matches!(bytes, b"." | b"..") {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'/' || bytes[i] == 0 {
            return false;
        }
        i += 1;
    }
    true
}

impl Spec {
    /// Why this description can make no map, as far as it is known before the memory exists
    /// (the host shards of a per-CPU map are counted then): the message of the compile error
    /// of a `const` constructor.
    pub(crate) const fn problem(&self) -> Option<&'static str> {
        let keyed = matches!(self.kind, MapKind::Hash | MapKind::PerCpuHash);
        let key = (self.key_size as usize, 1);
        if self.align > 8 {
            return Some(refusal::ALIGN);
        }
        if let Some(why) = types_problem(keyed, key, (self.value_size as usize, 1)) {
            return Some(why);
        }
        if self.capacity == 0 {
            return Some(refusal::NO_CAPACITY);
        }
        if self.capacity > MAX_CAPACITY {
            return Some(refusal::LARGE_CAPACITY);
        }
        if matches!(self.shards.cpu, Some(n) if n > MAX_SHARDS) || self.shards.sm > MAX_SHARDS {
            return Some(refusal::MANY_SHARDS);
        }
        if matches!(self.shards.cpu, Some(0)) && self.shards.sm == 0 {
            return Some(refusal::NO_SHARD);
        }
        match &self.placement {
            Placement::Shared(Cow::Borrowed(name)) if !name_ok(name) => Some(refusal::NAME),
            _ => None,
        }
    }

    /// The types' alignment checked: a map's memory is made of 8-byte words.
    pub(crate) fn check_align(&self) -> Result<(), MapError> {
        match self.align {
            0..=8 => Ok(()),
            align => Err(MapError::Alignment { align }),
        }
    }

    /// The geometry of this description, or why it can make no map.
    pub(crate) fn geometry(&self) -> Result<Geometry, MapError> {
        self.check_align()?;
        Geometry::new(
            self.kind,
            self.key_size,
            self.value_size,
            self.capacity,
            self.shards.host(),
            self.shards.sm,
        )
    }
}

/// A descriptor and, once created, the memory.
#[derive(Debug)]
pub(crate) struct MapCell {
    spec: Spec,
    raw: OnceLock<RawMap>,
    creating: Mutex<()>,
}

impl MapCell {
    /// The descriptor a `const` constructor makes, of key type `K` (when `KEYED`) and value
    /// type `V`.
    ///
    /// # Panics
    /// When `spec` can make no map ([`Spec::problem`]): in a `static` or a `const`, a compile
    /// error at its initialiser. The types' part is a constant as well (`assert_types`), so it
    /// fails the build wherever the constructor is used.
    pub(crate) const fn described<K, V, const KEYED: bool>(spec: Spec) -> MapCell {
        if let Some(why) = spec.problem() {
            panic!("{}", why)
        }
        // After the check above, which reports a `static`'s mistake at the `static`.
        assert_types::<K, V, KEYED>();
        MapCell { spec, raw: OnceLock::new(), creating: Mutex::new(()) }
    }

    /// A cell with its memory created now, in `spec`'s placement.
    pub(crate) fn create(spec: Spec) -> Result<MapCell, MapError> {
        let raw = RawMap::create(spec.geometry()?, &spec.placement)?;
        MapCell::with_raw(spec, raw)
    }

    /// A cell whose memory already exists (its kind and sizes checked by the caller).
    pub(crate) fn with_raw(spec: Spec, raw: RawMap) -> Result<MapCell, MapError> {
        spec.check_align()?;
        let cell = MapCell { spec, raw: OnceLock::new(), creating: Mutex::new(()) };
        let _ = cell.raw.set(raw);
        Ok(cell)
    }

    pub(crate) fn spec(&self) -> &Spec {
        &self.spec
    }

    /// The memory, created now if it does not exist yet.
    pub(crate) fn try_raw(&self) -> Result<&RawMap, MapError> {
        if let Some(raw) = self.raw.get() {
            return Ok(raw);
        }
        let _guard = self.creating.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(raw) = self.raw.get() {
            return Ok(raw);
        }
        let raw = RawMap::create(self.spec.geometry()?, &self.spec.placement)?;
        Ok(self.raw.get_or_init(|| raw))
    }

    /// The memory, created now if it does not exist yet.
    ///
    /// # Panics
    /// When the memory cannot be created (see [`MapCell::try_raw`]).
    pub(crate) fn raw(&self) -> &RawMap {
        match self.raw.get() {
            Some(raw) => raw,
            None => self.try_raw().unwrap_or_else(|e| {
                panic!(
                    "egpu-maps: creating a {} map failed: {e} (call `create` on the map first \
                     to handle this error)",
                    self.spec.kind.name()
                )
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{MAX_CAPACITY, MAX_ITEM_BYTES, MAX_SHARDS};
    use crate::region::shm_name;

    fn spec(capacity: u32, shards: Shards, name: &'static str) -> Spec {
        Spec {
            kind: MapKind::PerCpuHash,
            key_size: 8,
            value_size: 8,
            align: 8,
            capacity,
            shards,
            placement: Placement::Shared(Cow::Borrowed(name)),
        }
    }

    #[test]
    fn refusals_name_the_layouts_limits() {
        let named = |message: &str, limit: u32| {
            assert!(message.contains(&limit.to_string()), "`{message}` does not name {limit}")
        };
        for message in [refusal::EMPTY_KEY, refusal::LARGE_KEY, refusal::LARGE_VALUE] {
            named(message, MAX_ITEM_BYTES);
        }
        named(refusal::EMPTY_VALUE, MAX_ITEM_BYTES);
        named(refusal::NO_CAPACITY, MAX_CAPACITY);
        named(refusal::LARGE_CAPACITY, MAX_CAPACITY);
        named(refusal::MANY_SHARDS, MAX_SHARDS);
        assert!(refusal::LARGE_CAPACITY.contains(&format!("2^{}", MAX_CAPACITY.ilog2())));
    }

    #[test]
    fn problems_are_what_geometry_refuses() {
        let ok = spec(16, Shards::new(2, 1), "m");
        assert_eq!(ok.problem(), None);
        assert!(ok.geometry().is_ok());
        let cases = [
            (spec(0, Shards::ONE, "m"), refusal::NO_CAPACITY),
            (spec(MAX_CAPACITY + 1, Shards::ONE, "m"), refusal::LARGE_CAPACITY),
            (spec(4, Shards::new(0, 0), "m"), refusal::NO_SHARD),
            (spec(4, Shards::new(MAX_SHARDS + 1, 0), "m"), refusal::MANY_SHARDS),
            (spec(4, Shards { cpu: None, sm: MAX_SHARDS + 1 }, "m"), refusal::MANY_SHARDS),
            (Spec { align: 16, ..spec(4, Shards::ONE, "m") }, refusal::ALIGN),
            (Spec { key_size: 0, ..spec(4, Shards::ONE, "m") }, refusal::EMPTY_KEY),
            (Spec { value_size: 0, ..spec(4, Shards::ONE, "m") }, refusal::EMPTY_VALUE),
            (
                Spec { key_size: MAX_ITEM_BYTES + 1, ..spec(4, Shards::ONE, "m") },
                refusal::LARGE_KEY,
            ),
            (
                Spec { value_size: MAX_ITEM_BYTES + 1, ..spec(4, Shards::ONE, "m") },
                refusal::LARGE_VALUE,
            ),
        ];
        for (spec, refusal) in cases {
            assert_eq!(spec.problem(), Some(refusal));
            assert!(spec.geometry().is_err(), "{spec:?}: the run-time path agrees");
        }
        // A ring buffer has no key: an empty one is right there.
        let ring = Spec { kind: MapKind::RingBuf, key_size: 0, ..spec(4, Shards::ONE, "m") };
        assert_eq!(ring.problem(), None);
        assert!(ring.geometry().is_ok());
    }

    #[test]
    fn shared_names_are_checked_as_at_run_time() {
        let long = "n".repeat(201);
        let long: &'static str = Box::leak(long.into_boxed_str());
        for name in ["m", "egpu-1-launches", ".x", "...", "", ".", "..", "a/b", "/", "a\0b", long] {
            let refused = spec(4, Shards::ONE, name).problem() == Some(refusal::NAME);
            assert_eq!(refused, shm_name(name).is_err(), "`{name}`");
        }
        assert_eq!(spec(4, Shards::ONE, &long[..200]).problem(), None);
    }
}
