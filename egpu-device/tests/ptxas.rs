//! Tests that run NVIDIA's compiler tools, without a GPU: CUDA C kernels compiled by `nvcc`, PTX
//! read by egpu's reader, and PTX checked by `ptxas` for the GPU machine's target.
//!
//! They need `ptxas` and `nvcc`, from `EGPU_PTXAS` and `EGPU_NVCC` or `PATH` (`scripts/cuda-tools`
//! installs both from PyPI). Without them they print why they skip; with `EGPU_REQUIRE_PTXAS=1`,
//! which `scripts/test` sets, they fail instead.

use std::path::{Path, PathBuf};

use egpu_device::ptx::{FunctionKind, Module};
use egpu_device::testing::{require_nvcc, require_ptxas};
use egpu_device::toolchain::{Ptxas, PtxasReport, ToolError};

/// The GPU machine's target (an H200).
const ARCH: &str = "sm_90";

/// The repository's root: from `CARGO_MANIFEST_DIR` at run time when set (`cargo test`, or the GPU
/// bundle's `run.sh`, where the binary runs on another machine), else where it was built.
fn repo_root() -> PathBuf {
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    let root = manifest.join("..");
    root.canonicalize().unwrap_or(root)
}

/// The files of folder `dir` (relative to the repository's root) whose names end in `.ext`,
/// sorted. Panics if there are none: a missing corpus must not pass as an empty one.
fn corpus(dir: &str, ext: &str) -> Vec<PathBuf> {
    let dir = repo_root().join(dir);
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.unwrap_or_else(|e| panic!("{}: {e}", dir.display())).path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .{ext} files in {}", dir.display());
    files
}

/// `path` relative to the repository's root, for messages.
fn shown(path: &Path) -> String {
    let root = repo_root();
    path.strip_prefix(&root).unwrap_or(path).display().to_string()
}

/// Reads `ptx` with egpu's reader, checking that its pieces give the text back exactly.
fn read(ptx: &str) -> Result<Module, String> {
    let module = Module::parse(ptx).map_err(|e| format!("the PTX reader refused it: {e}"))?;
    let joined: String = (0..module.pieces().len()).map(|i| module.piece_text(i)).collect();
    if joined != ptx {
        return Err("the reader's pieces do not give the text back".into());
    }
    Ok(module)
}

/// What the reader found, in a few words: `2 functions (kernel reduce, func _Z3mixj)`.
fn functions(module: &Module) -> String {
    let names: Vec<String> = module
        .functions()
        .iter()
        .map(|f| {
            let kind = if f.kind == FunctionKind::Entry { "kernel" } else { "func" };
            format!("{kind} {}", f.name)
        })
        .collect();
    let s = if names.len() == 1 { "" } else { "s" };
    format!("{} function{s} ({})", names.len(), names.join(", "))
}

/// ptxas's report of each kernel, in a few words: `reduce 9 regs, 0 B stack, 0/0 B spilled`.
fn kernels(report: &PtxasReport) -> String {
    let kernels: Vec<String> = report
        .functions
        .iter()
        .filter(|f| f.entry)
        .map(|f| {
            let regs = f.registers.map_or("?".to_owned(), |r| r.to_string());
            format!(
                "{} {regs} regs, {} B stack, {}/{} B spilled",
                f.name, f.stack_frame, f.spill_stores, f.spill_loads
            )
        })
        .collect();
    kernels.join("; ")
}

/// Reads `ptx` and has ptxas check it: the reader and ptxas must agree on the kernels, each with a
/// register count. Returns a line about it.
fn read_and_check(ptxas: &Ptxas, ptx: &str) -> Result<String, String> {
    let module = read(ptx)?;
    let report = ptxas.check(ptx, ARCH).map_err(|e| e.to_string())?;
    let mut ptxas_kernels: Vec<&str> =
        report.functions.iter().filter(|f| f.entry).map(|f| f.name.as_str()).collect();
    let mut reader_kernels: Vec<&str> = module.entries().map(|f| f.name.as_str()).collect();
    ptxas_kernels.sort_unstable();
    reader_kernels.sort_unstable();
    if ptxas_kernels != reader_kernels {
        return Err(format!(
            "ptxas compiled kernels {ptxas_kernels:?}, the reader found {reader_kernels:?}"
        ));
    }
    if let Some(f) = report.functions.iter().find(|f| f.entry && f.registers.is_none()) {
        return Err(format!("ptxas reported no register count for kernel {}", f.name));
    }
    Ok(format!("{}; ptxas {ARCH}: {}", functions(&module), kernels(&report)))
}

/// Every CUDA C kernel of tests/kernels compiles with nvcc, and its PTX, like every PTX fixture of
/// tests/ptx, reads exactly and passes ptxas; and ptxas does refuse broken PTX, naming its line.
/// One line per file; all files are tried before the test fails.
#[test]
fn corpus_kernels_compile() {
    let Some(ptxas) = require_ptxas() else { return };
    let Some(nvcc) = require_nvcc() else { return };
    println!(
        "nvcc {} ({})\nptxas {} ({})",
        nvcc.path().display(),
        nvcc.version().unwrap_or_else(|e| e.to_string()),
        ptxas.path().display(),
        ptxas.version().unwrap_or_else(|e| e.to_string())
    );
    let mut failures = Vec::new();
    for cu in corpus("tests/kernels", "cu") {
        let result = nvcc.compile_ptx(&cu, ARCH).map_err(|e| e.to_string()).and_then(|ptx| {
            let line = read_and_check(&ptxas, &ptx)?;
            let stem = cu.file_stem().unwrap_or_default().to_string_lossy();
            let fixture = repo_root().join("tests/ptx").join(format!("{stem}.ptx"));
            let same = match std::fs::read_to_string(&fixture) {
                Ok(text) if text == ptx => format!("same as {}", shown(&fixture)),
                Ok(_) => format!("differs from {}", shown(&fixture)),
                Err(_) => "no fixture".to_owned(),
            };
            Ok(format!("nvcc: {} lines of PTX, {same}; {line}", ptx.lines().count()))
        });
        report_line(&cu, result, &mut failures);
    }
    for file in corpus("tests/ptx", "ptx") {
        let result = std::fs::read_to_string(&file)
            .map_err(|e| e.to_string())
            .and_then(|ptx| read_and_check(&ptxas, &ptx));
        report_line(&file, result, &mut failures);
    }
    let broken = std::fs::read_to_string(repo_root().join("tests/ptx/saxpy.ptx"))
        .expect("tests/ptx/saxpy.ptx")
        .replacen("\tret;", "\trett;", 1);
    let result = match ptxas.check(&broken, ARCH) {
        Err(ToolError::PtxasRejected { errors, .. })
            if errors.first().is_some_and(|e| e.source_line.trim() == "rett;") =>
        {
            Ok(format!("refused, line {}: {}", errors[0].line, errors[0].message))
        }
        Err(e) => Err(format!("refused, but without naming the line of `rett;`: {e}")),
        Ok(report) => Err(format!("accepted: {}", kernels(&report))),
    };
    report_line(Path::new("tests/ptx/saxpy.ptx with `rett;`"), result, &mut failures);
    assert!(
        failures.is_empty(),
        "{} of the corpus failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Prints the line for `file`, and records it if it failed.
fn report_line(file: &Path, result: Result<String, String>, failures: &mut Vec<String>) {
    match result {
        Ok(line) => println!("ok    {}: {line}", shown(file)),
        Err(e) => {
            println!("FAIL  {}: {e}", shown(file));
            failures.push(format!("{}: {e}", shown(file)));
        }
    }
}
