//! The bpf_conformance suite on both CPU engines.
//!
//! Each `.data` file of `../shared/conformance` (or `EGPU_CONFORMANCE_DIR`) holds a program
//! (`-- asm`), optional input memory (`-- mem`) and the expected `r0` (`-- result`) or an expected
//! error (`-- error`). As bpf_conformance's own runner does, `r1` points at the memory and `r2`
//! holds its length. A file the JIT refuses counts as a JIT failure. Every failure must be listed,
//! with its reason, in `tests/conformance-failures.txt`; the test fails on a failure not listed
//! and on a listed failure that now passes.

use std::collections::BTreeMap;
use std::path::PathBuf;

use egpu::ebpf::{AttachPoint, Program, assemble};
use egpu::vm::{Engine, EngineChoice, Vm};

struct Case {
    name: String,
    asm: String,
    mem: Vec<u8>,
    expect: Expect,
}

enum Expect {
    Result(u64),
    Error,
}

/// The `egpu` crate's folder: from the environment when run by `cargo test` or by the GPU
/// bundle's `run.sh` (the binary may run on another machine), else where it was built.
fn manifest_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

fn suite_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("EGPU_CONFORMANCE_DIR") {
        Some(d) => PathBuf::from(d),
        None => manifest_dir().join("../../shared/conformance"),
    };
    if dir.is_dir() {
        return Some(dir);
    }
    let why = format!(
        "the conformance suite is not at {} (set EGPU_CONFORMANCE_DIR to the `tests` folder of \
         github.com/Alan-Jowett/bpf_conformance)",
        dir.display()
    );
    if std::env::var("EGPU_REQUIRE_CONFORMANCE").as_deref() == Ok("1") {
        panic!("{why}; EGPU_REQUIRE_CONFORMANCE=1 is set");
    }
    eprintln!("egpu: skipping conformance: {why}");
    None
}

fn parse(name: &str, text: &str) -> Case {
    let mut sections: BTreeMap<&str, String> = BTreeMap::new();
    let mut current = None;
    for line in text.lines() {
        if let Some(section) = line.strip_prefix("-- ") {
            current = Some(section.trim());
            sections.entry(section.trim()).or_default();
            continue;
        }
        if let Some(s) = current {
            let body = sections.get_mut(s).expect("section exists");
            body.push_str(line);
            body.push('\n');
        }
    }
    let mem = sections
        .get("mem")
        .map(|m| {
            m.split_whitespace()
                .map(|b| {
                    u8::from_str_radix(b, 16).unwrap_or_else(|_| panic!("{name}: bad byte {b}"))
                })
                .collect()
        })
        .unwrap_or_default();
    let expect = match sections.get("result") {
        Some(r) => {
            let r = r.trim();
            let v = match r.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => r.parse(),
            };
            Expect::Result(v.unwrap_or_else(|_| panic!("{name}: bad result {r}")))
        }
        None if sections.contains_key("error") => Expect::Error,
        None => panic!("{name}: no `-- result` or `-- error`"),
    };
    let asm = sections.get("asm").cloned().unwrap_or_else(|| panic!("{name}: no `-- asm`"));
    Case { name: name.to_string(), asm, mem, expect }
}

/// Runs one case on one engine: `Ok` when it behaves as expected, else why not.
fn run(case: &Case, engine: Engine) -> Result<(), String> {
    let source = format!("mov %r2, {}\n{}", case.mem.len(), case.asm);
    let outcome = (|| {
        let slots = assemble(&source).map_err(|e| format!("assembler: {e}"))?;
        let attach = AttachPoint::User { ctx_size: case.mem.len() as u32 };
        let program = Program::new(slots, vec![], attach).map_err(|e| format!("program: {e}"))?;
        let choice = match engine {
            Engine::Jit => EngineChoice::Jit,
            Engine::Interpreter => EngineChoice::Interpreter,
        };
        let mut vm = Vm::with_engine(&program, choice).map_err(|e| format!("load: {e}"))?;
        let mut mem = case.mem.clone();
        vm.run(&mut mem).map_err(|e| format!("run: {e}"))
    })();
    if let Err(e) = &outcome
        && e.starts_with("load: the verifier")
    {
        println!(
            "  verifier refused {} ({}): {e}",
            case.name,
            match case.expect {
                Expect::Result(_) => "expected a result",
                Expect::Error => "expected an error",
            }
        );
    }
    match (&case.expect, outcome) {
        (Expect::Result(want), Ok(got)) if *want == got => Ok(()),
        (Expect::Result(want), Ok(got)) => Err(format!("returned {got:#x}, expected {want:#x}")),
        (Expect::Result(_), Err(e)) => Err(e),
        (Expect::Error, Err(_)) => Ok(()),
        (Expect::Error, Ok(got)) => Err(format!("returned {got:#x}, expected an error")),
    }
}

fn listed_failures() -> BTreeMap<(String, String), String> {
    let path = manifest_dir().join("../tests/conformance-failures.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut parts = l.splitn(3, ' ');
            let engine = parts.next().unwrap_or_default().to_string();
            let file = parts.next().unwrap_or_default().to_string();
            let reason = parts.next().unwrap_or_default().trim().to_string();
            assert!(!reason.is_empty(), "{}: `{l}` gives no reason", path.display());
            ((engine, file), reason)
        })
        .collect()
}

#[test]
fn conformance() {
    let Some(dir) = suite_dir() else { return };
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("readable suite")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "data"))
        .collect();
    files.sort();
    assert!(files.len() >= 300, "only {} files in {}", files.len(), dir.display());
    let cases: Vec<Case> = files
        .iter()
        .map(|p| {
            let name = p.file_name().expect("file name").to_string_lossy().into_owned();
            parse(&name, &std::fs::read_to_string(p).expect("readable file"))
        })
        .collect();

    let listed = listed_failures();
    let mut failed = BTreeMap::new();
    for engine in [Engine::Interpreter, Engine::Jit] {
        let mut passed = 0;
        for case in &cases {
            match run(case, engine) {
                Ok(()) => passed += 1,
                Err(why) => {
                    failed.insert((engine.to_string(), case.name.clone()), why);
                }
            }
        }
        println!("conformance {engine}: {passed}/{}", cases.len());
    }
    for ((engine, file), why) in &failed {
        println!("  failed {engine} {file}: {why}");
    }
    let unlisted: Vec<_> = failed.keys().filter(|k| !listed.contains_key(*k)).collect();
    let fixed: Vec<_> = listed.keys().filter(|k| !failed.contains_key(*k)).collect();
    assert!(
        unlisted.is_empty() && fixed.is_empty(),
        "failures not listed in tests/conformance-failures.txt: {unlisted:?}; \
         listed but now passing (remove them): {fixed:?}"
    );
}
