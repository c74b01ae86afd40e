//! Watching a tracer's maps live from another process: what a tracer embedding egpu does.
//!
//! The **writer** plays the tracer. It creates its maps in POSIX shared memory, under names that
//! start with a prefix of its own, `egpu-live-<pid>`, and updates them from two threads as its
//! probes would on every kernel launch:
//!
//! * `<prefix>.counts`, a `HashMap<u64, u64>`: launches per kernel id;
//! * `<prefix>.events`, a `PerCpuArray<u64>`: launches and threads launched, one shard per CPU;
//! * `<prefix>.launches`, a `RingBuf<Launch>`: one fixed-size record per launch;
//! * `<prefix>.status`, an `Array<u64>`, created last: running or done, and the writer's pid.
//!
//! The **reader** is any other process of the same user. It opens the maps by name (egpu checks
//! each map's kind and key and value sizes against its header, so a reader built with other
//! types is refused), becomes the consumer of the ring, and prints the maps every 200 ms until
//! the writer is done; then it prints what it read in all, which must be what the writer wrote.
//! The writer removes the shared-memory names when it exits, also on Ctrl-C.
//!
//! ```text
//! cargo run -p egpu-maps --example live_maps                  # a writer and the reader it starts
//! cargo run -p egpu-maps --example live_maps -- demo [SECS]   # the same, for SECS (2 s)
//! cargo run -p egpu-maps --example live_maps -- write [SECS]  # a writer, until Ctrl-C or SECS
//! cargo run -p egpu-maps --example live_maps -- read PREFIX [SECS]  # a reader, in another terminal
//! ```

use std::error::Error;
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytemuck::{Pod, Zeroable};
use egpu_maps::{Array, HashMap, MapError, PerCpuArray, Placement, RingBuf, Shards};
// SplitMix64, the workspace tests' generator, for made-up launches.
use egpu_test_support::splitmix64;

/// One record of the ring: a kernel launch.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
struct Launch {
    /// The kernel's id.
    kernel: u64,
    /// The writer thread that saw it, and its launch number there: `thread << 48 | n`.
    seq: u64,
    /// Threads launched (grid size times block size).
    threads: u64,
    /// How long the launch took, in nanoseconds (made up).
    duration_ns: u64,
}

/// The kernels the writer pretends to trace: id, name, weight.
const KERNELS: [(u64, &str, u64); 6] = [
    (0x7a3f_0001, "gemm_f16", 8),
    (0x7a3f_0002, "softmax", 4),
    (0x7a3f_0003, "layernorm", 4),
    (0x7a3f_0004, "attention_fwd", 2),
    (0x7a3f_0005, "all_reduce", 1),
    (0x7a3f_0006, "embedding", 1),
];

/// Indices of `<prefix>.events`.
const EV_LAUNCHES: u32 = 0;
const EV_THREADS: u32 = 1;
/// Indices of `<prefix>.status`.
const ST_STATE: u32 = 0;
const ST_PID: u32 = 1;
/// Values of `status[ST_STATE]`.
const RUNNING: u64 = 1;
const DONE: u64 = 2;

/// Writer threads.
const WRITERS: u64 = 2;
/// Launches a writer thread makes per millisecond.
const LAUNCHES_PER_MS: u64 = 20;
/// Records the ring holds.
const RING_RECORDS: u32 = 4096;
/// How often the reader prints.
const PRINT_EVERY: Duration = Duration::from_millis(200);

/// Set by Ctrl-C (SIGINT) or SIGTERM.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Makes Ctrl-C and SIGTERM stop the process in order (the writer removes its maps' names).
fn stop_on_signals() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        let handler: extern "C" fn(libc::c_int) = on_signal;
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe, and has the
        // signature `signal` expects.
        unsafe { libc::signal(signal, handler as libc::sighandler_t) };
    }
}

/// Whether process `pid` exists.
fn alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    // SAFETY: signal 0 delivers nothing; it only checks that the process exists.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

fn kernel_name(id: u64) -> String {
    KERNELS.iter().find(|k| k.0 == id).map_or_else(|| format!("{id:#x}"), |k| k.1.to_owned())
}

/// The maps of one writer, as either side sees them.
struct Maps {
    counts: HashMap<u64, u64>,
    events: PerCpuArray<u64>,
    launches: RingBuf<Launch>,
    status: Array<u64>,
}

fn name(prefix: &str, map: &str) -> String {
    format!("{prefix}.{map}")
}

impl Maps {
    /// Creates the maps in shared memory, `status` last: a reader that finds it finds them all.
    fn create(prefix: &str) -> Result<Maps, MapError> {
        let shared = |map: &str| Placement::Shared(name(prefix, map).into());
        let counts = HashMap::create(64, shared("counts"))?;
        let events = PerCpuArray::create(2, Shards::PER_CPU, shared("events"))?;
        let launches = RingBuf::create(RING_RECORDS, Shards::ONE, shared("launches"))?;
        let status = Array::create(2, shared("status"))?;
        status.set(ST_PID, &u64::from(std::process::id()))?;
        status.word::<u64>(ST_STATE, 0)?.store(RUNNING);
        Ok(Maps { counts, events, launches, status })
    }

    /// Opens a writer's maps, waiting up to `patience` for them to appear.
    fn open(prefix: &str, patience: Duration) -> Result<Maps, MapError> {
        let start = Instant::now();
        let mut said = false;
        let status = loop {
            let e = match Array::open_shared(&name(prefix, "status")) {
                Ok(status) => break status,
                Err(e) => e,
            };
            // Not there yet, or being created: its size or its header not written yet.
            let wait = match &e {
                MapError::Io { source, .. } => source.kind() == std::io::ErrorKind::NotFound,
                MapError::NotReady { .. } => true,
                _ => false,
            };
            if !wait || start.elapsed() >= patience || STOP.load(Ordering::SeqCst) {
                return Err(e);
            }
            if !said && start.elapsed() >= Duration::from_millis(500) {
                println!("reader: waiting for a writer to create {prefix}.*");
                said = true;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Ok(Maps {
            counts: HashMap::open_shared(&name(prefix, "counts"))?,
            events: PerCpuArray::open_shared(&name(prefix, "events"))?,
            launches: RingBuf::open_shared(&name(prefix, "launches"))?,
            status,
        })
    }

    fn state(&self) -> Result<u64, MapError> {
        // A sequentially consistent load: once it reads DONE, every update the writer made
        // before storing DONE is visible.
        Ok(self.status.word::<u64>(ST_STATE, 0)?.load())
    }
}

/// What a side counted, printed as its last line: `<side> total: launches=… …`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Totals {
    /// Launches counted in `counts`.
    launches: u64,
    /// Launches counted in `events`.
    events: u64,
    /// Threads counted in `events`.
    threads: u64,
    /// Records written to (read from) the ring.
    records: u64,
    /// Records the ring dropped because it was full.
    dropped: u64,
}

impl Totals {
    fn line(&self, side: &str) -> String {
        format!(
            "{side} total: launches={} events={} threads={} records={} dropped={}",
            self.launches, self.events, self.threads, self.records, self.dropped
        )
    }
}

/// One writer thread: launches until `STOP`, as a tracer's probes would record them.
fn write_launches(maps: &Maps, thread: u64) -> Result<Totals, MapError> {
    let mut rng = 0x5eed_0000 + thread;
    let mut totals = Totals::default();
    let mut n = 0u64;
    while !STOP.load(Ordering::SeqCst) {
        for _ in 0..LAUNCHES_PER_MS {
            let kernel = pick_kernel(splitmix64(&mut rng));
            let threads = (1 + splitmix64(&mut rng) % 1024) * 128;
            maps.counts.fetch_add(&kernel.0, 1)?;
            maps.events.fetch_add(EV_LAUNCHES, 1)?;
            maps.events.fetch_add(EV_THREADS, threads)?;
            let launch = Launch {
                kernel: kernel.0,
                seq: thread << 48 | n,
                threads,
                duration_ns: 1000 + splitmix64(&mut rng) % 50_000,
            };
            match maps.launches.output(&launch) {
                Ok(()) => totals.records += 1,
                Err(MapError::RingFull) => totals.dropped += 1,
                Err(e) => return Err(e),
            }
            totals.launches += 1;
            totals.events += 1;
            totals.threads += threads;
            n += 1;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(totals)
}

/// The kernel of a launch, by weight, for a random number.
fn pick_kernel(random: u64) -> &'static (u64, &'static str, u64) {
    let weights: u64 = KERNELS.iter().map(|k| k.2).sum();
    let mut pick = random % weights;
    for kernel in &KERNELS {
        if pick < kernel.2 {
            return kernel;
        }
        pick -= kernel.2;
    }
    unreachable!("the pick is below the sum of the weights")
}

/// The writer: creates the maps, updates them until `STOP` or `duration`, marks them done. With
/// `reader`, it first starts a reader process of its own and waits for it at the end.
fn write(duration: Option<Duration>, reader: bool) -> Result<ExitCode, Box<dyn Error>> {
    let prefix = format!("egpu-live-{}", std::process::id());
    let maps = Maps::create(&prefix)?;
    println!("writer: maps {prefix}.{{counts,events,launches,status}} in /dev/shm");
    let mut child = if reader {
        let exe = std::env::current_exe()?;
        Some(Command::new(exe).args(["read", &prefix]).spawn()?)
    } else {
        println!(
            "writer: watch them with `cargo run -p egpu-maps --example live_maps -- read \
             {prefix}`; {}",
            match duration {
                Some(d) => format!("running for {:.1} s (or until Ctrl-C)", d.as_secs_f64()),
                None => "running until Ctrl-C".to_owned(),
            }
        );
        None
    };
    let start = Instant::now();
    let totals = std::thread::scope(|s| {
        let maps = &maps;
        let threads: Vec<_> =
            (0..WRITERS).map(|t| s.spawn(move || write_launches(maps, t))).collect::<Vec<_>>();
        // Until Ctrl-C, the end of `duration`, or a writer thread's error.
        while !STOP.load(Ordering::SeqCst)
            && duration.is_none_or(|d| start.elapsed() < d)
            && !threads.iter().any(|t| t.is_finished())
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        STOP.store(true, Ordering::SeqCst);
        threads.into_iter().try_fold(Totals::default(), |sum, t| {
            let t = t.join().expect("a writer thread panicked")?;
            Ok::<_, MapError>(Totals {
                launches: sum.launches + t.launches,
                events: sum.events + t.events,
                threads: sum.threads + t.threads,
                records: sum.records + t.records,
                dropped: sum.dropped + t.dropped,
            })
        })
    })?;
    maps.status.word::<u64>(ST_STATE, 0)?.store(DONE);
    let mut code = ExitCode::SUCCESS;
    if let Some(child) = &mut child {
        let status = child.wait()?;
        if !status.success() {
            eprintln!("writer: the reader failed: {status}");
            code = ExitCode::FAILURE;
        }
    }
    println!(
        "writer: {:.1} s, {} launches, {} records dropped by the full ring",
        start.elapsed().as_secs_f64(),
        totals.launches,
        totals.dropped
    );
    println!("{}", totals.line("writer"));
    // Dropping `maps` removes the names; a reader that has them open keeps reading its mapping.
    Ok(code)
}

/// What the reader has taken from the ring so far.
#[derive(Default)]
struct FromRing {
    records: u64,
    /// Per kernel id: launches and threads seen in records.
    by_kernel: std::collections::BTreeMap<u64, (u64, u64)>,
    /// Per writer thread: the last launch number seen, to check that each thread's records come
    /// in order.
    last_seq: std::collections::BTreeMap<u64, u64>,
    out_of_order: u64,
}

impl FromRing {
    fn take(&mut self, launch: &Launch) {
        self.records += 1;
        let k = self.by_kernel.entry(launch.kernel).or_default();
        k.0 += 1;
        k.1 += launch.threads;
        let (thread, n) = (launch.seq >> 48, launch.seq & ((1 << 48) - 1));
        if let Some(last) = self.last_seq.insert(thread, n)
            && n <= last
        {
            self.out_of_order += 1;
        }
    }
}

/// Prints the maps as they are now.
fn print_maps(maps: &Maps, ring: &FromRing, since: Instant) -> Result<Totals, MapError> {
    let mut counts: Vec<(u64, u64)> = maps.counts.iter().collect();
    counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let launches = maps.events.get(EV_LAUNCHES)?;
    let totals = Totals {
        launches: counts.iter().map(|c| c.1).sum(),
        events: launches.sum(),
        threads: maps.events.sum(EV_THREADS)?,
        records: ring.records,
        dropped: maps.launches.drops(),
    };
    println!(
        "[{:>5.2} s] {} launches of {} kernels; events per CPU {:?} (sum {}); {:.2} G threads",
        since.elapsed().as_secs_f64(),
        totals.launches,
        counts.len(),
        launches.cpu,
        totals.events,
        totals.threads as f64 / 1e9,
    );
    println!("  {:<16} {:>9} {:>14} {:>16}", "kernel", "launches", "ring records", "ring threads");
    for (id, n) in &counts {
        let (records, threads) = ring.by_kernel.get(id).copied().unwrap_or_default();
        println!("  {:<16} {n:>9} {records:>14} {threads:>16}", kernel_name(*id));
    }
    println!(
        "  ring: {} records read, {} pending, {} dropped (full ring){}",
        ring.records,
        maps.launches.pending(),
        totals.dropped,
        if ring.out_of_order > 0 {
            format!(", {} OUT OF ORDER", ring.out_of_order)
        } else {
            "".into()
        }
    );
    Ok(totals)
}

/// The reader: opens the maps of the writer `prefix` and prints them until it is done (or gone,
/// or `duration` has passed, or Ctrl-C).
fn read(prefix: &str, duration: Option<Duration>) -> Result<ExitCode, Box<dyn Error>> {
    let patience = Duration::from_secs(10).min(duration.unwrap_or(Duration::MAX));
    let maps = Maps::open(prefix, patience)?;
    let writer = u32::try_from(maps.status.get(ST_PID)?)?;
    let start = Instant::now();
    println!("reader: pid {} reads the maps of writer {writer} ({prefix}.*)", std::process::id());
    // The header says what a map holds: opened with other types, it is refused.
    if let Err(e) = HashMap::<u32, u64>::open_shared(&name(prefix, "counts")) {
        println!("reader: (opened as a HashMap<u32, u64>, {prefix}.counts is refused: {e})");
    }
    let mut consumer = match maps.launches.consumer() {
        Ok(consumer) => Some(consumer),
        Err(MapError::ConsumerBusy { pid }) => {
            println!("reader: process {pid} consumes the ring already; this reader skips it");
            None
        }
        Err(e) => return Err(e.into()),
    };
    let mut ring = FromRing::default();
    let mut printed = Instant::now();
    let why = loop {
        // Read the state first: once it is DONE, the drain below gets every record.
        let done = maps.state()? == DONE;
        if let Some(consumer) = &mut consumer {
            consumer.drain().for_each(|launch| ring.take(&launch));
        }
        if done {
            break "the writer is done";
        }
        if !alive(writer) {
            break "the writer is gone without saying it is done";
        }
        if STOP.load(Ordering::SeqCst) {
            break "interrupted";
        }
        if duration.is_some_and(|d| start.elapsed() >= d) {
            break "time is up";
        }
        if printed.elapsed() >= PRINT_EVERY {
            print_maps(&maps, &ring, start)?;
            printed = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    println!("reader: {why}; the maps in the end:");
    let totals = print_maps(&maps, &ring, start)?;
    println!("{}", totals.line("reader"));
    let writer_lost = why == "the writer is gone without saying it is done";
    Ok(if writer_lost || ring.out_of_order > 0 { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

fn seconds(arg: Option<&String>) -> Result<Option<Duration>, Box<dyn Error>> {
    match arg {
        None => Ok(None),
        Some(s) => {
            let secs: f64 = s.parse().map_err(|_| format!("not a number of seconds: `{s}`"))?;
            Ok(Some(Duration::try_from_secs_f64(secs)?))
        }
    }
}

fn run(args: &[String]) -> Result<ExitCode, Box<dyn Error>> {
    stop_on_signals();
    match args {
        [] => write(Some(Duration::from_secs(2)), true),
        [mode, rest @ ..] if mode == "demo" && rest.len() <= 1 => {
            write(Some(seconds(rest.first())?.unwrap_or(Duration::from_secs(2))), true)
        }
        [mode, rest @ ..] if mode == "write" && rest.len() <= 1 => {
            write(seconds(rest.first())?, false)
        }
        [mode, prefix, rest @ ..] if mode == "read" && rest.len() <= 1 => {
            read(prefix, seconds(rest.first())?)
        }
        _ => Err("usage: live_maps [demo [SECS] | write [SECS] | read PREFIX [SECS]]".into()),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(code) => code,
        Err(e) => {
            let mut message = format!("live_maps: {e}");
            let mut source = e.source();
            while let Some(cause) = source {
                message += &format!(": {cause}");
                source = cause.source();
            }
            eprintln!("{message}");
            ExitCode::FAILURE
        }
    }
}
