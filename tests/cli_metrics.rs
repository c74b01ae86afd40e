//! `egpu run --metrics` for short jobs (issue 18, item 9): egpu's own series are served from the
//! first scrape, before any CUDA process appears, and with `--linger` the last values stay served
//! for a while after the command ends, after which egpu exits with the command's status.
//!
//! The series the built-in probes count per device are one per device (issue 29), exact against
//! the stand-in driver with two devices.
//!
//! Every wait here has a generous deadline (30 s): nothing depends on how fast the machine is.

use std::io::{BufRead, Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[expect(dead_code, reason = "this file makes no temporary folders")]
mod cli_support;
use cli_support::{egpu, fails};

/// Builds the stand-in driver and the launcher, and the preloaded library (egpu-preload's tests).
#[path = "../egpu-preload/tests/support/mod.rs"]
mod support;

const PATIENCE: Duration = Duration::from_secs(30);

/// `egpu run --library LIB --metrics 127.0.0.1:0 ARGS -- COMMAND`, its stdin, stdout and stderr
/// piped; returns it, its stderr and the metrics' address (from its first line).
fn start(
    args: &[&str],
    command: &[&std::ffi::OsStr],
) -> (Child, std::io::BufReader<std::process::ChildStderr>, String) {
    let library = support::preload_library();
    let mut child = Command::new(egpu())
        .args(["run".as_ref(), "--library".as_ref(), library.as_os_str()])
        .args(["--metrics", "127.0.0.1:0"])
        .args(args)
        .arg("--")
        .args(command)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("egpu run");
    let (err, address) = cli_support::metrics_address(&mut child);
    (child, err, address)
}

/// The response to `GET /metrics`, head and body, with `accept` as the `Accept` header.
fn scrape(address: &str, accept: Option<&str>) -> String {
    let mut stream = std::net::TcpStream::connect(address).expect("the metrics server");
    stream.set_read_timeout(Some(PATIENCE)).expect("a timeout");
    let accept = accept.map(|a| format!("Accept: {a}\r\n")).unwrap_or_default();
    write!(stream, "GET /metrics HTTP/1.1\r\nHost: {address}\r\n{accept}Connection: close\r\n\r\n")
        .expect("a request");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("a response");
    response
}

/// Scrapes until a response has `line` as one of its lines; returns that response.
#[track_caller]
fn scrape_until(address: &str, line: &str) -> String {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let response = scrape(address, None);
        if response.lines().any(|l| l == line) {
            return response;
        }
        assert!(Instant::now() < deadline, "no {line:?} in\n{response}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn item9_metrics_serve_health_before_any_process() {
    // A command that never calls CUDA, and waits for a line.
    let (mut child, _, address) = start(&[], &["sh".as_ref(), "-c".as_ref(), "read x".as_ref()]);
    let first = scrape(&address, None);
    assert!(first.starts_with("HTTP/1.1 200 OK\r\n"), "{first}");
    assert!(first.contains("text/plain; version=0.0.4"), "{first}");
    for line in [
        &format!("egpu_build_info{{version=\"{}\"}} 1", env!("CARGO_PKG_VERSION")),
        "egpu_processes_seen_total 0",
        "egpu_processes_running 0",
        "egpu_command_running 1",
        "egpu_metrics_scrapes_total 1",
        "# TYPE gpu_cuda_kernel_launch_calls_total counter",
    ] {
        assert!(first.lines().any(|l| l == line), "{line:?} in\n{first}");
    }
    assert!(first.lines().any(|l| l.starts_with("egpu_start_time_seconds ")), "{first}");
    // Asked for OpenMetrics, it is OpenMetrics; the scrapes are counted.
    let open = scrape(&address, Some("application/openmetrics-text;version=1.0.0,*/*;q=0.1"));
    assert!(open.contains("Content-Type: application/openmetrics-text; version=1.0.0"), "{open}");
    assert!(open.contains("\r\n\r\n# HELP ") && open.ends_with("# EOF\n"), "{open}");
    assert!(open.lines().any(|l| l == "egpu_metrics_scrapes_total 2"), "{open}");
    child.stdin.take().expect("its input").write_all(b"go\n").expect("a line");
    assert!(child.wait().expect("egpu run").success());
}

#[test]
fn item9_metrics_linger_after_the_command() {
    let dir = support::build("cli-linger");
    let launcher = dir.join("launcher");
    // The launcher counts 5 launches, says `ready PID`, waits for a line, launches once more
    // and exits; egpu keeps serving for a minute after (this test ends it sooner).
    let (mut child, mut err, address) =
        start(&["--kernel-names", "--linger", "1m"], &[launcher.as_os_str(), "wait".as_ref()]);
    let mut out = std::io::BufReader::new(child.stdout.take().expect("its output"));
    let mut line = String::new();
    out.read_line(&mut line).expect("a line");
    let pid = line.trim().strip_prefix("ready ").expect("ready <pid>").to_string();
    let series = |n| {
        format!(
            "gpu_cuda_kernel_launch_calls_total{{pid=\"{pid}\",cuda_kernel_name=\"_Z5kernAPf\"}} {n}"
        )
    };
    scrape_until(&address, &series(5));
    child.stdin.take().expect("its input").write_all(b"go\n").expect("a line");
    // egpu says that it lingers, how long and until when.
    let mut said = String::new();
    while !said.contains("stay at") {
        said.clear();
        assert_ne!(err.read_line(&mut said).expect("a line"), 0, "egpu said nothing of lingering");
    }
    assert!(said.contains(&format!("stay at http://{address}/metrics for 1m until ")), "{said}");
    assert!(said.contains("exited with 0") && said.trim_end().ends_with('Z'), "{said}");
    // The last values, those of a process that exited, are there; so are egpu's own.
    let last = scrape_until(&address, "egpu_command_running 0");
    for line in [
        &format!(
            "gpu_cuda_kernel_launch_calls_total{{pid=\"{pid}\",cuda_kernel_name=\"_Z5kernBPf\"}} 1"
        ),
        &series(5),
        "egpu_processes_seen_total 1",
        "egpu_processes_running 0",
        "egpu_command_exit_status 0",
    ] {
        assert!(last.lines().any(|l| l == line), "{line:?} in\n{last}");
    }
    assert!(child.try_wait().expect("egpu run").is_none(), "egpu still serves");
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn item9_metrics_linger_then_exit_with_the_commands_status() {
    let library = support::preload_library();
    let out = Command::new(egpu())
        .args(["run".as_ref(), "--library".as_ref(), library.as_os_str()])
        .args(["--metrics", "127.0.0.1:0", "--linger", "1s", "--", "sh", "-c", "exit 3"])
        .output()
        .expect("egpu run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("the command exited with 3; its last metrics stay at"), "{stderr}");
    // Without --metrics there is nothing to linger; bad durations are usage errors.
    fails(&["run", "--linger", "30s", "--", "true"], 2, &["--metrics <ADDRESS>"]);
    for bad in ["soon", "3 parsecs", "99999999999999999999s", "1e30", "400days"] {
        fails(
            &["run", "--metrics", "127.0.0.1:0", "--linger", bad, "--", "true"],
            2,
            &["--linger"],
        );
    }
}

#[test]
fn kernel_times_are_served_as_durations_in_seconds() {
    let dir = support::build("cli-times");
    let launcher = dir.join("launcher");
    // The launcher times kernA 3 times (4 us each on the stand-in's clock), kernB twice, kernC
    // once, synchronises, says `ready PID` and waits for a line.
    let (mut child, _, address) = start(
        &["--kernel-times", "--kernel-names"],
        &[launcher.as_os_str(), "times".as_ref(), "wait".as_ref()],
    );
    let mut out = std::io::BufReader::new(child.stdout.take().expect("its output"));
    let mut line = String::new();
    out.read_line(&mut line).expect("a line");
    let pid = line.trim().strip_prefix("ready ").expect("ready <pid>").to_string();
    let kernel = |k: &str| format!("pid=\"{pid}\",cuda_kernel_name=\"{k}\"");
    let a = format!("gpu_cuda_kernel_duration_seconds_count{{{}}} 3", kernel("_Z5kernAPf"));
    // The launches' times and the synchronisation's reach the metrics apart: the scrape that
    // is checked is one taken once both have (counts only grow, and nothing runs meanwhile).
    scrape_until(&address, &a);
    let synced = format!(
        "gpu_cuda_synchronize_duration_seconds_count{{pid=\"{pid}\",cuda_synchronize_kind=\"Context\"}} 1"
    );
    let response = scrape_until(&address, &synced);
    for line in [
        "# TYPE gpu_cuda_kernel_duration_seconds histogram".to_owned(),
        format!(
            "gpu_cuda_kernel_duration_seconds_bucket{{{},le=\"4.095e-06\"}} 3",
            kernel("_Z5kernAPf")
        ),
        format!(
            "gpu_cuda_kernel_duration_seconds_bucket{{{},le=\"2.047e-06\"}} 0",
            kernel("_Z5kernAPf")
        ),
        format!("gpu_cuda_kernel_duration_seconds_count{{{}}} 2", kernel("_Z5kernBPf")),
        format!(
            "gpu_cuda_kernel_duration_seconds_bucket{{{},le=\"8.191e-06\"}} 2",
            kernel("_Z5kernBPf")
        ),
        format!("gpu_cuda_kernel_duration_seconds_count{{{}}} 1", kernel("kernC")),
        format!(
            "gpu_cuda_synchronize_duration_seconds_count{{pid=\"{pid}\",cuda_synchronize_kind=\"Context\"}} 1"
        ),
    ] {
        assert!(response.lines().any(|l| l == line), "{line:?} in\n{response}");
    }
    // The same launches' GPU time by tag and by call site (none set: `0`), the seconds the
    // durations' sums add up to.
    let tagged = format!("egpu_gpu_launches_tag_total{{pid=\"{pid}\",tag_id=\"0\"}} 6");
    let response = scrape_until(&address, &tagged);
    let value = |prefix: &str| -> f64 {
        let sum = response.lines().filter(|l| l.starts_with(prefix));
        sum.map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()).expect(l)).sum()
    };
    let durations = value("gpu_cuda_kernel_duration_seconds_sum{");
    let by_tag = value("egpu_gpu_time_tag_seconds_total{");
    let by_site = value("egpu_gpu_time_site_seconds_total{");
    assert!(durations > 0.0 && (by_tag - durations).abs() < 1e-12, "{by_tag} {durations}");
    assert!((by_site - durations).abs() < 1e-12, "{by_site} {durations}\n{response}");
    let sites = format!("egpu_gpu_launches_site_total{{pid=\"{pid}\",site_id=\"0\"}} 6");
    assert!(response.lines().any(|l| l == sites), "{sites} in\n{response}");
    println!("gpu time by tag and site as metrics: {by_tag} s, 6 launches, as the durations");
    child.stdin.take().expect("its input").write_all(b"go\n").expect("a line");
    assert!(child.wait().expect("egpu run").success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 29: against the stand-in driver with two devices (`devices.c`: 4 launches and 2
/// allocations of 64 bytes on device 0, 7 launches and 2 allocations on device 1), the
/// `gpu_cuda_*` series counted per device have a series per device, labelled `gpu_index`, with
/// exactly what each device did; the others stay one per process.
#[test]
fn gpu_cuda_series_are_per_device_on_two_devices() {
    let dir = support::build("cli-devices");
    let exe = support::program(&dir, "devices");
    let library = support::preload_library();
    let mut child = Command::new(egpu())
        .args(["run".as_ref(), "--library".as_ref(), library.as_os_str()])
        .args(["--metrics", "127.0.0.1:0", "--"])
        .arg(&exe)
        .arg("wait")
        .env("FAKE_DEVICES", "2")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("egpu run");
    let (_err, address) = cli_support::metrics_address(&mut child);
    let mut out = std::io::BufReader::new(child.stdout.take().expect("its output"));
    let mut line = String::new();
    while !line.starts_with("ready ") {
        line.clear();
        assert_ne!(out.read_line(&mut line).expect("a line"), 0, "the program said no ready");
    }
    let pid = line.trim().strip_prefix("ready ").expect("ready <pid>").to_string();
    let on = |name: &str, device: u32, n: u64| {
        format!("{name}{{pid=\"{pid}\",gpu_index=\"{device}\"}} {n}")
    };
    let want = [
        on("gpu_cuda_kernel_launch_calls_total", 0, 4),
        on("gpu_cuda_kernel_launch_calls_total", 1, 7),
        on("gpu_cuda_memory_allocations_bytes_total", 0, 128),
        on("gpu_cuda_memory_allocations_bytes_total", 1, 128),
        // Nothing per device, nothing anywhere: the process's series.
        format!("gpu_cuda_graph_launch_calls_total{{pid=\"{pid}\"}} 0"),
        format!("gpu_cuda_memset_bytes_total{{pid=\"{pid}\"}} 0"),
        // Not counted per device: the process's series.
        format!("gpu_cuda_kernel_grid_size_count{{pid=\"{pid}\"}} 11"),
    ];
    let response = scrape_until(&address, &want[1]);
    let exact = (0..2)
        .filter(|&d| {
            want.iter()
                .filter(|w| w.contains(&format!("gpu_index=\"{d}\"")))
                .all(|w| response.lines().any(|l| l == w))
        })
        .count();
    println!("gpu_cuda series per device exact: {exact}/2 devices");
    for line in &want {
        assert!(response.lines().any(|l| l == line), "{line:?} in\n{response}");
    }
    // Every launch on one of the two devices: no series of the process's alone for launches.
    let alone = format!("gpu_cuda_kernel_launch_calls_total{{pid=\"{pid}\"}}");
    assert!(!response.contains(&alone), "{response}");
    assert_eq!(exact, 2);
    child.stdin.take().expect("its input").write_all(b"go\n").expect("a line");
    assert!(child.wait().expect("egpu run").success());
    let _ = std::fs::remove_dir_all(&dir);
}
