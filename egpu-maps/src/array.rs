//! [`Array`] and [`PerCpuArray`]: fixed-length arrays of `Pod` values indexed by `u32`.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use bytemuck::Pod;
use egpu_ebpf::MapKind;

use crate::MapError;
use crate::cell::{MapCell, Placement, Shards, Spec};
use crate::raw::RawMap;
use crate::word::{AtomicWord, Integer, PerShard, Word, field_offset, read, value_word};

const fn spec<V>(kind: MapKind, len: u32, shards: Shards) -> Spec {
    spec_in::<V>(kind, len, shards, None)
}

const fn spec_in<V>(kind: MapKind, len: u32, shards: Shards, name: Option<&'static str>) -> Spec {
    Spec {
        kind,
        key_size: 4,
        value_size: size_of::<V>() as u32,
        align: align_of::<V>() as u32,
        capacity: len,
        shards,
        placement: match name {
            Some(name) => Placement::Shared(Cow::Borrowed(name)),
            None => Placement::Process,
        },
    }
}

/// The descriptor of a `const` constructor, refused when it can make no map (at compile time in
/// a `static`).
const fn described<V>(
    kind: MapKind,
    len: u32,
    shards: Shards,
    name: Option<&'static str>,
) -> MapCell {
    MapCell::described::<u32, V, true>(spec_in::<V>(kind, len, shards, name))
}

/// A fixed-length array of values, all present from the start as zeros (Linux's
/// `BPF_MAP_TYPE_ARRAY`).
///
/// ```
/// use egpu_maps::Array;
///
/// static HISTOGRAM: Array<u64> = Array::with_len(64);
///
/// HISTOGRAM.fetch_add(3, 1)?;
/// assert_eq!(HISTOGRAM.get(3)?, 1);
/// assert!(HISTOGRAM.get(64).is_err());
/// # Ok::<(), egpu_maps::MapError>(())
/// ```
#[doc(alias = "BPF_MAP_TYPE_ARRAY")]
pub struct Array<V> {
    cell: MapCell,
    _types: PhantomData<fn() -> V>,
}

impl<V> fmt::Debug for Array<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Array").field("cell", &self.cell).finish()
    }
}

impl<V: Pod> Array<V> {
    /// A descriptor of an array of `len` values in process memory, created when first used.
    ///
    /// # Panics
    /// When the map cannot exist (a `len` of 0, say): in a `static`, a compile error that names
    /// the limit ([maps that cannot exist](crate#maps-that-cannot-exist)). [`Array::create`]
    /// returns the error instead.
    pub const fn with_len(len: u32) -> Array<V> {
        Array { cell: described::<V>(MapKind::Array, len, Shards::ONE, None), _types: PhantomData }
    }

    /// A descriptor of an array of `len` values in shared memory named `name`, created when
    /// first used.
    ///
    /// # Panics
    /// When the map cannot exist (a `len` of 0, say): in a `static`, a compile error that names
    /// the limit ([maps that cannot exist](crate#maps-that-cannot-exist)). [`Array::create`]
    /// returns the error instead.
    pub const fn shared(name: &'static str, len: u32) -> Array<V> {
        Array {
            cell: described::<V>(MapKind::Array, len, Shards::ONE, Some(name)),
            _types: PhantomData,
        }
    }

    /// Creates the array now, in `placement`.
    pub fn create(len: u32, placement: Placement) -> Result<Array<V>, MapError> {
        let mut s = spec::<V>(MapKind::Array, len, Shards::ONE);
        s.placement = placement;
        Ok(Array { cell: MapCell::create(s)?, _types: PhantomData })
    }

    /// Opens an array another process created in shared memory, checking kind and sizes.
    pub fn open_shared(name: &str) -> Result<Array<V>, MapError> {
        Array::from_raw(RawMap::open_shared(name)?)
    }

    /// Wraps an open map, checking its kind and sizes.
    pub fn from_raw(raw: RawMap) -> Result<Array<V>, MapError> {
        raw.expect(MapKind::Array, 4, size_of::<V>() as u32)?;
        let s = spec::<V>(MapKind::Array, raw.geometry().capacity, Shards::ONE);
        Ok(Array { cell: MapCell::with_raw(s, raw)?, _types: PhantomData })
    }

    /// The map's memory, created now if this descriptor has none yet.
    pub fn try_raw(&self) -> Result<&RawMap, MapError> {
        self.cell.try_raw()
    }

    /// The map's memory, created now if this descriptor has none yet.
    ///
    /// # Panics
    /// When creating it fails; [`Array::try_raw`] returns that error instead.
    pub fn raw(&self) -> &RawMap {
        self.cell.raw()
    }

    /// Number of values.
    pub fn len(&self) -> u32 {
        self.cell.spec().capacity
    }

    /// Whether the array has no value (never: arrays have at least one).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The value at `index`.
    pub fn get(&self, index: u32) -> Result<V, MapError> {
        let raw = self.try_raw()?;
        Ok(read(raw.region(), raw.element(0, index)?))
    }

    /// Stores `value` at `index`.
    pub fn set(&self, index: u32, value: &V) -> Result<(), MapError> {
        let raw = self.try_raw()?;
        raw.region().write_bytes(raw.element(0, index)?, bytemuck::bytes_of(value));
        Ok(())
    }

    /// The word at byte `offset` of the value at `index`, for atomic updates.
    pub fn word<W: AtomicWord>(&self, index: u32, offset: usize) -> Result<Word<'_, W>, MapError> {
        let raw = self.try_raw()?;
        Word::at(raw.region(), raw.element(0, index)?, offset, raw.geometry().value_size)
    }

    /// Adds `delta` to the value at `index` atomically and returns the previous value.
    pub fn fetch_add(&self, index: u32, delta: V) -> Result<V, MapError>
    where
        V: AtomicWord,
    {
        Ok(self.word::<V>(index, 0)?.fetch_add(delta))
    }

    /// Adds `delta` atomically to the field `field` picks out of the value at `index`, and
    /// returns the field's previous value. Probes use the same call.
    pub fn fetch_add_field<W: AtomicWord>(
        &self,
        index: u32,
        field: impl FnOnce(&V) -> &W,
        delta: W,
    ) -> Result<W, MapError> {
        Ok(self.word::<W>(index, field_offset(field)?)?.fetch_add(delta))
    }

    /// Every value, in order.
    pub fn to_vec(&self) -> Vec<V> {
        let raw = self.raw();
        (0..self.len())
            .filter_map(|i| raw.element(0, i).ok())
            .map(|o| read(raw.region(), o))
            .collect()
    }
}

/// An array with one copy per shard: one per logical CPU for host writers and one per streaming
/// multiprocessor for device writers (Linux's `BPF_MAP_TYPE_PERCPU_ARRAY`). Host writes go to
/// the shard of the CPU the thread runs on; readers see every shard or their sum.
///
/// ```
/// use egpu_maps::PerCpuArray;
///
/// static EVENTS: PerCpuArray<u64> = PerCpuArray::with_len(4);
///
/// EVENTS.fetch_add(0, 5)?;
/// assert_eq!(EVENTS.sum(0)?, 5);
/// # Ok::<(), egpu_maps::MapError>(())
/// ```
#[doc(alias = "BPF_MAP_TYPE_PERCPU_ARRAY")]
pub struct PerCpuArray<V> {
    cell: MapCell,
    _types: PhantomData<fn() -> V>,
}

impl<V> fmt::Debug for PerCpuArray<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PerCpuArray").field("cell", &self.cell).finish()
    }
}

impl<V: Pod> PerCpuArray<V> {
    /// A descriptor of `len` values per shard, one shard per logical CPU, in process memory,
    /// created when first used.
    ///
    /// # Panics
    /// When the map cannot exist (a `len` of 0, say): in a `static`, a compile error that names
    /// the limit ([maps that cannot exist](crate#maps-that-cannot-exist)). [`PerCpuArray::create`]
    /// returns the error instead.
    pub const fn with_len(len: u32) -> PerCpuArray<V> {
        PerCpuArray {
            cell: described::<V>(MapKind::PerCpuArray, len, Shards::PER_CPU, None),
            _types: PhantomData,
        }
    }

    /// A descriptor of `len` values per shard, with these shards.
    ///
    /// # Panics
    /// When the map cannot exist (a `len` of 0, say): in a `static`, a compile error that names
    /// the limit ([maps that cannot exist](crate#maps-that-cannot-exist)). [`PerCpuArray::create`]
    /// returns the error instead.
    pub const fn with_shards(len: u32, shards: Shards) -> PerCpuArray<V> {
        PerCpuArray {
            cell: described::<V>(MapKind::PerCpuArray, len, shards, None),
            _types: PhantomData,
        }
    }

    /// A descriptor of an array in shared memory named `name`.
    ///
    /// # Panics
    /// When the map cannot exist (a `len` of 0, say): in a `static`, a compile error that names
    /// the limit ([maps that cannot exist](crate#maps-that-cannot-exist)). [`PerCpuArray::create`]
    /// returns the error instead.
    pub const fn shared(name: &'static str, len: u32, shards: Shards) -> PerCpuArray<V> {
        PerCpuArray {
            cell: described::<V>(MapKind::PerCpuArray, len, shards, Some(name)),
            _types: PhantomData,
        }
    }

    /// Creates the array now.
    pub fn create(
        len: u32,
        shards: Shards,
        placement: Placement,
    ) -> Result<PerCpuArray<V>, MapError> {
        let mut s = spec::<V>(MapKind::PerCpuArray, len, shards);
        s.placement = placement;
        Ok(PerCpuArray { cell: MapCell::create(s)?, _types: PhantomData })
    }

    /// Opens an array another process created in shared memory, checking kind and sizes.
    pub fn open_shared(name: &str) -> Result<PerCpuArray<V>, MapError> {
        PerCpuArray::from_raw(RawMap::open_shared(name)?)
    }

    /// Wraps an open map, checking its kind and sizes.
    pub fn from_raw(raw: RawMap) -> Result<PerCpuArray<V>, MapError> {
        raw.expect(MapKind::PerCpuArray, 4, size_of::<V>() as u32)?;
        let g = raw.geometry();
        let s = spec::<V>(MapKind::PerCpuArray, g.capacity, Shards::new(g.cpu_shards, g.sm_shards));
        Ok(PerCpuArray { cell: MapCell::with_raw(s, raw)?, _types: PhantomData })
    }

    /// The map's memory, created now if this descriptor has none yet.
    pub fn try_raw(&self) -> Result<&RawMap, MapError> {
        self.cell.try_raw()
    }

    /// The map's memory, created now if this descriptor has none yet.
    ///
    /// # Panics
    /// When creating it fails; [`PerCpuArray::try_raw`] returns that error instead.
    pub fn raw(&self) -> &RawMap {
        self.cell.raw()
    }

    /// Values per shard.
    pub fn len(&self) -> u32 {
        self.cell.spec().capacity
    }

    /// Whether the array has no value (never).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The value at `index` in every shard.
    pub fn get(&self, index: u32) -> Result<PerShard<V>, MapError> {
        let raw = self.try_raw()?;
        let g = raw.geometry();
        let value = |s: u32| raw.element(s, index).map(|o| read::<V>(raw.region(), o));
        Ok(PerShard {
            cpu: (0..g.cpu_shards).map(value).collect::<Result<_, _>>()?,
            sm: (g.cpu_shards..g.shards()).map(value).collect::<Result<_, _>>()?,
        })
    }

    /// The sum over shards of the value at `index`.
    pub fn sum(&self, index: u32) -> Result<V, MapError>
    where
        V: Integer,
    {
        Ok(self.get(index)?.sum())
    }

    /// Stores `value` at `index` in this CPU's shard.
    pub fn set(&self, index: u32, value: &V) -> Result<(), MapError> {
        let raw = self.try_raw()?;
        let off = raw.element(raw.host_shard()?, index)?;
        raw.region().write_bytes(off, bytemuck::bytes_of(value));
        Ok(())
    }

    /// Adds `delta` to the value at `index` in this CPU's shard and returns the shard's previous
    /// value.
    pub fn fetch_add(&self, index: u32, delta: V) -> Result<V, MapError>
    where
        V: AtomicWord,
    {
        let raw = self.try_raw()?;
        let off = raw.element(raw.host_shard()?, index)?;
        Ok(value_word::<V>(raw.region(), off).fetch_add(delta))
    }
}
