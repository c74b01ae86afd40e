//! A map's device part: a copy of the map in GPU memory that device probes update at GPU speed,
//! merged into the map (in shared memory, say) by the host, while device threads still write.
//!
//! A [`DevicePart`] starts as an empty map of the map's geometry ([`DevicePart::image`], what the
//! caller uploads). The caller copies the part's device-written bytes ([`DevicePart::range`]: the
//! SM shards of a per-CPU kind, the one shard of a hash map or an array) out of the GPU now and
//! then, a snapshot, and hands it to [`DevicePart::merge`], which adds to the map what changed
//! since the last merge:
//!
//! - **Words add.** Each 8-byte word of a value grows in the map by what it grew in the part
//!   since the last merge (wrapping). Several parts (one per GPU context) and host writers of
//!   the same word therefore sum, as counters must; and a word only this part writes equals, in
//!   the map, what the part held at the last merge, whatever it holds (a stored gauge too).
//!   The differences telescope: after a merge of a snapshot taken when no device thread writes
//!   any more, the map holds exactly what the device did, however torn the earlier snapshots
//!   were (a copy engine reads 8-byte words whole, not a value's words together).
//! - **Entries are published whole.** A hash entry reaches the map when it is live in two
//!   snapshots in a row under the same tag and key (the key bytes of the second were read after
//!   the first had seen the entry published, so they are written), or in a snapshot the caller
//!   says is settled (no device writer left). Inserts under way are left for a later merge; an
//!   entry the device removed is removed from the map. Its value words then add as above.
//! - The device's refused inserts add to the map shard's count of refused inserts.
//! - **Rings are drained.** The records device producers published in a ring's part (a group of
//!   records at a time: see the `ring` module) are copied into the map's ring of the same
//!   shard, as a host producer writes it, in ticket order, a group once its sequence word has
//!   been seen committed in two snapshots in a row (its records were then written before the
//!   second copy began), or in a settled one; a group discarded (tickets a device lane took by
//!   the batch and did not use) is passed over likewise. The caller then writes the new `tail`
//!   of each shard back into the part ([`DevicePart::tails`]), which gives the producers the
//!   room; a snapshot taken after that write never shows a record that was drained. Records the
//!   map's ring has no room for are dropped and counted there; the device's drops add to its
//!   count.

use std::ops::Range;
use std::sync::atomic::Ordering::Relaxed;

use crate::hash_table::{live, state_of, tag_of};
use crate::layout::{Geometry, HEADER_BYTES, hash_state as st, header, pad8, ring_state, shard};
use crate::region::current_pid;
use crate::{MapError, MapKind, RawMap};

/// What one merge did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Merged {
    /// Value words that changed and were added to the map.
    pub words: u64,
    /// Hash entries published in the map.
    pub published: u64,
    /// Hash entries removed from the map, the device having removed them.
    pub removed: u64,
    /// Hash slots left for a later merge: inserts or replacements under way, entries seen once.
    pub deferred: u64,
    /// Entries the map refused (it was full): their updates are lost.
    pub refused: u64,
    /// Ring records copied into the map's ring (or dropped there, the ring being full).
    pub records: u64,
}

/// The host's side of a map's device part: what it merged last, and the last snapshot.
#[derive(Clone, Debug)]
pub struct DevicePart {
    geometry: Geometry,
    /// The device-written bytes of the map itself.
    range: Range<usize>,
    /// Copies of the map's slots after the map, one per group of SMs ([`DevicePart::spread`]).
    copies: u32,
    /// The device range as merged into the map (the value words added, the entries published).
    applied: Vec<u8>,
    /// The last snapshot, for entries seen twice.
    seen: Vec<u8>,
    /// A ring's `tail` of each shard of the part as last handed out by [`DevicePart::tails`].
    tails: Vec<u64>,
}

impl DevicePart {
    /// The host's side of a device part of a map of `geometry`, which starts empty.
    pub fn new(geometry: &Geometry) -> Result<DevicePart, MapError> {
        geometry.validate()?;
        let shards = match geometry.kind {
            MapKind::PerCpuArray | MapKind::PerCpuHash => geometry.cpu_shards..geometry.shards(),
            MapKind::RingBuf if geometry.sm_shards > 0 => geometry.cpu_shards..geometry.shards(),
            MapKind::Array | MapKind::Hash | MapKind::RingBuf => 0..1,
            kind => return Err(MapError::Unsupported { op: "a device part", kind }),
        };
        if shards.is_empty() {
            return Err(MapError::Geometry { reason: "the map has no SM shards".into() });
        }
        let start = geometry.shard_offset(shards.start);
        let end = geometry.shard_offset(shards.end);
        let empty = vec![0; end - start];
        Ok(DevicePart {
            geometry: *geometry,
            range: start..end,
            copies: 0,
            applied: empty.clone(),
            seen: empty,
            tails: vec![0; shards.len()],
        })
    }

    /// The host's side of a device part of a hash map or an array of `geometry` whose slots are
    /// followed by `copies` copies of them (a power of two, at most 1024), where device probes
    /// that only add to the values add (each SM to copy `%smid % copies`; see
    /// `egpu_ptx::translate::DeviceMap::spread`): a value is then the value in the map's slot
    /// plus those at its place in every copy. Entries are inserted in the map's slots only.
    pub fn spread(geometry: &Geometry, copies: u32) -> Result<DevicePart, MapError> {
        if !matches!(geometry.kind, MapKind::Hash | MapKind::Array) {
            return Err(MapError::Unsupported { op: "per-SM copies", kind: geometry.kind });
        }
        if !copies.is_power_of_two() || copies > 1024 {
            return Err(MapError::Geometry {
                reason: format!("{copies} copies: a power of two up to 1024"),
            });
        }
        Ok(DevicePart { copies, ..DevicePart::new(geometry)? })
    }

    /// The per-SM copies of the slots ([`DevicePart::spread`]); 0 for none.
    pub fn copies(&self) -> u32 {
        self.copies
    }

    /// Bytes of one copy of the slots (of the map's one shard).
    fn slots_bytes(&self) -> usize {
        self.geometry.slots as usize * self.geometry.slot_stride as usize
    }

    /// The bytes of the part the device writes, the copies included: what each snapshot holds.
    pub fn range(&self) -> Range<usize> {
        self.range.start..self.range.end + self.copies as usize * self.slots_bytes()
    }

    /// The part's first contents: an empty map (header, then zeros; or the map's values, see
    /// [`DevicePart::from_values`]), and its copies (zeros).
    pub fn image(&self) -> Vec<u8> {
        let mut image = vec![0; self.range().end];
        image[..HEADER_BYTES].copy_from_slice(&self.geometry.header_bytes(current_pid()));
        image[self.range.clone()].copy_from_slice(&self.applied);
        image
    }

    /// Starts the part of an array from `map`'s values rather than empty: its first image holds
    /// them (global data's first contents, or what host probes added already), as merged, so
    /// that merges add to the map only what device probes change.
    pub fn from_values(mut self, map: &RawMap) -> Result<DevicePart, MapError> {
        if self.geometry.kind != MapKind::Array {
            let kind = self.geometry.kind;
            return Err(MapError::Unsupported { op: "a device part from the map's values", kind });
        }
        if map.geometry() != &self.geometry {
            return Err(MapError::Geometry {
                reason: "the map's geometry is not the part's".into(),
            });
        }
        for w in (0..self.applied.len()).step_by(8) {
            let value = map.region().word(self.range.start + w).load(Relaxed);
            self.applied[w..w + 8].copy_from_slice(&value.to_le_bytes());
        }
        self.seen.copy_from_slice(&self.applied);
        Ok(self)
    }

    /// Merges `snapshot` (the part's bytes in [`range`](Self::range), copied from the GPU) into
    /// `map`, a map of the same geometry, as the module's documentation says. `settled`: no
    /// device thread wrote the part while the snapshot was taken, so entries are published at
    /// once. Records the time of the merge in the map's header.
    pub fn merge(
        &mut self,
        snapshot: &[u8],
        map: &RawMap,
        settled: bool,
    ) -> Result<Merged, MapError> {
        self.merge_into(snapshot, map, None, settled)
    }

    /// [`merge`](Self::merge), and the same changes into `own` too, a map of the same geometry
    /// that only this part (or the parts of one device) merges into: what the part's device
    /// did to the map, apart from the other parts' and the host's writes (the growth of its
    /// value words since the part was made, the entries it published, its refusals). Rings are
    /// drained into `map` only (a record is taken once).
    pub fn merge_into(
        &mut self,
        snapshot: &[u8],
        map: &RawMap,
        own: Option<&RawMap>,
        settled: bool,
    ) -> Result<Merged, MapError> {
        if snapshot.len() != self.range().len() {
            return Err(MapError::Geometry {
                reason: format!(
                    "a snapshot of {} bytes, not {}",
                    snapshot.len(),
                    self.range().len()
                ),
            });
        }
        let folded;
        let snapshot = if self.copies == 0 {
            snapshot
        } else {
            folded = self.fold(snapshot);
            &folded[..]
        };
        if map.geometry() != &self.geometry || own.is_some_and(|o| o.geometry() != &self.geometry) {
            return Err(MapError::Geometry {
                reason: "the map's geometry is not the part's".into(),
            });
        }
        let g = self.geometry;
        let mut merged = Merged::default();
        for s in self.shards() {
            match g.kind {
                MapKind::Hash | MapKind::PerCpuHash => {
                    self.merge_table(s, snapshot, map, own, settled, &mut merged);
                }
                MapKind::RingBuf => self.drain(s, snapshot, map, settled, &mut merged),
                _ => {
                    for i in 0..g.capacity {
                        let at = g.slot_offset(s, i);
                        let to = [Some((map, at)), own.map(|o| (o, at))];
                        let len = pad8(g.value_size) as usize;
                        self.add_words(at, len, snapshot, &to, &mut merged);
                    }
                }
            }
        }
        self.seen.copy_from_slice(snapshot);
        let now = wall_clock_ns();
        for m in std::iter::once(map).chain(own) {
            m.region().word(header::DEVICE_MERGED_NS).store(now, Relaxed);
        }
        Ok(merged)
    }

    /// The map's device-written bytes of `snapshot`, each value word plus the words at its place
    /// in every copy (wrapping).
    fn fold(&self, snapshot: &[u8]) -> Vec<u8> {
        let g = &self.geometry;
        let mut out = snapshot[..self.range.len()].to_vec();
        let first = g.slot_offset(0, 0) - self.range.start;
        let (from, len) = match g.kind {
            MapKind::Hash => (g.value_offset as usize, pad8(g.value_size) as usize),
            _ => (0, g.slot_stride as usize),
        };
        for copy in 0..self.copies as usize {
            let base = self.range.len() + copy * self.slots_bytes();
            for slot in 0..g.slots as usize {
                let at = slot * g.slot_stride as usize + from;
                for w in (0..len).step_by(8) {
                    let add = word(snapshot, base + at + w);
                    if add != 0 {
                        let to = first + at + w;
                        let sum = word(&out, to).wrapping_add(add);
                        out[to..to + 8].copy_from_slice(&sum.to_le_bytes());
                    }
                }
            }
        }
        out
    }

    /// The shards the device writes.
    fn shards(&self) -> Range<u32> {
        let stride = self.geometry.shard_stride as usize;
        let first = (self.range.start - HEADER_BYTES) / stride;
        first as u32..(first + self.range.len() / stride) as u32
    }

    /// Adds the growth of the `len` bytes of words at `at` (in the part) to the words at each
    /// offset of `to` in its map, and records them as applied.
    fn add_words(
        &mut self,
        at: usize,
        len: usize,
        snapshot: &[u8],
        to: &[Option<(&RawMap, usize)>],
        merged: &mut Merged,
    ) {
        let base = at - self.range.start;
        for w in (0..len).step_by(8) {
            let now = word(snapshot, base + w);
            let before = word(&self.applied, base + w);
            if now != before {
                for (map, to) in to.iter().flatten() {
                    map.region().word(to + w).fetch_add(now.wrapping_sub(before), Relaxed);
                }
                self.applied[base + w..base + w + 8].copy_from_slice(&now.to_le_bytes());
                merged.words += 1;
            }
        }
    }

    /// Merges hash shard `s`: first the entries the device removed (a key removed and inserted
    /// again elsewhere is then published again), then the rest.
    fn merge_table(
        &mut self,
        s: u32,
        snapshot: &[u8],
        map: &RawMap,
        own: Option<&RawMap>,
        settled: bool,
        merged: &mut Merged,
    ) {
        let g = self.geometry;
        let refused = g.shard_offset(s) + shard::REFUSED;
        let to = [Some((map, refused)), own.map(|o| (o, refused))];
        self.add_words(refused, 8, snapshot, &to, &mut Merged::default());
        let table = map.table(s);
        let own_table = own.map(|o| o.table(s));
        let (key_len, value_len) = (g.key_size as usize, pad8(g.value_size) as usize);
        let slot_of = |i: u32| g.slot_offset(s, i);
        let same = |a: &[u8], b: &[u8], at: usize| {
            let (x, y) = (word(a, at), word(b, at));
            live(x)
                && live(y)
                && tag_of(x) == tag_of(y)
                && a[at + 8..][..key_len] == b[at + 8..][..key_len]
        };
        for i in 0..g.slots {
            let at = slot_of(i) - self.range.start;
            if live(word(&self.applied, at)) && !same(snapshot, &self.applied, at) {
                let key = &self.applied[at + 8..][..key_len];
                if table.remove(key) {
                    merged.removed += 1;
                }
                if let Some(own) = &own_table {
                    own.remove(key);
                }
                self.applied[at..at + g.slot_stride as usize].fill(0);
            }
        }
        for i in 0..g.slots {
            let slot = slot_of(i);
            let at = slot - self.range.start;
            let now = word(snapshot, at);
            let known = live(word(&self.applied, at));
            if !known && live(now) && !settled && !same(snapshot, &self.seen, at) {
                merged.deferred += 1;
                continue;
            }
            if !live(now) {
                if matches!(state_of(now), st::BUSY | st::KEYED | st::COUNTED) {
                    merged.deferred += 1;
                }
                continue;
            }
            let key = &snapshot[at + 8..][..key_len];
            let Ok((j, _)) = table.entry(key) else {
                merged.refused += 1;
                continue;
            };
            // The device's own map: an entry it has no room for is left out of it alone.
            let own_value = own.zip(own_table.as_ref()).and_then(|(o, t)| {
                let (j, _) = t.entry(key).ok()?;
                Some((o, t.value_offset(j)))
            });
            if !known {
                self.applied[at..at + 8 + key_len].copy_from_slice(&snapshot[at..at + 8 + key_len]);
                merged.published += 1;
            }
            let value = slot + g.value_offset as usize;
            let to = [Some((map, table.value_offset(j))), own_value];
            self.add_words(value, value_len, snapshot, &to, merged);
        }
    }
}

impl DevicePart {
    /// Drains ring shard `s` of the part into the map's ring `s`: the groups published from the
    /// drained `tail` on, in ticket order, up to the first that is not (yet) to be taken.
    fn drain(&mut self, s: u32, snapshot: &[u8], map: &RawMap, settled: bool, m: &mut Merged) {
        let g = self.geometry;
        let header = g.shard_offset(s);
        let refused = header + shard::REFUSED;
        self.add_words(refused, 8, snapshot, &[Some((map, refused))], &mut Merged::default());
        let base = self.range.start;
        let tail_at = header + shard::TAIL - base;
        let (mut tail, head) = (word(&self.applied, tail_at), word(snapshot, header - base));
        let capacity = u64::from(g.capacity);
        let ring = map.ring(s);
        let size = g.value_size as usize;
        // At most a lap per merge: a slot's sequence word holds one lap.
        let stop = head.min(tail.saturating_add(capacity));
        while tail < stop {
            let (slot, lap) = ((tail % capacity) as u32, tail / capacity);
            let at = g.seq_offset(s, slot) - base;
            let seq = word(snapshot, at);
            let group = seq & ring_state::OWNER_MASK;
            let state = (seq >> ring_state::SHIFT) & 3;
            let published = seq >> 32 == lap
                && matches!(state, ring_state::COMMITTED | ring_state::DISCARDED)
                && group > 0
                && group <= stop - tail;
            if !published || !(settled || word(&self.seen, at) == seq) {
                m.deferred += 1;
                break;
            }
            // A discarded group (tickets a device lane took by the batch and did not use)
            // holds no records.
            let records = if state == ring_state::COMMITTED { group } else { 0 };
            for t in tail..tail + records {
                let from = g.slot_offset(s, (t % capacity) as u32) - base;
                if let Some(ticket) = ring.reserve() {
                    ring.write(ticket, &snapshot[from..from + size]);
                    ring.commit(ticket);
                }
                m.records += 1;
            }
            tail += group;
        }
        self.applied[tail_at..tail_at + 8].copy_from_slice(&tail.to_le_bytes());
    }

    /// For a ring: the `tail` of each shard of the part that moved since the last call, to be
    /// written into the part on the GPU (8 bytes at the offset given, from the map's start)
    /// before the next snapshot is taken, so that producers reuse the slots drained. Empty for
    /// the other kinds.
    pub fn tails(&mut self) -> Vec<(usize, u64)> {
        if self.geometry.kind != MapKind::RingBuf {
            return Vec::new();
        }
        let mut moved = Vec::new();
        for (i, s) in self.shards().enumerate() {
            let at = self.geometry.shard_offset(s) + shard::TAIL;
            let tail = word(&self.applied, at - self.range.start);
            if tail != self.tails[i] {
                self.tails[i] = tail;
                moved.push((at, tail));
            }
        }
        moved
    }
}

fn word(bytes: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(w)
}

/// Nanoseconds since the Unix epoch, by the wall clock: the clock of
/// [`RawMap::device_merged_ns`] (another process reads it).
pub fn wall_clock_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests;
