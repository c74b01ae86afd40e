//! Map descriptors: what a typed map is before its memory exists, and the memory once it does.
//!
//! A typed map can be a `static`: its constructor is a `const fn` that records the kind, sizes,
//! capacity, shards and placement. The memory is created, in its placement, the first time the
//! map is used or bound to a program, exactly once even when threads race to it.

use std::borrow::Cow;
use std::sync::{Mutex, OnceLock};

use egpu_ebpf::MapKind;

use crate::MapError;
use crate::layout::Geometry;
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
    pub(crate) capacity: u32,
    pub(crate) shards: Shards,
    pub(crate) placement: Placement,
}

impl Spec {
    pub(crate) fn geometry(&self) -> Result<Geometry, MapError> {
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
    pub(crate) const fn new(spec: Spec) -> MapCell {
        MapCell { spec, raw: OnceLock::new(), creating: Mutex::new(()) }
    }

    /// A cell whose memory already exists.
    pub(crate) fn with_raw(spec: Spec, raw: RawMap) -> MapCell {
        let cell = MapCell::new(spec);
        let _ = cell.raw.set(raw);
        cell
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
