//! Kernel GPU time from CUDA events (`EGPU_KERNEL_TIMES=1`), against the stand-in driver
//! (`tests/fixture/fake_cuda.c`), whose launches run for as many microseconds as their grids
//! have blocks along x and whose events complete at the program's synchronisations: every launch
//! gets its duration, a launch in a stream capture none, a full pool and failing event calls
//! leave the launches untouched and are counted.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use support::{build, preload_library};

/// What a summary says of the kernel times.
#[derive(Debug, Default)]
struct Times {
    /// Per kernel name: launches timed, nanoseconds, the histogram's buckets (`bits:count`).
    kernels: BTreeMap<String, (u64, u64, String)>,
    /// `timing timed=.. captured=.. full=.. failed=.. lost=..`, by key.
    counts: BTreeMap<String, u64>,
    /// Per kind of synchronisation, the calls timed.
    syncs: BTreeMap<String, u64>,
}

/// Runs the launcher's `times` mode with `env`, under the library; its output and the parent's
/// summary.
fn run_times(test: &str, env: &[(&str, &str)]) -> (String, Times, String) {
    let dir = build(test);
    let out = Command::new(dir.join("launcher"))
        .arg("times")
        .env("LD_PRELOAD", preload_library())
        .env("LD_LIBRARY_PATH", &dir)
        .env("EGPU_SUMMARY", dir.join("summary"))
        .envs(env.iter().copied())
        .output()
        .expect("running the launcher");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let text = summary(&dir);
    let mut times = Times::default();
    for line in text.lines() {
        let words: Vec<&str> = line.split(' ').collect();
        match words.as_slice() {
            ["kernel_time", _id, n, ns, buckets, name @ ..] => {
                let parse = |w: &str| w.parse::<u64>().expect("a number");
                times.kernels.insert(name.join(" "), (parse(n), parse(ns), buckets.to_string()));
            }
            ["timing", counts @ ..] => {
                for c in counts {
                    let (k, v) = c.split_once('=').expect("key=value");
                    times.counts.insert(k.into(), v.parse().expect("a count"));
                }
            }
            ["sync_time", kind, n, _ns] => {
                times.syncs.insert(kind.to_string(), n.parse().expect("a count"));
            }
            _ => {}
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    (stdout, times, text)
}

/// The one summary in `dir`.
fn summary(dir: &Path) -> String {
    for entry in std::fs::read_dir(dir).expect("the directory") {
        let path = entry.expect("an entry").path();
        let name = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
        if name.starts_with("summary.") {
            return std::fs::read_to_string(&path).expect("a summary");
        }
    }
    panic!("no summary in {}", dir.display());
}

fn count(times: &Times, key: &str) -> u64 {
    times.counts.get(key).copied().unwrap_or_else(|| panic!("no {key} in {:?}", times.counts))
}

#[test]
fn every_launch_gets_its_gpu_time_and_captures_none() {
    let (stdout, times, text) = run_times("times", &[("EGPU_KERNEL_TIMES", "1")]);
    // The program ran as without egpu: 3 + 2 + 1 + 1 (captured) + 2 launches reached the
    // driver (cuLaunchKernelEx's own cuLaunchKernel counts once), none recorded an event in the
    // capture; 8 launches timed, two records each, and one record before the launch that failed.
    assert!(
        stdout.contains("times done: driver launches 9, events made ")
            && stdout.contains(", records 17, in capture 0"),
        "{stdout}"
    );
    // Each launch's time is its grid's blocks in microseconds: the buckets hold the launches,
    // 4000 ns in bucket 12, 8000 in 13, 16000 in 14.
    let expected: BTreeMap<String, (u64, u64, String)> = [
        ("_Z5kernAPf", (5, 20_000, "12:5")),
        ("_Z5kernBPf", (2, 16_000, "13:2")),
        ("kernC", (1, 16_000, "14:1")),
    ]
    .map(|(k, (n, ns, b))| (k.to_string(), (n, ns, b.to_string())))
    .into();
    assert_eq!(times.kernels, expected, "{text}");
    assert_eq!(
        (count(&times, "timed"), count(&times, "captured"), count(&times, "full")),
        (8, 1, 0),
        "{text}"
    );
    assert_eq!((count(&times, "failed"), count(&times, "lost")), (0, 0), "{text}");
    // The synchronisation was timed too.
    assert_eq!(times.syncs.get("context"), Some(&1), "{text}");
}

#[test]
fn a_functions_first_launch_is_timed_without_its_loading() {
    // Lazy loading: a function's first launch loads it, 1 ms here, unless it was loaded first.
    let env = [("EGPU_KERNEL_TIMES", "1"), ("FAKE_LAZY_US", "1000")];
    let (stdout, times, text) = run_times("times-lazy", &env);
    // Each of the three functions loaded before its first timed launch, once.
    assert!(stdout.contains(", functions loaded 3"), "{stdout}");
    // So every launch's time is its grid's still, the first's too.
    let ns: BTreeMap<&str, u64> = times.kernels.iter().map(|(k, v)| (k.as_str(), v.1)).collect();
    let expected = [("_Z5kernAPf", 20_000), ("_Z5kernBPf", 16_000), ("kernC", 16_000)].into();
    assert_eq!(ns, expected, "{text}");
    // Without the opt-in nothing loads them ahead: the driver does, at their first launches.
    let (stdout, _, _) = run_times("times-lazy-off", &[("FAKE_LAZY_US", "1000")]);
    assert!(stdout.contains(", functions loaded 0"), "{stdout}");
}

#[test]
fn without_the_opt_in_nothing_is_timed() {
    let (stdout, times, text) = run_times("times-off", &[]);
    assert!(stdout.contains("driver launches 9, events made 0, records 0"), "{stdout}");
    assert!(times.kernels.is_empty() && times.counts.is_empty(), "{text}");
    assert!(times.syncs.is_empty(), "{text}");
}

#[test]
fn a_full_pool_skips_the_launch_and_counts_it() {
    let env = [("EGPU_KERNEL_TIMES", "1"), ("EGPU_KERNEL_TIMES_PAIRS", "1")];
    let (stdout, times, text) = run_times("times-pool", &env);
    // One pair: made once, never more; each launch is timed or counted as skipped. The pair
    // comes back at the first launch after the synchronisation (the failing one), whether
    // egpu's thread or that launch harvests it: kernA's first launch and its fourth are timed,
    // the five before the synchronisation and the last find the pool full.
    assert!(stdout.contains("driver launches 9, events made 2,"), "{stdout}");
    let (timed, full) = (count(&times, "timed"), count(&times, "full"));
    assert_eq!((timed, full), (2, 6), "{text}");
    assert_eq!(count(&times, "captured"), 1, "{text}");
    let launches: u64 = times.kernels.values().map(|k| k.0).sum();
    assert_eq!(launches, timed, "{text}");
}

#[test]
fn failing_event_calls_leave_the_launches_alone() {
    for call in ["create", "record", "query", "elapsed"] {
        let env = [("EGPU_KERNEL_TIMES", "1"), ("FAKE_EVENT_FAIL", call)];
        let (stdout, times, text) = run_times(&format!("times-fail-{call}"), &env);
        assert!(stdout.contains("times done: driver launches 9,"), "{call}: {stdout}");
        assert!(times.kernels.is_empty(), "{call}: {text}");
        // A query that fails at exit, waiting, is a time lost; any other failure is counted as
        // one.
        assert!(count(&times, "failed") + count(&times, "lost") >= 1, "{call}: {text}");
        assert_eq!(count(&times, "timed"), 0, "{call}: {text}");
    }
}
