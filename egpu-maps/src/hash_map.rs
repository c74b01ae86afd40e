//! [`HashMap`] and [`PerCpuHashMap`]: fixed-capacity hash maps over `Pod` keys and values.

use std::fmt;
use std::marker::PhantomData;

use bytemuck::Pod;
use egpu_ebpf::MapKind;

use crate::MapError;
use crate::cell::{MapCell, Placement, Shards, Spec};
use crate::raw::{RawMap, UpdateFlags};
use crate::word::{
    AtomicWord, Integer, PerShard, Word, check_field, field_offset, read, value_word,
};

const fn spec<K, V>(kind: MapKind, capacity: u32, shards: Shards) -> Spec {
    spec_in::<K, V>(kind, capacity, shards, None)
}

const fn spec_in<K, V>(
    kind: MapKind,
    capacity: u32,
    shards: Shards,
    name: Option<&'static str>,
) -> Spec {
    Spec {
        kind,
        key_size: size_of::<K>() as u32,
        value_size: size_of::<V>() as u32,
        align: if align_of::<K>() > align_of::<V>() { align_of::<K>() } else { align_of::<V>() }
            as u32,
        capacity,
        shards,
        placement: match name {
            Some(name) => Placement::Shared(std::borrow::Cow::Borrowed(name)),
            None => Placement::Process,
        },
    }
}

/// The descriptor of a `const` constructor, refused when it can make no map (at compile time in
/// a `static`).
const fn described<K, V>(
    kind: MapKind,
    capacity: u32,
    shards: Shards,
    name: Option<&'static str>,
) -> MapCell {
    MapCell::described::<K, V, true>(spec_in::<K, V>(kind, capacity, shards, name))
}

fn open<K, V>(raw: RawMap, kind: MapKind) -> Result<RawMap, MapError> {
    raw.expect(kind, size_of::<K>() as u32, size_of::<V>() as u32)?;
    Ok(raw)
}

/// A hash map of at most `capacity` entries, lock-free, in one block of memory shared with
/// probes, the GPU and other processes (Linux's `BPF_MAP_TYPE_HASH`).
///
/// ```
/// use egpu_maps::HashMap;
///
/// static LAUNCHES: HashMap<u64, u64> = HashMap::with_capacity(1024);
///
/// LAUNCHES.fetch_add(&7, 1)?;
/// LAUNCHES.fetch_add(&7, 2)?;
/// assert_eq!(LAUNCHES.get(&7), Some(3));
/// # Ok::<(), egpu_maps::MapError>(())
/// ```
///
/// Every word of a value is read and written atomically, but a value of several words is not:
/// a reader may see a value half written. Write a map from host code or from device code, not
/// both at once (per-CPU maps give each side its own shards). An atomic update of a value
/// (`fetch_add`, a [`Word`]) lands where the entry was when it was looked up, as with an eBPF
/// lookup: if another thread removes the key meanwhile and another key reuses its slot, the new
/// entry receives it.
#[doc(alias = "BPF_MAP_TYPE_HASH")]
pub struct HashMap<K, V> {
    cell: MapCell,
    _types: PhantomData<fn() -> (K, V)>,
}

impl<K, V> fmt::Debug for HashMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HashMap").field("cell", &self.cell).finish()
    }
}

impl<K: Pod, V: Pod> HashMap<K, V> {
    /// A descriptor of a map of at most `capacity` entries in process memory, created when first
    /// used.
    ///
    /// # Panics
    /// When the map cannot exist (a `capacity` of 0, say): in a `static`, a compile error that names
    /// the limit ([maps that cannot exist](crate#maps-that-cannot-exist)). [`HashMap::create`]
    /// returns the error instead.
    pub const fn with_capacity(capacity: u32) -> HashMap<K, V> {
        HashMap {
            cell: described::<K, V>(MapKind::Hash, capacity, Shards::ONE, None),
            _types: PhantomData,
        }
    }

    /// A descriptor of a map of at most `capacity` entries in shared memory named `name`,
    /// created when first used.
    ///
    /// # Panics
    /// When the map cannot exist (a `capacity` of 0, say): in a `static`, a compile error that names
    /// the limit ([maps that cannot exist](crate#maps-that-cannot-exist)). [`HashMap::create`]
    /// returns the error instead.
    pub const fn shared(name: &'static str, capacity: u32) -> HashMap<K, V> {
        HashMap {
            cell: described::<K, V>(MapKind::Hash, capacity, Shards::ONE, Some(name)),
            _types: PhantomData,
        }
    }

    /// Creates the map now, in `placement`.
    pub fn create(capacity: u32, placement: Placement) -> Result<HashMap<K, V>, MapError> {
        let mut s = spec::<K, V>(MapKind::Hash, capacity, Shards::ONE);
        s.placement = placement;
        Ok(HashMap { cell: MapCell::create(s)?, _types: PhantomData })
    }

    /// Opens a map another process created in shared memory, checking that it is a hash map of
    /// these key and value types' sizes. While the creator is still laying it out, this is
    /// [`MapError::NotReady`]: a reader that may start first retries on it.
    pub fn open_shared(name: &str) -> Result<HashMap<K, V>, MapError> {
        HashMap::from_raw(RawMap::open_shared(name)?)
    }

    /// Wraps an open map, checking its kind and sizes.
    pub fn from_raw(raw: RawMap) -> Result<HashMap<K, V>, MapError> {
        let raw = open::<K, V>(raw, MapKind::Hash)?;
        let s = spec::<K, V>(MapKind::Hash, raw.geometry().capacity, Shards::ONE);
        Ok(HashMap { cell: MapCell::with_raw(s, raw)?, _types: PhantomData })
    }

    /// The map's memory, created now if this descriptor has none yet.
    pub fn try_raw(&self) -> Result<&RawMap, MapError> {
        self.cell.try_raw()
    }

    /// The map's memory, created now if this descriptor has none yet.
    ///
    /// # Panics
    /// When creating it fails (a shared-memory name already taken, say); [`HashMap::try_raw`]
    /// returns that error instead.
    pub fn raw(&self) -> &RawMap {
        self.cell.raw()
    }

    /// The most entries the map holds.
    pub fn capacity(&self) -> u32 {
        self.cell.spec().capacity
    }

    /// The value stored under `key`.
    pub fn get(&self, key: &K) -> Option<V> {
        let raw = self.raw();
        let table = raw.table(0);
        table.find(bytemuck::bytes_of(key)).map(|(i, _)| read(raw.region(), table.value_offset(i)))
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &K) -> bool {
        self.raw().table(0).find(bytemuck::bytes_of(key)).is_some()
    }

    /// Stores `value` under `key`, inserting or replacing. A full map refuses a new key with
    /// [`MapError::Full`] and keeps every entry it had.
    pub fn insert(&self, key: &K, value: &V) -> Result<(), MapError> {
        self.update(key, value, UpdateFlags::Any)
    }

    /// Stores `value` under `key` as `flags` allow.
    pub fn update(&self, key: &K, value: &V, flags: UpdateFlags) -> Result<(), MapError> {
        self.try_raw()?
            .table(0)
            .update(bytemuck::bytes_of(key), Some(bytemuck::bytes_of(value)), flags)
            .map(drop)
    }

    /// Removes `key`; false when it was absent.
    pub fn remove(&self, key: &K) -> bool {
        self.raw().table(0).remove(bytemuck::bytes_of(key))
    }

    /// Removes every entry.
    pub fn clear(&self) {
        self.raw().table(0).clear();
    }

    /// Live entries.
    pub fn len(&self) -> usize {
        self.raw().table(0).len() as usize
    }

    /// Whether the map has no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Inserts refused because the map was full.
    pub fn refused(&self) -> u64 {
        self.raw().table(0).refused()
    }

    /// The word at byte `offset` of `key`'s value, for atomic updates, inserting a zero value
    /// first when `key` is absent. Like the pointer an eBPF lookup returns, the word stays where
    /// the entry was: if the key is removed and its slot reused by another key, it addresses
    /// the new entry's value.
    pub fn word<W: AtomicWord>(&self, key: &K, offset: usize) -> Result<Word<'_, W>, MapError> {
        let raw = self.try_raw()?;
        check_field::<W>(offset, raw.geometry().value_size)?;
        let table = raw.table(0);
        let (slot, _) = table.entry(bytemuck::bytes_of(key))?;
        Word::at(raw.region(), table.value_offset(slot), offset, raw.geometry().value_size)
    }

    /// Adds `delta` to `key`'s value atomically (inserting 0 first when absent) and returns the
    /// previous value.
    pub fn fetch_add(&self, key: &K, delta: V) -> Result<V, MapError>
    where
        V: AtomicWord,
    {
        Ok(self.word::<V>(key, 0)?.fetch_add(delta))
    }

    /// Adds `delta` atomically to the field `field` picks out of `key`'s value (inserting a zero
    /// value first when absent), and returns the field's previous value:
    /// `STATS.fetch_add_field(&kernel, |s| &s.bytes, n)`. Probes use the same call.
    pub fn fetch_add_field<W: AtomicWord>(
        &self,
        key: &K,
        field: impl FnOnce(&V) -> &W,
        delta: W,
    ) -> Result<W, MapError> {
        Ok(self.word::<W>(key, field_offset(field)?)?.fetch_add(delta))
    }

    /// The entries, read one at a time while writers may go on.
    pub fn iter(&self) -> impl Iterator<Item = (K, V)> + '_ {
        let raw = self.raw();
        let table = raw.table(0);
        (0..table.slots()).filter_map(move |i| {
            let mut key = K::zeroed();
            if !table.key_at(i, bytemuck::bytes_of_mut(&mut key)) {
                return None;
            }
            Some((key, read(raw.region(), table.value_offset(i))))
        })
    }
}

/// A hash map with one table per shard: one per logical CPU for host writers and one per
/// streaming multiprocessor for device writers (Linux's `BPF_MAP_TYPE_PERCPU_HASH`). Host
/// writes go to the shard of the CPU the thread runs on; readers see every shard.
///
/// ```
/// use egpu_maps::PerCpuHashMap;
///
/// let bytes: PerCpuHashMap<u32, u64> = PerCpuHashMap::with_capacity(64);
/// bytes.fetch_add(&1, 4096)?;
/// bytes.fetch_add(&1, 512)?;
/// assert_eq!(bytes.sum(&1), Some(4608));
/// # Ok::<(), egpu_maps::MapError>(())
/// ```
#[doc(alias = "BPF_MAP_TYPE_PERCPU_HASH")]
pub struct PerCpuHashMap<K, V> {
    cell: MapCell,
    _types: PhantomData<fn() -> (K, V)>,
}

impl<K, V> fmt::Debug for PerCpuHashMap<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PerCpuHashMap").field("cell", &self.cell).finish()
    }
}

impl<K: Pod, V: Pod> PerCpuHashMap<K, V> {
    /// A descriptor of a map of at most `capacity` entries per shard, with one shard per
    /// logical CPU, in process memory, created when first used.
    ///
    /// # Panics
    /// When the map cannot exist (a `capacity` of 0, say): in a `static`, a compile error that names
    /// the limit ([maps that cannot exist](crate#maps-that-cannot-exist)). [`PerCpuHashMap::create`]
    /// returns the error instead.
    pub const fn with_capacity(capacity: u32) -> PerCpuHashMap<K, V> {
        PerCpuHashMap {
            cell: described::<K, V>(MapKind::PerCpuHash, capacity, Shards::PER_CPU, None),
            _types: PhantomData,
        }
    }

    /// A descriptor of a map of at most `capacity` entries per shard, with these shards.
    ///
    /// # Panics
    /// When the map cannot exist (a `capacity` of 0, say): in a `static`, a compile error that names
    /// the limit ([maps that cannot exist](crate#maps-that-cannot-exist)). [`PerCpuHashMap::create`]
    /// returns the error instead.
    pub const fn with_shards(capacity: u32, shards: Shards) -> PerCpuHashMap<K, V> {
        PerCpuHashMap {
            cell: described::<K, V>(MapKind::PerCpuHash, capacity, shards, None),
            _types: PhantomData,
        }
    }

    /// A descriptor of a map in shared memory named `name`.
    ///
    /// # Panics
    /// When the map cannot exist (a `capacity` of 0, say): in a `static`, a compile error that names
    /// the limit ([maps that cannot exist](crate#maps-that-cannot-exist)). [`PerCpuHashMap::create`]
    /// returns the error instead.
    pub const fn shared(name: &'static str, capacity: u32, shards: Shards) -> PerCpuHashMap<K, V> {
        PerCpuHashMap {
            cell: described::<K, V>(MapKind::PerCpuHash, capacity, shards, Some(name)),
            _types: PhantomData,
        }
    }

    /// Creates the map now.
    pub fn create(
        capacity: u32,
        shards: Shards,
        placement: Placement,
    ) -> Result<PerCpuHashMap<K, V>, MapError> {
        let mut s = spec::<K, V>(MapKind::PerCpuHash, capacity, shards);
        s.placement = placement;
        Ok(PerCpuHashMap { cell: MapCell::create(s)?, _types: PhantomData })
    }

    /// Opens a map another process created in shared memory, checking kind and sizes.
    pub fn open_shared(name: &str) -> Result<PerCpuHashMap<K, V>, MapError> {
        PerCpuHashMap::from_raw(RawMap::open_shared(name)?)
    }

    /// Wraps an open map, checking its kind and sizes.
    pub fn from_raw(raw: RawMap) -> Result<PerCpuHashMap<K, V>, MapError> {
        let raw = open::<K, V>(raw, MapKind::PerCpuHash)?;
        let g = raw.geometry();
        let shards = Shards::new(g.cpu_shards, g.sm_shards);
        let s = spec::<K, V>(MapKind::PerCpuHash, g.capacity, shards);
        Ok(PerCpuHashMap { cell: MapCell::with_raw(s, raw)?, _types: PhantomData })
    }

    /// The map's memory, created now if this descriptor has none yet.
    pub fn try_raw(&self) -> Result<&RawMap, MapError> {
        self.cell.try_raw()
    }

    /// The map's memory, created now if this descriptor has none yet.
    ///
    /// # Panics
    /// When creating it fails; [`PerCpuHashMap::try_raw`] returns that error instead.
    pub fn raw(&self) -> &RawMap {
        self.cell.raw()
    }

    /// Stores `value` under `key` in this CPU's shard.
    pub fn insert(&self, key: &K, value: &V) -> Result<(), MapError> {
        let raw = self.try_raw()?;
        raw.table(raw.host_shard()?)
            .update(bytemuck::bytes_of(key), Some(bytemuck::bytes_of(value)), UpdateFlags::Any)
            .map(drop)
    }

    /// Adds `delta` to `key`'s value in this CPU's shard (inserting 0 first when absent) and
    /// returns the shard's previous value.
    pub fn fetch_add(&self, key: &K, delta: V) -> Result<V, MapError>
    where
        V: AtomicWord,
    {
        let raw = self.try_raw()?;
        let table = raw.table(raw.host_shard()?);
        let (slot, _) = table.entry(bytemuck::bytes_of(key))?;
        Ok(value_word::<V>(raw.region(), table.value_offset(slot)).fetch_add(delta))
    }

    /// `key`'s value in every shard (zero where a shard lacks it), or `None` when no shard has
    /// it.
    pub fn get(&self, key: &K) -> Option<PerShard<V>> {
        let raw = self.raw();
        let g = raw.geometry();
        let k = bytemuck::bytes_of(key);
        let mut found = false;
        let mut value = |s: u32| {
            let table = raw.table(s);
            match table.find(k) {
                Some((i, _)) => {
                    found = true;
                    read(raw.region(), table.value_offset(i))
                }
                None => V::zeroed(),
            }
        };
        let cpu = (0..g.cpu_shards).map(&mut value).collect();
        let sm = (g.cpu_shards..g.shards()).map(&mut value).collect();
        found.then_some(PerShard { cpu, sm })
    }

    /// The sum over shards of `key`'s value.
    pub fn sum(&self, key: &K) -> Option<V>
    where
        V: Integer,
    {
        self.get(key).map(|v| v.sum())
    }

    /// Removes `key` from every shard; false when no shard had it. Do not call it while device
    /// probes write the map: device shards belong to the device.
    pub fn remove(&self, key: &K) -> bool {
        let raw = self.raw();
        let k = bytemuck::bytes_of(key);
        (0..raw.geometry().shards()).fold(false, |any, s| raw.table(s).remove(k) | any)
    }

    /// The keys present in any shard, each once.
    pub fn keys(&self) -> Vec<K> {
        let raw = self.raw();
        let mut seen = std::collections::HashSet::new();
        let mut keys = Vec::new();
        for s in 0..raw.geometry().shards() {
            let table = raw.table(s);
            for i in 0..table.slots() {
                let mut key = K::zeroed();
                if table.key_at(i, bytemuck::bytes_of_mut(&mut key))
                    && seen.insert(bytemuck::bytes_of(&key).to_vec())
                {
                    keys.push(key);
                }
            }
        }
        keys
    }
}
