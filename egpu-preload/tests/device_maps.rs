//! The device parts of the user's maps under the preloaded library, without a GPU: the stand-in
//! driver (`tests/fixture/fake_cuda.c`) keeps "device memory" in host memory and runs each
//! launch of an instrumented module as threads that add to the arrays egpu put there, as the
//! device probe of this file's pack would on a GPU, until the program synchronises. The map in
//! shared memory must follow: on the merger's clock while the "kernel" runs, after the program's
//! synchronisation, and exactly at exit.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use egpu::ebpf::KernelCtx;
use egpu::maps::{Array, RawMap, RingBuf};
use support::{build, preload_library};

/// Threads started, counted on the device (element 0).
static COUNTS: Array<u64> = Array::with_len(4);

/// The pack's one probe: what the stand-in driver's writers emulate.
#[egpu::probe(device::kernel_entry)]
fn entered(_ctx: &KernelCtx) {
    COUNTS.fetch_add(0, 1);
}

/// Records of the ring probe: the launch and the writer, then the writer's count of records.
static EVENTS: RingBuf<[u64; 2]> = RingBuf::with_capacity(512);

/// The ring pack's one probe: what the stand-in driver's writers emulate for a ring of records
/// of two `u64`.
#[egpu::probe(device::kernel_entry)]
fn traced(ctx: &KernelCtx) {
    EVENTS.output(&[ctx.kernel_id, 0]);
}

/// A map the device probe only reads (its part mirrors the host's): what the host tells it to
/// add, in the first word of 16-byte values (the stand-in's writers read element 0's first
/// word, with `FAKE_DEVICE_READ=1`).
static SCALE: Array<[u64; 2]> = Array::with_len(1);

/// Adds what the host wrote into `SCALE`: what the stand-in's writers emulate with
/// `FAKE_DEVICE_READ=1`.
#[egpu::probe(device::kernel_entry)]
fn scaled(_ctx: &KernelCtx) {
    if let Ok(s) = SCALE.get(0) {
        COUNTS.fetch_add(0, s[0]);
    }
}

/// Writers per "launch", and adds each makes.
const WRITERS: u64 = 4;
const ADDS: u64 = 20_000;

/// Writes the pack to `dir` and returns its path.
fn pack(dir: &Path) -> PathBuf {
    let mut pack = egpu::pack::Pack::new();
    pack.add(entered::probe()).expect("the probe packs");
    let path = dir.join("counts.pack");
    std::fs::write(&path, pack.to_text()).expect("the pack file");
    path
}

/// The launcher in `merge` mode under the library, with the merger's period and the "kernel"'s
/// length given.
fn start(dir: &Path, merge_ms: &str, kernel_ms: &str) -> (Child, BufReader<ChildStdout>, u32) {
    start_with(dir, &pack(dir), merge_ms, kernel_ms)
}

/// [`start`] with the pack at `pack`.
fn start_with(
    dir: &Path,
    pack: &Path,
    merge_ms: &str,
    kernel_ms: &str,
) -> (Child, BufReader<ChildStdout>, u32) {
    start_env(dir, pack, merge_ms, kernel_ms, &[])
}

/// [`start_with`], with `env` added to the launcher's environment.
fn start_env(
    dir: &Path,
    pack: &Path,
    merge_ms: &str,
    kernel_ms: &str,
    env: &[(&str, &str)],
) -> (Child, BufReader<ChildStdout>, u32) {
    let ptx = dir.join("saxpy.ptx");
    std::fs::write(&ptx, include_str!("../../tests/ptx/saxpy.ptx")).expect("a module file");
    let mut child = Command::new(dir.join("launcher"))
        .args(["merge".as_ref(), ptx.as_os_str()])
        .env("LD_PRELOAD", preload_library())
        .env("LD_LIBRARY_PATH", dir)
        .env("EGPU_PROBES", pack)
        .env("EGPU_SUMMARY", dir.join(format!("summary-{merge_ms}")))
        .env("EGPU_MERGE_MS", merge_ms)
        .env("FAKE_DEVICE_WRITERS", WRITERS.to_string())
        .env("FAKE_DEVICE_ADDS", ADDS.to_string())
        .env("FAKE_KERNEL_MS", kernel_ms)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("running the launcher");
    let mut out = BufReader::new(child.stdout.take().expect("its output"));
    let line = next_line(&mut out);
    let pid =
        line.trim().strip_prefix("launched ").expect("launched <pid>").parse().expect("a pid");
    (child, out, pid)
}

fn next_line(out: &mut BufReader<ChildStdout>) -> String {
    let mut line = String::new();
    out.read_line(&mut line).expect("a line");
    line
}

/// The process's map in shared memory, and its element 0 as it is now.
fn shared(pid: u32) -> (RawMap, impl Fn() -> u64) {
    let raw = RawMap::open_shared(&egpu::host::builtin::user_map_name(pid, "COUNTS"))
        .expect("the map in shared memory");
    let array = Array::<u64>::from_raw(raw.clone()).expect("an array of u64");
    (raw, move || array.get(0).expect("element 0"))
}

/// Waits until `value()` is `want`, for at most `limit`: how long it took.
fn until(value: &impl Fn() -> u64, want: u64, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if value() == want {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    None
}

/// The summary the launcher wrote in `dir` with `EGPU_SUMMARY` naming `summary-TAG`.
fn summary_of(dir: &Path, tag: &str) -> String {
    std::fs::read_dir(dir)
        .expect("the directory")
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().starts_with(&format!("summary-{tag}.")))
        .map(|e| std::fs::read_to_string(e.path()).expect("the summary"))
        .expect("a summary")
}

fn finish(mut child: Child, out: &mut BufReader<ChildStdout>, dir: &Path, merge_ms: &str) {
    child.stdin.as_mut().expect("its input").write_all(b"go\n").expect("a line");
    assert!(child.wait().expect("the launcher").success());
    let _ = out;
    let summary = summary_of(dir, merge_ms);
    // Exactly what the two "launches" did, merged at exit after their end.
    let total = 2 * WRITERS * ADDS;
    assert!(summary.contains(&format!("map COUNTS 0 {total}\n")), "{summary}");
    // One part, its adds spread over per-SM copies (the writers each add to an "SM"'s copy),
    // unless EGPU_SPREAD=0 says none.
    let spread = std::env::var("EGPU_SPREAD").map_or(1, |v| u32::from(v != "0"));
    let parts = format!("device maps contexts 1 parts 1 spread {spread} ");
    assert!(summary.contains(&parts), "{summary}");
    assert!(summary.contains(" failed 0 "), "{summary}");
}

/// With a short period, the map grows while the "kernel" runs, and says how old its device part
/// is; after the synchronisation it holds the kernel's exact count; at exit, both kernels'.
#[test]
fn the_merger_follows_the_device_writers_on_its_clock() {
    let dir = build("merge-clock");
    let (mut child, mut out, pid) = start(&dir, "20", "1500");
    let (raw, value) = shared(pid);
    let one = WRITERS * ADDS;
    let start = Instant::now();
    let mut partial = None;
    while start.elapsed() < Duration::from_secs(10) {
        let v = value();
        if v > 0 && v < one {
            partial = Some(v);
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let partial = partial.expect("a count between 0 and the kernel's, while the kernel runs");
    let age = egpu_age(&raw);
    assert!(age < Duration::from_secs(1), "the device part merged {age:?} ago");
    child.stdin.as_mut().expect("its input").write_all(b"go\n").expect("a line");
    assert_eq!(next_line(&mut out).trim(), "synced");
    let took = until(&value, one, Duration::from_secs(10));
    assert!(took.is_some(), "after the synchronisation: {} of {one}", value());
    eprintln!("seen mid-kernel: {partial} of {one}; exact {took:?} after the synchronisation");
    finish(child, &mut out, &dir, "20");
    let _ = std::fs::remove_dir_all(&dir);
}

/// With the clock as good as stopped, nothing shows while the "kernel" runs, and the count shows
/// soon after the program's synchronisation: the merge the synchronisation asked for.
#[test]
fn a_synchronisation_merges_the_device_parts() {
    let dir = build("merge-sync");
    let (mut child, mut out, pid) = start(&dir, "600000", "300");
    let (_raw, value) = shared(pid);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(value(), 0, "no merge before the synchronisation");
    child.stdin.as_mut().expect("its input").write_all(b"go\n").expect("a line");
    assert_eq!(next_line(&mut out).trim(), "synced");
    let took = until(&value, WRITERS * ADDS, Duration::from_secs(5));
    let took = took.unwrap_or_else(|| panic!("after the synchronisation: {}", value()));
    eprintln!("exact {took:?} after the synchronisation");
    finish(child, &mut out, &dir, "600000");
    let _ = std::fs::remove_dir_all(&dir);
}

/// How long ago the map's device part was last merged.
fn egpu_age(raw: &RawMap) -> Duration {
    let merged = raw.device_merged_ns().expect("a merge happened");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos() as u64;
    Duration::from_nanos(now.saturating_sub(merged))
}

/// Parts per context: a module loaded in two contexts gets a part in each, and the map sums
/// them; a context destroyed is merged before it goes (its work waited for) and forgotten, so a
/// new context under the same handle gets parts of its own, and the merger (every 5 ms) never
/// copies from it while the (slow) destroy runs. Exact at exit: three launches.
#[test]
fn each_context_has_its_parts_and_a_destroyed_one_is_merged_first() {
    let dir = build("merge-contexts");
    let summary = contexts(&dir, None);
    let total = 3 * WRITERS * ADDS;
    assert!(summary.contains(&format!("map COUNTS 0 {total}\n")), "{summary}");
    // Context 1 and the new context 2: the destroyed one's part is gone.
    assert!(summary.contains("device maps contexts 2 parts 2 "), "{summary}");
    assert!(summary.contains(" failed 0 "), "{summary}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The maps' parts are made in a context before a stream capture begins there, so that a module
/// the capture loads (the runtime's lazy loading, at a kernel's first launch) is instrumented.
/// In a context with no parts, a module loaded during the capture is loaded as it came: making
/// them then (allocations, copies) could invalidate the capture.
#[test]
fn parts_are_made_before_captures_and_never_during_one() {
    let dir = build("merge-captured");
    let summary = contexts(&dir, Some("captured"));
    assert!(summary.contains("modules instrumented: 1, not instrumentable: 0\n"), "{summary}");
    assert!(summary.contains("device maps contexts 1 parts 1 "), "{summary}");
    let summary = contexts(&dir, Some("captured-other"));
    let why = "modules instrumented: 0, not instrumentable: 1 (no maps in the context: 1)\n";
    assert!(summary.contains(why), "{summary}");
    assert!(summary.contains("during a stream capture"), "{summary}");
    assert!(summary.contains("device maps contexts 1 parts 1 "), "{summary}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The launcher's `contexts` mode (with `extra`, its variant) under the library: the summary.
fn contexts(dir: &Path, extra: Option<&str>) -> String {
    let ptx = dir.join("saxpy.ptx");
    std::fs::write(&ptx, include_str!("../../tests/ptx/saxpy.ptx")).expect("a module file");
    for old in std::fs::read_dir(dir).expect("the directory").filter_map(Result::ok) {
        if old.file_name().to_string_lossy().starts_with("summary-contexts.") {
            std::fs::remove_file(old.path()).expect("an old summary removed");
        }
    }
    let out = Command::new(dir.join("launcher"))
        .args(["contexts".as_ref(), ptx.as_os_str()])
        .args(extra)
        .env("LD_PRELOAD", preload_library())
        .env("LD_LIBRARY_PATH", dir)
        .env("EGPU_PROBES", pack(dir))
        .env("EGPU_SUMMARY", dir.join("summary-contexts"))
        .env("EGPU_MERGE_MS", "5")
        .env("FAKE_DEVICE_WRITERS", WRITERS.to_string())
        .env("FAKE_DEVICE_ADDS", ADDS.to_string())
        .output()
        .expect("running the launcher");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("contexts done"), "{stdout}");
    summary_of(dir, "contexts")
}

/// A ring written on the "device" while a consumer in another process (this one) reads the
/// ring in shared memory: the records are drained into it while the "kernel" runs (the ring on
/// the device is far smaller than what the writers write, so only the tails written back give
/// them room), each arrives whole and once, each writer's in order, and what did not arrive was
/// counted as dropped, exactly, after the exit's settled merge.
#[test]
fn a_ring_written_on_the_device_is_drained_while_kernels_run() {
    let dir = build("merge-ring");
    let mut pack = egpu::pack::Pack::new();
    pack.add(traced::probe()).expect("the probe packs");
    let path = dir.join("ring.pack");
    std::fs::write(&path, pack.to_text()).expect("the pack file");
    let (mut child, mut out, pid) = start_with(&dir, &path, "5", "1500");
    let name = egpu::host::builtin::user_map_name(pid, "EVENTS");
    let ring = RingBuf::<[u64; 2]>::from_raw(RawMap::open_shared(&name).expect("the ring"))
        .expect("a ring of two u64");
    let mut consumer = ring.consumer().expect("the consumer's role");
    let mut received: Vec<[u64; 2]> = Vec::new();
    let start = Instant::now();
    while received.len() < 2048 && start.elapsed() < Duration::from_secs(10) {
        received.extend(consumer.drain());
        std::thread::sleep(Duration::from_millis(1));
    }
    let mid_kernel = received.len();
    assert!(mid_kernel >= 2048, "more than the device ring holds, while the kernel runs");
    child.stdin.as_mut().expect("its input").write_all(b"go\n").expect("a line");
    assert_eq!(next_line(&mut out).trim(), "synced");
    child.stdin.as_mut().expect("its input").write_all(b"go\n").expect("a line");
    while child.try_wait().expect("the launcher").is_none() {
        received.extend(consumer.drain());
        std::thread::sleep(Duration::from_millis(1));
    }
    received.extend(consumer.drain());
    assert!(child.wait().expect("the launcher").success());
    // Each (launch, writer)'s records in order, each once.
    let mut last = std::collections::HashMap::new();
    for &[writer, count] in &received {
        let launch = writer >> 32;
        assert!((1..=2).contains(&launch) && (1..=WRITERS).contains(&(writer & 0xffff_ffff)));
        if let Some(before) = last.insert(writer, count) {
            assert!(count > before, "writer {writer:#x}: {count} after {before}");
        }
    }
    let per_writer: u64 = (0..ADDS).map(|i| 1 + i % 3).sum();
    let total = 2 * WRITERS * per_writer;
    assert_eq!(received.len() as u64 + ring.drops(), total, "received and dropped: all");
    let summary = summary_of(&dir, "5");
    assert!(summary.contains("device maps contexts 1 parts 1 spread 0 "), "{summary}");
    assert!(summary.contains(" failed 0 "), "{summary}");
    // The ring's line, written after the last merge: what it dropped is final.
    let line = summary.lines().find(|l| l.starts_with("ring EVENTS records of 16 B: pending "));
    let line = line.unwrap_or_else(|| panic!("the ring's line: {summary}"));
    assert!(line.ends_with(&format!(" dropped {}", ring.drops())), "{line}");
    eprintln!(
        "{mid_kernel} records mid-kernel; {} of {total}, {} dropped",
        received.len(),
        ring.drops()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A map the device probes only read is a copy of the host's, refreshed when the host writes it
/// (never merged back): the first launch adds what `SCALE` held when the part was made (0), the
/// second what the host wrote meanwhile (3), seen by the device after the merges that followed.
#[test]
fn a_map_the_device_only_reads_follows_the_host() {
    let dir = build("merge-mirror");
    let mut pack = egpu::pack::Pack::new();
    pack.add(scaled::probe()).expect("the probe packs");
    let path = dir.join("scaled.pack");
    std::fs::write(&path, pack.to_text()).expect("the pack file");
    // The first launch's writers end (reading 0) before the host writes: without that, a
    // writer still running when a merge refreshed the part read 3 (seen once in CI).
    let env = [("FAKE_DEVICE_READ", "1"), ("FAKE_SYNC_FIRST", "1")];
    let (mut child, mut out, pid) = start_env(&dir, &path, "10", "0", &env);
    let name = egpu::host::builtin::user_map_name(pid, "SCALE");
    let scale = Array::<[u64; 2]>::from_raw(RawMap::open_shared(&name).expect("the map"))
        .expect("an array of two u64");
    scale.set(0, &[3, 0]).expect("element 0");
    let written = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos() as u64;
    // Two merges after the write: the second began after it, and refreshes first.
    let (counts, _) = shared(pid);
    let (mut after, mut last) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(20);
    while after < 2 && Instant::now() < deadline {
        let merged = counts.device_merged_ns().unwrap_or(0);
        if merged > written && merged != last {
            (after, last) = (after + 1, merged);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(after, 2, "two merges after the host's write");
    child.stdin.as_mut().expect("its input").write_all(b"go\n").expect("a line");
    assert_eq!(next_line(&mut out).trim(), "synced");
    child.stdin.as_mut().expect("its input").write_all(b"go\n").expect("a line");
    assert!(child.wait().expect("the launcher").success());
    let summary = summary_of(&dir, "10");
    assert!(summary.contains(&format!("map COUNTS 0 {}\n", 3 * WRITERS * ADDS)), "{summary}");
    assert!(summary.contains(" mirrored 1 refreshed 1\n"), "{summary}");
    assert!(summary.contains(" failed 0 "), "{summary}");
}

/// The `allocs` set's table: a device allocation the program makes is in the table's maps, and
/// in their device parts, before the allocation call returns (a kernel launched next searches
/// it), not at the next merge.
#[test]
fn an_allocation_reaches_the_table_s_device_parts_before_the_call_returns() {
    use egpu::host::mem::allocs::{AllocCount, AllocRange};
    let dir = build("merge-allocs");
    let pack = egpu::host::mem::pack(&[egpu::host::mem::Set::Allocs], Default::default())
        .expect("the set's pack");
    let path = dir.join("allocs.pack");
    std::fs::write(&path, pack.to_text()).expect("the pack file");
    // Merges an hour apart: only the allocation's own refresh can copy the table.
    let (mut child, mut out, pid) =
        start_env(&dir, &path, "3600000", "0", &[("FAKE_PRINT_TABLE", "1")]);
    let name = |map: &str| egpu::host::builtin::user_map_name(pid, map);
    let count =
        Array::<AllocCount>::from_raw(RawMap::open_shared(&name("ALLOC_COUNT")).expect("map"))
            .expect("the table's count");
    let ranges =
        Array::<AllocRange>::from_raw(RawMap::open_shared(&name("ALLOC_RANGES")).expect("map"))
            .expect("the table");
    assert_eq!(count.get(0).expect("slot 0").live, 0);
    child.stdin.as_mut().expect("its input").write_all(b"go\n").expect("a line");
    // Its device part, right after the allocation returned, before the launcher's copy and
    // synchronisation wake the merger: the launcher's 64-byte buffer, id 1.
    assert_eq!(next_line(&mut out).trim(), "table 64 1");
    assert_eq!(next_line(&mut out).trim(), "synced");
    // The host's maps: the same.
    assert_eq!(count.get(0).expect("slot 0").live, 1);
    let entry = ranges.get(0).expect("entry 0");
    assert_eq!((entry.end - entry.start, entry.id), (64, 1));
    child.stdin.as_mut().expect("its input").write_all(b"go\n").expect("a line");
    assert!(child.wait().expect("the launcher").success());
    let summary = summary_of(&dir, "3600000");
    // Both maps the probes only read were copied to their parts once, at the allocation.
    assert!(summary.contains(" mirrored 2 refreshed 2\n"), "{summary}");
    assert!(summary.contains(" failed 0 "), "{summary}");
}
