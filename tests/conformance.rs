//! The bpf_conformance suite on both CPU engines.
//!
//! Each `.data` file of `tests/conformance` (or `EGPU_CONFORMANCE_DIR`) holds a program
//! (`-- asm`), optional input memory (`-- mem`) and the expected `r0` (`-- result`) or an expected
//! error (`-- error`). As bpf_conformance's own runner does, `r1` points at the memory and `r2`
//! holds its length. A file the JIT refuses counts as a JIT failure. Every failure must be listed,
//! with its reason, in `tests/conformance-failures.txt`; the test fails on a failure not listed
//! and on a listed failure that now passes.

use egpu::ebpf::conformance::{Case, Expect, Failures, check_listed, suite};
use egpu::ebpf::verifier::verify;
use egpu::vm::{Engine, EngineChoice, Vm};
use egpu_test_support::workspace_root;

/// Runs one case on one engine: `Ok` when it behaves as expected, else why not.
fn run(case: &Case, engine: Engine) -> Result<(), String> {
    let outcome = (|| {
        let program = case.program()?;
        let choice = match engine {
            Engine::Jit => EngineChoice::Jit,
            Engine::Interpreter => EngineChoice::Interpreter,
        };
        let verified =
            verify(&program).map_err(|e| format!("load: the verifier refused it: {e}"))?;
        let mut vm = Vm::with_engine(&verified, choice).map_err(|e| format!("load: {e}"))?;
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

#[test]
fn conformance() {
    let Some(cases) = suite(&workspace_root()) else { return };
    let cases = cases.expect("a readable suite");
    assert!(cases.len() >= 300, "only {} files in the suite", cases.len());

    let mut failed = Failures::new();
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
    let engines = [Engine::Interpreter.to_string(), Engine::Jit.to_string()];
    let engines: Vec<&str> = engines.iter().map(String::as_str).collect();
    if let Err(e) = check_listed(&workspace_root(), &engines, &failed) {
        panic!("{e}");
    }
}
