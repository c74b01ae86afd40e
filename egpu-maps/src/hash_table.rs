//! The hash table of one shard: lock-free open addressing with linear probing.
//!
//! Each slot starts with a state word (see [`layout::hash_state`]). A key is looked for from the
//! slot `hash & (slots - 1)` on, until an empty slot; its tag (`hash >> 32`) is compared first and
//! the key's words only on a tag match. A slot is *live* when it is FULL, or WRITING (full, with
//! its value being replaced).
//!
//! Inserting a new key:
//! 1. Scan the key's probe sequence. Found live: it is an update. A slot claimed by another
//!    inserter of the same tag: wait until it settles (an insert takes a few stores). Remember
//!    the first reusable slot (a tombstone, or the empty slot ending the scan).
//! 2. Claim that slot by compare-and-swap to BUSY, with the inserter's process id in the word.
//! 3. Write the key, then mark the slot KEYED.
//! 4. Scan again for the same key: a live entry, or a KEYED one nearer the start of the probe
//!    sequence, wins, and this insert turns its slot into a tombstone and starts over (it then
//!    finds the winner). A KEYED one further on is waited for: it will see this one and give up,
//!    or it published before this one was visible and is found live. Waits only ever point
//!    further along the sequence, so they cannot form a cycle.
//! 5. Count the entry (`len`) and mark the slot COUNTED. When the shard already holds
//!    `capacity` entries, give the count and the slot back, reclaim the slots of dead writers,
//!    wait for the inserts under way, and refuse the insert only if that made no room. Only the
//!    one winner of racing inserts of a key counts itself.
//! 6. Write the value and mark the slot FULL: readers see key and value together.
//!
//! Replacing the value of a live entry marks it WRITING (with the writer's process id) for the
//! time of the copy, so that a removal, which turns only FULL into a tombstone, waits, and the
//! slot cannot be reused by another key under the copy.
//!
//! Racing inserts of one key therefore make one entry. Lookups never wait: they skip slots that
//! are not live. A slot is never made empty again while the map is shared, so a probe sequence
//! never loses its tail.
//!
//! A writer that dies inside an insert or a replacement leaves a BUSY, KEYED, COUNTED or WRITING
//! slot. Readers skip the first three and read the last (its value may be half written). A
//! writer that waits on such a slot checks, now and then, whether the process in the state word
//! still exists; when it does not, an insert's slot becomes a tombstone (a COUNTED one gives its
//! count back) and a replacement's slot FULL again. An insert refused for lack of room reclaims
//! every such slot of the shard first. A writer killed between its count and the store of
//! COUNTED (two adjacent instructions) leaves the count one too high; the count is corrected when
//! the shard next seems full, or by [`RawMap::repair`](crate::RawMap::repair).

use std::collections::HashMap as StdHashMap;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};

use crate::layout::{DEVICE_OWNER, Geometry, hash_key, hash_state as st, shard};
use crate::region::{Region, current_pid, process_alive};
use crate::{MapError, UpdateFlags};

/// One shard's table, with the offsets its probes use at hand.
#[derive(Clone, Copy)]
pub(crate) struct Table<'a> {
    region: &'a Region,
    g: &'a Geometry,
    shard: u32,
    /// Byte offset of slot 0.
    first: usize,
    /// Bytes of a slot.
    stride: usize,
    /// Slots - 1.
    mask: u32,
}

/// Where a key's probe sequence starts, and its tag.
#[derive(Clone, Copy, Debug)]
struct Probe {
    home: u32,
    tag: u64,
}

pub(crate) fn state_of(word: u64) -> u64 {
    word >> st::SHIFT
}

fn owner_of(word: u64) -> u32 {
    ((word >> st::OWNER_SHIFT) & st::OWNER_MASK) as u32
}

pub(crate) fn tag_of(word: u64) -> u64 {
    word & 0xffff_ffff
}

fn make(state: u64, owner: u32, tag: u64) -> u64 {
    state << st::SHIFT | (u64::from(owner) & st::OWNER_MASK) << st::OWNER_SHIFT | tag
}

/// Whether a slot in state `word` holds an entry.
pub(crate) fn live(word: u64) -> bool {
    matches!(state_of(word), st::FULL | st::WRITING)
}

/// Whether a writer is in the middle of something on a slot in state `word`.
fn pending(word: u64) -> bool {
    matches!(state_of(word), st::BUSY | st::KEYED | st::COUNTED | st::WRITING)
}

/// Whether a slot in state `word` is an insert whose key is written.
fn key_written(word: u64) -> bool {
    matches!(state_of(word), st::KEYED | st::COUNTED)
}

/// How many times an insert that found no room looks again after waiting for the inserts under
/// way (see [`Table::make_room`]).
const MAX_ROOM_RETRIES: u32 = 4;

/// This process's id as recorded in state words.
fn me() -> u32 {
    current_pid() & st::OWNER_MASK as u32
}

/// Outcome of an update.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Updated {
    /// A new entry, at this slot.
    Inserted(u32),
    /// An existing entry's value was replaced (or, without a value, left alone), at this slot.
    Replaced(u32),
}

impl<'a> Table<'a> {
    pub(crate) fn new(region: &'a Region, g: &'a Geometry, shard: u32) -> Table<'a> {
        debug_assert!(shard < g.shards());
        Table {
            region,
            g,
            shard,
            first: g.slot_offset(shard, 0),
            stride: g.slot_stride as usize,
            mask: g.slots - 1,
        }
    }

    fn probe(&self, key: &[u8]) -> Probe {
        let h = hash_key(key);
        Probe { home: (h as u32) & self.mask, tag: h >> 32 }
    }

    #[inline]
    fn slot(&self, i: u32) -> usize {
        self.first + i as usize * self.stride
    }

    fn state(&self, i: u32) -> &'a AtomicU64 {
        self.region.word(self.slot(i))
    }

    fn key_offset(&self, i: u32) -> usize {
        self.slot(i) + 8
    }

    /// Byte offset of the value of slot `i` (in the region).
    pub(crate) fn value_offset(&self, i: u32) -> usize {
        self.slot(i) + self.g.value_offset as usize
    }

    fn counter(&self, off: usize) -> &'a AtomicU64 {
        self.region.word(self.g.shard_offset(self.shard) + off)
    }

    /// Entries counted (live ones, and inserts under way).
    pub(crate) fn len(&self) -> u64 {
        self.counter(shard::LEN_OR_HEAD).load(Relaxed)
    }

    /// Inserts refused because the shard was full.
    pub(crate) fn refused(&self) -> u64 {
        self.counter(shard::REFUSED).load(Relaxed)
    }

    /// Slots of the shard.
    pub(crate) fn slots(&self) -> u32 {
        self.g.slots
    }

    /// The `n`-th slot of a probe sequence.
    fn nth(&self, p: Probe, n: u32) -> u32 {
        (p.home.wrapping_add(n)) & self.mask
    }

    /// Whether slot `i`, read as the live `word`, holds `key`, and still held the same entry
    /// after the key was compared.
    fn holds(&self, i: u32, word: u64, key: &[u8]) -> bool {
        self.region.bytes_equal(self.key_offset(i), key) && self.same_entry(i, word)
    }

    /// Whether slot `i` still holds the live entry it held as `word` (a replacement of its value
    /// meanwhile does not count as a change).
    pub(crate) fn same_entry(&self, i: u32, word: u64) -> bool {
        let now = self.state(i).load(Acquire);
        live(now) && tag_of(now) == tag_of(word)
    }

    /// The slot of `key`'s live entry, and its state word then.
    pub(crate) fn find(&self, key: &[u8]) -> Option<(u32, u64)> {
        let p = self.probe(key);
        for n in 0..self.g.slots {
            let i = self.nth(p, n);
            let word = self.state(i).load(Acquire);
            if state_of(word) == st::EMPTY {
                return None;
            }
            if live(word) && tag_of(word) == p.tag && self.holds(i, word, key) {
                return Some((i, word));
            }
        }
        None
    }

    /// The slot of `key`'s live entry, inserted with a zero value when absent, and its state
    /// word.
    pub(crate) fn entry(&self, key: &[u8]) -> Result<(u32, u64), MapError> {
        loop {
            if let Some(found) = self.find(key) {
                return Ok(found);
            }
            match self.update(key, None, UpdateFlags::NoExist) {
                Ok(_) | Err(MapError::Exists) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Stores `value` under `key` as `flags` allow; `value` may be shorter than the value size
    /// (the rest is zeroed), or `None` to leave an existing value alone and zero a new one.
    pub(crate) fn update(
        &self,
        key: &[u8],
        value: Option<&[u8]>,
        flags: UpdateFlags,
    ) -> Result<Updated, MapError> {
        let p = self.probe(key);
        let len = self.counter(shard::LEN_OR_HEAD);
        let mut retries = 0;
        'restart: loop {
            // Step 1.
            let mut free: Option<(u32, u64)> = None;
            let mut n = 0;
            while n < self.g.slots {
                let i = self.nth(p, n);
                let word = self.state(i).load(Acquire);
                match state_of(word) {
                    st::EMPTY => {
                        free.get_or_insert((i, word));
                        break;
                    }
                    st::TOMB => {
                        free.get_or_insert((i, word));
                    }
                    _ if live(word) && tag_of(word) == p.tag && self.holds(i, word, key) => {
                        if flags == UpdateFlags::NoExist {
                            return Err(MapError::Exists);
                        }
                        let Some(v) = value else { return Ok(Updated::Replaced(i)) };
                        if state_of(word) == st::WRITING {
                            self.settle(i, word);
                            continue; // look at the same slot again
                        }
                        let writing = make(st::WRITING, me(), p.tag);
                        if self.state(i).compare_exchange(word, writing, Acquire, Relaxed).is_err()
                        {
                            continue; // removed or being written meanwhile: look again
                        }
                        self.write_value(i, v);
                        self.state(i).store(word, Release);
                        return Ok(Updated::Replaced(i));
                    }
                    st::BUSY | st::KEYED | st::COUNTED if tag_of(word) == p.tag => {
                        self.settle(i, word);
                        continue; // look at the same slot again
                    }
                    _ => {}
                }
                n += 1;
            }
            if flags == UpdateFlags::Exist {
                return Err(MapError::NotFound);
            }
            // Step 2.
            let Some((slot, seen)) = free else {
                retries += 1;
                if retries <= MAX_ROOM_RETRIES && self.make_room() {
                    continue 'restart;
                }
                self.counter(shard::REFUSED).fetch_add(1, Relaxed);
                return Err(MapError::Full { capacity: self.g.capacity });
            };
            let busy = make(st::BUSY, me(), p.tag);
            if self.state(slot).compare_exchange(seen, busy, Acquire, Relaxed).is_err() {
                continue 'restart;
            }
            // Step 3.
            self.region.write_bytes(self.key_offset(slot), key);
            let keyed = make(st::KEYED, me(), p.tag);
            self.state(slot).store(keyed, Release);
            // Step 4.
            let my_n = (slot.wrapping_sub(p.home)) & self.mask;
            let mut n = 0;
            while n < self.g.slots {
                let i = self.nth(p, n);
                if i == slot {
                    n += 1;
                    continue;
                }
                let word = self.state(i).load(Acquire);
                if tag_of(word) != p.tag {
                    if state_of(word) == st::EMPTY {
                        break;
                    }
                    n += 1;
                    continue;
                }
                let lost = match state_of(word) {
                    st::EMPTY => break,
                    _ if live(word) => self.holds(i, word, key),
                    _ if key_written(word) && self.region.bytes_equal(self.key_offset(i), key) => {
                        if n < my_n {
                            true
                        } else {
                            self.settle(i, word);
                            continue;
                        }
                    }
                    st::BUSY => {
                        self.settle(i, word);
                        continue;
                    }
                    _ => false,
                };
                if lost {
                    self.state(slot).store(make(st::TOMB, 0, p.tag), Release);
                    continue 'restart;
                }
                n += 1;
            }
            // Step 5.
            if len.fetch_add(1, Relaxed) >= u64::from(self.g.capacity) {
                len.fetch_sub(1, Relaxed);
                self.state(slot).store(make(st::TOMB, 0, p.tag), Release);
                retries += 1;
                if retries <= MAX_ROOM_RETRIES && self.make_room() {
                    continue 'restart;
                }
                self.counter(shard::REFUSED).fetch_add(1, Relaxed);
                return Err(MapError::Full { capacity: self.g.capacity });
            }
            self.state(slot).store(make(st::COUNTED, me(), p.tag), Release);
            // Step 6.
            self.write_value(slot, value.unwrap_or_default());
            self.state(slot).store(make(st::FULL, 0, p.tag), Release);
            return Ok(Updated::Inserted(slot));
        }
    }

    /// Called when an insert found no room: reclaims the slots of dead writers in the shard,
    /// waits for the inserts under way (racing inserts of one key each count themselves until
    /// all but one give up), and says whether room may have appeared, so that the insert should
    /// try again.
    #[cold]
    fn make_room(&self) -> bool {
        let before = self.len();
        let mut changed = self.reclaim_dead();
        for i in 0..self.g.slots {
            let word = self.state(i).load(Acquire);
            if matches!(state_of(word), st::BUSY | st::KEYED | st::COUNTED) {
                self.settle(i, word);
                changed = true;
            }
        }
        self.recount();
        changed || self.len() < before
    }

    /// Reclaims the slots of dead writers and corrects the entry count; see [`Table::recount`].
    pub(crate) fn repair(&self) {
        self.reclaim_dead();
        self.recount();
    }

    /// Sets the entry count to the live entries, when a scan of the whole shard finds no insert
    /// under way and the count did not change meanwhile. This corrects the one count a writer
    /// killed between counting its insert and marking its slot COUNTED leaves behind: an insert
    /// that claims a slot after the scan passed it counts itself after the compare-and-swap
    /// here, or makes it fail.
    fn recount(&self) {
        let len = self.counter(shard::LEN_OR_HEAD);
        let start = len.load(Acquire);
        let mut live_slots = 0u64;
        for i in 0..self.g.slots {
            let word = self.state(i).load(Acquire);
            match state_of(word) {
                st::BUSY | st::KEYED | st::COUNTED => return,
                _ if live(word) => live_slots += 1,
                _ => {}
            }
        }
        if live_slots != start {
            let _ = len.compare_exchange(start, live_slots, AcqRel, Relaxed);
        }
    }

    /// Reclaims every slot of the shard left by a writer whose process is gone; whether there was
    /// one.
    fn reclaim_dead(&self) -> bool {
        let mut alive: StdHashMap<u32, bool> = StdHashMap::new();
        let mut any = false;
        for i in 0..self.g.slots {
            let word = self.state(i).load(Acquire);
            let owner = owner_of(word);
            if pending(word)
                && owner != DEVICE_OWNER
                && !*alive.entry(owner).or_insert_with(|| process_alive(owner))
            {
                any |= self.reclaim(i, word);
            }
        }
        any
    }

    /// Undoes what the dead writer of slot `i`, seen as `word`, left: an insert's slot becomes a
    /// tombstone and its count is given back; a replacement's slot is FULL again.
    fn reclaim(&self, i: u32, word: u64) -> bool {
        let (to, uncount) = match state_of(word) {
            st::WRITING => (make(st::FULL, 0, tag_of(word)), false),
            st::COUNTED => (make(st::TOMB, 0, tag_of(word)), true),
            _ => (make(st::TOMB, 0, tag_of(word)), false),
        };
        let done = self.state(i).compare_exchange(word, to, Release, Relaxed).is_ok();
        if done && uncount {
            self.counter(shard::LEN_OR_HEAD).fetch_sub(1, Relaxed);
        }
        done
    }

    /// Writes `value` (zero-padded to the value size) into slot `i`.
    fn write_value(&self, i: u32, value: &[u8]) {
        let off = self.value_offset(i);
        let size = self.g.value_size as usize;
        self.region.write_bytes(off, &value[..value.len().min(size)]);
        // Zero what `value` did not cover, whole words after its last one.
        let written = value.len().min(size).div_ceil(8) * 8;
        for at in (written..size.div_ceil(8) * 8).step_by(8) {
            self.region.word(off + at).store(0, Relaxed);
        }
    }

    /// Waits until slot `i` no longer holds `word` (a writer in the middle of something). When
    /// the writer's process is gone, reclaims the slot.
    fn settle(&self, i: u32, word: u64) {
        let state = self.state(i);
        let mut spins = 0u32;
        while state.load(Acquire) == word {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
                continue;
            }
            std::thread::yield_now();
            let owner = owner_of(word);
            if spins.is_multiple_of(256)
                && owner != DEVICE_OWNER
                && !process_alive(owner)
                && self.reclaim(i, word)
            {
                return;
            }
        }
    }

    /// Removes `key`'s entry; false when there is none.
    pub(crate) fn remove(&self, key: &[u8]) -> bool {
        while let Some((i, word)) = self.find(key) {
            if state_of(word) == st::WRITING {
                self.settle(i, word);
                continue;
            }
            let tomb = make(st::TOMB, 0, tag_of(word));
            if self.state(i).compare_exchange(word, tomb, Release, Relaxed).is_ok() {
                self.counter(shard::LEN_OR_HEAD).fetch_sub(1, Relaxed);
                return true;
            }
        }
        false
    }

    /// Copies the key of slot `i` into `key` if the slot holds a live entry, and says whether
    /// it did (the entry was live before and after the copy).
    pub(crate) fn key_at(&self, i: u32, key: &mut [u8]) -> bool {
        let word = self.state(i).load(Acquire);
        if !live(word) {
            return false;
        }
        self.region.read_bytes(self.key_offset(i), key);
        self.same_entry(i, word)
    }

    /// Removes every entry.
    pub(crate) fn clear(&self) {
        for i in 0..self.g.slots {
            loop {
                let word = self.state(i).load(Acquire);
                match state_of(word) {
                    st::WRITING => self.settle(i, word),
                    st::FULL => {
                        let tomb = make(st::TOMB, 0, tag_of(word));
                        if self.state(i).compare_exchange(word, tomb, Release, Relaxed).is_ok() {
                            self.counter(shard::LEN_OR_HEAD).fetch_sub(1, Relaxed);
                            break;
                        }
                    }
                    _ => break,
                }
            }
        }
    }

    /// Counts slots by state, for tests and diagnostics: (busy or keyed, tombstones).
    #[cfg(test)]
    pub(crate) fn census(&self) -> (u32, u32) {
        let (mut pending, mut tombs) = (0, 0);
        for i in 0..self.g.slots {
            match state_of(self.state(i).load(Acquire)) {
                st::BUSY | st::KEYED | st::COUNTED => pending += 1,
                st::TOMB => tombs += 1,
                _ => {}
            }
        }
        (pending, tombs)
    }

    /// Leaves a free slot for `key` as an inserter owned by `pid` that dies in `state` (BUSY,
    /// KEYED or COUNTED) would, the key written and, for COUNTED, counted.
    #[cfg(test)]
    pub(crate) fn abandon_insert(&self, key: &[u8], pid: u32, state: u64) {
        let p = self.probe(key);
        for n in 0..self.g.slots {
            let i = self.nth(p, n);
            let word = self.state(i).load(Acquire);
            if matches!(state_of(word), st::EMPTY | st::TOMB)
                && self
                    .state(i)
                    .compare_exchange(word, make(st::BUSY, pid, p.tag), Acquire, Relaxed)
                    .is_ok()
            {
                self.region.write_bytes(self.key_offset(i), key);
                if state == st::COUNTED {
                    self.counter(shard::LEN_OR_HEAD).fetch_add(1, Relaxed);
                }
                self.state(i).store(make(state, pid, p.tag), Release);
                return;
            }
        }
        panic!("no free slot");
    }
}
