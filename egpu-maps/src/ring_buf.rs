//! [`RingBuf`]: fixed-size records from many producers to one consumer.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use bytemuck::Pod;
use egpu_ebpf::MapKind;

use crate::MapError;
use crate::cell::{MapCell, Placement, Shards, Spec};
use crate::raw::RawMap;
use crate::ring::Ticket;

const fn spec<T>(records: u32, shards: Shards) -> Spec {
    spec_in::<T>(records, shards, None)
}

const fn spec_in<T>(records: u32, shards: Shards, name: Option<&'static str>) -> Spec {
    Spec {
        kind: MapKind::RingBuf,
        key_size: 0,
        value_size: size_of::<T>() as u32,
        align: align_of::<T>() as u32,
        capacity: records,
        shards,
        placement: match name {
            Some(name) => Placement::Shared(Cow::Borrowed(name)),
            None => Placement::Process,
        },
    }
}

/// The descriptor of a `const` constructor, refused when it can make no map (at compile time in
/// a `static`).
const fn described<T>(records: u32, shards: Shards, name: Option<&'static str>) -> MapCell {
    MapCell::described::<(), T, false>(spec_in::<T>(records, shards, name))
}

/// A ring buffer of `T` records (Linux's `BPF_MAP_TYPE_RINGBUF`, with fixed-size records).
///
/// Producers never block and never overwrite a record the consumer has not read: on a full ring
/// the record is dropped and counted ([`RingBuf::drops`]). One consumer at a time, in any
/// process, reads the records ([`RingBuf::consumer`]). A ring can have several shards (one ring
/// each): host producers write the shard of their CPU, device producers that of their SM, and
/// the consumer reads them all (each shard in order; no order across shards). Device producers
/// write their records without publishing them; once a shard written on the GPU is back in host
/// memory, [`RawMap::commit_written_records`] publishes them to the consumer. (Under the
/// preloaded library, rings written on the GPU are drained into the ring in shared memory while
/// kernels run.)
///
/// ```
/// use egpu_maps::RingBuf;
///
/// let events: RingBuf<[u64; 2]> = RingBuf::with_capacity(128);
/// events.output(&[1, 2])?;
/// let mut reservation = events.reserve()?;
/// *reservation = [3, 4];
/// reservation.commit();
///
/// let mut consumer = events.consumer()?;
/// assert_eq!(consumer.drain().collect::<Vec<_>>(), [[1, 2], [3, 4]]);
/// # Ok::<(), egpu_maps::MapError>(())
/// ```
#[doc(alias = "BPF_MAP_TYPE_RINGBUF")]
pub struct RingBuf<T> {
    cell: MapCell,
    _types: PhantomData<fn() -> T>,
}

impl<T> fmt::Debug for RingBuf<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RingBuf").field("cell", &self.cell).finish()
    }
}

impl<T: Pod> RingBuf<T> {
    /// A descriptor of one host ring of `records` records in process memory, created when first
    /// used.
    ///
    /// # Panics
    /// When the map cannot exist (a `records` of 0, say): in a `static`, a compile error that names
    /// the limit ([maps that cannot exist](crate#maps-that-cannot-exist)). [`RingBuf::create`]
    /// returns the error instead.
    pub const fn with_capacity(records: u32) -> RingBuf<T> {
        RingBuf { cell: described::<T>(records, Shards::ONE, None), _types: PhantomData }
    }

    /// A descriptor of rings of `records` records, with these shards (one ring each).
    ///
    /// # Panics
    /// When the map cannot exist (a `records` of 0, say): in a `static`, a compile error that names
    /// the limit ([maps that cannot exist](crate#maps-that-cannot-exist)). [`RingBuf::create`]
    /// returns the error instead.
    pub const fn with_shards(records: u32, shards: Shards) -> RingBuf<T> {
        RingBuf { cell: described::<T>(records, shards, None), _types: PhantomData }
    }

    /// A descriptor of a ring buffer in shared memory named `name`.
    ///
    /// # Panics
    /// When the map cannot exist (a `records` of 0, say): in a `static`, a compile error that names
    /// the limit ([maps that cannot exist](crate#maps-that-cannot-exist)). [`RingBuf::create`]
    /// returns the error instead.
    pub const fn shared(name: &'static str, records: u32, shards: Shards) -> RingBuf<T> {
        RingBuf { cell: described::<T>(records, shards, Some(name)), _types: PhantomData }
    }

    /// Creates the ring buffer now.
    pub fn create(
        records: u32,
        shards: Shards,
        placement: Placement,
    ) -> Result<RingBuf<T>, MapError> {
        let mut s = spec::<T>(records, shards);
        s.placement = placement;
        Ok(RingBuf { cell: MapCell::create(s)?, _types: PhantomData })
    }

    /// Opens a ring buffer another process created in shared memory, checking the record size.
    pub fn open_shared(name: &str) -> Result<RingBuf<T>, MapError> {
        RingBuf::from_raw(RawMap::open_shared(name)?)
    }

    /// Wraps an open map, checking its kind and record size.
    pub fn from_raw(raw: RawMap) -> Result<RingBuf<T>, MapError> {
        raw.expect(MapKind::RingBuf, 0, size_of::<T>() as u32)?;
        let g = raw.geometry();
        let s = spec::<T>(g.capacity, Shards::new(g.cpu_shards, g.sm_shards));
        Ok(RingBuf { cell: MapCell::with_raw(s, raw)?, _types: PhantomData })
    }

    /// The map's memory, created now if this descriptor has none yet.
    pub fn try_raw(&self) -> Result<&RawMap, MapError> {
        self.cell.try_raw()
    }

    /// The map's memory, created now if this descriptor has none yet.
    ///
    /// # Panics
    /// When creating it fails; [`RingBuf::try_raw`] returns that error instead.
    pub fn raw(&self) -> &RawMap {
        self.cell.raw()
    }

    /// Copies `record` into the ring; [`MapError::RingFull`] when it was dropped.
    pub fn output(&self, record: &T) -> Result<(), MapError> {
        self.try_raw()?.output(bytemuck::bytes_of(record))
    }

    /// Copies `record` into the ring once per warp-level call (`egpu_ringbuf_output_warp`): on
    /// the CPU a warp is one lane, so as [`output`](Self::output).
    pub fn output_warp(&self, record: &T) -> Result<(), MapError> {
        self.output(record)
    }

    /// Reserves room for a record in this CPU's ring: [`MapError::RingFull`] (the drop is
    /// counted) when the ring is full, [`MapError::NoHostShard`] when the map has rings for
    /// devices only. The record starts zeroed; [`Reserved::commit`] publishes it, and dropping
    /// the reservation discards it.
    pub fn reserve(&self) -> Result<Reserved<'_, T>, MapError> {
        let raw = self.try_raw()?;
        let shard = raw.host_shard()?;
        let ring = raw.ring(shard);
        let ticket = ring.reserve().ok_or(MapError::RingFull)?;
        ring.write(ticket, &[]);
        Ok(Reserved { raw, shard, ticket: Some(ticket), _types: PhantomData })
    }

    /// Becomes the ring's consumer. Fails while another live process, or another consumer in
    /// this one, holds the role.
    pub fn consumer(&self) -> Result<Consumer<'_, T>, MapError> {
        let raw = self.try_raw()?;
        let shards = raw.geometry().shards();
        for s in 0..shards {
            if let Err(e) = raw.ring(s).claim_consumer() {
                (0..s).for_each(|s| raw.ring(s).release_consumer());
                return Err(e);
            }
        }
        Ok(Consumer { raw, next: 0, _types: PhantomData })
    }

    /// Records dropped because the ring was full, over all shards.
    pub fn drops(&self) -> u64 {
        self.raw().refused()
    }

    /// Records dropped because the ring was full, per shard: the host's shards first, then each
    /// SM's (none when the map's memory cannot be made).
    pub fn shard_drops(&self) -> Vec<u64> {
        let Ok(raw) = self.try_raw() else { return Vec::new() };
        (0..raw.geometry().shards()).map(|s| raw.ring(s).drops()).collect()
    }

    /// Records reserved by producers that died before committing them, skipped by the consumer.
    pub fn lost(&self) -> u64 {
        let raw = self.raw();
        (0..raw.geometry().shards()).map(|s| raw.ring(s).lost()).sum()
    }

    /// Records reserved or committed and not yet consumed.
    pub fn pending(&self) -> u64 {
        self.raw().len()
    }
}

/// A record being written into a ring: it derefs to the record, zeroed to start with.
pub struct Reserved<'a, T: Pod> {
    raw: &'a RawMap,
    shard: u32,
    ticket: Option<Ticket>,
    _types: PhantomData<&'a mut T>,
}

impl<T: Pod> fmt::Debug for Reserved<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reserved").field("shard", &self.shard).finish_non_exhaustive()
    }
}

impl<T: Pod> Reserved<'_, T> {
    fn record(&self) -> *mut T {
        let ticket = self.ticket.expect("a live reservation has a ticket");
        let off = self.raw.ring(self.shard).record_at(ticket);
        // SAFETY: the offset lies inside the region (checked geometry).
        unsafe { self.raw.region().base().add(off).cast() }
    }

    /// Publishes the record to the consumer.
    pub fn commit(mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.raw.ring(self.shard).commit(ticket);
        }
    }
}

impl<T: Pod> std::ops::Deref for Reserved<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the slot is reserved by this producer: no other producer writes it and the
        // consumer does not read it before the commit. Records are 8-byte aligned and `T`
        // aligns to 8 at most (checked when the map type is built). Any bytes are a valid `T`.
        unsafe { &*self.record() }
    }
}

impl<T: Pod> std::ops::DerefMut for Reserved<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as for `deref`; `&mut self` makes this the only reference.
        unsafe { &mut *self.record() }
    }
}

impl<T: Pod> Drop for Reserved<'_, T> {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.raw.ring(self.shard).discard(ticket);
        }
    }
}

/// The consumer of a ring buffer: reads records in order, per shard. Dropping it gives the role
/// back.
pub struct Consumer<'a, T: Pod> {
    raw: &'a RawMap,
    next: u32,
    _types: PhantomData<fn() -> T>,
}

impl<T: Pod> fmt::Debug for Consumer<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer").finish_non_exhaustive()
    }
}

impl<T: Pod> Consumer<'_, T> {
    /// The next record, if one is committed.
    pub fn poll(&mut self) -> Option<T> {
        let mut record = T::zeroed();
        self.raw.next_record(&mut self.next, bytemuck::bytes_of_mut(&mut record)).then_some(record)
    }

    /// The records committed so far, read as the iterator goes.
    pub fn drain(&mut self) -> impl Iterator<Item = T> + '_ {
        std::iter::from_fn(move || self.poll())
    }
}

impl<T: Pod> Drop for Consumer<'_, T> {
    fn drop(&mut self) {
        for s in 0..self.raw.geometry().shards() {
            self.raw.ring(s).release_consumer();
        }
    }
}
