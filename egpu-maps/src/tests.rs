//! Unit tests of the map kinds, and of what the layout's internal states do when a writer dies:
//! these use the crate's test hooks (`Table::abandon_insert`, `Table::census`,
//! `Ring::abandon_reservation`) and write state words directly.

use std::process::{Child, Command};
use std::sync::atomic::Ordering::SeqCst;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::layout::{self, DEVICE_OWNER, hash_state as st};
use crate::*;

#[test]
fn hash_map_basics() {
    let m: HashMap<u64, [u32; 3]> = HashMap::with_capacity(10);
    assert!(m.is_empty());
    for k in 0..10u64 {
        m.insert(&k, &[k as u32, 1, 2]).unwrap();
    }
    assert!(matches!(m.insert(&99, &[0; 3]), Err(MapError::Full { capacity: 10 })));
    assert_eq!(m.len(), 10);
    for k in 0..10u64 {
        assert_eq!(m.get(&k), Some([k as u32, 1, 2]));
    }
    assert!(m.remove(&3));
    assert!(!m.remove(&3));
    m.insert(&99, &[9; 3]).unwrap();
    assert_eq!(m.get(&99), Some([9; 3]));
    assert_eq!(m.get(&3), None);
    let mut all: Vec<_> = m.iter().map(|(k, _)| k).collect();
    all.sort();
    assert_eq!(all, [0, 1, 2, 4, 5, 6, 7, 8, 9, 99]);
}

// ---------------------------------------------------------------------------------------------
// Helpers.

/// The id of a process that has certainly exited and been reaped.
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().expect("spawn `true`");
    let pid = child.id();
    assert!(child.wait().expect("wait for `true`").success());
    assert!(!crate::region::process_alive(pid), "pid {pid} was reused at once");
    pid
}

/// A live process other than this one, killed (and reaped) on drop or by `kill`.
struct Sleeper(Child);

impl Sleeper {
    fn start() -> Sleeper {
        Sleeper(Command::new("sleep").arg("5").spawn().expect("spawn `sleep`"))
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    /// Kills and reaps it: from then on its pid names no process.
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        self.kill();
    }
}

fn key_bytes(k: &u64) -> &[u8] {
    bytemuck::bytes_of(k)
}

/// The state word of every slot of shard 0 of a hash map, with its index.
fn slot_words(raw: &RawMap) -> Vec<(u32, u64)> {
    let g = raw.geometry();
    (0..g.slots).map(|i| (i, raw.region().word(g.slot_offset(0, i)).load(SeqCst))).collect()
}

/// The one slot of shard 0 in state `state`.
fn only_slot_in(raw: &RawMap, state: u64) -> u32 {
    let found: Vec<u32> = slot_words(raw)
        .into_iter()
        .filter(|&(_, w)| w >> st::SHIFT == state)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(found.len(), 1, "slots in state {state}: {found:?}");
    found[0]
}

#[test]
fn a_dead_inserters_slot_is_skipped_and_reclaimed_by_an_insert_of_its_key() {
    let m: HashMap<u64, u64> = HashMap::with_capacity(16);
    m.insert(&1, &10).unwrap();
    let dead = dead_pid();
    m.raw().table(0).abandon_insert(key_bytes(&5), dead, st::COUNTED);
    assert_eq!(m.raw().table(0).census(), (1, 0));
    assert_eq!(m.len(), 2, "the abandoned insert is counted until reclaimed");

    // Readers skip the slot, at once.
    let start = Instant::now();
    for _ in 0..1000 {
        assert_eq!(m.get(&5), None);
        assert!(!m.contains_key(&5));
    }
    assert!(start.elapsed() < Duration::from_secs(1), "lookups waited: {:?}", start.elapsed());
    assert_eq!(m.iter().map(|(k, _)| k).collect::<Vec<_>>(), [1]);
    assert!(!m.remove(&5));

    // An insert of the same key finds the owner gone and takes the slot back.
    let start = Instant::now();
    m.insert(&5, &50).unwrap();
    assert!(start.elapsed() < Duration::from_secs(2), "took {:?}", start.elapsed());
    assert_eq!(m.get(&5), Some(50));
    assert_eq!(m.len(), 2);
    assert_eq!(m.iter().count(), 2);
    let (pending, tombs) = m.raw().table(0).census();
    assert_eq!(pending, 0);
    assert!(tombs <= 1, "the slot became a tombstone or was reused: {tombs} tombstones");
    assert_eq!(m.get(&1), Some(10));
}

#[test]
fn a_dead_inserters_keyed_slot_is_reclaimed_too() {
    let m: HashMap<u64, u64> = HashMap::with_capacity(16);
    m.raw().table(0).abandon_insert(key_bytes(&9), dead_pid(), st::KEYED);
    assert_eq!(m.get(&9), None, "a KEYED slot is not an entry yet");
    // Through `word`, the path `fetch_add` takes.
    assert_eq!(m.fetch_add(&9, 3).unwrap(), 0);
    assert_eq!(m.get(&9), Some(3));
    assert_eq!(m.len(), 1);
    assert_eq!(m.raw().table(0).census().0, 0);
}

#[test]
fn a_dead_inserters_slot_does_not_block_other_keys() {
    let m: HashMap<u64, u64> = HashMap::with_capacity(16);
    m.raw().table(0).abandon_insert(key_bytes(&5), dead_pid(), st::BUSY);
    let start = Instant::now();
    for k in 100..108u64 {
        m.insert(&k, &k).unwrap();
        assert_eq!(m.get(&k), Some(k));
        assert!(m.remove(&k));
    }
    m.insert(&6, &60).unwrap();
    assert!(start.elapsed() < Duration::from_secs(1), "took {:?}", start.elapsed());
    assert_eq!(m.get(&6), Some(60));
    assert_eq!(m.get(&5), None);
    // The abandoned slot is still there until an insert of its key comes by...
    assert_eq!(m.raw().table(0).census().0, 1);
    m.insert(&5, &50).unwrap();
    // ...which reclaims it: the count is right again.
    assert_eq!(m.raw().table(0).census().0, 0);
    assert_eq!(m.len(), 2);
    assert_eq!(m.iter().count(), 2);
}

#[test]
fn a_dead_inserters_slot_does_not_cost_capacity() {
    let m: HashMap<u64, u64> = HashMap::with_capacity(4);
    m.raw().table(0).abandon_insert(key_bytes(&5), dead_pid(), st::COUNTED);
    for k in 10..14u64 {
        m.insert(&k, &k).unwrap_or_else(|e| panic!("insert {k}: {e}"));
    }
    assert_eq!(m.len(), m.iter().count());
}

#[test]
fn a_count_left_by_a_writer_killed_between_counting_and_marking_is_corrected() {
    // The one window the layout cannot close (two words, two instructions): the count is one
    // too high. It is corrected when the map next seems full, or by `repair`.
    let leak = |m: &HashMap<u64, u64>| {
        let raw = m.raw();
        raw.region()
            .word(raw.geometry().shard_offset(0) + layout::shard::LEN_OR_HEAD)
            .fetch_add(1, SeqCst);
    };
    let m: HashMap<u64, u64> = HashMap::with_capacity(4);
    leak(&m);
    for k in 10..14u64 {
        m.insert(&k, &k).unwrap_or_else(|e| panic!("insert {k}: {e}"));
    }
    assert_eq!((m.len(), m.iter().count()), (4, 4));
    assert!(matches!(m.insert(&14, &14), Err(MapError::Full { capacity: 4 })));
    for k in 10..14u64 {
        assert_eq!(m.get(&k), Some(k));
    }
    assert!(m.remove(&10));
    leak(&m);
    assert_eq!(m.len(), 4);
    m.raw().repair();
    assert_eq!(m.len(), 3);
}

#[test]
fn a_live_inserters_slot_makes_an_insert_of_its_key_wait() {
    let mut sleeper = Sleeper::start();
    let m: HashMap<u64, u64> = HashMap::with_capacity(16);
    m.raw().table(0).abandon_insert(key_bytes(&5), sleeper.pid(), st::BUSY);
    let raw = m.raw().clone();
    let (tx, rx) = mpsc::channel();
    let inserter = std::thread::spawn(move || {
        let m: HashMap<u64, u64> = HashMap::from_raw(raw).unwrap();
        let _ = tx.send(m.insert(&5, &50).map(|()| m.len()));
    });
    assert!(
        matches!(rx.recv_timeout(Duration::from_millis(100)), Err(RecvTimeoutError::Timeout)),
        "the insert did not wait for the live inserter"
    );
    // Meanwhile readers and other keys go on.
    assert_eq!(m.get(&5), None);
    m.insert(&6, &60).unwrap();
    assert_eq!(m.get(&6), Some(60));
    sleeper.kill();
    let len = rx.recv_timeout(Duration::from_secs(5)).expect("the insert finished").unwrap();
    inserter.join().unwrap();
    assert!(len >= 2);
    assert_eq!(m.get(&5), Some(50));
    assert_eq!(m.len(), 2);
    assert_eq!(m.raw().table(0).census().0, 0);
}

#[test]
fn a_device_owned_slot_is_never_taken_for_dead() {
    let m: HashMap<u64, u64> = HashMap::with_capacity(16);
    m.raw().table(0).abandon_insert(key_bytes(&5), DEVICE_OWNER, st::COUNTED);
    let raw = m.raw().clone();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let m: HashMap<u64, u64> = HashMap::from_raw(raw).unwrap();
        let _ = tx.send(m.insert(&5, &50));
    });
    assert!(matches!(rx.recv_timeout(Duration::from_millis(100)), Err(RecvTimeoutError::Timeout)));
    // The device finishes its insert: the waiting insert then updates the entry.
    let g = *m.raw().geometry();
    let i = only_slot_in(m.raw(), st::COUNTED);
    let off = g.slot_offset(0, i);
    m.raw().region().write_bytes(off + g.value_offset as usize, key_bytes(&7));
    let word = m.raw().region().word(off);
    word.store((word.load(SeqCst) & 0xffff_ffff) | st::FULL << st::SHIFT, SeqCst);
    rx.recv_timeout(Duration::from_secs(5)).expect("the insert finished").unwrap();
    assert_eq!(m.get(&5), Some(50));
    assert_eq!(m.len(), 1);
}

#[test]
fn racing_inserts_leave_no_pending_slots() {
    const THREADS: usize = 4;
    let m: HashMap<u64, u64> = HashMap::with_capacity(64);
    let barrier = std::sync::Barrier::new(THREADS);
    for round in 0..50u64 {
        std::thread::scope(|s| {
            for t in 0..THREADS as u64 {
                let (m, barrier) = (&m, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    for k in 0..32u64 {
                        m.insert(&(round << 32 | k), &t).unwrap();
                    }
                });
            }
        });
        let (pending, _) = m.raw().table(0).census();
        assert_eq!(pending, 0, "round {round}");
        assert_eq!(m.len(), 32);
        assert_eq!(m.iter().count(), 32);
        m.clear();
    }
}

// ---------------------------------------------------------------------------------------------
// Producers that die.

#[test]
fn a_dead_producers_reservation_is_skipped_and_counted_as_lost() {
    let ring: RingBuf<u64> = RingBuf::with_capacity(16);
    for i in 0..3 {
        ring.output(&i).unwrap();
    }
    ring.raw().ring(0).abandon_reservation(dead_pid());
    for i in 3..6 {
        ring.output(&i).unwrap();
    }
    assert_eq!(ring.pending(), 7);
    let mut consumer = ring.consumer().unwrap();
    assert_eq!(consumer.drain().collect::<Vec<_>>(), [0, 1, 2, 3, 4, 5]);
    assert_eq!(ring.lost(), 1);
    assert_eq!(ring.drops(), 0);
    assert_eq!(ring.pending(), 0);
    // The ring goes on, over the freed slot and round the end.
    for i in 6..30 {
        ring.output(&i).unwrap();
        assert_eq!(consumer.poll(), Some(i));
    }
    assert_eq!(consumer.poll(), None);
    assert_eq!(ring.lost(), 1);
}

#[test]
fn a_live_producers_reservation_is_waited_for() {
    let mut sleeper = Sleeper::start();
    let ring: RingBuf<u64> = RingBuf::with_capacity(16);
    ring.output(&0).unwrap();
    ring.raw().ring(0).abandon_reservation(sleeper.pid());
    ring.output(&2).unwrap();
    let mut consumer = ring.consumer().unwrap();
    assert_eq!(consumer.poll(), Some(0));
    for _ in 0..3 {
        assert_eq!(consumer.poll(), None, "the consumer went past a live reservation");
    }
    assert_eq!(ring.lost(), 0);
    sleeper.kill();
    assert_eq!(consumer.poll(), Some(2));
    assert_eq!(ring.lost(), 1);
}

#[test]
fn a_device_producers_reservation_is_never_taken_for_lost() {
    let ring: RingBuf<u64> = RingBuf::with_capacity(4);
    ring.raw().ring(0).abandon_reservation(DEVICE_OWNER);
    ring.output(&1).unwrap();
    let mut consumer = ring.consumer().unwrap();
    assert_eq!(consumer.poll(), None);
    assert_eq!(ring.lost(), 0);
}

#[test]
fn a_producer_dead_before_moving_head_does_not_stop_the_ring() {
    let ring: RingBuf<u64> = RingBuf::with_capacity(8);
    ring.output(&0).unwrap();
    let raw = ring.raw();
    raw.ring(0).abandon_reservation(dead_pid());
    // Undo the move of `head`: the producer died between its two compare-and-swaps.
    let head = raw.region().word(raw.geometry().shard_offset(0) + layout::shard::LEN_OR_HEAD);
    assert_eq!(head.load(SeqCst), 2);
    head.store(1, SeqCst);
    let mut consumer = ring.consumer().unwrap();
    assert_eq!(consumer.poll(), Some(0));
    assert_eq!(consumer.poll(), None);
    assert_eq!(ring.lost(), 1);
    drop(consumer);
    let raw = raw.clone();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(raw.output(&7u64.to_le_bytes()));
    });
    let sent = rx.recv_timeout(Duration::from_secs(2));
    assert!(matches!(sent, Ok(Ok(()))), "output after the lost record: {sent:?}");
}

#[test]
fn a_slot_freed_by_a_consumer_that_died_before_moving_tail_is_passed_over() {
    let ring: RingBuf<u64> = RingBuf::with_capacity(4);
    for i in 0..3 {
        ring.output(&i).unwrap();
    }
    let mut consumer = ring.consumer().unwrap();
    assert_eq!(consumer.poll(), Some(0));
    drop(consumer);
    // A consumer read record 1 and freed its slot for the next lap, then died: `tail` still
    // names ticket 1.
    let raw = ring.raw();
    let seq = raw.region().word(raw.geometry().seq_offset(0, 1));
    assert_eq!(seq.load(SeqCst) >> layout::ring_state::SHIFT & 3, layout::ring_state::COMMITTED);
    seq.store(1 << 32 | layout::ring_state::FREE << layout::ring_state::SHIFT, SeqCst);
    let mut consumer = ring.consumer().unwrap();
    assert_eq!(consumer.poll(), Some(2));
    assert_eq!(consumer.poll(), None);
    // The ring goes on, and holds `capacity` records again.
    for i in 3..7 {
        ring.output(&i).unwrap();
    }
    assert!(matches!(ring.output(&7), Err(MapError::RingFull)));
    assert_eq!(consumer.drain().collect::<Vec<_>>(), [3, 4, 5, 6]);
    assert_eq!((ring.lost(), ring.drops()), (0, 1));
}

#[test]
fn a_dead_consumers_role_can_be_taken_over() {
    let ring: RingBuf<u64> = RingBuf::with_shards(4, Shards::new(2, 1));
    let raw = ring.raw();
    for s in 0..3 {
        let word = raw.region().word(raw.geometry().shard_offset(s) + layout::shard::CONSUMER);
        word.store(u64::from(dead_pid()), SeqCst);
    }
    let consumer = ring.consumer().unwrap();
    for s in 0..3 {
        let word = raw.region().word(raw.geometry().shard_offset(s) + layout::shard::CONSUMER);
        assert_eq!(word.load(SeqCst), u64::from(std::process::id()));
    }
    drop(consumer);
    for s in 0..3 {
        let word = raw.region().word(raw.geometry().shard_offset(s) + layout::shard::CONSUMER);
        assert_eq!(word.load(SeqCst), 0, "the role is given back on drop");
    }
}

#[test]
fn a_live_consumer_in_another_process_keeps_the_role() {
    let sleeper = Sleeper::start();
    let ring: RingBuf<u64> = RingBuf::with_shards(4, Shards::new(3, 0));
    let raw = ring.raw();
    // The other process holds shard 1 only; shard 0 is free.
    let word = raw.region().word(raw.geometry().shard_offset(1) + layout::shard::CONSUMER);
    word.store(u64::from(sleeper.pid()), SeqCst);
    assert!(matches!(ring.consumer(), Err(MapError::ConsumerBusy { pid }) if pid == sleeper.pid()));
    let shard0 = raw.region().word(raw.geometry().shard_offset(0) + layout::shard::CONSUMER);
    assert_eq!(shard0.load(SeqCst), 0, "a refused claim gives back what it took");
    drop(sleeper);
    assert!(ring.consumer().is_ok());
}
