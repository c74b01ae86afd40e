//! Tests that run NVIDIA's compiler tools, without a GPU: CUDA C kernels compiled by `nvcc`, PTX
//! read by egpu's reader, and PTX checked by `ptxas` for the GPU machine's target.
//!
//! They need `ptxas` and `nvcc`, from `EGPU_PTXAS` and `EGPU_NVCC` or `PATH` (`scripts/cuda-tools`
//! installs both from PyPI). Without them they print why they skip; with `EGPU_REQUIRE_PTXAS=1`,
//! which `scripts/test` sets, they fail instead.

use std::path::{Path, PathBuf};

use egpu_device::ptx::{FunctionKind, PtxModule};
use egpu_device::testing::{require_nvcc, require_ptxas};
use egpu_device::toolchain::{Ptxas, PtxasReport, ToolError};
use egpu_test_support::{files_with_extension, workspace_path, workspace_root};

/// The GPU machine's target (an H200).
const ARCH: &str = "sm_90";

/// The target to check `ptx` for: its own `.target` when that is an H200's (`sm_90a`, as
/// Triton writes for Hopper, uses instructions only `sm_90a` has), else [`ARCH`].
fn arch_of(ptx: &str) -> &'static str {
    let target = ptx.lines().find_map(|l| l.trim().strip_prefix(".target"));
    if target.is_some_and(|t| t.split(',').any(|p| p.trim() == "sm_90a")) { "sm_90a" } else { ARCH }
}

/// The PTX fixtures: hand-written and nvcc's in `tests/ptx`, Triton's (made on the GPU machine
/// by `egpu-preload/tests/programs/triton_corpus.py`) in `tests/ptx/triton`.
fn ptx_fixtures() -> Vec<PathBuf> {
    let mut files = corpus("tests/ptx", "ptx");
    files.extend(corpus("tests/ptx/triton", "ptx"));
    files
}

/// The files of folder `dir` (relative to the repository's root) whose names end in `.ext`,
/// sorted. Panics if there are none: a missing corpus must not pass as an empty one.
fn corpus(dir: &str, ext: &str) -> Vec<PathBuf> {
    let dir = workspace_path(dir);
    let files = files_with_extension(&dir, ext);
    assert!(!files.is_empty(), "no .{ext} files in {}", dir.display());
    files
}

/// `path` relative to the repository's root, for messages.
fn shown(path: &Path) -> String {
    let root = workspace_root();
    path.strip_prefix(&root).unwrap_or(path).display().to_string()
}

/// Reads `ptx` with egpu's reader, checking that its pieces give the text back exactly.
fn read(ptx: &str) -> Result<PtxModule, String> {
    let module = PtxModule::parse(ptx).map_err(|e| format!("the PTX reader refused it: {e}"))?;
    let joined: String = (0..module.pieces().len()).map(|i| module.piece_text(i)).collect();
    if joined != ptx {
        return Err("the reader's pieces do not give the text back".into());
    }
    Ok(module)
}

/// What the reader found, in a few words: `2 functions (kernel reduce, func _Z3mixj)`.
fn functions(module: &PtxModule) -> String {
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
    let report = ptxas.check(ptx, arch_of(ptx)).map_err(|e| e.to_string())?;
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
    Ok(format!("{}; ptxas {}: {}", functions(&module), arch_of(ptx), kernels(&report)))
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
            let fixture = workspace_path("tests/ptx").join(format!("{stem}.ptx"));
            let same = match std::fs::read_to_string(&fixture) {
                Ok(text) if text == ptx => format!("same as {}", shown(&fixture)),
                Ok(_) => format!("differs from {}", shown(&fixture)),
                Err(_) => "no fixture".to_owned(),
            };
            Ok(format!("nvcc: {} lines of PTX, {same}; {line}", ptx.lines().count()))
        });
        report_line(&cu, result, &mut failures);
    }
    for file in ptx_fixtures() {
        let result = std::fs::read_to_string(&file)
            .map_err(|e| e.to_string())
            .and_then(|ptx| read_and_check(&ptxas, &ptx));
        report_line(&file, result, &mut failures);
    }
    let broken = std::fs::read_to_string(workspace_path("tests/ptx/saxpy.ptx"))
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

/// Every program of the bpf_conformance suite translates to a kernel that ptxas accepts. The
/// suite's files that fail are listed, with why, in tests/conformance-failures.txt (engine
/// `ptxas`); the test fails on a failure not listed there.
#[test]
fn conformance_translates_for_ptxas() {
    use egpu_device::translate::kernel_module;
    use egpu_ebpf::conformance::{Failures, check_listed, suite};
    use egpu_ebpf::verifier::verify;

    let Some(ptxas) = require_ptxas() else { return };
    let Some(cases) = suite(&workspace_root()) else { return };
    let cases = cases.expect("a readable suite");
    let mut failed = Failures::new();
    for case in &cases {
        let outcome = (|| -> Result<(), String> {
            let verified =
                verify(&case.program()?).map_err(|e| format!("the verifier refused it: {e}"))?;
            let ptx = kernel_module(&verified, "conformance").map_err(|e| e.to_string())?;
            read(&ptx)?;
            ptxas.check(&ptx, ARCH).map_err(|e| e.to_string())?;
            Ok(())
        })();
        if let Err(why) = outcome {
            failed.insert(("ptxas".to_string(), case.name.clone()), why);
        }
    }
    println!("ptxas-valid conformance: {}/{}", cases.len() - failed.len(), cases.len());
    for ((_, file), why) in &failed {
        println!("  failed {file}: {why}");
    }
    if let Err(e) = check_listed(&workspace_root(), &["ptxas"], &failed) {
        panic!("{e}");
    }
}

/// Every `bpf_loop` program the verifier suite accepts (`tests/verifier/ok_loop_*.s`) translates,
/// with its maps bound at made-up addresses, to a kernel that ptxas accepts: the loop functions
/// egpu appends and the callbacks become `.func`s.
#[test]
fn bpf_loop_programs_translate_for_ptxas() {
    use egpu_device::translate::{DeviceMap, kernel_module_with};
    use egpu_ebpf::verifier::verify;
    use egpu_ebpf::{AttachPoint, MapDef, Program, assemble};
    use egpu_maps::layout::Geometry;

    let Some(ptxas) = require_ptxas() else { return };
    let files: Vec<PathBuf> = corpus("tests/verifier", "s")
        .into_iter()
        .filter(|f| f.file_name().is_some_and(|n| n.to_string_lossy().starts_with("ok_loop_")))
        .filter(|f| std::fs::read_to_string(f).is_ok_and(|t| t.contains("call 181")))
        .collect();
    assert!(files.len() >= 3, "the suite's bpf_loop programs: {files:?}");
    let mut failures = Vec::new();
    for file in &files {
        let result = (|| -> Result<String, String> {
            let text = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
            let maps: Vec<MapDef> = text
                .lines()
                .filter_map(|l| l.strip_prefix("# map:"))
                .map(|m| m.trim().parse().map_err(|e| format!("{e}")))
                .collect::<Result<_, _>>()?;
            let bound: Vec<DeviceMap> = maps
                .iter()
                .map(|d| DeviceMap {
                    addr: 0x7f00_0000_0000,
                    geometry: Geometry::new(d.kind, d.key_size, d.value_size, d.capacity, 1, 0)
                        .expect("a geometry"),
                    live: false,
                    spread: 0,
                    drained: false,
                })
                .collect();
            let slots = assemble(&text).map_err(|e| e.to_string())?;
            let attach = AttachPoint::User { ctx_size: 8 };
            let program = Program::new(slots, maps, attach).map_err(|e| e.to_string())?;
            let verified = verify(&program).map_err(|e| e.to_string())?;
            let ptx = kernel_module_with(&verified, "loops", &bound).map_err(|e| e.to_string())?;
            let funcs = read(&ptx)?.functions().len();
            ptxas.check(&ptx, ARCH).map_err(|e| e.to_string())?;
            Ok(format!("{funcs} PTX functions, ptxas accepts them"))
        })();
        report_line(file, result, &mut failures);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Probes for the corpus: at each device attach point, one that reads every field of its
/// context, and one that counts into an `Array` and a per-SM `PerCpuArray` (at made-up device
/// addresses: ptxas only checks the code).
fn corpus_probes() -> (Vec<egpu_ebpf::verifier::Verified>, Vec<egpu_device::translate::DeviceMap>) {
    use egpu_ebpf::verifier::verify;
    use egpu_ebpf::{AttachPoint, DeviceEvent, KernelCtx, MapDef, MapKind, MemAccessCtx, Program};
    use egpu_maps::layout::Geometry;

    // Sums every 4-byte word of the context, after a byte, a half and a signed load.
    let reader = |ctx_bytes: usize| {
        let mut text = String::from("ldxb %r0, [%r1+1]\nldxh %r2, [%r1+2]\nadd %r0, %r2\n");
        text.push_str("ldxsw %r2, [%r1+4]\nadd %r0, %r2\nldxdw %r2, [%r1+0]\nadd %r0, %r2\n");
        for off in (0..ctx_bytes).step_by(4) {
            text.push_str(&format!("ldxw %r2, [%r1+{off}]\nadd %r0, %r2\n"));
        }
        text.push_str("exit\n");
        text
    };
    let counter = "stw [%r10-4], 0\nlddw %r1, map[0]\nmov %r2, %r10\nadd %r2, -4\ncall 1\n\
                   jeq %r0, 0, +2\nmov %r1, 1\nlock add [%r0+0], %r1\n\
                   stw [%r10-8], 0\nlddw %r1, map[1]\nmov %r2, %r10\nadd %r2, -8\ncall 1\n\
                   jeq %r0, 0, +2\nmov %r1, 4\nlock add32 [%r0+0], %r1\nmov %r0, 0\nexit";
    // Counts accesses per 4 KiB page in a hash map, as Probe Rust's `fetch_add` does: look up,
    // insert a zero when missing, look up again, add; then removes and re-inserts a key.
    let pages = "ldxdw %r6, [%r1+0]\nrsh %r6, 12\nstxdw [%r10-8], %r6\nstdw [%r10-16], 0\n\
                 lddw %r1, map[2]\nmov %r2, %r10\nadd %r2, -8\ncall 1\njne %r0, 0, found\n\
                 lddw %r1, map[2]\nmov %r2, %r10\nadd %r2, -8\nmov %r3, %r10\nadd %r3, -16\n\
                 mov %r4, 1\ncall 2\nlddw %r1, map[2]\nmov %r2, %r10\nadd %r2, -8\ncall 1\n\
                 jeq %r0, 0, out\nfound:\nmov %r1, 1\nlock add [%r0+0], %r1\nout:\n\
                 stw [%r10-20], 3\nlddw %r1, map[3]\nmov %r2, %r10\nadd %r2, -20\ncall 3\n\
                 lddw %r1, map[3]\nmov %r2, %r10\nadd %r2, -20\nmov %r3, %r10\nadd %r3, -16\n\
                 mov %r4, 0\ncall 2\nmov %r0, 0\nexit";
    // A bpf_loop whose callback (a `.func` in PTX, which cannot name the kernel's registers)
    // reads every context word through the spilled context pointer and updates an array (whose
    // adds the main function would combine), a per-SM array and a hash map (which the main
    // function would look up through a cache).
    let looping = |ctx_bytes: usize| {
        let mut text = String::from(
            "stxdw [%r10-8], %r1\nmov %r1, 3\nlddw %r2, func body\nmov %r3, %r10\nmov %r4, 0\n\
             call 181\nmov %r0, 0\nexit\nbody:\nldxdw %r7, [%r2-8]\nmov %r6, 0\n",
        );
        for off in (0..ctx_bytes).step_by(4) {
            text.push_str(&format!("ldxw %r3, [%r7+{off}]\nadd %r6, %r3\n"));
        }
        text.push_str(
            "stw [%r10-4], 0\nlddw %r1, map[0]\nmov %r2, %r10\nadd %r2, -4\ncall 1\n\
             jeq %r0, 0, +2\nmov %r1, 1\nlock add [%r0+0], %r1\n\
             lddw %r1, map[1]\nmov %r2, %r10\nadd %r2, -4\ncall 1\n\
             jeq %r0, 0, +2\nmov %r1, 1\nlock add [%r0+0], %r1\n\
             stxdw [%r10-16], %r6\nlddw %r1, map[2]\nmov %r2, %r10\nadd %r2, -16\ncall 1\n\
             jeq %r0, 0, +2\nmov %r1, 1\nlock add [%r0+0], %r1\nmov %r0, 0\nexit\n",
        );
        text
    };
    // A 16-byte record per event into a ring: the address, then size | site << 32.
    let trace = "ldxdw %r2, [%r1+0]\nstxdw [%r10-16], %r2\nldxw %r3, [%r1+16]\nldxw %r4, [%r1+20]\n\
                 lsh %r4, 32\nor %r3, %r4\nstxdw [%r10-8], %r3\nlddw %r1, map[4]\nmov %r2, %r10\n\
                 add %r2, -16\nmov %r3, 16\nmov %r4, 0\ncall 130\nmov %r0, 0\nexit";
    let maps = vec![
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
        MapDef {
            name: "pages".into(),
            kind: MapKind::Hash,
            key_size: 8,
            value_size: 8,
            capacity: 4096,
        },
        MapDef {
            name: "odd".into(),
            kind: MapKind::PerCpuHash,
            key_size: 4,
            value_size: 8,
            capacity: 64,
        },
        MapDef {
            name: "trace".into(),
            kind: MapKind::RingBuf,
            key_size: 0,
            value_size: 16,
            capacity: 1024,
        },
    ];
    let bindings = vec![
        egpu_device::translate::DeviceMap {
            addr: 0x7f00_0000_0000,
            geometry: Geometry::new(MapKind::Array, 4, 8, 1, 1, 0).expect("geometry"),
            live: false,
            spread: 0,
            drained: false,
        },
        egpu_device::translate::DeviceMap {
            addr: 0x7f00_0010_0000,
            geometry: Geometry::new(MapKind::PerCpuArray, 4, 8, 1, 2, 132).expect("geometry"),
            live: false,
            spread: 0,
            drained: false,
        },
        egpu_device::translate::DeviceMap {
            addr: 0x7f00_0020_0000,
            geometry: Geometry::new(MapKind::Hash, 8, 8, 4096, 1, 0).expect("geometry"),
            live: false,
            spread: 0,
            drained: false,
        },
        egpu_device::translate::DeviceMap {
            addr: 0x7f00_1000_0000,
            geometry: Geometry::new(MapKind::PerCpuHash, 4, 8, 64, 2, 132).expect("geometry"),
            live: false,
            spread: 0,
            drained: false,
        },
        egpu_device::translate::DeviceMap {
            addr: 0x7f00_2000_0000,
            geometry: Geometry::new(MapKind::RingBuf, 0, 16, 1024, 0, 132).expect("geometry"),
            live: false,
            spread: 0,
            drained: false,
        },
    ];
    // The warp's helpers: the leading lane adds the warp's sectors and lanes to an array.
    let warp = {
        use egpu_ebpf::helpers::id::{
            WARP_LANES, WARP_LEADER, WARP_PEERS, WARP_SECTORS, WARP_STRIDE,
        };
        format!(
            "ldxdw %r6, [%r1+0]\nldxw %r7, [%r1+16]\nmov %r1, %r6\ncall {WARP_STRIDE}\n\
             mov %r9, %r0\ncall {WARP_LEADER}\njeq %r0, 0, out\n\
             mov %r1, %r6\nmov %r2, %r7\ncall {WARP_SECTORS}\nmov %r8, %r0\nadd %r8, %r9\n\
             call {WARP_LANES}\nadd %r8, %r0\nmov %r1, %r6\nrsh %r1, 12\n\
             call {WARP_PEERS}\nadd %r8, %r0\nstw [%r10-4], 0\nlddw %r1, map[0]\n\
             mov %r2, %r10\nadd %r2, -4\ncall 1\njeq %r0, 0, out\nlock add [%r0+0], %r8\n\
             out:\nmov %r0, 0\nexit"
        )
    };
    let mut programs = Vec::new();
    for event in [
        DeviceEvent::KernelEntry,
        DeviceEvent::KernelExit,
        DeviceEvent::GlobalLoad,
        DeviceEvent::GlobalStore,
        DeviceEvent::GlobalAtomic,
    ] {
        let ctx = match event {
            DeviceEvent::KernelEntry | DeviceEvent::KernelExit => size_of::<KernelCtx>(),
            _ => size_of::<MemAccessCtx>(),
        };
        let mut sources = vec![
            (reader(ctx), vec![]),
            (counter.to_string(), maps.clone()),
            (looping(ctx), maps.clone()),
        ];
        if !matches!(event, DeviceEvent::KernelEntry | DeviceEvent::KernelExit) {
            sources.push((pages.to_string(), maps.clone()));
            sources.push((trace.to_string(), maps.clone()));
            sources.push((warp.clone(), maps.clone()));
        }
        for (text, maps) in sources {
            let slots = egpu_ebpf::assemble(&text).expect("assembles");
            let program = Program::new(slots, maps, AttachPoint::Device(event)).expect("program");
            programs.push(verify(&program).expect("verified"));
        }
    }
    (programs, bindings)
}

/// The corpus: CUDA C compiled by nvcc, and the PTX fixtures (nvcc, Triton's, Triton-style and
/// hand-written), by name.
fn corpus_sources(nvcc: &egpu_device::toolchain::Nvcc) -> Vec<(String, String)> {
    let mut sources: Vec<(String, String)> = Vec::new();
    for cu in corpus("tests/kernels", "cu") {
        let ptx = nvcc.compile_ptx(&cu, ARCH).unwrap_or_else(|e| panic!("{}: {e}", shown(&cu)));
        sources.push((format!("{} (nvcc)", shown(&cu)), ptx));
    }
    for file in ptx_fixtures() {
        let ptx =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", shown(&file)));
        sources.push((shown(&file), ptx));
    }
    sources
}

/// Probes that only add the bytes of each access (by block: by the kernel's id, they would run
/// as register adds, `inject/summaries.rs`) run once per run of accesses (`inject/runs.rs`):
/// over the whole corpus, with tensor copies looking their bytes up, the instrumented modules
/// pass ptxas, and the Triton matmul's copies make runs.
#[test]
fn runs_of_accesses_pass_ptxas() {
    use egpu_device::inject::{DeviceProbe, InjectOptions, Kernels, inject_with};
    use egpu_device::translate::DeviceMap;
    use egpu_ebpf::verifier::verify;
    use egpu_ebpf::{AttachPoint, DeviceEvent, MapDef, MapKind, Program, assemble};
    use egpu_maps::layout::Geometry;

    let Some(ptxas) = require_ptxas() else { return };
    let Some(nvcc) = require_nvcc() else { return };
    let bytes = egpu_test_support::read_workspace_file("tests/probes/kernel_bytes.s")
        .replace("ldxdw %r0, [%r9+8]", "ldxw %r0, [%r9+36]");
    let def = MapDef {
        name: "bytes".into(),
        kind: MapKind::Hash,
        key_size: 8,
        value_size: 8,
        capacity: 1024,
    };
    let program = |event| {
        let p = Program::new(
            assemble(&bytes).expect("assembles"),
            vec![def.clone()],
            AttachPoint::Device(event),
        );
        verify(&p.expect("a program")).expect("verified")
    };
    let (loads, stores) = (program(DeviceEvent::GlobalLoad), program(DeviceEvent::GlobalStore));
    let geometry = Geometry::new(MapKind::Hash, 8, 8, 1024, 1, 0).expect("geometry");
    let maps =
        [DeviceMap { addr: 0x7f00_0000_0000, geometry, live: false, spread: 0, drained: false }];
    let probes = [
        DeviceProbe { program: &loads, kernels: Kernels::All, maps: &maps },
        DeviceProbe { program: &stores, kernels: Kernels::All, maps: &maps },
    ];
    let options =
        InjectOptions { tensor_boxes: Some(0x7f00_1000_0000), ..InjectOptions::default() };
    let (mut failures, mut runs) = (Vec::new(), 0);
    for (name, ptx) in corpus_sources(&nvcc) {
        let result =
            inject_with(&ptx, &probes, &options).map_err(|e| e.to_string()).and_then(|i| {
                let batched = i.ptx.matches("_run, 0;").count().saturating_sub(1);
                runs += batched;
                assert!(!i.ptx.contains("{ADDR}") && !i.ptx.contains("{SIZE}"), "{name}");
                ptxas.check(&i.ptx, arch_of(&ptx)).map_err(|e| e.to_string())?;
                Ok(format!("{batched} runs"))
            });
        report_line(Path::new(&name), result, &mut failures);
    }
    println!("runs of accesses over the corpus: {runs}, every module ptxas-valid");
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(runs >= 4, "the Triton matmul's copies make runs");
}

/// Every kernel of the corpus (CUDA C compiled by nvcc, and the PTX fixtures: nvcc, Triton-style
/// and hand-written) is instrumented at every attach point, with probes that read every context
/// field and probes that update maps, and ptxas accepts the result. Prints what instrumentation
/// costs each kernel in registers and local memory.
#[test]
fn injected_corpus_passes_ptxas() {
    use egpu_device::inject::{DeviceProbe, InjectOptions, Kernels, inject_with};
    use egpu_ebpf::{AttachPoint, DeviceEvent, MapKind, MemAccessCtx};

    let Some(ptxas) = require_ptxas() else { return };
    let Some(nvcc) = require_nvcc() else { return };
    let (programs, bindings) = corpus_probes();
    let drained: Vec<_> = bindings
        .iter()
        .map(|b| egpu_device::translate::DeviceMap {
            drained: b.geometry.kind == MapKind::RingBuf,
            ..*b
        })
        .collect();
    let probes: Vec<DeviceProbe<'_>> = programs
        .iter()
        .map(|p| {
            // Store probes write their ring as the preloaded library binds it: drained.
            let store = p.program().attach_point() == AttachPoint::Device(DeviceEvent::GlobalStore);
            let maps = match (p.program().maps().is_empty(), store) {
                (true, _) => &[][..],
                (false, false) => &bindings[..],
                (false, true) => &drained[..],
            };
            DeviceProbe { program: p, kernels: Kernels::All, maps }
        })
        .collect();
    let sources = corpus_sources(&nvcc);
    let mut failures = Vec::new();
    let (mut observed, mut memory, mut unobserved) = (0, 0, Vec::new());
    let mut classes = std::collections::BTreeMap::<u32, usize>::new();
    for (name, ptx) in &sources {
        let result = (|| -> Result<String, String> {
            let before = ptxas.check(ptx, arch_of(ptx)).map_err(|e| format!("original: {e}"))?;
            // Tensor copies look their box up in a table, as under the preloaded library.
            let options =
                InjectOptions { tensor_boxes: Some(0x7f00_1000_0000), ..InjectOptions::default() };
            let injected = inject_with(ptx, &probes, &options).map_err(|e| e.to_string())?;
            observed += injected.observed;
            memory += injected.memory_instructions;
            for u in &injected.unobserved {
                unobserved.push(format!("{name}:{}: `{}`: {}", u.line, u.opcode, u.reason));
            }
            let accesses: std::collections::BTreeSet<(&str, u32, u32)> = injected
                .sites
                .iter()
                .chain(&injected.uncovered)
                .filter(|s| !matches!(s.event, DeviceEvent::KernelEntry | DeviceEvent::KernelExit))
                .map(|s| (s.function.as_str(), s.index, s.class))
                .collect();
            for (_, _, class) in accesses {
                *classes.entry(class).or_default() += 1;
            }
            read(&injected.ptx)?;
            let after = ptxas.check(&injected.ptx, arch_of(ptx)).map_err(|e| e.to_string())?;
            let costs: Vec<String> = after
                .functions
                .iter()
                .filter(|f| f.entry)
                .map(|f| {
                    let old = before.function(&f.name);
                    let regs = |r: Option<u32>| r.map_or("?".into(), |r| r.to_string());
                    format!(
                        "{} {}->{} regs, stack {}->{} B",
                        f.name,
                        regs(old.and_then(|o| o.registers)),
                        regs(f.registers),
                        old.map_or(0, |o| o.stack_frame),
                        f.stack_frame
                    )
                })
                .collect();
            Ok(format!("{} sites; {}", injected.sites.len(), costs.join("; ")))
        })();
        report_line(Path::new(name), result, &mut failures);
    }
    println!("ptxas-valid injected corpus: {}/{}", sources.len() - failures.len(), sources.len());
    for u in &unobserved {
        println!("  not observed: {u}");
    }
    let by_class: Vec<String> =
        classes.iter().map(|(&c, n)| format!("{} {n}", MemAccessCtx::class_name(c))).collect();
    println!("global memory instructions observed: {observed}/{memory} ({})", by_class.join(", "));
    assert!(failures.is_empty(), "{} failed:\n{}", failures.len(), failures.join("\n"));
    assert_eq!(observed, memory, "every global memory instruction of the corpus is observed");
    for class in 0..=MemAccessCtx::TENSOR_MAP {
        let name = MemAccessCtx::class_name(class);
        assert!(classes.contains_key(&class), "the corpus has no {name} observed");
    }
}
