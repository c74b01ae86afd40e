//! The hash table of one shard: lock-free open addressing with linear probing.
//!
//! Each slot starts with a state word (see [`layout::hash_state`]). A key is looked for from the
//! slot `hash & (slots - 1)` on, until an empty slot; its tag (`hash >> 32`) is compared first and
//! the key's words only on a tag match.
//!
//! Inserting a new key:
//! 1. Scan the key's probe sequence. Found as a live entry: it is an update. A slot claimed by
//!    another inserter of the same tag: wait until it settles (an insert takes a few stores).
//!    Remember the first reusable slot (a tombstone, or the empty slot ending the scan).
//! 2. Count the entry (`len`), refusing it when the shard holds `capacity` entries already, and
//!    claim the slot by compare-and-swap to BUSY, with the inserter's process id in the word.
//! 3. Write the key, then mark the slot KEYED.
//! 4. Scan again for the same key: a live entry, or a KEYED one nearer the start of the probe
//!    sequence, wins, and this insert turns its slot into a tombstone and starts over (it then
//!    finds the winner). A KEYED one further on is waited for: it will see this one and give up,
//!    or it published before this one was visible and is found live. Waits only ever point
//!    further along the sequence, so they cannot form a cycle.
//! 5. Write the value and mark the slot FULL: readers see key and value together.
//!
//! Racing inserts of one key therefore make one entry. Lookups never wait: they skip slots that
//! are not FULL. Removing a key turns FULL into a tombstone. A slot is never made empty again
//! while the map is shared, so a probe sequence never loses its tail.
//!
//! An inserter that dies between steps 2 and 5 leaves a BUSY or KEYED slot. Readers skip it.
//! An inserter that waits on it checks, now and then, whether the process in the state word
//! still exists; when it does not, the slot becomes a tombstone and its count is returned.

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use crate::layout::{DEVICE_OWNER, Geometry, hash_key, hash_state as st, shard};
use crate::region::{Region, process_alive};
use crate::{MapError, UpdateFlags};

/// One shard's table.
#[derive(Clone, Copy)]
pub(crate) struct Table<'a> {
    region: &'a Region,
    g: &'a Geometry,
    shard: u32,
}

/// Where a key's probe sequence starts, and its tag.
#[derive(Clone, Copy, Debug)]
struct Probe {
    home: u32,
    tag: u64,
}

fn state_of(word: u64) -> u64 {
    word >> st::SHIFT
}

fn owner_of(word: u64) -> u32 {
    ((word >> st::OWNER_SHIFT) & st::OWNER_MASK) as u32
}

fn tag_of(word: u64) -> u64 {
    word & 0xffff_ffff
}

fn make(state: u64, owner: u32, tag: u64) -> u64 {
    state << st::SHIFT | (u64::from(owner) & st::OWNER_MASK) << st::OWNER_SHIFT | tag
}

/// This process's id as recorded in state words.
fn me() -> u32 {
    std::process::id() & st::OWNER_MASK as u32
}

/// Outcome of an update.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Updated {
    /// A new entry, at this slot.
    Inserted(u32),
    /// An existing entry's value was replaced, at this slot.
    Replaced(u32),
}

impl<'a> Table<'a> {
    pub(crate) fn new(region: &'a Region, g: &'a Geometry, shard: u32) -> Table<'a> {
        debug_assert!(shard < g.shards());
        Table { region, g, shard }
    }

    fn probe(&self, key: &[u8]) -> Probe {
        let h = hash_key(key);
        Probe { home: (h as u32) & (self.g.slots - 1), tag: h >> 32 }
    }

    fn slot(&self, i: u32) -> usize {
        self.g.slot_offset(self.shard, i)
    }

    fn state(&self, i: u32) -> &'a std::sync::atomic::AtomicU64 {
        self.region.word(self.slot(i))
    }

    fn key_offset(&self, i: u32) -> usize {
        self.slot(i) + 8
    }

    /// Byte offset of the value of slot `i` (in the region).
    pub(crate) fn value_offset(&self, i: u32) -> usize {
        self.slot(i) + self.g.value_offset as usize
    }

    fn counter(&self, off: usize) -> &'a std::sync::atomic::AtomicU64 {
        self.region.word(self.g.shard_offset(self.shard) + off)
    }

    /// Live entries.
    pub(crate) fn len(&self) -> u64 {
        self.counter(shard::LEN_OR_HEAD).load(Relaxed)
    }

    /// Inserts refused because the shard was full.
    pub(crate) fn refused(&self) -> u64 {
        self.counter(shard::REFUSED).load(Relaxed)
    }

    /// The `n`-th slot of a probe sequence.
    fn nth(&self, p: Probe, n: u32) -> u32 {
        (p.home.wrapping_add(n)) & (self.g.slots - 1)
    }

    /// Whether slot `i`, read as `word`, holds `key`, and still did after the key was compared.
    fn holds(&self, i: u32, word: u64, key: &[u8]) -> bool {
        self.region.bytes_equal(self.key_offset(i), key) && self.state(i).load(Acquire) == word
    }

    /// The slot of `key`'s live entry.
    pub(crate) fn find(&self, key: &[u8]) -> Option<u32> {
        let p = self.probe(key);
        for n in 0..self.g.slots {
            let i = self.nth(p, n);
            let word = self.state(i).load(Acquire);
            match state_of(word) {
                st::EMPTY => return None,
                st::FULL if tag_of(word) == p.tag && self.holds(i, word, key) => return Some(i),
                _ => {}
            }
        }
        None
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
                    st::FULL if tag_of(word) == p.tag && self.holds(i, word, key) => {
                        if flags == UpdateFlags::NoExist {
                            return Err(MapError::Exists);
                        }
                        if let Some(v) = value {
                            self.write_value(i, v);
                        }
                        return Ok(Updated::Replaced(i));
                    }
                    st::BUSY | st::KEYED if tag_of(word) == p.tag => {
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
                self.counter(shard::REFUSED).fetch_add(1, Relaxed);
                return Err(MapError::Full { capacity: self.g.capacity });
            };
            let len = self.counter(shard::LEN_OR_HEAD);
            if len.fetch_add(1, Relaxed) >= u64::from(self.g.capacity) {
                len.fetch_sub(1, Relaxed);
                self.counter(shard::REFUSED).fetch_add(1, Relaxed);
                return Err(MapError::Full { capacity: self.g.capacity });
            }
            let busy = make(st::BUSY, me(), p.tag);
            if self.state(slot).compare_exchange(seen, busy, Acquire, Relaxed).is_err() {
                len.fetch_sub(1, Relaxed);
                continue 'restart;
            }
            // Step 3.
            self.region.write_bytes(self.key_offset(slot), key);
            let keyed = make(st::KEYED, me(), p.tag);
            self.state(slot).store(keyed, Release);
            // Step 4.
            let my_n = (slot.wrapping_sub(p.home)) & (self.g.slots - 1);
            let mut n = 0;
            while n < self.g.slots {
                let i = self.nth(p, n);
                if i == slot {
                    n += 1;
                    continue;
                }
                let word = self.state(i).load(Acquire);
                let lost = match state_of(word) {
                    st::EMPTY => break,
                    st::FULL => tag_of(word) == p.tag && self.holds(i, word, key),
                    st::KEYED if tag_of(word) == p.tag && self.holds(i, word, key) => {
                        if n < my_n {
                            true
                        } else {
                            self.settle(i, word);
                            continue;
                        }
                    }
                    st::BUSY if tag_of(word) == p.tag => {
                        self.settle(i, word);
                        continue;
                    }
                    _ => false,
                };
                if lost {
                    self.state(slot).store(make(st::TOMB, 0, p.tag), Release);
                    len.fetch_sub(1, Relaxed);
                    continue 'restart;
                }
                n += 1;
            }
            // Step 5.
            match value {
                Some(v) => self.write_value(slot, v),
                None => self.write_value(slot, &[]),
            }
            self.state(slot).store(make(st::FULL, 0, p.tag), Release);
            return Ok(Updated::Inserted(slot));
        }
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

    /// Waits until slot `i` no longer holds `word` (an insert in progress). When the inserter's
    /// process is gone, turns the slot into a tombstone and gives its count back.
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
                && state
                    .compare_exchange(word, make(st::TOMB, 0, tag_of(word)), Relaxed, Relaxed)
                    .is_ok()
            {
                self.counter(shard::LEN_OR_HEAD).fetch_sub(1, Relaxed);
                return;
            }
        }
    }

    /// Removes `key`'s entry; false when there is none.
    pub(crate) fn remove(&self, key: &[u8]) -> bool {
        while let Some(i) = self.find(key) {
            let full = make(st::FULL, 0, self.probe(key).tag);
            let tomb = make(st::TOMB, 0, tag_of(full));
            if self.state(i).compare_exchange(full, tomb, Release, Relaxed).is_ok() {
                self.counter(shard::LEN_OR_HEAD).fetch_sub(1, Relaxed);
                return true;
            }
        }
        false
    }

    /// Slots of the shard.
    pub(crate) fn slots(&self) -> u32 {
        self.g.slots
    }

    /// Copies the key of slot `i` into `key` if the slot holds a live entry, and says whether
    /// it did (the entry was live before and after the copy).
    pub(crate) fn key_at(&self, i: u32, key: &mut [u8]) -> bool {
        let word = self.state(i).load(Acquire);
        if state_of(word) != st::FULL {
            return false;
        }
        self.region.read_bytes(self.key_offset(i), key);
        self.state(i).load(Acquire) == word
    }

    /// Removes every entry.
    pub(crate) fn clear(&self) {
        for i in 0..self.g.slots {
            let word = self.state(i).load(Acquire);
            if state_of(word) == st::FULL
                && self
                    .state(i)
                    .compare_exchange(word, make(st::TOMB, 0, tag_of(word)), Release, Relaxed)
                    .is_ok()
            {
                self.counter(shard::LEN_OR_HEAD).fetch_sub(1, Relaxed);
            }
        }
    }

    /// Counts slots by state, for tests and diagnostics: (busy or keyed, tombstones).
    #[cfg(test)]
    pub(crate) fn census(&self) -> (u32, u32) {
        let (mut pending, mut tombs) = (0, 0);
        for i in 0..self.g.slots {
            match state_of(self.state(i).load(Acquire)) {
                st::BUSY | st::KEYED => pending += 1,
                st::TOMB => tombs += 1,
                _ => {}
            }
        }
        (pending, tombs)
    }

    /// Claims a free slot for `key` as an inserter that then dies would: BUSY, owned by `pid`.
    #[cfg(test)]
    pub(crate) fn abandon_insert(&self, key: &[u8], pid: u32) {
        let p = self.probe(key);
        let len = self.counter(shard::LEN_OR_HEAD);
        len.fetch_add(1, Relaxed);
        for n in 0..self.g.slots {
            let i = self.nth(p, n);
            let word = self.state(i).load(Acquire);
            if matches!(state_of(word), st::EMPTY | st::TOMB)
                && self
                    .state(i)
                    .compare_exchange(word, make(st::BUSY, pid, p.tag), Acquire, Relaxed)
                    .is_ok()
            {
                return;
            }
        }
        panic!("no free slot");
    }
}
