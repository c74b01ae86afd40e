//! Bad input for the PTX reader, the injector and the translator: whatever the text, they return
//! a value or a typed error, never panic; and injecting probes into PTX that ptxas accepts gives
//! PTX that ptxas accepts.
//!
//! - [`mutated_fixtures_never_panic`]: 2000+ seeded mutations of every `tests/ptx/*.ptx` fixture
//!   (bytes deleted, inserted and replaced, among them `{ } ; [ ] @ % .` and multi-byte UTF-8;
//!   truncations; lines duplicated, dropped, wrapped in blocks, guarded; accesses made generic),
//!   each instrumented with probes at every device attach point, some with maps. `inject` must
//!   return `Ok` or an `InjectError`; when `Ok`, the output must read again, hold every piece of
//!   the input in order, and list its sites at lines of the input.
//! - [`injection_keeps_ptxas_valid_mutants_valid`]: of the mutants that ptxas accepts as they
//!   are, a sample of 40 is instrumented, and ptxas must accept every result.
//! - The typed errors: `.address_size 32`, host probes, helpers the GPU lacks, maps without a
//!   binding, bad prefixes, contexts that do not fit.
//!
//! `EGPU_SEED` (decimal or `0x` hex) changes the mutations; the seed is printed, and a case that
//! fails is written to the temporary folder with its number.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use egpu_device::inject::{DeviceProbe, InjectError, Kernels, inject};
use egpu_device::ptx::PtxModule;
use egpu_device::testing::require_ptxas;
use egpu_device::translate::{Context, DeviceMap, Options, TranslateError, translate};
use egpu_ebpf::verifier::{Verified, verify};
use egpu_ebpf::{
    AttachPoint, DeviceEvent, HostEvent, KernelCtx, MapDef, MapKind, MemAccessCtx, Phase, Program,
    assemble,
};
use egpu_maps::layout::Geometry;
use egpu_test_support::{Algorithm, Rng, files_with_extension, seed_from_env, workspace_path};

/// The GPU machine's target (an H200).
const ARCH: &str = "sm_90";

/// Mutants per fixture in the no-panic test (350 for each of the fixtures, 10 today: 3500 cases).
const MUTANTS_PER_FIXTURE: usize = 350;

/// Mutants of the ptxas test that ptxas must accept before and after injection.
const PTXAS_SAMPLE: usize = 40;

// ---------------------------------------------------------------------------------------------
// Fixtures, probes, the generator
// ---------------------------------------------------------------------------------------------

/// Every `tests/ptx/*.ptx`, as (file name, text), sorted by name.
fn fixtures() -> Vec<(String, String)> {
    let dir = workspace_path("tests/ptx");
    let files: Vec<(String, String)> = files_with_extension(&dir, "ptx")
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p:?}: {e}"));
            (p.file_name().unwrap_or_default().to_string_lossy().into_owned(), text)
        })
        .collect();
    assert!(files.len() >= 5, "expected the PTX fixtures in {}", dir.display());
    files
}

/// xorshift64*, seeded from `EGPU_SEED` or `default` (the seed is printed), made odd so that it
/// is never 0.
fn rng_for(test: &str, default: u64) -> Rng {
    Rng::with_algorithm(Algorithm::XorShift64Star, seed_from_env(test, default) | 1)
}

/// Short texts that matter to the reader: its delimiters, and UTF-8 of two, three and four bytes.
const TOKENS: &[&str] = &[
    "{",
    "}",
    ";",
    "[",
    "]",
    "@",
    "%",
    ".",
    "(",
    ")",
    ",",
    ":",
    "\"",
    "/*",
    "*/",
    "//",
    "\n",
    "\t",
    " ",
    "é",
    "→",
    "😀",
    "\u{0}",
    "@!",
    "$",
    "::",
    ".entry",
    ".func",
    ".reg",
    "ld.global",
    "st.global",
    ".v4",
    "+",
    "-",
    "0x",
    "\\",
];

/// Lines that are (nearly) valid PTX, for insertion.
const LINES: &[&str] = &[
    "\tret;",
    "\texit;",
    "\t@%p1 ret;",
    "\tld.global.u32 %r1, [%rd1];",
    "\tld.global.nc.v2.f32 {%f1, %f2}, [%rd1+8];",
    "\tst.global.u32 [%rd1+-4], %r1;",
    "\tld.u64 %rd1, [%rd1+0x10];",
    "\tst.volatile.u32 [%rd1], %r1;",
    "\t{ .reg .b32 %x; }",
    "\t// a comment with { ; } and é",
    "\t/* a comment\n over two lines */",
    "$Lnew:",
    ".visible .entry extra()\n{\n\tret;\n}",
    ".func f_extra()\n{\n\tret;\n}",
    ".extern .func (.param .b32 r) g (.param .b64 a);",
    ".global .align 8 .b8 gvar[16];",
];

/// One mutation of `chars`, which stays valid UTF-8 (it is a list of characters).
fn mutate_once(rng: &mut Rng, chars: &mut Vec<char>) {
    let len = chars.len();
    let at = rng.below(len + 1);
    match rng.below(12) {
        // Delete a few characters.
        0 | 1 => {
            let n = 1 + rng.below(8);
            chars.drain(at.min(len)..(at + n).min(len));
        }
        // Insert a token.
        2 | 3 => {
            let t = rng.pick(TOKENS);
            chars.splice(at..at, t.chars());
        }
        // Replace a character by a token.
        4 | 5 if len > 0 => {
            let at = at.min(len - 1);
            let t = rng.pick(TOKENS);
            chars.splice(at..at + 1, t.chars());
        }
        // Truncate.
        6 => chars.truncate(at),
        // A random byte value as a character (ASCII and Latin-1).
        7 if len > 0 => chars[at.min(len - 1)] = char::from(rng.next_u64() as u8),
        _ => mutate_lines(rng, chars),
    }
}

/// Mutations by line, most of which ptxas may still accept.
fn mutate_lines(rng: &mut Rng, chars: &mut Vec<char>) {
    let text: String = chars.iter().collect();
    let mut lines: Vec<String> = text.split('\n').map(str::to_owned).collect();
    let n = lines.len();
    let i = rng.below(n);
    let instruction = |l: &str| {
        let t = l.trim_start();
        t.ends_with(';') && !t.starts_with('.') && !t.starts_with("//") && !t.starts_with('@')
    };
    match rng.below(10) {
        0 => {
            let l = lines[i].clone();
            lines.insert(i, l);
        }
        1 => {
            lines.remove(i);
        }
        2 => lines.insert(i, rng.pick(LINES).to_owned()),
        3 if instruction(&lines[i]) => lines[i] = format!("\t{{\n{}\n\t}}", lines[i]),
        4 if instruction(&lines[i]) => {
            let guard = rng.pick(&["@%p1 ", "@!%p1 ", "@%p2 "]);
            lines[i] = format!("\t{guard}{}", lines[i].trim_start());
        }
        5 => {
            let from = rng.pick(&["ld.global.", "st.global.", "ld.global.nc.", "ret;"]);
            let to = rng.pick(&["ld.", "st.", "ld.global.", "exit;", "ld.volatile.", ""]);
            lines[i] = lines[i].replacen(from, to, 1);
        }
        6 => {
            let to = rng.pick(&["+8]", "+-8]", "+0x10]", " + 4 ]", "]"]);
            lines[i] = lines[i].replacen(']', to, 1);
        }
        7 => lines[i].push_str(" // {;} é"),
        8 => lines.retain(|l| l.trim() != "ret;"),
        _ => {
            let j = rng.below(n);
            lines.swap(i, j);
        }
    }
    *chars = lines.join("\n").chars().collect();
}

/// `text` mutated one to three times.
fn mutate(rng: &mut Rng, text: &str) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for _ in 0..=rng.below(3) {
        mutate_once(rng, &mut chars);
    }
    chars.into_iter().collect()
}

/// Assembles and verifies `text` for `attach` with `maps`.
fn program(text: &str, maps: Vec<MapDef>, attach: AttachPoint) -> Verified {
    let slots = assemble(text).unwrap_or_else(|e| panic!("assembling {text:?}: {e}"));
    let program = Program::new(slots, maps, attach).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    verify(&program).unwrap_or_else(|e| panic!("verifying {text:?}: {e}"))
}

/// Sums every 4-byte word of a context of `bytes` bytes, after byte, half and signed loads; with
/// a local call that doubles the sum.
fn reader(bytes: usize) -> String {
    let mut text = String::from("ldxb %r0, [%r1+1]\nldxh %r2, [%r1+2]\nadd %r0, %r2\n");
    text.push_str("ldxsw %r2, [%r1+4]\nadd %r0, %r2\nldxdw %r2, [%r1+0]\nadd %r0, %r2\n");
    for off in (0..bytes).step_by(4) {
        text.push_str(&format!("ldxw %r2, [%r1+{off}]\nadd %r0, %r2\n"));
    }
    text.push_str("mov %r1, %r0\ncall local double\nexit\ndouble:\nmov %r0, %r1\nadd %r0, %r1\n");
    text.push_str("exit\n");
    text
}

/// Counts into an `Array` (a 64-bit add, which the injector combines per thread) and a per-SM
/// `PerCpuArray` (a 32-bit add).
const COUNTER: &str = "stw [%r10-4], 0\nlddw %r1, map[0]\nmov %r2, %r10\nadd %r2, -4\ncall 1\n\
                       jeq %r0, 0, +2\nmov %r1, 1\nlock add [%r0+0], %r1\n\
                       stw [%r10-8], 0\nlddw %r1, map[1]\nmov %r2, %r10\nadd %r2, -8\ncall 1\n\
                       jeq %r0, 0, +2\nmov %r1, 4\nlock add32 [%r0+0], %r1\nmov %r0, 0\nexit";

fn counter_maps() -> Vec<MapDef> {
    vec![
        MapDef {
            name: "all".into(),
            kind: MapKind::Array,
            key_size: 4,
            value_size: 8,
            capacity: 1,
        },
        MapDef {
            name: "per_sm".into(),
            kind: MapKind::PerCpuArray,
            key_size: 4,
            value_size: 8,
            capacity: 1,
        },
    ]
}

/// Made-up device addresses for the counter's maps (ptxas only checks the code).
fn counter_bindings() -> Vec<DeviceMap> {
    vec![
        in_gpu_memory(0x7f00_0000_0000, Geometry::new(MapKind::Array, 4, 8, 1, 1, 0)),
        DeviceMap {
            addr: 0x7f00_0010_0000,
            geometry: Geometry::new(MapKind::PerCpuArray, 4, 8, 1, 2, 132).expect("geometry"),
            live: false,
            spread: 0,
            drained: false,
        },
    ]
}

/// The fuzzing probes: a reader at global loads and at kernel entry, a counter (with maps) at
/// global stores and at kernel exit.
fn fuzz_programs() -> Vec<Verified> {
    let device = |e| AttachPoint::Device(e);
    vec![
        program(&reader(size_of::<MemAccessCtx>()), vec![], device(DeviceEvent::GlobalLoad)),
        program(COUNTER, counter_maps(), device(DeviceEvent::GlobalStore)),
        program(&reader(size_of::<KernelCtx>()), vec![], device(DeviceEvent::KernelEntry)),
        program(COUNTER, counter_maps(), device(DeviceEvent::KernelExit)),
    ]
}

fn probes<'a>(programs: &'a [Verified], bindings: &'a [DeviceMap]) -> Vec<DeviceProbe<'a>> {
    programs
        .iter()
        .map(|p| {
            let maps = if p.program().maps().is_empty() { &[][..] } else { bindings };
            DeviceProbe { program: p, kernels: Kernels::All, maps }
        })
        .collect()
}

/// Writes a failing case where it can be found again; returns the path.
fn save(name: &str, text: &str) -> String {
    let path = std::env::temp_dir().join(name);
    match std::fs::write(&path, text) {
        Ok(()) => path.display().to_string(),
        Err(e) => format!("(not saved: {e})"),
    }
}

/// What an injection result must satisfy: the output reads, holds the input's pieces in order,
/// and names sites at lines of the input.
fn check_injection(
    input: &str,
    ptx: &str,
    sites: &[egpu_device::inject::Site],
) -> Result<(), String> {
    let out =
        PtxModule::parse(ptx).map_err(|e| format!("the injected output does not read: {e}"))?;
    let joined: String = (0..out.pieces().len()).map(|i| out.piece_text(i)).collect();
    if joined != ptx {
        return Err("the output's pieces do not give its text back".into());
    }
    let original = PtxModule::parse(input).map_err(|e| format!("input re-read: {e}"))?;
    let mut from = 0;
    for i in 0..original.pieces().len() {
        let piece = original.piece_text(i);
        match ptx[from..].find(piece) {
            Some(at) => from += at + piece.len(),
            None => return Err(format!("piece {i} of the input ({piece:?}) is not in the output")),
        }
    }
    let lines = input.split('\n').count();
    if let Some(s) = sites.iter().find(|s| s.line == 0 || s.line > lines) {
        return Err(format!("site at line {} of a {lines}-line input: {s:?}", s.line));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// (a) No panics
// ---------------------------------------------------------------------------------------------

#[test]
fn mutated_fixtures_never_panic() {
    let programs = fuzz_programs();
    let bindings = counter_bindings();
    let probes = probes(&programs, &bindings);
    let mut rng = rng_for("mutated_fixtures_never_panic", 0x5eed_f00d_b00c);
    let (mut ok, mut refused, mut sites) = (0usize, 0usize, 0usize);
    let mut failures = Vec::new();
    // The panic message goes to stderr as usual; the case is saved for the report.
    for (name, text) in fixtures() {
        for case in 0..MUTANTS_PER_FIXTURE {
            let mutant = mutate(&mut rng, &text);
            let result = catch_unwind(AssertUnwindSafe(|| {
                // The reader on its own, then the injector.
                let _ = PtxModule::parse(&mutant);
                inject(&mutant, &probes)
            }));
            let outcome = match result {
                Err(_) => Err("panicked".to_owned()),
                Ok(Err(_)) => {
                    refused += 1;
                    Ok(())
                }
                Ok(Ok(injection)) => {
                    ok += 1;
                    sites += injection.sites.len();
                    check_injection(&mutant, &injection.ptx, &injection.sites)
                }
            };
            if let Err(why) = outcome {
                let saved = save(&format!("egpu-bad-input-{name}-{case}.ptx"), &mutant);
                failures.push(format!("{name} mutant {case} ({saved}): {why}"));
            }
        }
    }
    println!(
        "{} mutants: {ok} instrumented ({sites} sites), {refused} refused with an error",
        ok + refused + failures.len()
    );
    assert!(ok > 100 && refused > 100, "the mutations should give both outcomes");
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}

/// Byte-level oddities of the reader's own input, directly: every prefix of a fixture with UTF-8
/// in its comments, and lone delimiters.
#[test]
fn every_prefix_reads_or_fails_cleanly() {
    let programs = fuzz_programs();
    let bindings = counter_bindings();
    let probes = probes(&programs, &bindings);
    let text = fixtures()
        .into_iter()
        .find(|(n, _)| n == "odd_layout.ptx")
        .map(|(_, t)| t.replace("// out", "// é→😀 out"))
        .expect("odd_layout.ptx");
    let mut cut = 0;
    for (at, _) in text.char_indices().step_by(7) {
        let prefix = &text[..at];
        if let Ok(injection) = inject(prefix, &probes) {
            check_injection(prefix, &injection.ptx, &injection.sites)
                .unwrap_or_else(|e| panic!("prefix of {at} bytes: {e}"));
        }
        cut += 1;
    }
    for lone in ["{", "}", ";", "[", "]", "@", "%", ".", "\"", "/*", "*/", "é", "@!", ".entry", ""]
    {
        let _ = inject(lone, &probes);
        let _ = PtxModule::parse(lone);
    }
    println!("{cut} prefixes");
}

// ---------------------------------------------------------------------------------------------
// (b) ptxas: valid in, valid out
// ---------------------------------------------------------------------------------------------

#[test]
fn injection_keeps_ptxas_valid_mutants_valid() {
    let Some(ptxas) = require_ptxas() else { return };
    let programs = fuzz_programs();
    let bindings = counter_bindings();
    let probes = probes(&programs, &bindings);
    let mut rng = rng_for("injection_keeps_ptxas_valid_mutants_valid", 0xface_5eed);
    // Gentle mutations (by line), which ptxas accepts often enough; each injected without error.
    let fixtures = fixtures();
    let mut candidates = Vec::new();
    for case in 0..600 {
        let (name, text) = &fixtures[case % fixtures.len()];
        let mut chars: Vec<char> = text.chars().collect();
        for _ in 0..=rng.below(2) {
            mutate_lines(&mut rng, &mut chars);
        }
        let mutant: String = chars.into_iter().collect();
        if mutant != *text {
            candidates.push((format!("{name} mutant {case}"), mutant));
        }
    }
    let next = AtomicUsize::new(0);
    let accepted = AtomicUsize::new(0);
    let tried = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                while accepted.load(Ordering::SeqCst) < PTXAS_SAMPLE {
                    let Some((name, mutant)) = candidates.get(next.fetch_add(1, Ordering::SeqCst))
                    else {
                        break;
                    };
                    tried.fetch_add(1, Ordering::SeqCst);
                    if ptxas.check(mutant, ARCH).is_err() {
                        continue;
                    }
                    accepted.fetch_add(1, Ordering::SeqCst);
                    let why = match inject(mutant, &probes) {
                        Err(e) => format!("inject refused it: {e}"),
                        Ok(injection) => match ptxas.check(&injection.ptx, ARCH) {
                            Ok(_) => continue,
                            Err(e) => {
                                let saved = save(
                                    &format!(
                                        "egpu-bad-input-{}.injected.ptx",
                                        name.replace(' ', "-")
                                    ),
                                    &injection.ptx,
                                );
                                format!("ptxas refused the injected output ({saved}): {e}")
                            }
                        },
                    };
                    let saved =
                        save(&format!("egpu-bad-input-{}.ptx", name.replace(' ', "-")), mutant);
                    let mut f = failures.lock().unwrap_or_else(|e| e.into_inner());
                    f.push(format!("{name} ({saved}): {why}"));
                }
            });
        }
    });
    let accepted = accepted.into_inner();
    println!(
        "ptxas accepted {accepted} of {} mutants tried; each instrumented and checked again",
        tried.into_inner()
    );
    let failures = failures.into_inner().unwrap_or_else(|e| e.into_inner());
    assert!(accepted >= PTXAS_SAMPLE, "only {accepted} mutants were valid PTX");
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n\n"));
}

// ---------------------------------------------------------------------------------------------
// (c) Typed errors
// ---------------------------------------------------------------------------------------------

fn saxpy() -> String {
    fixtures().into_iter().find(|(n, _)| n == "saxpy.ptx").map(|(_, t)| t).expect("saxpy.ptx")
}

fn exit_probe(event: DeviceEvent) -> Verified {
    program("mov %r0, 0\nexit", vec![], AttachPoint::Device(event))
}

#[test]
fn a_32_bit_module_is_refused() {
    let p = exit_probe(DeviceEvent::KernelEntry);
    let probes = [DeviceProbe { program: &p, kernels: Kernels::All, maps: &[] }];
    let ptx = saxpy().replace(".address_size 64", ".address_size 32");
    assert_eq!(inject(&ptx, &probes), Err(InjectError::AddressSize("32".into())));
    let message = inject(&ptx, &probes).expect_err("32-bit").to_string();
    assert!(message.contains("32") && message.contains("64-bit"), "{message}");
}

#[test]
fn a_host_probe_is_refused() {
    let device = exit_probe(DeviceEvent::GlobalLoad);
    let attach = AttachPoint::Host(HostEvent::Launch, Phase::Enter);
    let host = program("mov %r0, 0\nexit", vec![], attach);
    let probes = [
        DeviceProbe { program: &device, kernels: Kernels::All, maps: &[] },
        DeviceProbe { program: &host, kernels: Kernels::All, maps: &[] },
    ];
    assert_eq!(inject(&saxpy(), &probes), Err(InjectError::NotDevice { probe: 1, attach }));
    // A user attach point is not a device event either.
    let user = program("mov %r0, 0\nexit", vec![], AttachPoint::User { ctx_size: 8 });
    let probes = [DeviceProbe { program: &user, kernels: Kernels::Named(&["nothing"]), maps: &[] }];
    assert!(matches!(inject(&saxpy(), &probes), Err(InjectError::NotDevice { probe: 0, .. })));
}

/// `inject` of `program` (with `maps` bound) into saxpy must fail with a `TranslateError`.
fn translate_error(program: &Verified, maps: &[DeviceMap]) -> TranslateError {
    let probes = [DeviceProbe { program, kernels: Kernels::All, maps }];
    match inject(&saxpy(), &probes) {
        Err(InjectError::Translate { probe: 0, error }) => error,
        Ok(injection) => {
            panic!("expected a translation error, got {} sites", injection.sites.len())
        }
        Err(other) => panic!("expected a translation error, got {other:?}"),
    }
}

/// Every helper of the table runs on the GPU today: a ring buffer output and an array update
/// translate to PTX that ptxas accepts. What the GPU cannot do is refused before any kernel runs
/// it: a ring buffer read live from mapped host memory (`DeviceMap::live`) is a `MapUse` error
/// naming the instruction and the map.
#[test]
fn helpers_run_on_the_gpu_and_a_live_ring_is_refused() {
    let ring = MapDef {
        name: "events".into(),
        kind: MapKind::RingBuf,
        key_size: 0,
        value_size: 8,
        capacity: 64,
    };
    let ring_binding = |live| DeviceMap {
        addr: 0x7f00_0000_0000,
        geometry: Geometry::new(MapKind::RingBuf, 0, 8, 64, 1, 0).expect("ring geometry"),
        live,
        spread: 0,
        drained: false,
    };
    // bpf_ringbuf_output into a ring buffer (the call at slot 7).
    let output = program(
        "stdw [%r10-8], 7\nlddw %r1, map[0]\nmov %r2, %r10\nadd %r2, -8\nmov %r3, 8\nmov %r4, 0\n\
         call 130\nmov %r0, 0\nexit",
        vec![ring],
        AttachPoint::Device(DeviceEvent::KernelExit),
    );
    // bpf_map_update_elem on an array (the call at slot 9).
    let update = program(
        "stw [%r10-4], 0\nstdw [%r10-16], 1\nlddw %r1, map[0]\nmov %r2, %r10\nadd %r2, -4\n\
         mov %r3, %r10\nadd %r3, -16\nmov %r4, 0\ncall 2\nmov %r0, 0\nexit",
        counter_maps()[..1].to_vec(),
        AttachPoint::Device(DeviceEvent::GlobalLoad),
    );
    let ptxas = require_ptxas();
    for (program, maps, name) in [
        (&output, vec![ring_binding(false)], "bpf_ringbuf_output"),
        (&update, counter_bindings()[..1].to_vec(), "bpf_map_update_elem"),
    ] {
        let probes = [DeviceProbe { program, kernels: Kernels::All, maps: &maps }];
        let injection = inject(&saxpy(), &probes).unwrap_or_else(|e| panic!("{name}: {e}"));
        if let Some(ptxas) = &ptxas {
            ptxas.check(&injection.ptx, ARCH).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
    let live = [ring_binding(true)];
    let probes = [DeviceProbe { program: &output, kernels: Kernels::All, maps: &live }];
    match inject(&saxpy(), &probes) {
        Err(InjectError::Translate {
            probe: 0,
            error: TranslateError::MapUse { pc, name, why },
        }) => {
            assert_eq!((pc, name.as_str()), (7, "events"));
            assert!(why.contains("read live"), "{why}");
        }
        other => panic!("a live ring must be refused, got {other:?}"),
    }
}

#[test]
fn a_map_without_binding_is_refused() {
    let counter = program(COUNTER, counter_maps(), AttachPoint::Device(DeviceEvent::GlobalStore));
    let error = translate_error(&counter, &[]);
    assert_eq!(error, TranslateError::Map { pc: 1, name: "all".into() });
    // One binding for two maps: the second is missing.
    let error = translate_error(&counter, &counter_bindings()[..1]);
    assert_eq!(error, TranslateError::Map { pc: 10, name: "per_sm".into() });
    assert!(error.to_string().contains("`per_sm` has no device binding"), "{error}");
}

#[test]
fn bad_prefixes_are_refused() {
    let p = exit_probe(DeviceEvent::KernelEntry);
    let context = Context::Kernel { kernel_id: 1 };
    for bad in ["", "1p", "_p", "p-q", "p q", "p.q", "%p", "pé", "p$"] {
        let result = translate(&p, &Options::new(bad, context.clone()));
        assert_eq!(result, Err(TranslateError::Prefix(bad.into())), "prefix {bad:?}");
    }
    for good in ["p", "P9", "p_9_"] {
        assert!(translate(&p, &Options::new(good, context.clone())).is_ok(), "prefix {good:?}");
    }
}

#[test]
fn contexts_that_do_not_fit_are_refused() {
    let access = |is_store| Context::load_store(1, "%rd1".into(), 4, 0, is_store);
    let memory = Context::Memory("%rd1".into());
    let kernel = Context::Kernel { kernel_id: 1 };
    let cases = [
        (DeviceEvent::GlobalLoad, memory.clone(), "memory"),
        (DeviceEvent::KernelEntry, memory.clone(), "memory"),
        (DeviceEvent::GlobalStore, kernel.clone(), "kernel entry/exit"),
        (DeviceEvent::KernelExit, access(false), "memory access"),
    ];
    for (event, context, given) in cases {
        let p = exit_probe(event);
        let result = translate(&p, &Options::new("p", context));
        let attach = AttachPoint::Device(event);
        assert_eq!(result, Err(TranslateError::Context { attach, given }), "{event:?}");
    }
    let user = program("mov %r0, 0\nexit", vec![], AttachPoint::User { ctx_size: 8 });
    for context in [kernel, access(true)] {
        assert!(matches!(
            translate(&user, &Options::new("p", context)),
            Err(TranslateError::Context { .. })
        ));
    }
    assert!(translate(&user, &Options::new("p", memory)).is_ok());
}

// ---------------------------------------------------------------------------------------------
// (d) Bugs this suite found, each the smallest input that showed it; all fixed, and kept as
//     tests so that they stay fixed.
// ---------------------------------------------------------------------------------------------

fn one_probe_injection(
    ptx: &str,
    program: &Verified,
    maps: &[DeviceMap],
) -> egpu_device::inject::Injection {
    let probes = [DeviceProbe { program, kernels: Kernels::All, maps }];
    inject(ptx, &probes).unwrap_or_else(|e| panic!("inject: {e}"))
}

/// `MemAccessCtx::site` is "the access's index among the function's observed accesses": with two
/// `global_load` probes, saxpy's first load is site 0 for both, its second load site 1 (the
/// injector once counted one per probe and access).
#[test]
fn a_site_index_is_the_same_for_every_probe() {
    let a = exit_probe(DeviceEvent::GlobalLoad);
    let b = exit_probe(DeviceEvent::GlobalLoad);
    let probes = [
        DeviceProbe { program: &a, kernels: Kernels::All, maps: &[] },
        DeviceProbe { program: &b, kernels: Kernels::All, maps: &[] },
    ];
    let injection = inject(&saxpy(), &probes).expect("inject");
    let got: Vec<(usize, u32)> = injection.sites.iter().map(|s| (s.line, s.index)).collect();
    assert_eq!(got, [(47, 0), (47, 0), (49, 1), (49, 1)]);
}

/// PTX integer literals: `010` is octal (8; ptxas refuses `08`), `8U` unsigned, `0b1000` binary,
/// `0X8` hexadecimal, all accepted by ptxas in an address, and the injector reads them as ptxas
/// does. (It once read `010` as decimal 10, a probe address 2 bytes off, and skipped the other
/// three silently, as it did for a comment inside the brackets, which `tests/ptx/odd_layout.ptx`
/// has: `[%rd4 /* base */ + 0]`.)
#[test]
fn address_offsets_are_read_as_ptx_reads_them() {
    let p = exit_probe(DeviceEvent::GlobalLoad);
    let mut wrong = Vec::new();
    for offset in ["010", "8U", "0b1000", "0X8", "/* c */ 8", "8"] {
        let ptx = saxpy().replace("[%rd7];", &format!("[%rd7+{offset}];"));
        assert!(ptx.contains(&format!("[%rd7+{offset}]")));
        let injection = one_probe_injection(&ptx, &p, &[]);
        let sites = injection.sites.len();
        let address = injection.ptx.contains(", %rd7, 8;\n");
        if sites != 2 || !address {
            wrong.push(format!("+{offset}: {sites} sites, address rd7+8 computed: {address}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The translation trusts the binding's geometry over the program's map table: a program whose
/// map has 64-byte values, bound to a map of 8-byte values, is translated, and its store at
/// offset 56 of the value would land past the slot (here past the whole map). The GPU has no
/// memory protection, so a binding that disagrees with the map (kind, key and value sizes) is
/// refused; it once was translated.
#[test]
fn a_binding_that_disagrees_with_its_map_is_refused() {
    let map = MapDef {
        name: "wide".into(),
        kind: MapKind::Array,
        key_size: 4,
        value_size: 64,
        capacity: 1,
    };
    let p = program(
        "stw [%r10-4], 0\nlddw %r1, map[0]\nmov %r2, %r10\nadd %r2, -4\ncall 1\njeq %r0, 0, +1\n\
         stdw [%r0+56], 1\nmov %r0, 0\nexit",
        vec![map],
        AttachPoint::Device(DeviceEvent::GlobalLoad),
    );
    let narrow = in_gpu_memory(0x7f00_0000_0000, Geometry::new(MapKind::Array, 4, 8, 1, 1, 0));
    let error = translate_error(&p, &[narrow]);
    assert!(
        matches!(error, TranslateError::MapUse { ref name, .. } if name == "wide"),
        "{error:?}"
    );
}

/// A per-CPU array bound without SM shards is refused, and the error names the map used
/// (`per_sm`; it once named the program's first map, `all`).
#[test]
fn a_per_cpu_map_without_sm_shards_is_named() {
    let p = program(
        "stw [%r10-4], 0\nlddw %r1, map[1]\nmov %r2, %r10\nadd %r2, -4\ncall 1\nmov %r0, 0\nexit",
        counter_maps(),
        AttachPoint::Device(DeviceEvent::KernelEntry),
    );
    let mut bindings = counter_bindings();
    bindings[1].geometry = Geometry::new(MapKind::PerCpuArray, 4, 8, 1, 2, 0).expect("geometry");
    let error = translate_error(&p, &bindings);
    assert!(
        matches!(error, TranslateError::MapUse { ref name, .. } if name == "per_sm"),
        "{error:?}"
    );
}

/// A kernel may end without `ret` (ptxas accepts it; execution ends at the closing brace). Its
/// `kernel_exit` probes and the flush of the adds combined per thread run there too (the injector
/// once instrumented only `ret` and `exit`, and such counts were lost).
#[test]
fn a_kernel_without_ret_still_exits_through_its_probes() {
    let ptx = saxpy().replace("\tret;\n", "");
    assert!(!ptx.contains("ret;"));
    let exit = exit_probe(DeviceEvent::KernelExit);
    let injection = one_probe_injection(&ptx, &exit, &[]);
    assert_eq!(injection.sites.len(), 1, "the kernel_exit probe has no site");
    // The combining flush: with `ret`, one flush at the exit besides one per combining site.
    let count = program(
        "stw [%r10-4], 0\nlddw %r1, map[0]\nmov %r2, %r10\nadd %r2, -4\ncall 1\njeq %r0, 0, +2\n\
         mov %r1, 1\nlock add [%r0+0], %r1\nmov %r0, 0\nexit",
        counter_maps()[..1].to_vec(),
        AttachPoint::Device(DeviceEvent::GlobalLoad),
    );
    let flushes = |ptx: &str| {
        let injection = one_probe_injection(ptx, &count, &counter_bindings()[..1]);
        injection.ptx.matches("red.add.u64 [%egpu_sum_addr]").count()
    };
    assert_eq!(flushes(&ptx), flushes(&saxpy()), "no flush at the end of a kernel without ret");
}

/// Instrumenting an instrumented module (two tools, or one run twice) gives PTX that ptxas
/// accepts: the second injection takes a name stem found nowhere in the module (it once named
/// its local functions `egpu0_f1` again, and declared `%egpu_sum_addr` twice).
#[test]
fn an_instrumented_module_can_be_instrumented_again() {
    let Some(ptxas) = require_ptxas() else { return };
    let count = program(COUNTER, counter_maps(), AttachPoint::Device(DeviceEvent::GlobalLoad));
    let calls = program(
        "mov %r1, 3\ncall local f\nexit\nf:\nmov %r0, %r1\nexit",
        vec![],
        AttachPoint::Device(DeviceEvent::KernelEntry),
    );
    let bindings = counter_bindings();
    let probes = [
        DeviceProbe { program: &count, kernels: Kernels::All, maps: &bindings },
        DeviceProbe { program: &calls, kernels: Kernels::All, maps: &[] },
    ];
    let once = inject(&saxpy(), &probes).expect("inject");
    ptxas.check(&once.ptx, ARCH).expect("once: accepted");
    let twice = inject(&once.ptx, &probes).expect("inject again");
    if let Err(e) = ptxas.check(&twice.ptx, ARCH) {
        panic!("twice: {e}");
    }
}

/// A binding of a map of `geometry` at `addr` in GPU memory, read after the kernel.
fn in_gpu_memory(addr: u64, geometry: Result<Geometry, egpu_maps::MapError>) -> DeviceMap {
    let geometry = geometry.expect("geometry");
    DeviceMap { addr, geometry, live: false, spread: 0, drained: false }
}
