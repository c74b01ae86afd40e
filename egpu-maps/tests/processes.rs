//! Maps shared with real second processes. The test binary runs itself as the child: the
//! `child` test below does a role's work when `EGPU_MAPS_CHILD=<role>:<base name>` is set, and
//! returns at once otherwise.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::{shm_path, unique_name, within};
use egpu_maps::{Array, HashMap, MapError, PerCpuArray, PerCpuHashMap, Placement, RingBuf, Shards};
use egpu_test_support::Rng;

const CHILD_ENV: &str = "EGPU_MAPS_CHILD";

/// The names of the maps of one test, derived from a base name unique to the test run.
struct Names {
    hash: String,
    per_cpu: String,
    ring: String,
    progress: String,
}

impl Names {
    fn new(base: &str) -> Names {
        Names {
            hash: format!("{base}-hash"),
            per_cpu: format!("{base}-percpu"),
            ring: format!("{base}-ring"),
            progress: format!("{base}-progress"),
        }
    }
}

fn shared(name: &str) -> Placement {
    Placement::Shared(name.to_owned().into())
}

/// The child side of every test here.
#[test]
fn child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        println!("{CHILD_ENV} is not set: not a child run, nothing to do");
        return;
    };
    let (role, base) = spec.split_once(':').expect("EGPU_MAPS_CHILD is <role>:<name>");
    match role {
        "reader" => reader(base),
        "writer" => writer(base),
        "consumer" => consumer(base),
        other => panic!("unknown child role `{other}`"),
    }
    println!("CHILD-OK {role}");
}

/// Starts this test binary again as a child in `role`.
fn spawn_child(role: &str, base: &str, stdin: Stdio) -> Child {
    Command::new(std::env::current_exe().expect("the test binary's path"))
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{role}:{base}"))
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the test binary as a child")
}

/// What an exited child wrote.
fn output_of(child: &mut Child) -> String {
    let mut out = String::new();
    if let Some(mut s) = child.stdout.take() {
        let _ = s.read_to_string(&mut out);
    }
    if let Some(mut s) = child.stderr.take() {
        let _ = s.read_to_string(&mut out);
    }
    out
}

/// Waits at most `limit` for the child to exit (killing it after that), and returns its status
/// and output.
fn finish(mut child: Child, limit: Duration) -> (ExitStatus, String) {
    // Read the pipes as the child writes, so a chatty child never blocks on a full pipe.
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let out = thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the child did not finish within {limit:?}: {}", out.join().unwrap());
        }
        thread::sleep(Duration::from_millis(2));
    };
    (status, out.join().expect("the output reader"))
}

#[track_caller]
fn assert_mismatch<T>(r: Result<T, MapError>, what: &str) {
    match r {
        Err(MapError::Mismatch { .. }) => {}
        Err(e) => panic!("{what}: expected Mismatch, got {e}"),
        Ok(_) => panic!("{what}: expected Mismatch, the open succeeded"),
    }
}

// ---------------------------------------------------------------------------------------------
// a. A second process opens maps by name.

/// Child: checks what the parent wrote, checks opens with wrong types, writes back.
fn reader(base: &str) {
    let names = Names::new(base);
    let hash = HashMap::<u64, u64>::open_shared(&names.hash).unwrap();
    assert_eq!(hash.len(), 100);
    for k in 0..100u64 {
        assert_eq!(hash.get(&k), Some(k * k), "key {k}");
    }
    let per_cpu = PerCpuArray::<u64>::open_shared(&names.per_cpu).unwrap();
    let shards = per_cpu.get(0).unwrap();
    assert_eq!((shards.cpu.len(), shards.sm.len()), (4, 1));
    for i in 0..8u32 {
        assert_eq!(per_cpu.sum(i).unwrap(), u64::from(i) + 1, "index {i}");
    }
    let ring = RingBuf::<[u64; 2]>::open_shared(&names.ring).unwrap();
    let mut consumer = ring.consumer().unwrap();
    let records: Vec<[u64; 2]> = consumer.drain().collect();
    assert_eq!(records, (0..10u64).map(|i| [i, i * 3]).collect::<Vec<_>>());
    drop(consumer);

    assert_mismatch(HashMap::<u32, u64>::open_shared(&names.hash), "hash, u32 keys");
    assert_mismatch(HashMap::<u64, u32>::open_shared(&names.hash), "hash, u32 values");
    assert_mismatch(PerCpuHashMap::<u64, u64>::open_shared(&names.hash), "hash as per-CPU");
    assert_mismatch(Array::<u64>::open_shared(&names.per_cpu), "per-CPU array as array");
    assert_mismatch(PerCpuArray::<u32>::open_shared(&names.per_cpu), "per-CPU array, u32");
    assert_mismatch(RingBuf::<u64>::open_shared(&names.ring), "ring, u64 records");
    assert_mismatch(RingBuf::<[u64; 2]>::open_shared(&names.hash), "hash as ring");
    println!("MISMATCH-OK 7");

    for _ in 0..100 {
        hash.fetch_add(&1000, 5).unwrap();
    }
    for i in 0..8u32 {
        per_cpu.fetch_add(i, 10).unwrap();
    }
    for i in 0..5u64 {
        ring.output(&[100 + i, u64::from(std::process::id())]).unwrap();
    }
}

#[test]
fn a_second_process_opens_maps_by_name() {
    let base = unique_name("reader");
    let names = Names::new(&base);
    let hash: HashMap<u64, u64> = HashMap::create(256, shared(&names.hash)).unwrap();
    let per_cpu: PerCpuArray<u64> =
        PerCpuArray::create(8, Shards::new(4, 1), shared(&names.per_cpu)).unwrap();
    let ring: RingBuf<[u64; 2]> = RingBuf::create(64, Shards::ONE, shared(&names.ring)).unwrap();
    for k in 0..100u64 {
        hash.insert(&k, &(k * k)).unwrap();
    }
    for i in 0..8u32 {
        per_cpu.fetch_add(i, u64::from(i) + 1).unwrap();
    }
    for i in 0..10u64 {
        ring.output(&[i, i * 3]).unwrap();
    }

    let child = spawn_child("reader", &base, Stdio::null());
    let pid = child.id();
    let (status, output) = finish(child, Duration::from_secs(30));
    assert!(status.success(), "the child failed ({status}):\n{output}");
    assert!(output.contains("MISMATCH-OK 7"), "{output}");
    assert!(output.contains("CHILD-OK reader"), "the child did not run its role:\n{output}");

    // What the child wrote.
    assert_eq!(hash.get(&1000), Some(500));
    assert_eq!(hash.len(), 101);
    for i in 0..8u32 {
        assert_eq!(per_cpu.sum(i).unwrap(), u64::from(i) + 11, "index {i}");
    }
    let mut consumer = ring.consumer().expect("the child gave the consumer role back");
    let records: Vec<[u64; 2]> = consumer.drain().collect();
    assert_eq!(records, (0..5u64).map(|i| [100 + i, u64::from(pid)]).collect::<Vec<_>>());
    // The child only opened the maps: their names are still there.
    for name in [&names.hash, &names.per_cpu, &names.ring] {
        assert!(shm_path(name).exists(), "{name}");
    }
    drop(consumer);
    drop((hash, per_cpu, ring));
    for name in [&names.hash, &names.per_cpu, &names.ring] {
        assert!(!shm_path(name).exists(), "{name} outlived its creator");
    }
}

// ---------------------------------------------------------------------------------------------
// The consumer role across processes.

/// Child: takes the consumer role, says so, and keeps it until its stdin closes.
fn consumer(base: &str) {
    let names = Names::new(base);
    let ring = RingBuf::<u64>::open_shared(&names.ring).unwrap();
    let mut consumer = ring.consumer().unwrap();
    assert_eq!(consumer.poll(), Some(1));
    println!("CHILD-HOLDING");
    // Standard output may be block-buffered when it is a pipe: the parent waits for this line.
    std::io::stdout().flush().unwrap();
    let mut rest = Vec::new();
    std::io::stdin().read_to_end(&mut rest).unwrap();
}

/// Starts a consumer child and waits until it holds the role.
fn holding_consumer(base: &str) -> Child {
    let mut child = spawn_child("consumer", base, Stdio::piped());
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        match stdout.read_line(&mut line) {
            // The harness may have begun the line with `test child ... `.
            Ok(n) if n > 0 && line.trim_end().ends_with("CHILD-HOLDING") => break,
            Ok(n) if n > 0 => {}
            _ => panic!("the consumer child ended early: {line}{}", output_of(&mut child)),
        }
    }
    // Nothing but the harness's last lines follows, which `finish` reads.
    child.stdout = Some(stdout.into_inner());
    child
}

#[test]
fn the_consumer_role_is_held_by_one_process() {
    let base = unique_name("consumer");
    let names = Names::new(&base);
    let ring: RingBuf<u64> = RingBuf::create(8, Shards::ONE, shared(&names.ring)).unwrap();

    // A live consumer elsewhere keeps the role; it gives it back when it ends.
    ring.output(&1).unwrap();
    let mut child = holding_consumer(&base);
    match ring.consumer() {
        Err(MapError::ConsumerBusy { pid }) => assert_eq!(pid, child.id()),
        other => panic!("{other:?}"),
    }
    drop(child.stdin.take());
    let (status, output) = finish(child, Duration::from_secs(30));
    assert!(status.success(), "{output}");
    ring.output(&2).unwrap();
    assert_eq!(ring.consumer().unwrap().poll(), Some(2));

    // A consumer killed with the role held: the role is free once it is gone.
    ring.output(&1).unwrap();
    let mut child = holding_consumer(&base);
    assert!(matches!(ring.consumer(), Err(MapError::ConsumerBusy { .. })));
    child.kill().unwrap();
    assert_eq!(child.wait().unwrap().signal(), Some(9));
    ring.output(&3).unwrap();
    assert_eq!(ring.consumer().unwrap().poll(), Some(3));
}

// ---------------------------------------------------------------------------------------------
// b. A writer killed with SIGKILL at any point.

/// Fresh keys the writer inserts, one per iteration, before it only updates.
const FRESH: u64 = 8_000;
/// Iterations the writer runs before it waits to be killed.
const ITERATIONS: u64 = 12_000;
/// Hash capacity: 64 counters, the fresh keys and two more inserts by the parent.
const CAPACITY: u32 = 64 + FRESH as u32 + 2;
/// Ring records: room for every iteration's record.
const RING: u32 = ITERATIONS as u32 + 1;

/// Child: updates the maps as fast as it can until killed.
fn writer(base: &str) {
    let names = Names::new(base);
    let hash = HashMap::<u64, u64>::open_shared(&names.hash).unwrap();
    let progress = Array::<u64>::open_shared(&names.progress).unwrap();
    let ring = RingBuf::<u64>::open_shared(&names.ring).unwrap();
    let done = progress.word::<u64>(0, 0).unwrap();
    for i in 0..ITERATIONS {
        hash.fetch_add(&(i % 64), 1).unwrap();
        if i < FRESH {
            hash.insert(&(1000 + i), &i).unwrap();
        }
        ring.output(&i).unwrap();
        done.store(i + 1);
    }
    // Wait to be killed; leave if the parent goes away first.
    let parent = std::os::unix::process::parent_id();
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::os::unix::process::parent_id() == parent && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
}

/// What one killed writer left (printed by the test, to see which states the kills hit).
#[derive(Debug, Default)]
#[allow(dead_code)] // read through Debug only
struct Aftermath {
    progress: u64,
    /// An insert was in flight (counted, not yet an entry) when the writer died.
    insert_in_flight: bool,
    /// Slots left BUSY, KEYED, COUNTED or WRITING by the writer.
    pending_slots: usize,
    /// `len` still counted one entry more than there were after the in-flight key was inserted
    /// again.
    leaked_count: bool,
    lost: u64,
}

/// Starts a writer, kills it once it has done `threshold` iterations (and `spin` more spins),
/// and checks what it left. With `strict`, also checks what the library's known bugs break.
fn kill_a_writer(base: &str, threshold: u64, spin: u64, strict: bool) -> Aftermath {
    let names = Names::new(base);
    let hash: HashMap<u64, u64> = HashMap::create(CAPACITY, shared(&names.hash)).unwrap();
    let progress: Array<u64> = Array::create(1, shared(&names.progress)).unwrap();
    let ring: RingBuf<u64> = RingBuf::create(RING, Shards::ONE, shared(&names.ring)).unwrap();
    let done = progress.word::<u64>(0, 0).unwrap();

    let mut child = spawn_child("writer", base, Stdio::null());
    let deadline = Instant::now() + Duration::from_secs(30);
    while done.load() < threshold {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the writer exited early ({status}):\n{}", output_of(&mut child));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the writer did not reach {threshold} iterations in time");
        }
        std::hint::spin_loop();
    }
    for _ in 0..spin {
        std::hint::spin_loop();
    }
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(9), "{status}: {}", output_of(&mut child));

    // The iteration in flight when the writer died is `p`.
    let p = done.load();
    let mut after = Aftermath { progress: p, ..Aftermath::default() };
    assert!(p >= threshold);

    // Counters: the update in flight may or may not have landed.
    let sum: u64 = (0..64).map(|k| hash.get(&k).unwrap_or(0)).sum();
    assert!(sum == p || sum == p + 1, "counters sum to {sum} after {p} iterations");
    // Fresh keys: all those of finished iterations, none of later ones.
    for j in 0..p.min(FRESH) {
        assert_eq!(hash.get(&(1000 + j)), Some(j), "fresh key {} (progress {p})", 1000 + j);
    }
    if p < FRESH {
        let v = hash.get(&(1000 + p));
        assert!(v.is_none() || v == Some(p), "the key in flight holds {v:?}");
    }
    for j in (p + 1).min(FRESH)..FRESH {
        assert_eq!(hash.get(&(1000 + j)), None, "key {} before its iteration", 1000 + j);
    }
    let live = hash.iter().count();
    assert!(
        hash.len() == live || hash.len() == live + 1,
        "len {} with {live} entries: more than one insert in flight",
        hash.len()
    );
    after.insert_in_flight = hash.len() == live + 1;
    after.pending_slots = pending_slots(&hash);
    assert!(after.pending_slots <= 1, "{} slots left pending by one writer", after.pending_slots);

    // Inserting the key in flight again finishes, even over a slot the writer left half
    // inserted, and so does a new key.
    let in_flight = 1000 + p;
    let other = HashMap::<u64, u64>::open_shared(&names.hash).unwrap();
    let r = within(Duration::from_secs(5), move || {
        other.insert(&in_flight, &p).map(|()| other.get(&in_flight))
    });
    assert!(matches!(r, Some(Ok(Some(v))) if v == p), "insert of the key in flight: {r:?}");
    let other = HashMap::<u64, u64>::open_shared(&names.hash).unwrap();
    let r = within(Duration::from_secs(5), move || other.insert(&u64::MAX, &7));
    assert!(matches!(r, Some(Ok(()))), "insert of a new key: {r:?}");
    assert_eq!(hash.get(&u64::MAX), Some(7));

    // Consistency.
    let entries: Vec<(u64, u64)> = hash.iter().collect();
    let keys: std::collections::HashSet<u64> = entries.iter().map(|&(k, _)| k).collect();
    assert_eq!(keys.len(), entries.len(), "a key appears twice");
    after.leaked_count = hash.len() != entries.len();
    // An insert killed between counting itself and marking its slot leaves one count, which a
    // repair (or the next time the map seems full) corrects.
    assert!(hash.len() - entries.len() <= 1, "len {} with {} entries", hash.len(), entries.len());
    hash.raw().repair();
    if strict {
        assert_eq!(hash.len(), entries.len(), "len after the repair (progress {p})");
    }

    // The ring: records in order, the one in flight committed or lost.
    let mut consumer = ring.consumer().unwrap();
    let records: Vec<u64> = consumer.drain().collect();
    assert!(
        records.iter().copied().eq(0..records.len() as u64),
        "records out of order: {:?}…",
        &records[..records.len().min(20)]
    );
    after.lost = ring.lost();
    let extra = records.len() as u64 - p;
    assert!(
        matches!((extra, after.lost), (0, 0) | (0, 1) | (1, 0)),
        "{} records and {} lost after {p} iterations",
        records.len(),
        after.lost
    );
    assert_eq!(ring.drops(), 0);
    drop(consumer);
    if strict {
        let raw = ring.raw().clone();
        let r = within(Duration::from_secs(2), move || raw.output(&1u64.to_le_bytes()));
        assert!(matches!(r, Some(Ok(()))), "output after the writer died: {r:?}");
    }
    after
}

/// Slots of a hash map claimed by an insert that has not finished (BUSY or KEYED).
fn pending_slots(map: &HashMap<u64, u64>) -> usize {
    use egpu_maps::layout::hash_state;
    let raw = map.raw();
    let g = raw.geometry();
    let (base, len) = raw.memory();
    (0..g.slots)
        .filter(|&i| {
            let off = g.slot_offset(0, i);
            assert!(off + 8 <= len);
            // SAFETY: an aligned word inside the map's memory, which `map` keeps alive; the
            // layout's words are only ever accessed atomically.
            let word = unsafe { AtomicU64::from_ptr(base.as_ptr().add(off).cast()) };
            let state = word.load(Ordering::SeqCst) >> hash_state::SHIFT;
            matches!(
                state,
                hash_state::BUSY | hash_state::KEYED | hash_state::COUNTED | hash_state::WRITING
            )
        })
        .count()
}

#[test]
fn a_writer_killed_at_any_point_leaves_usable_maps() {
    let mut rng = Rng::from_env("kills", 0x5167_4b11);
    let mut seen = Vec::new();
    for (round, threshold) in [64, 700, 2_500, 5_000, 7_990].into_iter().enumerate() {
        let base = unique_name(&format!("kill-{round}"));
        seen.push(kill_a_writer(&base, threshold, rng.below(20_000) as u64, false));
    }
    println!("killed writers: {seen:?}");
}

#[test]
fn killed_writers_leave_exact_counts_and_a_working_ring() {
    let mut rng = Rng::from_env("strict kills", 0x5167_4b12);
    for round in 0..60 {
        let base = unique_name(&format!("strict-{round}"));
        let threshold = 64 + rng.below(FRESH as usize - 64) as u64;
        kill_a_writer(&base, threshold, rng.below(20_000) as u64, true);
    }
}
