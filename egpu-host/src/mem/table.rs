//! The table `egpu mem` prints: a line per kernel, most GPU time first.

use std::fmt::Write as _;

use super::record::{Kernel, Recording, Stride};

/// Bytes as a person reads them (`1.50 GB`, decimal units).
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1000.0 && unit + 1 < UNITS.len() {
        v /= 1000.0;
        unit += 1;
    }
    if unit == 0 { format!("{n} B") } else { format!("{v:.2} {}", UNITS[unit]) }
}

/// A kernel's achieved bandwidth, bytes per second, and whether it is exact: every launch
/// whose bytes were counted was timed (graph replays are timed and counted but not launched
/// by the host); otherwise the bytes are scaled to the launches timed, which assumes they are
/// alike.
pub fn bandwidth(k: &Kernel) -> Option<(f64, bool)> {
    let total = k.traffic?.total();
    if k.gpu_ns == 0 {
        return None;
    }
    let exact = k.timed >= k.launches;
    let share = if exact { 1.0 } else { k.timed as f64 / k.launches.max(1) as f64 };
    Some((total as f64 * share / (k.gpu_ns as f64 * 1e-9), exact))
}

/// A kernel's name cut to `width` characters (the end kept: templates' parameters come last
/// but the name first, so the start is kept and the cut marked with `…`).
pub(super) fn cut(name: &str, width: usize) -> String {
    if name.chars().count() <= width {
        return name.to_owned();
    }
    let kept: String = name.chars().take(width - 1).collect();
    format!("{kept}…")
}

/// The table of `recording`.
pub fn render(recording: &Recording) -> String {
    let h = &recording.header;
    let mut text = String::new();
    let peak = h.peak_bytes_per_second;
    let device = if h.device.is_empty() { "no device seen" } else { h.device.as_str() };
    let _ = writeln!(
        text,
        "process {} ({}): {device}, driver {}, peak {}, sets {}",
        h.pid,
        cut(&h.command, 60),
        h.driver,
        if peak > 0.0 { format!("{}/s", bytes(peak as u64)) } else { "unknown".into() },
        h.sets.join(",")
    );
    if !h.devices.is_empty() {
        let each: Vec<String> = h
            .devices
            .iter()
            .map(|d| {
                let uuid = if d.uuid.is_empty() { "-" } else { &d.uuid };
                format!("{} {uuid} {}", d.index, d.name).trim_end().to_owned()
            })
            .collect();
        let _ = writeln!(text, "devices: {}", each.join("; "));
    }
    let _ = writeln!(
        text,
        "{:<40} {:>8} {:>11} {:>11} {:>11} {:>11} {:>12} {:>6} {:>8} {:>9} {:>8}",
        "kernel",
        "launches",
        "GPU time",
        "read",
        "written",
        "atomic",
        "bandwidth",
        "peak",
        "B/access",
        "coalesced",
        "pages"
    );
    for k in &recording.kernels {
        let time = if k.timed > 0 {
            format!("{:.3} ms", k.gpu_ns as f64 / 1e6)
        } else if k.event_launches > 0 {
            format!("{:.3} ms (events)", k.event_ns as f64 / 1e6)
        } else if k.instrumented {
            "-".into()
        } else {
            "(no probes)".into()
        };
        let _ = write!(text, "{:<40} {:>8} {:>11} ", cut(&k.name, 40), k.launches, time);
        match k.traffic {
            Some(t) => {
                let accesses = add([t.loads, t.stores, t.atomics, t.asyncs]);
                let per = if accesses > 0 {
                    format!(
                        "{:.1}",
                        add([t.loaded, t.stored, t.atomic, t.async_bytes]) as f64 / accesses as f64
                    )
                } else {
                    "-".into()
                };
                let (bw, of_peak) = match bandwidth(k) {
                    Some((bw, exact)) => (
                        format!("{}{}/s", if exact { "" } else { "~" }, bytes(bw as u64)),
                        if peak > 0.0 { format!("{:.0}%", 100.0 * bw / peak) } else { "-".into() },
                    ),
                    None => ("-".into(), "-".into()),
                };
                let _ = writeln!(
                    text,
                    "{:>11} {:>11} {:>11} {:>12} {:>6} {:>8} {:>9} {:>8}",
                    bytes(t.read()),
                    bytes(t.written()),
                    bytes(t.atomic),
                    bw,
                    of_peak,
                    per,
                    coalesced(k),
                    pages(k)
                );
            }
            None if k.unselected => {
                let _ = writeln!(text, "{:>11}", "not selected (--kernel)");
            }
            None if !k.instrumented => {
                let _ = writeln!(text, "{:>11}", "not instrumentable");
            }
            None => {
                let _ = writeln!(
                    text,
                    "{:>11} {:>11} {:>11} {:>12} {:>6} {:>8} {:>9} {:>8}",
                    "-",
                    "-",
                    "-",
                    "-",
                    "-",
                    "-",
                    coalesced(k),
                    pages(k)
                );
            }
        }
        // What it moved on each device, where the probes ran on two or more (issue 29).
        for d in &k.devices {
            let t = d.traffic;
            let _ = writeln!(
                text,
                "{:<40} {:>8} {:>11} {:>11} {:>11} {:>11}",
                format!("  on device {}", d.device),
                "",
                "",
                bytes(t.read()),
                bytes(t.written()),
                bytes(t.atomic)
            );
        }
    }
    let timed = add(recording.kernels.iter().map(|k| k.timed));
    let launched = add(recording.kernels.iter().map(|k| k.launches));
    let total = add(recording.kernels.iter().filter_map(|k| k.traffic).map(|t| t.total()));
    let gpu = add(recording.kernels.iter().map(|k| k.gpu_ns));
    let _ = writeln!(
        text,
        "{} kernels, {launched} launches ({timed} timed), {} moved, {:.3} ms of GPU time in kernels timed",
        recording.kernels.len(),
        bytes(total),
        gpu as f64 / 1e6
    );
    if let Some(e) = &h.events {
        let _ = writeln!(text, "{}", events_line(recording, e));
    }
    // The least coalesced sites (the recording keeps them least coalesced first).
    let names: std::collections::BTreeMap<&str, &str> =
        recording.kernels.iter().map(|k| (k.id.as_str(), k.name.as_str())).collect();
    for s in recording.sites.iter().filter(|s| s.requests.efficiency() < 0.99).take(SITES_SHOWN) {
        let kernel = names.get(s.kernel.as_str()).copied().unwrap_or(s.kernel.as_str());
        let at = s.line.map_or(format!("site {}", s.site), |l| format!("PTX line {l}"));
        let stride = s.requests.stride().map_or_else(String::new, |(class, share)| {
            let what = match class {
                Stride::Broadcast => "one address".to_owned(),
                Stride::Unit => "unit stride".to_owned(),
                Stride::Bytes(b) => format!("stride {b:.0} B"),
                Stride::Gather => "gather, no one stride".to_owned(),
            };
            format!(", {what} ({:.0}%)", 100.0 * share)
        });
        let _ = writeln!(
            text,
            "  {} {at}: {:.1} sectors per request, {:.0}% of them needed ({} requests{stride})",
            cut(kernel, 40),
            s.requests.sectors_per_request(),
            100.0 * s.requests.efficiency(),
            s.requests.requests
        );
    }
    // What the maps could not hold.
    for (map, n) in &h.refused {
        let _ = writeln!(text, "  {map} was full: {n} entries refused, their counts left out");
    }
    // Where each kernel's atomics meet most.
    for k in &recording.kernels {
        let Some(top) = k.pages.as_ref().and_then(|p| p.contended.first()) else { continue };
        let _ = writeln!(
            text,
            "  {} contends at {:#x}: {} atomics there",
            cut(&k.name, 40),
            top.address,
            top.count
        );
    }
    // What the probes cost in registers and local memory, as the driver loaded the kernels:
    // where they grew the most first.
    let mut grown: Vec<&super::Kernel> = recording
        .kernels
        .iter()
        .filter(|k| k.instrumented && k.registers > 0)
        .filter(|k| {
            (k.registers > k.machine_registers && k.machine_registers > 0) || k.local_bytes > 0
        })
        .collect();
    grown.sort_by_key(|k| std::cmp::Reverse(k.registers.saturating_sub(k.machine_registers)));
    for k in grown.into_iter().take(SITES_SHOWN) {
        let before = match k.machine_registers {
            0 => String::new(),
            n => format!(" ({n} without probes)"),
        };
        let local = match k.local_bytes {
            0 => String::new(),
            n => format!(", {n} bytes of local memory"),
        };
        let _ = writeln!(
            text,
            "  {}: {} registers per thread{before}{local}",
            cut(&k.name, 40),
            k.registers
        );
    }
    // Bandwidth over time, with the `timeline` set.
    text.push_str(&super::windows::render(recording));
    text.push_str(&super::allocs::render(recording));
    text.push_str(&super::managed::render(recording));
    text
}

/// The sum of `values`, at most `u64::MAX` (a recording's numbers are whatever it says).
fn add(values: impl IntoIterator<Item = u64>) -> u64 {
    values.into_iter().fold(0, u64::saturating_add)
}

/// What the kernel times from CUDA events measured and skipped (`--kernel-times`): the GPU time
/// marked `(events)` in the table is theirs.
fn events_line(recording: &Recording, e: &super::record::EventTiming) -> String {
    let ns = add(recording.kernels.iter().map(|k| k.event_ns));
    let mut line = format!(
        "  (events): GPU time from CUDA events around each launch: {} launches timed, {:.3} ms",
        e.timed,
        ns as f64 / 1e6
    );
    for (n, what) in [
        (e.captured, "not timed in stream captures"),
        (e.pool_full, "not timed with every pair of events in flight"),
        (e.failed, "event calls failed"),
        (e.lost, "lost (unfinished at a teardown or exit)"),
    ] {
        if n > 0 {
            let _ = write!(line, "; {n} {what}");
        }
    }
    line
}

/// The pages a kernel touched, with the `pages` set.
fn pages(k: &Kernel) -> String {
    k.pages.as_ref().map_or("-".into(), |p| p.distinct.to_string())
}

/// Sites listed under the table, least coalesced first.
const SITES_SHOWN: usize = 8;

/// A kernel's coalescing: the fewest sectors its requests could have taken over those they
/// touched, with the `pattern` set.
fn coalesced(k: &Kernel) -> String {
    k.pattern.map_or("-".into(), |p| format!("{:.0}%", 100.0 * p.efficiency()))
}
