//! One ring of fixed-size records: many producers, one consumer, never blocking a producer.
//!
//! Records are numbered by tickets 0, 1, 2, …; ticket `t` lives in slot `t % capacity`, in lap
//! `t / capacity`. Each slot's sequence word (see [`layout::ring_state`]) says which lap it is in
//! and whether it is free, reserved, committed or discarded; the sequence words are an array of
//! their own, after the records ([`Geometry::seq_offset`]). The shard header keeps `head`, a
//! hint of the next ticket to reserve, and `tail`, the next ticket the consumer reads.
//!
//! - **Reserve**: read `head` as `t`; if slot `t % capacity` is free for lap `t / capacity`,
//!   compare-and-swap it to reserved (with the producer's process id) and move `head` on. If the
//!   slot is still in the previous lap, the ring is full: the record is dropped and counted,
//!   never waited for. If another producer got the slot first, or the slot is already in a later
//!   lap (its producer died before moving `head`), move `head` on and try again.
//! - **Commit**: store the record, then mark the slot committed (release ordering).
//! - **Consume**: at ticket `tail`, a committed slot is read, freed for the next lap, and `tail`
//!   moves on. A discarded one is freed and skipped. A reserved one is waited for (the poll
//!   returns nothing), unless its producer's process no longer exists: then it is freed, skipped
//!   and counted as lost. A slot already freed for the next lap (a consumer died between freeing
//!   it and moving `tail`) is passed over.
//!
//! Fixed-size records were chosen for the device side: a record's slot is a multiply away from
//! its ticket, records never straddle the end of the ring, and no length word has to be written
//! before the record it describes.
//!
//! - **Device producers** (translated probes on the GPU) work in groups (a warp's active lanes),
//!   in one of two ways:
//!   - *Read after the kernel* (a ring in GPU memory that the host copies back): the group's
//!     leader takes the group's tickets by one atomic add on `head`; tickets at or past
//!     `tail + capacity` are dropped and counted, and `head` is brought back to that limit;
//!     the records are written, and no sequence word. Sound only while nobody consumes. Once
//!     the shard's bytes are back in a host map, [`Ring::commit_written`] marks every record in
//!     `[tail, head)` whose slot is still free for its lap committed, with [`DEVICE_OWNER`] as
//!     its owner, and the consumer reads them as any others.
//!   - *Drained while kernels run* (a ring's device part under the preloaded library,
//!     [`crate::merge`]): the leader reads `tail`, then claims room for the group's `n` records
//!     by adding `n` to the shard's [`CLAIMED`](shard::CLAIMED) word. A claim that ends past
//!     `tail + capacity` is taken back (`CLAIMED` less `n`) and the records are dropped and
//!     counted; otherwise the leader takes `n` consecutive tickets by adding `n` to `head`.
//!     Every claim that succeeded ended within `tail + capacity` after all the claims before
//!     it, so every ticket handed out is below `tail + capacity`: its slot's previous record was
//!     consumed, whoever consumes at the same time. The lanes write their records; after a warp
//!     barrier, the leader stores the sequence word of the group's first slot, with release
//!     ordering: committed, in the first ticket's lap, with the group's size in the owner field.
//!     The other slots' sequence words are not written; the drain reads a group at a time.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};

use crate::MapError;
use crate::layout::{DEVICE_OWNER, Geometry, ring_state as rs, shard};
use crate::region::{Region, current_pid, process_alive};

/// One ring (one shard of a ring-buffer map).
#[derive(Clone, Copy)]
pub(crate) struct Ring<'a> {
    region: &'a Region,
    g: &'a Geometry,
    shard: u32,
}

fn seq(lap: u32, state: u64, owner: u32) -> u64 {
    u64::from(lap) << 32 | state << rs::SHIFT | (u64::from(owner) & rs::OWNER_MASK)
}

fn lap_of(word: u64) -> u32 {
    (word >> 32) as u32
}

fn state_of(word: u64) -> u64 {
    (word >> rs::SHIFT) & 3
}

fn owner_of(word: u64) -> u32 {
    (word & rs::OWNER_MASK) as u32
}

/// A ticket reserved by this producer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ticket {
    slot: u32,
    lap: u32,
}

/// What the consumer found at the tail.
pub(crate) enum Next {
    /// A record was copied out.
    Record,
    /// Nothing to read yet.
    Empty,
}

impl<'a> Ring<'a> {
    pub(crate) fn new(region: &'a Region, g: &'a Geometry, shard: u32) -> Ring<'a> {
        debug_assert!(shard < g.shards());
        Ring { region, g, shard }
    }

    fn counter(&self, off: usize) -> &'a AtomicU64 {
        self.region.word(self.g.shard_offset(self.shard) + off)
    }

    /// The sequence word of `slot`, in the array after the records.
    fn seq(&self, slot: u32) -> &'a AtomicU64 {
        self.region.word(self.g.seq_offset(self.shard, slot))
    }

    /// Byte offset of the record of `slot` (a ring's slot is its record: the value offset is 0).
    fn record_offset(&self, slot: u32) -> usize {
        self.g.slot_offset(self.shard, slot)
    }

    fn place(&self, ticket: u64) -> (u32, u32) {
        let cap = u64::from(self.g.capacity);
        ((ticket % cap) as u32, (ticket / cap) as u32)
    }

    /// Reserves the next slot, or counts a drop and returns `None` when the ring is full.
    pub(crate) fn reserve(&self) -> Option<Ticket> {
        let head = self.counter(shard::LEN_OR_HEAD);
        let me = current_pid();
        loop {
            let t = head.load(Acquire);
            let (slot, lap) = self.place(t);
            let word = self.seq(slot).load(Acquire);
            let ahead = lap_of(word).wrapping_sub(lap) as i32;
            if ahead < 0 {
                // The slot still holds the record of the previous lap: full.
                self.counter(shard::REFUSED).fetch_add(1, Relaxed);
                return None;
            }
            if ahead > 0 {
                // Ticket `t` was taken and consumed already: `head` is stale, or its producer
                // died before moving it. Move it on.
                let _ = head.compare_exchange(t, t + 1, Release, Relaxed);
                continue;
            }
            if state_of(word) == rs::FREE {
                if self
                    .seq(slot)
                    .compare_exchange(word, seq(lap, rs::RESERVED, me), Acquire, Relaxed)
                    .is_ok()
                {
                    let _ = head.compare_exchange(t, t + 1, Release, Relaxed);
                    return Some(Ticket { slot, lap });
                }
            } else {
                // Taken in this lap by a producer that has not moved `head` yet: help.
                let _ = head.compare_exchange(t, t + 1, Release, Relaxed);
            }
        }
    }

    /// Writes `record` (zero-padded to the record size) into a reserved slot.
    pub(crate) fn write(&self, ticket: Ticket, record: &[u8]) {
        let off = self.record_offset(ticket.slot);
        let size = self.g.value_size as usize;
        self.region.write_bytes(off, record);
        for at in (record.len().div_ceil(8) * 8..size.div_ceil(8) * 8).step_by(8) {
            self.region.word(off + at).store(0, Relaxed);
        }
    }

    /// Byte offset of a reserved slot's record.
    pub(crate) fn record_at(&self, ticket: Ticket) -> usize {
        self.record_offset(ticket.slot)
    }

    /// Publishes a reserved slot.
    pub(crate) fn commit(&self, ticket: Ticket) {
        self.seq(ticket.slot).store(seq(ticket.lap, rs::COMMITTED, 0), Release);
    }

    /// Gives a reserved slot up: the consumer skips it.
    pub(crate) fn discard(&self, ticket: Ticket) {
        self.seq(ticket.slot).store(seq(ticket.lap, rs::DISCARDED, 0), Release);
    }

    /// Copies out the next record, if one is ready, into `out` (the record size long).
    pub(crate) fn next(&self, out: &mut [u8]) -> Next {
        let tail = self.counter(shard::TAIL);
        loop {
            let t = tail.load(Relaxed);
            let (slot, lap) = self.place(t);
            let word = self.seq(slot).load(Acquire);
            if lap_of(word) == lap.wrapping_add(1) {
                // Already freed: a consumer died between freeing the slot and moving `tail`.
                tail.store(t + 1, Relaxed);
                continue;
            }
            if lap_of(word) != lap {
                return Next::Empty;
            }
            let free_next = seq(lap.wrapping_add(1), rs::FREE, 0);
            match state_of(word) {
                rs::COMMITTED => {
                    self.region.read_bytes(self.record_offset(slot), out);
                    self.seq(slot).store(free_next, Release);
                    tail.store(t + 1, Relaxed);
                    return Next::Record;
                }
                rs::DISCARDED => {
                    self.seq(slot).store(free_next, Release);
                    tail.store(t + 1, Relaxed);
                }
                rs::RESERVED => {
                    let owner = owner_of(word);
                    let gone = owner != DEVICE_OWNER && !process_alive(owner);
                    if !(gone
                        && self
                            .seq(slot)
                            .compare_exchange(word, free_next, Release, Relaxed)
                            .is_ok())
                    {
                        return Next::Empty;
                    }
                    self.counter(shard::LOST).fetch_add(1, Relaxed);
                    tail.store(t + 1, Relaxed);
                }
                _ => return Next::Empty,
            }
        }
    }

    /// Publishes the records device producers wrote (which have a sequence word only at each
    /// group's first slot): every ticket `t` from `tail` up to `head` (at most
    /// `tail + capacity`) whose slot is free for lap `t / capacity` becomes committed for that
    /// lap, owned by [`DEVICE_OWNER`]. Slots a host producer reserved, committed or discarded,
    /// and slots already committed (a group's first), are left alone, so this can be called
    /// again. First brings `head` back to `tail + capacity` if it is past it. Returns the
    /// records committed.
    pub(crate) fn commit_written(&self) -> u64 {
        let tail = self.counter(shard::TAIL).load(Acquire);
        let limit = tail.saturating_add(u64::from(self.g.capacity));
        let head = self.counter(shard::LEN_OR_HEAD).fetch_min(limit, AcqRel).min(limit);
        let mut committed = 0;
        for t in tail..head {
            let (slot, lap) = self.place(t);
            let word = self.seq(slot).load(Acquire);
            if lap_of(word) != lap || state_of(word) != rs::FREE {
                continue;
            }
            let done = seq(lap, rs::COMMITTED, DEVICE_OWNER);
            // Release: the consumer that sees the word sees the record, written before the call.
            if self.seq(slot).compare_exchange(word, done, Release, Relaxed).is_ok() {
                committed += 1;
            }
        }
        committed
    }

    /// Records dropped because the ring was full.
    pub(crate) fn drops(&self) -> u64 {
        self.counter(shard::REFUSED).load(Relaxed)
    }

    /// Reserved records skipped because their producer died.
    pub(crate) fn lost(&self) -> u64 {
        self.counter(shard::LOST).load(Relaxed)
    }

    /// Records committed or in flight but not yet consumed (an estimate while producers run).
    pub(crate) fn pending(&self) -> u64 {
        let head = self.counter(shard::LEN_OR_HEAD).load(Acquire);
        head.saturating_sub(self.counter(shard::TAIL).load(Acquire))
    }

    /// Takes the consumer role for this process; fails while a live process holds it.
    pub(crate) fn claim_consumer(&self) -> Result<(), MapError> {
        let word = self.counter(shard::CONSUMER);
        let me = u64::from(current_pid());
        loop {
            let holder = word.load(Acquire);
            if holder != 0 && process_alive(holder as u32) {
                return Err(MapError::ConsumerBusy { pid: holder as u32 });
            }
            if word.compare_exchange(holder, me, Acquire, Relaxed).is_ok() {
                return Ok(());
            }
        }
    }

    /// Gives the consumer role back.
    pub(crate) fn release_consumer(&self) {
        let _ = self.counter(shard::CONSUMER).compare_exchange(
            u64::from(current_pid()),
            0,
            Release,
            Relaxed,
        );
    }

    /// Reserves a slot as a producer that then dies would, owned by `pid`.
    #[cfg(test)]
    pub(crate) fn abandon_reservation(&self, pid: u32) {
        let t = self.reserve().expect("room in the ring");
        self.seq(t.slot).store(seq(t.lap, rs::RESERVED, pid), Release);
    }
}
