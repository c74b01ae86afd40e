//! `egpu cxl`: a command run as it is (the baseline) and with part of its GPU memory in an
//! emulated slower tier (`egpu::host::cxl`), every launch timed by CUDA events, then a third
//! time untimed with probes that count each kernel's accesses and those to far memory (counting
//! would change the emulated run's times); then per kernel the two times, the slowdown and the
//! share of far accesses. While the emulated and count runs go, a thread of egpu's finds the
//! command's processes (those with the tier's maps in shared memory), reads the allocations
//! each makes from its `ALLOCS` ring, resolves the policy over them and writes the process's
//! tier, which its preloaded library copies to the GPU at its next merge.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use egpu::host::cxl::{Lookup, Policy, TierMaps, Tracker};

use crate::args::{CxlArgs, OtlpProtocol, RunArgs};
use crate::{Error, failed};

/// `egpu cxl`.
pub(crate) fn cxl_cmd(a: CxlArgs) -> Result<ExitCode, Error> {
    let delay = u64::try_from(a.far_latency.as_nanos()).unwrap_or(u64::MAX);
    let lookup = match &a.bitmap_pages {
        None => Lookup::Ranges,
        Some(text) => Lookup::Bitmap { page_shift: page_shift(text)? },
    };
    // Refused now, with the reason, rather than in each process.
    Tracker::new(a.far.clone(), lookup, delay).map_err(failed)?;
    let dir = std::env::temp_dir().join(format!("egpu-cxl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| failed(format!("{}: {e}", dir.display())))?;
    let _scratch = Scratch(dir.clone());
    let baseline = if a.no_baseline {
        None
    } else {
        eprintln!("egpu: cxl: the baseline run");
        crate::run::run_cmd(run_args(&a, dir.join("baseline"), None))?;
        Some(kernel_times(&dir, "baseline")?)
    };
    let pack_path = dir.join("cxl.pack");
    let pack = match a.bandwidth {
        Some(_) => egpu::host::cxl::pack_capped(),
        None => egpu::host::cxl::pack(),
    };
    write_pack(&pack_path, pack)?;
    let shown = match lookup {
        Lookup::Ranges => "a table of ranges".to_owned(),
        Lookup::Bitmap { page_shift } => format!("a bitmap of {} B pages", 1u64 << page_shift),
    };
    let capped = a.bandwidth.map(|r| format!(", at most {r} bytes/s per SM")).unwrap_or_default();
    eprintln!("egpu: cxl: far {}, {delay} ns away{capped}, found in {shown}", a.far);
    let code = fed_run(&a, run_args(&a, dir.join("emulated"), Some(&pack_path)), lookup, delay)?;
    let shares = if a.no_count || code != ExitCode::SUCCESS {
        None
    } else {
        eprintln!("egpu: cxl: the count run (each kernel's accesses, and those to far memory)");
        let count_path = dir.join("count.pack");
        write_pack(&count_path, egpu::host::cxl::count_pack())?;
        let counted = run_args(&a, dir.join("counted"), Some(&count_path));
        fed_run(&a, counted, lookup, delay)?;
        Some(far_shares(&dir, "counted")?)
    };
    print!("{}", table(baseline.as_ref(), &kernel_times(&dir, "emulated")?, shares.as_ref()));
    Ok(code)
}

/// `pack` written to `path` for the preloaded library.
fn write_pack(
    path: &Path,
    pack: Result<egpu::host::pack::Pack, egpu::host::pack::PackError>,
) -> Result<(), Error> {
    let pack = pack.map_err(failed)?;
    std::fs::write(path, pack.to_text()).map_err(|e| failed(format!("{}: {e}", path.display())))
}

/// Runs `run` while a thread of egpu's writes the tier of each of its processes; then a line
/// per process.
fn fed_run(a: &CxlArgs, run: RunArgs, lookup: Lookup, delay: u64) -> Result<ExitCode, Error> {
    let stop = Arc::new(AtomicBool::new(false));
    let feeder = {
        let (stop, policy, rate) = (stop.clone(), a.far.clone(), a.bandwidth.unwrap_or(0));
        std::thread::spawn(move || feed(&stop, &policy, lookup, delay, rate))
    };
    let code = crate::run::run_cmd(run);
    stop.store(true, Ordering::Relaxed);
    let fed = feeder.join().unwrap_or_default();
    let code = code?;
    for (pid, line) in fed {
        eprintln!("egpu: cxl: process {pid}: {line}");
    }
    Ok(code)
}

/// A folder of egpu's own, removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `--bitmap-pages`: a power of two from 4K to 1G (as policies write numbers:
/// [`egpu::host::cxl::number`]), as its log2.
fn page_shift(text: &str) -> Result<u32, Error> {
    let bytes = egpu::host::cxl::number(text).unwrap_or(0);
    let log = bytes.trailing_zeros();
    if bytes.is_power_of_two() && (12..=30).contains(&log) {
        Ok(log)
    } else {
        Err(failed(format!("--bitmap-pages {text}: a power of two from 4K to 1G")))
    }
}

/// The command under the preloaded library, every launch timed, its summaries at `summary`,
/// with the pack at `probes`. The emulated run bounds each instrumented kernel's registers to
/// keep its blocks per SM (`EGPU_MAXNREG=1`, unless the environment says otherwise): the far
/// tier's probes hold its configuration in registers, and a kernel that then fits fewer
/// blocks per SM slows for that alone (on the H200, `mem_timing.cu`'s grid-stride saxpy with
/// nothing far: 1.52x unbounded, 1.05x bounded).
fn run_args(a: &CxlArgs, summary: PathBuf, probes: Option<&Path>) -> RunArgs {
    let bound = probes.is_some() && std::env::var_os("EGPU_MAXNREG").is_none();
    RunArgs {
        summary: Some(summary),
        library: a.library.clone(),
        probes: probes.map(|p| p.to_string_lossy().into_owned()),
        metrics: None,
        kernel_names: false,
        otlp: None,
        otlp_every: Duration::from_secs(10),
        otlp_protocol: OtlpProtocol::Json,
        linger: None,
        kernel_times: true,
        gpu_time_report: None,
        command: a.command.clone(),
        env: if bound { vec![("EGPU_MAXNREG".into(), "1".into())] } else { Vec::new() },
    }
}

/// Until `stop`: the tier of each process of this one's with the tier's maps, written when it
/// is found and again after each change of its allocations; then a line per process.
fn feed(
    stop: &AtomicBool,
    policy: &Policy,
    lookup: Lookup,
    delay: u64,
    rate: u64,
) -> Vec<(u32, String)> {
    let me = std::process::id();
    let mut fed: BTreeMap<u32, (TierMaps, Tracker, Option<String>)> = BTreeMap::new();
    loop {
        let last = stop.load(Ordering::Relaxed);
        for pid in egpu::host::builtin::processes() {
            if fed.contains_key(&pid) || !crate::metrics::descends_from(pid, me) {
                continue;
            }
            let (Ok(maps), Ok(tracker)) =
                (TierMaps::open(pid), Tracker::new(policy.clone(), lookup, delay))
            else {
                continue;
            };
            let tracker = tracker.with_bandwidth(rate);
            let failed =
                tracker.tier().and_then(|t| t.write_to(&maps)).err().map(|e| e.to_string());
            fed.insert(pid, (maps, tracker, failed));
        }
        for (maps, tracker, failed) in fed.values_mut() {
            let Ok(mut consumer) = maps.allocations().consumer() else { continue };
            if tracker.record(consumer.drain()) {
                let written = tracker.tier().and_then(|t| t.write_to(maps));
                *failed = written.err().map(|e| e.to_string());
            }
        }
        if last {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    fed.into_iter()
        .map(|(pid, (_, tracker, failed))| {
            let tier = tracker.tier().ok();
            let far: u64 = (tracker.allocations().iter())
                .map(|a| tier.as_ref().map_or(0, |t| t.far_bytes(a.addr, a.size)))
                .sum();
            let marked = match tracker.marked().len() {
                0 => String::new(),
                1 => ", 1 range marked".to_owned(),
                n => format!(", {n} ranges marked"),
            };
            let line = format!(
                "{} device allocations, {far} bytes of them far{marked}{}",
                tracker.allocations().len(),
                failed.map(|e| format!("; the tier could not be written: {e}")).unwrap_or_default()
            );
            (pid, line)
        })
        .collect()
}

/// Per kernel name: launches timed and their nanoseconds, from the summaries `run`'s processes
/// wrote (`kernel_time ID LAUNCHES NS BUCKETS NAME` lines).
fn kernel_times(dir: &Path, run: &str) -> Result<BTreeMap<String, (u64, u64)>, Error> {
    let mut times: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for text in summaries(dir, run)? {
        for line in text.lines() {
            let words: Vec<&str> = line.split(' ').collect();
            if let ["kernel_time", _id, n, ns, _buckets, name @ ..] = words.as_slice()
                && let (Ok(n), Ok(ns)) = (n.parse::<u64>(), ns.parse::<u64>())
            {
                let t = times.entry(name.join(" ")).or_default();
                t.0 += n;
                t.1 += ns;
            }
        }
    }
    Ok(times)
}

/// Per kernel name: its accesses in the count run and those to far memory, from the
/// summaries `run`'s processes wrote (`map CXL_ACCESSES NAME N`, `map CXL_FAR NAME N`).
fn far_shares(dir: &Path, run: &str) -> Result<BTreeMap<String, (u64, u64)>, Error> {
    let mut shares: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for text in summaries(dir, run)? {
        for line in text.lines() {
            let words: Vec<&str> = line.split(' ').collect();
            if let ["map", map @ ("CXL_ACCESSES" | "CXL_FAR"), name @ .., n] = words.as_slice()
                && let Ok(n) = n.parse::<u64>()
            {
                let share = shares.entry(name.join(" ")).or_default();
                if *map == "CXL_FAR" {
                    share.1 += n;
                } else {
                    share.0 += n;
                }
            }
        }
    }
    Ok(shares)
}

/// The summaries the processes of `run` wrote into `dir`.
fn summaries(dir: &Path, run: &str) -> Result<Vec<String>, Error> {
    let entries = std::fs::read_dir(dir).map_err(|e| failed(format!("{}: {e}", dir.display())))?;
    Ok(entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(&format!("{run}.")))
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect())
}

/// The table: per kernel of the emulated run, its launches, the mean GPU time per launch of
/// each run and their ratio, and the share of its accesses that went to far memory (from the
/// count run; `-` without one, or for a kernel whose accesses it did not see).
fn table(
    baseline: Option<&BTreeMap<String, (u64, u64)>>,
    emulated: &BTreeMap<String, (u64, u64)>,
    shares: Option<&BTreeMap<String, (u64, u64)>>,
) -> String {
    let mean = |(n, ns): (u64, u64)| if n == 0 { 0.0 } else { ns as f64 / n as f64 / 1e3 };
    let mut out = format!(
        "{:<40} {:>9} {:>14} {:>14} {:>9} {:>12}\n",
        "kernel", "launches", "baseline µs", "emulated µs", "slowdown", "far accesses"
    );
    for (name, &times) in emulated {
        let base = baseline.and_then(|b| b.get(name)).map(|&t| mean(t));
        let (shown, ratio) = match base {
            Some(b) if b > 0.0 => (format!("{b:.3}"), format!("{:.2}×", mean(times) / b)),
            _ => ("-".into(), "-".into()),
        };
        let far = match shares.and_then(|s| s.get(name)) {
            Some(&(all, far)) if all > 0 => format!("{:.1}%", far as f64 * 100.0 / all as f64),
            _ => "-".into(),
        };
        let short: String = name.chars().take(40).collect();
        out.push_str(&format!(
            "{short:<40} {:>9} {shown:>14} {:>14.3} {ratio:>9} {far:>12}\n",
            times.0,
            mean(times)
        ));
    }
    if emulated.is_empty() {
        out.push_str("(no kernel launch was timed: did the command use CUDA?)\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitmap_pages_are_powers_of_two_from_4k_to_1g() {
        assert_eq!(page_shift("64K").ok(), Some(16));
        assert_eq!(page_shift("4096").ok(), Some(12));
        assert_eq!(page_shift("1G").ok(), Some(30));
        for bad in ["", "2K", "3M", "2G", "64Q", "K"] {
            assert!(page_shift(bad).is_err(), "{bad}");
        }
    }

    /// The count run's maps, read from the summaries, give each kernel's share of far
    /// accesses; a kernel the count run did not see, or no count run, gives `-`.
    #[test]
    fn the_table_shows_each_kernels_share_of_far_accesses() {
        let dir = std::env::temp_dir().join(format!("egpu-cxl-shares-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a folder");
        let summary = "kernel_time 0x1 2 4000 - saxpy\nmap CXL_ACCESSES saxpy 300\n\
                       map CXL_FAR saxpy 75\nmap CXL_ACCESSES void k<int> 8\nmap OTHER saxpy 9\n";
        std::fs::write(dir.join("counted.12"), summary).expect("a summary");
        std::fs::write(dir.join("counted.13"), "map CXL_ACCESSES saxpy 100\n").expect("another");
        std::fs::write(dir.join("emulated.12"), "map CXL_FAR saxpy 1000\n").expect("not counted");
        let shares = far_shares(&dir, "counted").expect("read");
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(shares.get("saxpy"), Some(&(400, 75)));
        assert_eq!(shares.get("void k<int>"), Some(&(8, 0)));
        let times: BTreeMap<String, (u64, u64)> =
            [("saxpy".to_owned(), (2, 4000)), ("other".to_owned(), (1, 10))].into();
        let text = table(Some(&times), &times, Some(&shares));
        let row = |k: &str| text.lines().find(|l| l.starts_with(k)).expect(k).to_owned();
        assert!(row("saxpy").ends_with(" 18.8%"), "{text}");
        assert!(row("other").ends_with(" -"), "{text}");
        assert!(table(None, &times, None).lines().nth(1).expect("a row").ends_with(" -"));
    }

    /// `--bandwidth` takes bytes per second with the policies' suffixes, `B/s` or `/s` after.
    #[test]
    fn bandwidth_is_bytes_per_second() {
        use clap::Parser;
        for (text, rate) in [("2G", 2u64 << 30), ("500MB/s", 500 << 20), ("4096/s", 4096)] {
            let cli = crate::args::Cli::try_parse_from(["egpu", "cxl", "--bandwidth", text, "x"])
                .expect("parses");
            let crate::args::Command::Cxl(a) = cli.command else { panic!("not cxl") };
            assert_eq!(a.bandwidth, Some(rate), "{text}");
        }
    }

    /// The emulated run bounds registers to keep blocks per SM; the baseline runs as it is.
    #[test]
    fn the_emulated_run_keeps_each_kernels_blocks_per_sm() {
        use clap::Parser;
        let cli = crate::args::Cli::try_parse_from(["egpu", "cxl", "--far", "all", "--", "prog"])
            .expect("parses");
        let crate::args::Command::Cxl(a) = cli.command else { panic!("not cxl") };
        let bound = ("EGPU_MAXNREG".into(), "1".into());
        let emulated = run_args(&a, "s".into(), Some(Path::new("p")));
        let user_set = std::env::var_os("EGPU_MAXNREG").is_some();
        assert_eq!(emulated.env.contains(&bound), !user_set, "{:?}", emulated.env);
        assert!(run_args(&a, "s".into(), None).env.is_empty());
    }

    #[test]
    fn the_table_gives_each_kernels_times_and_slowdown() {
        let base: BTreeMap<String, (u64, u64)> = [("saxpy".to_owned(), (2, 4000))].into();
        let emulated: BTreeMap<String, (u64, u64)> =
            [("saxpy".to_owned(), (2, 10_000)), ("other".to_owned(), (1, 500))].into();
        let t = table(Some(&base), &emulated, None);
        let saxpy = t.lines().find(|l| l.starts_with("saxpy")).expect("saxpy's line");
        assert!(saxpy.contains("2.000") && saxpy.contains("5.000") && saxpy.contains(" 2.50× "));
        let other = t.lines().find(|l| l.starts_with("other")).expect("other's line");
        assert_eq!(other.split_whitespace().filter(|w| *w == "-").count(), 3, "{other}");
        assert!(table(None, &BTreeMap::new(), None).contains("no kernel launch was timed"));
    }
}
