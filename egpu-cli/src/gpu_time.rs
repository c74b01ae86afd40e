//! `egpu run --kernel-times --gpu-time-report FILE`: the GPU time of the timed launches per tag
//! and per call site. Each process writes its maps (`egpu::host::gpu_time`), each site with its
//! frames named, to `BASE.<pid>` at its exit (`EGPU_GPU_TIME`, the preloaded library's
//! `attribution::gpu_time`: there the loaded objects are at hand, and its shared objects are
//! removed after); once the command ends, this reads them and writes the report (FILE), the
//! folded stacks (FILE.folded) and their flame graph (FILE.svg, by `inferno`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use egpu::host::gpu_time::OTHER;

/// One process's GPU time as it wrote it.
#[derive(Default)]
struct Process {
    /// Site id, ns, launches, frames (outermost first, `;` between them).
    sites: Vec<(u64, u64, u64, String)>,
    /// Tag id, ns, launches.
    tags: Vec<(u64, u64, u64)>,
}

/// The folder and base of the processes' files for this run (removed when read).
pub(crate) fn base() -> PathBuf {
    std::env::temp_dir().join(format!("egpu-{}-gpu-time", std::process::id()))
}

/// Reads the processes' files under `base` (removing them), then writes the report to `file`,
/// the folded stacks to `file.folded` and the flame graph to `file.svg`; a file that cannot be
/// written is said.
pub(crate) fn write(base: &Path, file: &Path) -> Result<(), String> {
    let processes = read(base);
    let failed = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    std::fs::write(file, report(&processes)).map_err(|e| failed(file, e))?;
    let folded = folded(&processes);
    let folded_path = with_suffix(file, ".folded");
    std::fs::write(&folded_path, &folded).map_err(|e| failed(&folded_path, e))?;
    let svg_path = with_suffix(file, ".svg");
    let mut options = inferno::flamegraph::Options::default();
    options.title = "GPU time by call stack".into();
    options.count_name = "ns".into();
    let mut svg = Vec::new();
    if folded.is_empty() {
        // inferno refuses an empty profile: an empty picture says there was nothing.
        svg.extend_from_slice(
            b"<?xml version=\"1.0\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1200\" \
              height=\"60\"><text x=\"10\" y=\"30\">no GPU time recorded</text></svg>\n",
        );
    } else {
        inferno::flamegraph::from_lines(&mut options, folded.lines(), &mut svg)
            .map_err(|e| failed(&svg_path, e))?;
    }
    std::fs::write(&svg_path, svg).map_err(|e| failed(&svg_path, e))?;
    eprintln!(
        "egpu: GPU time per tag and per call site in {}, by call stack in {} and {}",
        file.display(),
        folded_path.display(),
        svg_path.display()
    );
    Ok(())
}

fn with_suffix(file: &Path, suffix: &str) -> PathBuf {
    let mut path = file.as_os_str().to_owned();
    path.push(suffix);
    PathBuf::from(path)
}

/// The files `BASE.<pid>`, read and removed, by pid.
fn read(base: &Path) -> BTreeMap<u32, Process> {
    let mut all = BTreeMap::new();
    let (Some(folder), Some(stem)) = (base.parent(), base.file_name().and_then(|n| n.to_str()))
    else {
        return all;
    };
    let Ok(entries) = std::fs::read_dir(folder) else { return all };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(stem)?.strip_prefix('.')?.parse::<u32>().ok())
        else {
            continue;
        };
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        let _ = std::fs::remove_file(entry.path());
        all.insert(pid, parse(&text));
    }
    all
}

fn parse(text: &str) -> Process {
    let mut process = Process::default();
    for line in text.lines() {
        let mut words = line.splitn(5, ' ');
        let kind = words.next();
        let mut number = || words.next().and_then(|w| w.parse::<u64>().ok());
        let (Some(id), Some(ns), Some(launches)) = (number(), number(), number()) else {
            continue;
        };
        match kind {
            Some("site") => {
                let frames = words.next().unwrap_or_default().to_string();
                process.sites.push((id, ns, launches, frames));
            }
            Some("tag") => process.tags.push((id, ns, launches)),
            _ => {}
        }
    }
    process
}

fn seconds(ns: u64) -> String {
    format!("{:.9}", ns as f64 / 1e9)
}

/// The report: per process, the GPU time per tag, then per call site (its stack by function,
/// innermost frame first; the site ids whose frames name the same functions counted as one),
/// largest first.
fn report(processes: &BTreeMap<u32, Process>) -> String {
    let mut text =
        String::from("# GPU time of the launches timed by CUDA events (--kernel-times)\n");
    if processes.is_empty() {
        text.push_str("# no process timed a launch\n");
    }
    let id = |id: u64, none: &str| match id {
        0 => none.to_string(),
        OTHER => "other".to_string(),
        id => id.to_string(),
    };
    for (pid, p) in processes {
        let total: u64 = p.tags.iter().map(|t| t.1).sum();
        let launches: u64 = p.tags.iter().map(|t| t.2).sum();
        let _ =
            writeln!(text, "\nprocess {pid}: {} GPU-seconds, {launches} launches", seconds(total));
        let _ = writeln!(text, "{:<22} {:>16} {:>10}", "tag", "GPU-seconds", "launches");
        let mut tags = p.tags.clone();
        tags.sort_by_key(|t| std::cmp::Reverse(t.1));
        for (tag, ns, n) in tags {
            let _ = writeln!(text, "{:<22} {:>16} {n:>10}", id(tag, "none"), seconds(ns));
        }
        // Sites whose frames name the same functions (their addresses differ) are one row.
        let mut stacks: BTreeMap<&str, (u64, u64, usize)> = BTreeMap::new();
        for (_, ns, n, frames) in &p.sites {
            let row = stacks.entry(frames.as_str()).or_default();
            (row.0, row.1, row.2) = (row.0 + ns, row.1 + n, row.2 + 1);
        }
        let mut stacks: Vec<_> = stacks.into_iter().collect();
        stacks.sort_by_key(|s| std::cmp::Reverse(s.1.0));
        let _ = writeln!(
            text,
            "{:<22} {:>16} {:>10} {:>6}  stack",
            "call site", "GPU-seconds", "launches", "sites"
        );
        for (frames, (ns, n, ids)) in stacks {
            let stack: Vec<&str> = frames.split(';').rev().collect();
            let _ = writeln!(
                text,
                "{:<22} {:>16} {n:>10} {ids:>6}  {}",
                stack[0],
                seconds(ns),
                stack.join(" <- ")
            );
        }
    }
    text
}

/// The folded stacks: `FRAME;FRAME;… NS`, outermost first, summed over the processes' sites
/// with the same frames.
fn folded(processes: &BTreeMap<u32, Process>) -> String {
    let mut stacks: BTreeMap<&str, u64> = BTreeMap::new();
    for p in processes.values() {
        for (_, ns, _, frames) in p.sites.iter().filter(|s| s.1 > 0) {
            *stacks.entry(frames.as_str()).or_default() += ns;
        }
    }
    stacks.into_iter().map(|(frames, ns)| format!("{frames} {ns}\n")).collect()
}
