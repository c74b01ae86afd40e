//! How long the verifier takes: on a 1,000-instruction probe, and on every program of the
//! verifier suite (`tests/verifier/`), reporting the worst. Each figure is the median of several
//! rounds. `cargo bench -p egpu --bench verifier`.
//!
//! Also the suite's Collatz program (`ok_loop_collatz_branchy.s`): a 1,000-iteration `bpf_loop`
//! whose callback branches and updates a map, which is verified in time linear in the body.
//!
//! The 1,000-instruction probe is 111 copies of a block that reads a context field, masks it,
//! branches on it (so every block doubles the paths, which joins must undo), spills to and
//! reloads from a stack slot, and adds into a running total.

use std::time::{Duration, Instant};

use egpu::ebpf::verifier::verify;
use egpu::ebpf::{AttachPoint, HostEvent, MapDef, Phase, Program, assemble};
use egpu_test_support::{files_with_extension, workspace_path};

fn probe_of_1000() -> Program {
    let mut text = String::from("mov %r6, 0\nmov %r7, 0\n");
    for i in 0..111 {
        let field = 40 + 4 * (i % 6);
        let slot = 8 * (i % 32 + 1);
        text.push_str(&format!(
            "ldxw %r2, [%r1+{field}]
             and %r2, 0xff
             jgt %r2, 100, big{i}
             add %r6, %r2
             ja next{i}
             big{i}:
             stxdw [%r10-{slot}], %r2
             ldxdw %r3, [%r10-{slot}]
             add %r7, %r3
             next{i}:
             add %r6, 1\n"
        ));
    }
    text.push_str("mov %r0, %r6\nadd %r0, %r7\nexit\n");
    let slots = assemble(&text).expect("assembles");
    Program::new(slots, vec![], AttachPoint::Host(HostEvent::Launch, Phase::Enter)).expect("valid")
}

/// The suite's programs, with their maps and attach points (the headers `tests/verifier.rs`
/// documents).
fn suite() -> Vec<(String, Program)> {
    files_with_extension(&workspace_path("tests/verifier"), "s")
        .iter()
        .filter_map(|path| {
            let text = std::fs::read_to_string(path).expect("readable");
            let mut attach = AttachPoint::User { ctx_size: 0 };
            let mut maps = Vec::new();
            for line in text.lines() {
                if let Some(a) = line.strip_prefix("# attach:") {
                    attach = a.trim().parse().expect("an attach point");
                } else if let Some(m) = line.strip_prefix("# map:") {
                    maps.push(m.trim().parse::<MapDef>().expect("NAME=KIND:KEY:VALUE:CAPACITY"));
                }
            }
            let name = path.file_stem().expect("a name").to_string_lossy().into_owned();
            let program = Program::new(assemble(&text).ok()?, maps, attach).ok()?;
            Some((name, program))
        })
        .collect()
}

/// Median time of one verification, over `rounds`.
fn time(program: &Program, rounds: usize) -> Duration {
    let mut times: Vec<Duration> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            let _ = std::hint::black_box(verify(std::hint::black_box(program)));
            start.elapsed()
        })
        .collect();
    times.sort();
    times[rounds / 2]
}

fn main() {
    let probe = probe_of_1000();
    let verified = verify(&probe).expect("the 1,000-instruction probe verifies");
    let t = time(&probe, 21);
    println!(
        "verify a {}-instruction probe: {:.1} µs ({} instructions followed)",
        probe.insns().len(),
        t.as_secs_f64() * 1e6,
        verified.insns_processed()
    );
    let suite = suite();
    let (_, collatz) =
        suite.iter().find(|(name, _)| name == "ok_loop_collatz_branchy").expect("in the suite");
    let verified = verify(collatz).expect("the branchy loop verifies");
    let t = time(collatz, 21);
    println!(
        "verify a branchy 1000-iteration bpf_loop: {:.1} µs ({} instructions followed)",
        t.as_secs_f64() * 1e6,
        verified.insns_processed()
    );
    let mut times: Vec<(Duration, &str, String)> = suite
        .iter()
        .map(|(name, p)| {
            let verdict = match verify(p) {
                Ok(v) => format!("accepted, {} instructions followed", v.insns_processed()),
                Err(e) => format!("refused ({})", e.violation),
            };
            let rounds = if verdict.contains("too-complex") { 3 } else { 21 };
            (time(p, rounds), name.as_str(), verdict)
        })
        .collect();
    times.sort();
    let total: Duration = times.iter().map(|t| t.0).sum();
    println!(
        "verify each of the {} suite programs: {:.1} ms in all",
        times.len(),
        total.as_secs_f64() * 1e3
    );
    let accepted =
        times.iter().filter(|t| t.2.starts_with("accepted")).max().expect("some accepted");
    println!(
        "  slowest accepted: {} in {:.1} µs ({})",
        accepted.1,
        accepted.0.as_secs_f64() * 1e6,
        accepted.2
    );
    for (t, name, verdict) in times.iter().rev().take(3) {
        println!("  slowest: {name} in {:.1} ms ({verdict})", t.as_secs_f64() * 1e3);
    }
    let (t, name, _) = times.last().expect("a suite");
    println!("worst case over the suite: {:.1} ms ({name})", t.as_secs_f64() * 1e3);
}
