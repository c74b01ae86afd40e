//! The `live_maps` example run as separate processes: a writer and a reader of its shared maps.
//!
//! `cargo test` builds the examples before it runs the tests; the binary is found next to this
//! test's (`target/<profile>/deps/` → `target/<profile>/examples/`).

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The `live_maps` example's binary, built by `cargo test` alongside this test.
fn live_maps() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary");
    let name = format!("live_maps{}", std::env::consts::EXE_SUFFIX);
    let binary = exe
        .ancestors()
        .skip(1)
        .map(|dir| dir.join("examples").join(&name))
        .find(|path| path.is_file())
        .unwrap_or_else(|| {
            panic!(
                "no examples/{name} above {}: run `cargo test -p egpu-maps`, which builds the \
                 examples, or `cargo build -p egpu-maps --example live_maps` first",
                exe.display()
            )
        });
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/live_maps.rs");
    let modified = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    if let (Some(built), Some(edited)) = (modified(&binary), modified(&source)) {
        assert!(
            built >= edited,
            "{} is older than {}: rebuild it (`cargo test -p egpu-maps` does)",
            binary.display(),
            source.display()
        );
    }
    binary
}

fn spawn(args: &[&str]) -> Child {
    Command::new(live_maps())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start live_maps")
}

/// Waits for `child` for up to 30 s (killing it after that), returning whether it succeeded
/// and everything it printed.
fn finish(mut child: Child, what: &str) -> (bool, String) {
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        stdout.read_to_string(&mut s).map(|_| s)
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        stderr.read_to_string(&mut s).map(|_| s)
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for live_maps") {
            break status;
        }
        if start.elapsed() > Duration::from_secs(30) {
            child.kill().expect("kill live_maps");
            panic!("the {what} ran for 30 s: {:?}", child.wait());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = out.join().unwrap().expect("the output of live_maps");
    let err = err.join().unwrap().expect("the errors of live_maps");
    (status.success(), format!("{out}{err}"))
}

/// The part after `<side> total: ` of the line that starts so.
fn total<'a>(output: &'a str, side: &str) -> &'a str {
    let start = format!("{side} total: ");
    output
        .lines()
        .find_map(|line| line.strip_prefix(&start))
        .unwrap_or_else(|| panic!("no `{start}` line in:\n{output}"))
}

/// The number after `field=` in a totals line.
fn field(totals: &str, field: &str) -> u64 {
    let start = format!("{field}=");
    totals
        .split_whitespace()
        .find_map(|f| f.strip_prefix(&start))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in `{totals}`"))
}

/// Checks that the reader read what the writer wrote, and printed the maps live meanwhile.
fn check(writer: &str, reader: &str) {
    let context = || format!("writer:\n{writer}\nreader:\n{reader}");
    let (wrote, read) = (total(writer, "writer"), total(reader, "reader"));
    assert!(field(wrote, "launches") > 1000, "too few launches: {}", context());
    assert_eq!(wrote, read, "the reader's totals differ from the writer's\n{}", context());
    assert_eq!(
        field(read, "records") + field(read, "dropped"),
        field(wrote, "launches"),
        "records lost\n{}",
        context()
    );
    let snapshots = reader.lines().filter(|l| l.starts_with('[')).count();
    // At least one while the writer ran, and the last one.
    assert!(snapshots >= 2, "the reader printed {snapshots} snapshots\n{}", context());
    assert!(reader.contains("gemm_f16"), "no counts table\n{}", context());
    assert!(
        reader.contains("is refused: the map is a hash map with 8-byte keys"),
        "opening the counts with other types was not refused\n{}",
        context()
    );
}

/// The shared-memory objects of the writer with process id `pid` that still exist.
fn leftovers(pid: u32) -> Vec<String> {
    let prefix = format!("egpu-live-{pid}.");
    std::fs::read_dir("/dev/shm")
        .map(|dir| {
            dir.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

/// A writer for 1 s and a reader started by hand, as two users of a terminal would.
#[test]
fn reader_reads_what_a_timed_writer_wrote() {
    let writer = spawn(&["write", "1"]);
    let pid = writer.id();
    // The reader may well start before the writer has created its maps: it waits for them.
    let reader = spawn(&["read", &format!("egpu-live-{pid}")]);
    let (reader_ok, reader_out) = finish(reader, "reader");
    let (writer_ok, writer_out) = finish(writer, "writer");
    assert!(writer_ok && reader_ok, "failed:\nwriter:\n{writer_out}\nreader:\n{reader_out}");
    check(&writer_out, &reader_out);
    assert_eq!(leftovers(pid), Vec::<String>::new(), "the writer left its maps behind");
}

/// A writer stopped by Ctrl-C (SIGINT) marks its maps done and removes their names.
#[test]
fn writer_stops_cleanly_on_ctrl_c() {
    let mut writer = spawn(&["write"]);
    let pid = writer.id();
    // Wait for the writer to say where its maps are, so that the signal finds its handler set.
    let mut first = String::new();
    BufReader::new(writer.stdout.as_mut().unwrap()).read_line(&mut first).expect("a line");
    assert!(first.contains(&format!("egpu-live-{pid}")), "unexpected first line {first:?}");
    let reader = spawn(&["read", &format!("egpu-live-{pid}")]);
    std::thread::sleep(Duration::from_millis(800));
    // SAFETY: `pid` is the process this test started and has not waited for yet.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGINT) }, 0);
    let (writer_ok, writer_out) = finish(writer, "writer");
    let (reader_ok, reader_out) = finish(reader, "reader");
    assert!(writer_ok && reader_ok, "failed:\nwriter:\n{writer_out}\nreader:\n{reader_out}");
    check(&writer_out, &reader_out);
    assert_eq!(leftovers(pid), Vec::<String>::new(), "the writer left its maps behind");
}

/// The example run with no mode but a duration: the writer starts its own reader.
#[test]
fn demo_writer_starts_its_own_reader() {
    let demo = spawn(&["demo", "1"]);
    let pid = demo.id();
    let (ok, out) = finish(demo, "demo");
    assert!(ok, "failed:\n{out}");
    check(&out, &out);
    assert_eq!(leftovers(pid), Vec::<String>::new(), "the writer left its maps behind");
}
