//! egpu-maps against the usual alternatives, side by side in one run (about 10 s):
//!
//! * **Hash-map updates per second**, with 1 and 2 threads, each thread adding 1 to the values
//!   of keys drawn from a fixed pseudo-random sequence over 4096 keys (the map pre-filled):
//!   `egpu_maps::HashMap<u64, u64>::fetch_add`, `std::collections::HashMap` behind a
//!   `std::sync::Mutex` (`*entry(k).or_insert(0) += 1`), and `dashmap::DashMap` (the same
//!   `entry` call); and, for reference, `egpu_maps::PerCpuHashMap`, whose threads write their
//!   own CPU's shard. Both std and dashmap hash with std's default SipHash; egpu's hash is fixed
//!   by its layout. Thread `t` is pinned to the `t`-th CPU this process may use, so that two
//!   threads really run at once.
//! * **How fast a second process obtains the current value of a counter**: by reading a shared
//!   egpu map that this process keeps updating (the child re-executes this binary with
//!   `--child <shm name>`, opens the map by name and times its reads), against asking the
//!   process that owns the counter over a pipe (one request byte down the child's stdin, the
//!   8-byte value back up its stdout, timed as round trips here). The two processes are pinned
//!   to two CPUs; the pipe is also timed with both on one CPU, where a round trip wakes no other
//!   CPU (on a virtual machine, waking an idle CPU can cost tens of microseconds).
//!
//! The variants are interleaved (A, B, C, A, B, C, …) and each figure is the median of its
//! rounds, so that drift on a noisy machine affects them all alike. The last two lines are the
//! ratios the project tracks, above 1 where egpu is faster: egpu's `HashMap` against `DashMap`
//! with 2 threads, and the pipe's round trip (processes on two CPUs) against a read of the shared
//! map while its owner updates it.
//!
//! `cargo run --release -p egpu-maps --example map_bench`

use std::collections::HashMap as StdHashMap;
use std::hint::black_box;
use std::io::{Read, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use dashmap::DashMap;
use egpu_maps::{HashMap, PerCpuHashMap, Placement, Shards};
// SplitMix64, the workspace tests' generator: a fixed pseudo-random sequence, the same on every
// run.
use egpu_test_support::splitmix64;

/// Distinct keys of the update benchmark.
const KEYS: usize = 4096;
/// Length of the key sequence the threads walk (a power of two).
const SEQUENCE: usize = 1 << 16;
/// Updates per thread in one run.
const UPDATES_PER_THREAD: usize = 1 << 20;
/// Rounds of the update benchmark.
const UPDATE_ROUNDS: usize = 7;
/// Rounds of the cross-process benchmark.
const PROCESS_ROUNDS: usize = 5;
/// How long one cross-process measurement lasts.
const PROCESS_WINDOW: Duration = Duration::from_millis(200);
/// The key of the counter the second process reads.
const COUNTER_KEY: u64 = 0xc0de;

/// The 4096 keys (random-looking 64-bit ids, like kernel ids) and the sequence of them the
/// threads update.
fn key_sequence() -> (Vec<u64>, Vec<u64>) {
    let mut state = 0x5eed;
    let keys: Vec<u64> = (0..KEYS).map(|_| splitmix64(&mut state)).collect();
    let sequence =
        (0..SEQUENCE).map(|_| keys[(splitmix64(&mut state) % KEYS as u64) as usize]).collect();
    (keys, sequence)
}

// ---------------------------------------------------------------------------------------------
// Where threads run.

/// Where the calling thread may run, to restore after [`pin`].
fn affinity() -> libc::cpu_set_t {
    // SAFETY: an all-zero `cpu_set_t` is a valid, empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a writable `cpu_set_t` of the size given.
    let r = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) };
    assert_eq!(r, 0, "sched_getaffinity: {}", std::io::Error::last_os_error());
    set
}

/// Runs the calling thread on `cpu` only, or where `set` allows.
fn pin(cpu: Option<usize>, set: &libc::cpu_set_t) {
    let mut one = *set;
    if let Some(cpu) = cpu {
        // SAFETY: `one` is a valid `cpu_set_t`; `cpu` is below CPU_SETSIZE (checked by the
        // caller: it comes from `cpus`).
        unsafe {
            libc::CPU_ZERO(&mut one);
            libc::CPU_SET(cpu, &mut one);
        }
    }
    // SAFETY: `one` is a valid `cpu_set_t` of the size given.
    let r = unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &one) };
    assert_eq!(r, 0, "sched_setaffinity: {}", std::io::Error::last_os_error());
}

/// The CPUs this thread may run on.
fn cpus() -> Vec<usize> {
    let set = affinity();
    // SAFETY: `set` is a valid `cpu_set_t`; every index is below CPU_SETSIZE.
    let cpus: Vec<usize> =
        (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect();
    if cpus.is_empty() { vec![0] } else { cpus }
}

// ---------------------------------------------------------------------------------------------
// Hash-map updates.

/// The maps compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Impl {
    Egpu,
    MutexStd,
    Dash,
    EgpuPerCpu,
}

impl Impl {
    const ALL: [Impl; 4] = [Impl::Egpu, Impl::MutexStd, Impl::Dash, Impl::EgpuPerCpu];

    fn name(self) -> &'static str {
        match self {
            Impl::Egpu => "egpu_maps::HashMap",
            Impl::EgpuPerCpu => "egpu PerCpuHashMap",
            Impl::MutexStd => "Mutex<std HashMap>",
            Impl::Dash => "dashmap::DashMap",
        }
    }
}

/// One map of each kind behind one interface, so that every variant runs the same loop.
enum AnyMap {
    Egpu(HashMap<u64, u64>),
    MutexStd(Mutex<StdHashMap<u64, u64>>),
    Dash(DashMap<u64, u64>),
    EgpuPerCpu(PerCpuHashMap<u64, u64>, Vec<u64>),
}

impl AnyMap {
    /// A map of `which` holding every key with the value 0.
    fn prefilled(which: Impl, keys: &[u64]) -> AnyMap {
        match which {
            Impl::Egpu => {
                let map = HashMap::create(KEYS as u32, Placement::Process).expect("egpu map");
                keys.iter().for_each(|k| map.insert(k, &0).expect("room for every key"));
                AnyMap::Egpu(map)
            }
            Impl::MutexStd => {
                let mut map = StdHashMap::with_capacity(KEYS);
                keys.iter().for_each(|&k| {
                    map.insert(k, 0);
                });
                AnyMap::MutexStd(Mutex::new(map))
            }
            Impl::Dash => {
                let map = DashMap::with_capacity(KEYS);
                keys.iter().for_each(|&k| {
                    map.insert(k, 0);
                });
                AnyMap::Dash(map)
            }
            Impl::EgpuPerCpu => {
                let map = PerCpuHashMap::create(KEYS as u32, Shards::PER_CPU, Placement::Process)
                    .expect("egpu map");
                // Every key in every CPU's shard, as a warmed-up tracer would have.
                let anywhere = affinity();
                for cpu in cpus() {
                    pin(Some(cpu), &anywhere);
                    keys.iter().for_each(|k| map.insert(k, &0).expect("room for every key"));
                }
                pin(None, &anywhere);
                AnyMap::EgpuPerCpu(map, keys.to_vec())
            }
        }
    }

    /// Adds 1 to the value of each key of `keys`, in order.
    #[inline(never)]
    fn bump_all(&self, keys: impl Iterator<Item = u64>) {
        match self {
            AnyMap::Egpu(map) => {
                for k in keys {
                    black_box(map.fetch_add(&k, 1).expect("the key is present"));
                }
            }
            AnyMap::MutexStd(map) => {
                for k in keys {
                    *map.lock().unwrap().entry(k).or_insert(0) += 1;
                }
            }
            AnyMap::Dash(map) => {
                for k in keys {
                    *map.entry(k).or_insert(0) += 1;
                }
            }
            AnyMap::EgpuPerCpu(map, _) => {
                for k in keys {
                    black_box(map.fetch_add(&k, 1).expect("room for the key"));
                }
            }
        }
    }

    /// The sum of the values: the number of updates, once a run is over.
    fn total(&self) -> u64 {
        match self {
            AnyMap::Egpu(map) => map.iter().map(|(_, v)| v).sum(),
            AnyMap::MutexStd(map) => map.lock().unwrap().values().sum(),
            AnyMap::Dash(map) => map.iter().map(|e| *e.value()).sum(),
            AnyMap::EgpuPerCpu(map, keys) => keys.iter().map(|k| map.sum(k).unwrap_or(0)).sum(),
        }
    }
}

/// Updates per second of `threads` threads on a fresh pre-filled map of `which`. Thread `t`
/// runs on the `t`-th CPU this process may use (round robin), so that two threads really run
/// at once rather than taking turns on one CPU when the scheduler so decides.
fn updates_per_second(which: Impl, threads: usize, keys: &[u64], sequence: &[u64]) -> f64 {
    let map = AnyMap::prefilled(which, keys);
    let barrier = Barrier::new(threads + 1);
    let (cpus, anywhere) = (cpus(), affinity());
    let started = std::thread::scope(|s| {
        for t in 0..threads {
            let (map, barrier, anywhere) = (&map, &barrier, &anywhere);
            let cpu = cpus[t % cpus.len()];
            // Each thread walks the sequence from its own point, so that the threads mostly
            // touch different keys at a time, as independent probes would.
            let start = t * SEQUENCE / threads.max(1) + t * 7919;
            s.spawn(move || {
                pin(Some(cpu), anywhere);
                let keys = (0..UPDATES_PER_THREAD).map(|i| sequence[(start + i) % SEQUENCE]);
                barrier.wait();
                map.bump_all(keys);
            });
        }
        barrier.wait();
        // The scope joins the threads before it returns: the time includes all of their work.
        Instant::now()
    });
    let elapsed = started.elapsed();
    let updates = (threads * UPDATES_PER_THREAD) as u64;
    assert_eq!(map.total(), updates, "{} lost updates", which.name());
    updates as f64 / elapsed.as_secs_f64()
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 { xs[n / 2] } else { (xs[n / 2 - 1] + xs[n / 2]) / 2.0 }
}

fn spread(xs: &[f64]) -> (f64, f64) {
    let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (min, max)
}

/// Figures of the update benchmark: medians by implementation and thread count.
struct Updates {
    /// `[thread count index][implementation index]`: every round's figure.
    rounds: [[Vec<f64>; 4]; 2],
}

impl Updates {
    fn median(&self, which: Impl, threads: usize) -> f64 {
        let i = Impl::ALL.iter().position(|&w| w == which).unwrap();
        median(self.rounds[threads - 1][i].clone())
    }
}

fn bench_updates() -> Updates {
    let (keys, sequence) = key_sequence();
    let mut rounds: [[Vec<f64>; 4]; 2] = Default::default();
    // One untimed round first: page faults, thread creation, frequency ramp-up.
    for which in Impl::ALL {
        updates_per_second(which, 2, &keys, &sequence);
    }
    for _ in 0..UPDATE_ROUNDS {
        for threads in [1, 2] {
            for (i, which) in Impl::ALL.into_iter().enumerate() {
                let rate = updates_per_second(which, threads, &keys, &sequence);
                rounds[threads - 1][i].push(rate);
            }
        }
    }
    let updates = Updates { rounds };
    println!(
        "hash-map updates ({KEYS} keys, pre-filled; {UPDATE_ROUNDS} rounds of {} updates per \
         thread; median [min, max])",
        UPDATES_PER_THREAD
    );
    for threads in [1, 2] {
        for (i, which) in Impl::ALL.into_iter().enumerate() {
            let (min, max) = spread(&updates.rounds[threads - 1][i]);
            let m = updates.median(which, threads);
            println!(
                "  {threads} thread{}  {:<20} {:>7.2} M updates/s  ({:>6.1} ns/update/thread)  \
                 [{:.2}, {:.2}]",
                if threads == 1 { " " } else { "s" },
                which.name(),
                m / 1e6,
                threads as f64 * 1e9 / m,
                min / 1e6,
                max / 1e6,
            );
        }
    }
    updates
}

// ---------------------------------------------------------------------------------------------
// Cross-process reads.

/// The child's commands, one byte each on its stdin.
const CMD_GET: u8 = b'g';
const CMD_READ: u8 = b'r';
const CMD_QUIT: u8 = b'q';
const CMD_PIN: u8 = b'p';

/// The child: opens the shared map `name` and answers the parent's commands until told to quit.
///
/// * `g`: answers with its own counter's current value, 8 bytes (the pipe variant: the child
///   owns this counter and bumps it as it goes).
/// * `r` + 4 bytes of milliseconds: reads the shared counter for that long and answers with
///   four `u64`s: reads, nanoseconds, how often the value changed, how often it went backwards.
/// * `p` + 4 bytes: runs on that CPU only; answers with one byte.
fn child(name: &str) {
    let map: HashMap<u64, u64> = HashMap::open_shared(name).expect("open the parent's map");
    let anywhere = affinity();
    let mut stdin = std::io::stdin().lock();
    let mut stdout = std::io::stdout().lock();
    let mut counter = 0u64;
    let mut cmd = [0u8; 1];
    while stdin.read_exact(&mut cmd).is_ok() {
        match cmd[0] {
            CMD_GET => {
                counter += 1;
                stdout.write_all(&counter.to_le_bytes()).expect("answer");
            }
            CMD_READ => {
                let mut ms = [0u8; 4];
                stdin.read_exact(&mut ms).expect("duration");
                let window = Duration::from_millis(u32::from_le_bytes(ms).into());
                let (reads, ns, changes, backwards) = read_for(&map, window);
                for x in [reads, ns, changes, backwards] {
                    stdout.write_all(&x.to_le_bytes()).expect("answer");
                }
            }
            CMD_PIN => {
                let mut cpu = [0u8; 4];
                stdin.read_exact(&mut cpu).expect("cpu");
                pin(Some(u32::from_le_bytes(cpu) as usize), &anywhere);
                stdout.write_all(&[CMD_PIN]).expect("answer");
            }
            CMD_QUIT => return,
            other => panic!("unknown command {other}"),
        }
        stdout.flush().expect("answer");
    }
}

/// Reads `COUNTER_KEY` from `map` for `window`: (reads, nanoseconds, changes, backwards).
#[inline(never)]
fn read_for(map: &HashMap<u64, u64>, window: Duration) -> (u64, u64, u64, u64) {
    let start = Instant::now();
    let (mut reads, mut changes, mut backwards) = (0u64, 0u64, 0u64);
    let mut last = map.get(&COUNTER_KEY).expect("the counter exists");
    loop {
        for _ in 0..1024 {
            let v = black_box(map.get(black_box(&COUNTER_KEY))).expect("the counter exists");
            if v != last {
                changes += 1;
                backwards += u64::from(v < last);
                last = v;
            }
        }
        reads += 1024;
        let elapsed = start.elapsed();
        if elapsed >= window {
            return (reads, elapsed.as_nanos() as u64, changes, backwards);
        }
    }
}

/// This process's side of the cross-process benchmark.
struct Peer {
    child: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
}

impl Peer {
    fn spawn(name: &str) -> Peer {
        let exe = std::env::current_exe().expect("this binary");
        let mut child = Command::new(exe)
            .args(["--child", name])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn the child");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        Peer { child, stdin, stdout }
    }

    fn get(&mut self) -> u64 {
        let mut answer = [0u8; 8];
        self.stdin.write_all(&[CMD_GET]).expect("ask the child");
        self.stdout.read_exact(&mut answer).expect("the child's answer");
        u64::from_le_bytes(answer)
    }

    /// ns per pipe round trip, over `PROCESS_WINDOW`.
    fn pipe_round_trip_ns(&mut self) -> f64 {
        for _ in 0..200 {
            black_box(self.get());
        }
        let start = Instant::now();
        let mut trips = 0u64;
        let mut last = 0;
        while start.elapsed() < PROCESS_WINDOW {
            for _ in 0..16 {
                let v = self.get();
                assert!(v > last, "the child's counter goes up");
                last = v;
            }
            trips += 16;
        }
        start.elapsed().as_nanos() as f64 / trips as f64
    }

    /// ns per shared-map read in the child, over `PROCESS_WINDOW`, and how often it saw the
    /// value change; with `busy`, a thread of this process updates the counter all the while.
    fn shared_read_ns(&mut self, map: &HashMap<u64, u64>, busy: bool) -> (f64, u64) {
        let stop = AtomicBool::new(false);
        let (reads, ns, changes, backwards) = std::thread::scope(|s| {
            if busy {
                s.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..64 {
                            map.fetch_add(&COUNTER_KEY, 1).expect("the counter exists");
                        }
                    }
                });
            }
            let ms = PROCESS_WINDOW.as_millis() as u32;
            let mut request = vec![CMD_READ];
            request.extend_from_slice(&ms.to_le_bytes());
            self.stdin.write_all(&request).expect("ask the child");
            let mut answer = [0u8; 32];
            self.stdout.read_exact(&mut answer).expect("the child's answer");
            stop.store(true, Ordering::Relaxed);
            let word = |i: usize| u64::from_le_bytes(answer[i * 8..i * 8 + 8].try_into().unwrap());
            (word(0), word(1), word(2), word(3))
        });
        assert_eq!(backwards, 0, "the child saw the counter go backwards");
        (ns as f64 / reads as f64, changes)
    }

    /// Makes the child run on `cpu` only.
    fn place(&mut self, cpu: usize) {
        let mut request = vec![CMD_PIN];
        request.extend_from_slice(&(cpu as u32).to_le_bytes());
        self.stdin.write_all(&request).expect("ask the child");
        self.stdout.read_exact(&mut [0u8; 1]).expect("the child's answer");
    }

    fn quit(mut self) {
        self.stdin.write_all(&[CMD_QUIT]).expect("tell the child to quit");
        let status = self.child.wait().expect("the child");
        assert!(status.success(), "the child failed: {status}");
    }
}

/// Figures of the cross-process benchmark (medians, ns).
struct CrossProcess {
    shared_busy_ns: f64,
    shared_idle_ns: f64,
    pipe_ns: f64,
    pipe_one_cpu_ns: f64,
}

fn bench_cross_process() -> CrossProcess {
    let name = format!("egpu-map-bench-{}", std::process::id());
    let map: HashMap<u64, u64> =
        HashMap::create(16, Placement::Shared(name.clone().into())).expect("shared map");
    map.insert(&COUNTER_KEY, &0).expect("room");
    // Where each side runs is chosen, not left to the scheduler, which otherwise moves a pipe's
    // two ends onto one CPU or apart from run to run: this process (and its updating thread)
    // on one CPU; the child on another, or on the same one for the last variant.
    let (anywhere, cpus) = (affinity(), cpus());
    let (mine, other) = (cpus[0], cpus.get(1).copied().unwrap_or(cpus[0]));
    pin(Some(mine), &anywhere);
    let mut peer = Peer::spawn(&name);
    let (mut busy, mut idle, mut pipe) = (Vec::new(), Vec::new(), Vec::new());
    let mut pipe_one_cpu = Vec::new();
    let mut busy_changes = Vec::new();
    // A first untimed round: the child's start-up, page faults.
    peer.place(other);
    peer.shared_read_ns(&map, true);
    peer.pipe_round_trip_ns();
    for _ in 0..PROCESS_ROUNDS {
        peer.place(other);
        let (ns, changes) = peer.shared_read_ns(&map, true);
        busy.push(ns);
        busy_changes.push(changes as f64);
        idle.push(peer.shared_read_ns(&map, false).0);
        pipe.push(peer.pipe_round_trip_ns());
        peer.place(mine);
        pipe_one_cpu.push(peer.pipe_round_trip_ns());
    }
    peer.quit();
    pin(None, &anywhere);
    let figures = CrossProcess {
        shared_busy_ns: median(busy.clone()),
        shared_idle_ns: median(idle.clone()),
        pipe_ns: median(pipe.clone()),
        pipe_one_cpu_ns: median(pipe_one_cpu.clone()),
    };
    println!(
        "a second process obtains a counter's current value ({PROCESS_ROUNDS} rounds of {} ms; \
         median [min, max]; this process on CPU {mine}, the child on CPU {other} unless said)",
        PROCESS_WINDOW.as_millis()
    );
    let line = |what: &str, m: f64, xs: &[f64]| {
        let (min, max) = spread(xs);
        println!("  {what:<58} {m:>9.1} ns  ({:>8.2} M/s)  [{min:.1}, {max:.1}]", 1e3 / m);
    };
    line("shared egpu map, read in the child, parent updating it", figures.shared_busy_ns, &busy);
    line("shared egpu map, read in the child, parent idle", figures.shared_idle_ns, &idle);
    line("pipe round trip (request byte down, 8-byte value up)", figures.pipe_ns, &pipe);
    line(
        &format!("pipe round trip, both processes on CPU {mine}"),
        figures.pipe_one_cpu_ns,
        &pipe_one_cpu,
    );
    println!(
        "  (with the parent updating, the child saw the value change {:.0} times per round, \
         median)",
        median(busy_changes)
    );
    figures
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let [_, flag, name] = args.as_slice()
        && flag == "--child"
    {
        child(name);
        return;
    }
    if cfg!(debug_assertions) {
        println!("(a debug build: run with --release for meaningful figures)");
    }
    let start = Instant::now();
    let updates = bench_updates();
    println!();
    let cross = bench_cross_process();
    println!();
    for threads in [1, 2] {
        let egpu = updates.median(Impl::Egpu, threads);
        println!(
            "ratio hash-update-{threads}-thread{} vs mutex-std-hashmap: {:.2}",
            if threads == 1 { "" } else { "s" },
            egpu / updates.median(Impl::MutexStd, threads)
        );
    }
    println!(
        "ratio hash-update-1-thread vs dashmap: {:.2}",
        updates.median(Impl::Egpu, 1) / updates.median(Impl::Dash, 1)
    );
    println!(
        "ratio cross-process-read (parent idle) vs pipe: {:.2}",
        cross.pipe_ns / cross.shared_idle_ns
    );
    println!(
        "ratio cross-process-read vs pipe on one CPU: {:.2}",
        cross.pipe_one_cpu_ns / cross.shared_busy_ns
    );
    println!("(ran {:.1} s)", start.elapsed().as_secs_f64());
    println!(
        "ratio hash-update-2-threads vs dashmap: {:.2}",
        updates.median(Impl::Egpu, 2) / updates.median(Impl::Dash, 2)
    );
    println!("ratio cross-process-read vs pipe: {:.2}", cross.pipe_ns / cross.shared_busy_ns);
}
