//! The `egpu` command line, run as a program: `egpu translate` and `egpu inject` on files, their
//! output checked by ptxas where it is installed, and every way of calling them wrongly, with its
//! exit code (2 for usage, 1 for a failure) and what the message must say.
//!
//! The binary is the one cargo built for this test (`CARGO_BIN_EXE_egpu`); where that path does
//! not exist (the test binary was copied to another machine), an `egpu` next to the test binary,
//! or one folder up, is used instead.

use std::path::{Path, PathBuf};
use std::process::Command;

mod cli_support;
use cli_support::{TempDir, egpu, fails, run, succeeds};

use egpu::ebpf::{AttachPoint, DeviceEvent, Program, assemble};
use egpu_device::ptx::PtxModule;
use egpu_device::testing::require_ptxas;
use egpu_test_support::workspace_path;

/// The GPU machine's target (an H200).
const ARCH: &str = "sm_90";

/// Reads every word of a `MemAccessCtx` (and the address as a whole).
const LOAD_PROBE: &str = "ldxdw %r0, [%r1+0]\nldxw %r2, [%r1+16]\nadd %r0, %r2\n\
                          ldxw %r2, [%r1+20]\nadd %r0, %r2\nldxw %r2, [%r1+48]\nadd %r0, %r2\nexit\n";

/// Reads the kernel id, a thread index and the SM of a `KernelCtx`.
const EXIT_PROBE: &str = "ldxdw %r0, [%r1+0]\nldxw %r2, [%r1+8]\nadd %r0, %r2\nexit\n";

/// ptxas accepts `ptx` (when ptxas is installed) and egpu's reader reads it.
#[track_caller]
fn check_ptx(what: &str, ptx: &str) {
    PtxModule::parse(ptx).unwrap_or_else(|e| panic!("{what}: the PTX reader refused it: {e}"));
    if let Some(ptxas) = require_ptxas() {
        ptxas.check(ptx, ARCH).unwrap_or_else(|e| panic!("{what}: {e}\n{ptx}"));
    }
}

fn saxpy() -> PathBuf {
    workspace_path("tests/ptx/saxpy.ptx")
}

// ---------------------------------------------------------------------------------------------
// translate
// ---------------------------------------------------------------------------------------------

#[test]
fn translate_reads_assembly_and_bytecode_alike() {
    let dir = TempDir::new("translate");
    let asm = dir.file("load.s", LOAD_PROBE);
    let slots = assemble(LOAD_PROBE).expect("assembles");
    let attach = AttachPoint::Device(DeviceEvent::GlobalLoad);
    let bytes = Program::new(slots, vec![], attach).expect("a program").to_bytes();
    let bin = dir.file("load.bin", &bytes);
    let from_text = succeeds(&[Path::new("translate"), &asm]);
    let from_bytes = succeeds(&[Path::new("translate"), &bin]);
    assert_eq!(from_text.stdout, from_bytes.stdout, "assembly and bytecode translate differently");
    assert!(from_text.stdout.contains(".entry probe("), "{}", from_text.stdout);
    check_ptx("egpu translate load.s", &from_text.stdout);
    println!(
        "translate: {} lines of PTX, same from assembly and bytecode",
        from_text.stdout.lines().count()
    );
}

#[test]
fn translate_takes_an_attach_point_and_a_kernel_name() {
    let dir = TempDir::new("attach");
    // 16 bytes of user memory: the second word is in bounds for user(16), not for user(8).
    let user = dir.file("user.s", "ldxdw %r0, [%r1+8]\nldxw %r2, [%r1+4]\nadd %r0, %r2\nexit\n");
    let out = succeeds(&[
        Path::new("translate"),
        &user,
        Path::new("--attach"),
        Path::new("user(16)"),
        Path::new("--kernel"),
        Path::new("my_kernel"),
    ]);
    assert!(out.stdout.contains(".visible .entry my_kernel("), "{}", out.stdout);
    assert!(!out.stdout.contains(".entry probe"), "{}", out.stdout);
    assert!(out.stdout.contains(".param .u64 my_kernel_arg"), "{}", out.stdout);
    check_ptx("egpu translate user.s --attach user(16) --kernel my_kernel", &out.stdout);
    fails(
        &[Path::new("translate"), &user, Path::new("--attach"), Path::new("user(8)")],
        1,
        &["user.s", "the verifier refused it"],
    );
    // A kernel-entry probe reads special registers.
    let exit = dir.file("exit.s", EXIT_PROBE);
    let out = succeeds(&[
        Path::new("translate"),
        &exit,
        Path::new("--attach"),
        Path::new("device::kernel_entry"),
    ]);
    assert!(out.stdout.contains("%tid.x"), "{}", out.stdout);
    check_ptx("egpu translate exit.s --attach device::kernel_entry", &out.stdout);
}

// ---------------------------------------------------------------------------------------------
// inject
// ---------------------------------------------------------------------------------------------

#[test]
fn inject_writes_the_module_and_lists_the_sites() {
    let dir = TempDir::new("inject");
    let load = dir.file("load.s", LOAD_PROBE);
    let exit = dir.file("exit.s", EXIT_PROBE);
    let out = dir.0.join("out.ptx");
    let mut probe_load = std::ffi::OsString::from("device::global_load=");
    probe_load.push(&load);
    let mut probe_exit = std::ffi::OsString::from("device::kernel_exit=");
    probe_exit.push(&exit);
    let args = [
        "inject".into(),
        saxpy().into_os_string(),
        "--probe".into(),
        probe_load,
        "--probe".into(),
        probe_exit.clone(),
        "-o".into(),
        out.clone().into_os_string(),
    ];
    let r = succeeds(&args);
    assert_eq!(r.stdout, "", "with -o nothing goes to standard output");
    let module = saxpy().display().to_string();
    let want = format!(
        "{module}:47: device::global_load in saxpy, 4 bytes\n\
         {module}:49: device::global_load in saxpy, 4 bytes\n\
         {module}:57: device::kernel_exit in saxpy\n\
         {module}: observed 3 of 3 global memory instructions\n\
         {module}:51: device::global_store in saxpy observed, but no probe attaches\n\
         3 sites\n"
    );
    assert_eq!(r.stderr, want);
    let ptx = std::fs::read_to_string(&out).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
    let original = std::fs::read_to_string(saxpy()).expect("saxpy.ptx");
    assert!(ptx.len() > original.len() && ptx.contains("ld.global.nc.f32 \t%f2, [%rd6];"));
    check_ptx("egpu inject saxpy.ptx -o out.ptx", &ptx);
    print!("{}", r.stderr);

    // Without -o, the module goes to standard output; `--kernel saxpy` selects the one kernel.
    let r = succeeds(&[
        "inject".into(),
        saxpy().into_os_string(),
        "--probe".into(),
        probe_exit.clone(),
        "--kernel".into(),
        "saxpy".into(),
    ]);
    assert!(r.stderr.ends_with("1 sites\n"), "{}", r.stderr);
    assert!(r.stdout.contains(".entry saxpy("), "{}", r.stdout);
    check_ptx("egpu inject saxpy.ptx --kernel saxpy", &r.stdout);

    // A kernel the module does not have is refused: see item 8 of issue 18, below.
}

/// `--registers`: what instrumenting costs each kernel, by ptxas before and after.
#[test]
fn inject_says_what_a_kernel_costs_in_registers() {
    let Some(ptxas) = require_ptxas() else { return };
    let dir = TempDir::new("registers");
    let load = dir.file("load.s", LOAD_PROBE);
    let mut probe = std::ffi::OsString::from("device::global_load=");
    probe.push(&load);
    let out = dir.0.join("out.ptx");
    let args = [
        "inject".into(),
        saxpy().into_os_string(),
        "--probe".into(),
        probe,
        "--registers".into(),
        "-o".into(),
        out.clone().into_os_string(),
    ];
    let with = |ptxas: &Path| {
        Command::new(egpu()).args(&args).env("EGPU_PTXAS", ptxas).output().expect("egpu runs")
    };
    let r = with(ptxas.path());
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.contains(": saxpy: registers "))
        .unwrap_or_else(|| panic!("{stderr}"));
    // `registers B -> A`: what ptxas says of the module and of the instrumented one written.
    let numbers: Vec<u32> =
        line.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse().ok()).collect();
    let registers = |ptx: &str| {
        let report = ptxas.check(ptx, ARCH).expect("ptxas accepts it");
        report.function("saxpy").and_then(|f| f.registers).expect("saxpy's registers")
    };
    let original = std::fs::read_to_string(saxpy()).expect("saxpy.ptx");
    let written = std::fs::read_to_string(&out).expect("the instrumented module");
    assert_eq!((numbers[0], numbers[1]), (registers(&original), registers(&written)), "{line}");
    for shown in ["local memory ", " bytes, blocks of 256 threads per SM ", "(128: ", "1024: "] {
        assert!(line.contains(shown), "{shown} in {line}");
    }
    println!("{line}");
    // No ptxas: said, and a failure.
    let r = with(&dir.0.join("no-ptxas"));
    assert_eq!(r.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&r.stderr).contains("--registers needs ptxas"));
}

#[test]
fn inject_says_which_accesses_make_runs() {
    // bytes[kernel_id] += size: at saxpy's two 4-byte loads, 4 added to a register each.
    let bytes = workspace_path("tests/probes/kernel_bytes.s");
    let probe = format!("device::global_load={}", bytes.display());
    let saxpy = saxpy();
    let args = ["inject", saxpy.to_str().expect("a UTF-8 path"), "--probe", &probe];
    let r = succeeds(&[&args[..], &["--map", "bytes=hash:8:8:1024"]].concat());
    let line = format!(
        "{}: 2 accesses whose probes only add counts and sizes to the kernel's values: they \
         add them to registers, flushed when a thread exits",
        saxpy.display()
    );
    assert!(r.stderr.lines().any(|l| l == line), "{}", r.stderr);
    assert_eq!(r.stdout.matches("add.u64 %egpu_hs0_0, %egpu_hs0_0, 4;").count(), 2);
    // bytes[block] += size: the two loads, one after the other, make one run.
    let by_block = std::fs::read_to_string(&bytes)
        .expect("the probe")
        .replace("ldxdw %r0, [%r9+8]", "ldxw %r0, [%r9+36]");
    let dir = TempDir::new("runs");
    let by_block_path = dir.0.join("by_block.s");
    std::fs::write(&by_block_path, by_block).expect("written");
    let probe = format!("device::global_load={}", by_block_path.display());
    let args = ["inject", saxpy.to_str().expect("a UTF-8 path"), "--probe", &probe];
    let r = succeeds(&[&args[..], &["--map", "bytes=hash:8:8:1024"]].concat());
    let line = format!(
        "{}: 2 accesses in 1 run of straight-line code: probes that only add the size run once \
         per run, at its last access, with the run's total",
        saxpy.display()
    );
    assert!(r.stderr.lines().any(|l| l == line), "{}", r.stderr);
    assert_eq!(r.stdout.matches("_run, 0;").count(), 2, "declared, then reset after the probe");
}

#[test]
fn inject_takes_a_fat_binarys_ptx_for_an_architecture() {
    use egpu_device::testing::fatbin_with;
    let dir = TempDir::new("fatbin");
    let text = std::fs::read_to_string(saxpy()).expect("saxpy.ptx");
    let for_sm = |sm: u32| text.replace(".target sm_90", &format!(".target sm_{sm}"));
    let (p80, p90) = (for_sm(80), for_sm(90));
    let cubin = (2, 90, 0, &b"\x7fELF\0\0\0\0"[..], 8);
    let both = dir.file(
        "both.fatbin",
        fatbin_with(&[
            cubin,
            (1, 80, 0, p80.as_bytes(), p80.len()),
            (1, 90, 0, p90.as_bytes(), p90.len()),
        ]),
    );
    let probe =
        format!("device::kernel_entry={}", workspace_path("tests/probes/count.s").display());
    let inject = |extra: &[&str]| -> Vec<String> {
        let head = ["inject", both.to_str().expect("a UTF-8 path"), "--probe", &probe];
        head.iter().chain(extra).map(|a| a.to_string()).collect()
    };
    // The newest PTX by default, else the newest a device of the architecture runs.
    let r = succeeds(&inject(&["--map", "counts=array:4:8:1"]));
    assert!(r.stdout.contains(".target sm_90") && r.stdout.contains("egpu"), "{}", r.stdout);
    let r = succeeds(&inject(&["--map", "counts=array:4:8:1", "--arch", "sm_86"]));
    assert!(r.stdout.contains(".target sm_80"), "{}", r.stdout);
    fails(
        &inject(&["--map", "counts=array:4:8:1", "--arch", "sm_75"]),
        1,
        &["a fat binary with no PTX for sm_75"],
    );
    fails(&inject(&["--arch", "ninety"]), 2, &["not an architecture such as sm_90"]);
    // Cubins only, and a fat binary cut short: said, with the file's name.
    let inject_file = |path: &Path, why: &str| {
        let file = path.to_str().expect("a UTF-8 path");
        fails(&["inject", file, "--probe", &probe, "--map", "counts=array:4:8:1"], 1, &[why]);
    };
    let cubins = dir.file("cubins.fatbin", fatbin_with(&[cubin]));
    inject_file(&cubins, "cubins.fatbin: a fat binary with no PTX (cubins only)");
    let bytes = std::fs::read(&both).expect("the fat binary");
    let cut = dir.file("cut.fatbin", &bytes[..bytes.len() - 9]);
    inject_file(&cut, "cut.fatbin: malformed fat binary");
}

#[test]
fn maps_are_declared_on_the_command_line() {
    let probes = workspace_path("tests/probes");
    let pages = probes.join("page_count.s");
    let saxpy = saxpy();
    // A hash map at a given address: its header's address is a constant of the code.
    let map = "pages=hash:8:8:1048576@7f0000000000";
    let probe = format!("device::global_load={}", pages.display());
    let r = succeeds(&[
        "inject",
        saxpy.to_str().expect("a UTF-8 path"),
        "--probe",
        &probe,
        "--map",
        map,
    ]);
    check_ptx("egpu inject saxpy.ptx --probe page_count.s --map pages=hash:...", &r.stdout);
    let shard = 0x7f00_0000_0000_u64 + 128;
    assert!(r.stdout.contains(&shard.to_string()), "the shard's address is in the code");
    assert_eq!(r.stderr.lines().last(), Some("2 sites"));
    // A ring per SM, translated on its own.
    let trace = probes.join("trace.s");
    let r = succeeds(&[
        "translate",
        trace.to_str().expect("a UTF-8 path"),
        "--map",
        "trace=ringbuf:0:16:1024:132@100000",
    ]);
    check_ptx("egpu translate trace.s --map trace=ringbuf:...", &r.stdout);
    assert!(r.stdout.contains("st.global.v2.u64"), "{}", r.stdout);
    // Without `--map`, a program that uses a map is refused by name.
    fails(&["translate", pages.to_str().expect("a UTF-8 path")], 1, &["map index 0"]);
    // A map that does not fit the program (4-byte values, 8-byte adds): the verifier says why.
    fails(
        &["translate", pages.to_str().expect("a UTF-8 path"), "--map", "pages=hash:8:4:16"],
        1,
        &["the verifier refused it", "pages"],
    );
    for (bad, why) in [
        ("pages", "expected NAME=KIND"),
        ("pages=hash:8:8", "expected KIND:KEY:VALUE:CAPACITY"),
        ("pages=lru:8:8:16", "the kind is one of"),
        ("pages=hash:8:x:16", "are numbers"),
        ("pages=hash:8:8:0", "capacity"),
        ("pages=hash:8:8:16:x", "SM_SHARDS `x` is not a number"),
        ("pages=hash:8:8:16@zz", "hexadecimal"),
        ("pages=array:8:8:16", "u32 index"),
    ] {
        let page = pages.to_str().expect("a UTF-8 path");
        fails(&["translate", page, "--map", bad], 2, &[why, "--map <MAP>", "try '--help'"]);
    }
}

/// Builds the stand-in driver and the launcher, and the preloaded library (egpu-preload's tests).
#[path = "../egpu-preload/tests/support/mod.rs"]
mod support;

#[test]
fn run_starts_a_program_under_the_library_and_maps_reads_it_live() {
    use std::io::{BufRead, Write};
    let dir = support::build("cli-run");
    let library = support::preload_library();
    let launcher = dir.join("launcher");
    let summary = dir.join("summary");
    // The launcher under `egpu run`: every call counted, exit status passed on.
    let r = succeeds(&[
        "run".as_ref(),
        "--library".as_ref(),
        library.as_os_str(),
        "--summary".as_ref(),
        summary.as_os_str(),
        "--".as_ref(),
        launcher.as_os_str(),
    ]);
    assert!(r.stdout.contains("parent driver launches 21 ptsz 1 other calls 28"), "{}", r.stdout);
    let parent = std::fs::read_dir(&dir)
        .expect("the directory")
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .find(|text| text.contains("_Z5kernAPf"))
        .expect("the parent's summary");
    assert!(parent.contains("launches 20\n") && parent.contains("copies htod 5 13056"), "{parent}");
    let failing = [
        "run".as_ref(),
        "--library".as_ref(),
        library.as_os_str(),
        "--".as_ref(),
        "sh".as_ref(),
        "-c".as_ref(),
        "exit 3".as_ref(),
    ];
    assert_eq!(run(&failing).code, 3, "the command's exit status");
    // A probe pack that cannot be read stops `egpu run` before the command starts.
    let bad_pack = dir.join("bad.pack");
    std::fs::write(&bad_pack, "egpu-probes 2\nprobe p host::nothing\nend\n").expect("write");
    let marker = dir.join("ran");
    let touch = format!("touch {}", marker.display());
    let refused = run(&[
        "run".as_ref(),
        "--library".as_ref(),
        library.as_os_str(),
        "--probes".as_ref(),
        bad_pack.as_os_str(),
        "--".as_ref(),
        "sh".as_ref(),
        "-c".as_ref(),
        touch.as_ref(),
    ]);
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("line 2") && refused.stderr.contains("host::nothing"),
        "{}",
        refused.stderr
    );
    assert!(!marker.exists(), "the command did not run");
    // While it runs, `egpu maps` lists it and reads its counts, and `egpu run` serves them.
    let mut child = Command::new(egpu())
        .args(["run".as_ref(), "--library".as_ref(), library.as_os_str()])
        .args(["--metrics", "127.0.0.1:0", "--kernel-names", "--"])
        .arg(&launcher)
        .arg("wait")
        .env("LD_LIBRARY_PATH", &dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("egpu run");
    let (_err, address) = cli_support::metrics_address(&mut child);
    let mut out = std::io::BufReader::new(child.stdout.take().expect("its output"));
    let mut line = String::new();
    out.read_line(&mut line).expect("a line");
    let pid = line.trim().strip_prefix("ready ").expect("ready <pid>").to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let report = loop {
        // The counts reach the shared maps as the program's threads publish them: wait for all.
        let r = succeeds(&["maps", &pid]);
        let all = r.stdout.contains("syncs context 1") && r.stdout.contains("launches 5\n");
        if all || std::time::Instant::now() > deadline {
            break r.stdout;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    assert!(report.contains("launches 5\n") && report.contains(" 5 _Z5kernAPf\n"), "{report}");
    // The same as JSON (issue 18, item 11): one document, counts as numbers.
    let json = succeeds(&["maps", &pid, "--json"]).stdout;
    let doc: serde_json::Value = serde_json::from_str(&json).expect("one JSON document");
    assert_eq!(doc["pid"].to_string(), pid, "{json}");
    assert_eq!(doc["launches"], 5, "{json}");
    let kernel = &doc["kernels"][0];
    assert_eq!((&kernel["name"], &kernel["launches"]), (&"_Z5kernAPf".into(), &5.into()), "{json}");
    assert_eq!(doc["syncs"]["context"], 1, "{json}");
    assert_eq!(doc["shapes"]["blocks"], 20, "{json}");
    assert!(doc.get("other").is_none(), "every line of the report is known: {json}");
    let listed = succeeds(&["maps"]).stdout;
    assert!(listed.contains(&format!("{pid}: launches 5")), "{listed}");
    let scrape = |path: &str| {
        use std::io::Read;
        let mut stream = std::net::TcpStream::connect(&address).expect("the metrics server");
        // HTTP/1.1 keeps a connection open unless asked not to; this test reads to its end.
        write!(stream, "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n")
            .expect("a request");
        let mut response = String::new();
        stream.read_to_string(&mut response).expect("a response");
        response
    };
    let metrics = scrape("/metrics");
    assert!(metrics.starts_with("HTTP/1.1 200 OK\r\n"), "{metrics}");
    assert!(metrics.contains("Content-Type: text/plain; version=0.0.4"), "{metrics}");
    let series = format!(
        "gpu_cuda_kernel_launch_calls_total{{pid=\"{pid}\",cuda_kernel_name=\"_Z5kernAPf\"}} 5"
    );
    assert!(metrics.contains(&series), "{metrics}");
    assert!(
        metrics.contains(&format!("gpu_cuda_device_synchronize_calls_total{{pid=\"{pid}\"}} 1"))
    );
    assert!(scrape("/other").starts_with("HTTP/1.1 404"));
    child.stdin.take().expect("its input").write_all(b"go\n").expect("a line");
    assert!(child.wait().expect("egpu run").success());
    fails(&["maps", &pid], 1, &[&format!("process {pid} has no egpu maps")]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn run_and_maps_refuse_what_they_cannot_do() {
    fails(&["run"], 2, &["required arguments were not provided", "<COMMAND>"]);
    fails(&["run", "--summary", "x"], 2, &["required arguments were not provided", "<COMMAND>"]);
    fails(&["run", "--library", "/no/such/library.so", "--", "true"], 1, &["does not exist"]);
    fails(&["run", "--metrics", "0.0.0.0:9400", "--", "true"], 2, &["a loopback address"]);
    fails(&["run", "--metrics", "localhost", "--", "true"], 2, &["an address and port"]);
    fails(&["run", "--kernel-names", "--", "true"], 2, &["not provided", "--metrics <ADDRESS>"]);
    fails(&["maps", "nope"], 2, &["not a process id"]);
    fails(&["maps", "1", "2"], 2, &["unexpected argument '2'"]);
    fails(&["maps", "1", "--watch", "0"], 2, &["a number of seconds"]);
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

#[test]
fn usage_errors_exit_with_2() {
    let dir = TempDir::new("usage");
    let load = dir.file("load.s", LOAD_PROBE);
    let load = load.to_str().expect("a UTF-8 temporary path");
    let none: [&str; 0] = [];
    // No subcommand: the help, on standard error.
    fails(&none, 2, &["Usage: egpu <COMMAND>", "translate", "run"]);
    fails(&["frobnicate"], 2, &["unrecognized subcommand 'frobnicate'", "Usage: egpu"]);
    fails(&["translate", load, "--bogus", "x"], 2, &["unexpected argument '--bogus'", "Usage:"]);
    fails(&["inject", "m.ptx", "-x"], 2, &["unexpected argument '-x'"]);
    fails(&["translate", load, "--attach"], 2, &["a value is required for '--attach <ATTACH>'"]);
    fails(&["translate"], 2, &["not provided", "<PROGRAM>"]);
    fails(&["translate", load, load], 2, &["unexpected argument"]);
    fails(&["translate", load, "--attach", "device::nowhere"], 2, &["unknown attach point"]);
    fails(&["translate", load, "--attach", "host::launch::enter"], 2, &["runs on the host"]);
    let saxpy = saxpy();
    let saxpy = saxpy.to_str().expect("a UTF-8 path");
    fails(&["inject", saxpy], 2, &["not provided", "--probe <[ATTACH=]PROGRAM>"]);
    fails(&["inject", saxpy, "--probe", load], 2, &["expected ATTACH=PROGRAM"]);
    let host = format!("host::launch::enter={load}");
    fails(
        &["inject", saxpy, "--probe", &host],
        2,
        &["host::launch::enter", "not a device attach point"],
    );
    let user = format!("user(8)={load}");
    fails(&["inject", saxpy, "--probe", &user], 2, &["not a device attach point"]);
    // Help is not an error.
    let r = succeeds(&["--help"]);
    assert!(r.stdout.contains("Usage: egpu") && r.stderr.is_empty(), "{}", r.stdout);
}

#[test]
fn failures_exit_with_1_and_say_why() {
    let dir = TempDir::new("failures");
    let load = dir.file("load.s", LOAD_PROBE);
    let load = load.to_str().expect("a UTF-8 temporary path");
    let missing = dir.0.join("missing.s");
    let missing = missing.to_str().expect("a UTF-8 temporary path");
    fails(&["translate", missing], 1, &["reading ", missing]);
    let saxpy = saxpy();
    let saxpy = saxpy.to_str().expect("a UTF-8 path");
    let probe = format!("device::global_load={missing}");
    fails(&["inject", saxpy, "--probe", &probe], 1, &["reading ", missing]);
    let missing_ptx = dir.0.join("missing.ptx");
    let missing_ptx = missing_ptx.to_str().expect("a UTF-8 temporary path");
    let probe = format!("device::global_load={load}");
    fails(&["inject", missing_ptx, "--probe", &probe], 1, &["reading ", missing_ptx]);

    // The verifier: r0 is never set; and a read past the end of the access context.
    let unset = dir.file("unset.s", "exit\n");
    let unset = unset.to_str().expect("a UTF-8 temporary path");
    fails(&["translate", unset], 1, &["unset.s", "verifier"]);
    let past = dir.file("past.s", "ldxdw %r0, [%r1+4096]\nexit\n");
    let past = past.to_str().expect("a UTF-8 temporary path");
    fails(&["translate", past], 1, &["past.s", "the verifier refused it"]);
    let probe = format!("device::kernel_exit={past}");
    fails(&["inject", saxpy, "--probe", &probe], 1, &["past.s", "the verifier refused it"]);

    // Text that does not assemble, and bytes that do not decode.
    let bad_asm = dir.file("bad.s", "mov %r0, 1\nfrobnicate %r0\nexit\n");
    fails(&["translate", bad_asm.to_str().expect("UTF-8")], 1, &["bad.s", "line 2"]);
    let bad_bytes = dir.file("bad.bin", [0xffu8, 0, 0, 0, 0, 0, 0, 0]);
    fails(&["translate", bad_bytes.to_str().expect("UTF-8")], 1, &["bad.bin"]);
    let odd_bytes = dir.file("odd.bin", [0x95u8, 0, 0]);
    fails(&["translate", odd_bytes.to_str().expect("UTF-8")], 1, &["odd.bin"]);

    // Malformed PTX: a kernel whose body never closes, an unterminated comment.
    let probe = format!("device::global_load={load}");
    for (name, text, line) in [
        (
            "open.ptx",
            ".version 9.0\n.target sm_90\n.address_size 64\n.entry k()\n{\n\tret;\n",
            "line 5",
        ),
        ("comment.ptx", ".version 9.0\n/* never\nends\n", "line 2"),
        ("header.ptx", ".version 9.0\n.visible .entry k(.param .u64 p)\n", "line 2"),
    ] {
        let ptx = dir.file(name, text);
        let ptx = ptx.to_str().expect("a UTF-8 temporary path");
        fails(&["inject", ptx, "--probe", &probe], 1, &[name, "reading the PTX", line]);
    }
    let wide = dir.file("wide.ptx", ".version 9.0\n.target sm_90\n.address_size 32\n");
    let wide = wide.to_str().expect("a UTF-8 temporary path");
    fails(&["inject", wide, "--probe", &probe], 1, &["wide.ptx", "64-bit modules only"]);
}

/// `--kernel` must name a PTX identifier that is not one of the translation's own names (such as
/// `e_f1`); `egpu translate` once printed, with exit code 0, modules that ptxas refused.
#[test]
fn translate_refuses_a_kernel_name_that_is_not_an_identifier() {
    let dir = TempDir::new("names");
    let calls = dir.file("calls.s", "mov %r1, 3\ncall local f\nexit\nf:\nmov %r0, %r1\nexit\n");
    let calls = calls.to_str().expect("a UTF-8 temporary path");
    for name in ["a b", "", "9k", "k%", "e_f1"] {
        let r = run(&["translate", calls, "--kernel", name]);
        assert_ne!(r.code, 0, "--kernel {name:?} printed a module:\n{}", r.stdout);
    }
}

/// `egpu run --otlp`: the counts of the command's processes reach an OpenTelemetry collector (a
/// stand-in here, listening on a loopback port) while it runs and once more when it ends, those
/// of processes that exited meanwhile included.
#[cfg(feature = "otlp")]
#[test]
fn run_pushes_the_metrics_to_an_otlp_collector() {
    use std::io::{Read, Write};
    let dir = support::build("cli-otlp");
    let library = support::preload_library();
    let collector = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let url = format!("http://{}", collector.local_addr().expect("its address"));
    let bodies = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let received = bodies.clone();
    std::thread::spawn(move || {
        for stream in collector.incoming().flatten() {
            let mut stream = stream;
            let mut request = Vec::new();
            let mut buf = [0u8; 65536];
            // The head, then as many body bytes as Content-Length says.
            while let Ok(n) = stream.read(&mut buf) {
                if n == 0 {
                    break;
                }
                request.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&request);
                if let Some(end) = text.find("\r\n\r\n") {
                    let length = text[..end]
                        .lines()
                        .find_map(|l| l.strip_prefix("Content-Length: "))
                        .and_then(|n| n.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    if request.len() >= end + 4 + length {
                        break;
                    }
                }
            }
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
            received.lock().expect("the bodies").push(String::from_utf8_lossy(&request).into());
        }
    });
    // The launcher counts, then waits for a line; its forked children exit meanwhile.
    let mut child = Command::new(egpu())
        .args(["run".as_ref(), "--library".as_ref(), library.as_os_str()])
        .args(["--otlp", &url, "--otlp-every", "0.2", "--"])
        .arg(dir.join("launcher"))
        .arg("wait")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("egpu run");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let launches = |body: &str, n: u32| {
        body.contains("\"name\":\"gpu.cuda.kernel.launch.calls\"")
            && body.contains(&format!("\"asInt\":\"{n}\""))
    };
    while !bodies.lock().expect("the bodies").iter().any(|b| launches(b, 5)) {
        assert!(std::time::Instant::now() < deadline, "no push with the 5 launches");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // Let it finish: one more launch, then the last push, after the process has exited.
    child.stdin.take().expect("stdin").write_all(b"go\n").expect("a line");
    let out = child.wait_with_output().expect("egpu run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let all = bodies.lock().expect("the bodies").clone();
    let last = all.last().expect("a push");
    assert!(last.starts_with("POST /v1/metrics HTTP/1.1\r\n"), "{last}");
    assert!(launches(last, 6), "the last push has all 6 launches: {last}");
    assert!(last.contains("\"key\":\"process.pid\""), "{last}");
    // An endpoint that is not plain HTTP is a usage error, before anything runs.
    let bad = run(&[
        "run".as_ref(),
        "--library".as_ref(),
        library.as_os_str(),
        "--otlp".as_ref(),
        "https://127.0.0.1:4318".as_ref(),
        "--".as_ref(),
        "true".as_ref(),
    ]);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("https is not supported"), "{}", bad.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The README's `egpu` commands (every `cargo run -p egpu-cli -- ...` of its shell blocks) run as
/// written, from the repository's root (what they write going to a temporary folder), and
/// succeed; one that needs a release build of an example that is not there says so and is left
/// out.
#[test]
fn item10_the_readmes_commands_run() {
    let readme = std::fs::read_to_string(workspace_path("README.md")).expect("README.md");
    let mut commands: Vec<String> = Vec::new();
    let mut in_shell = false;
    let mut pending = String::new();
    for line in readme.lines() {
        if line.starts_with("```") {
            in_shell = line == "```sh";
            continue;
        }
        if !in_shell {
            continue;
        }
        let code = line.split(" #").next().unwrap_or_default().trim_end();
        pending.push_str(code.trim_end_matches('\\'));
        pending.push(' ');
        if !code.ends_with('\\') {
            if let Some(args) = pending.trim().strip_prefix("cargo run -p egpu-cli -- ") {
                commands.push(args.to_string());
            }
            pending.clear();
        }
    }
    assert!(commands.len() >= 3, "the README shows {} egpu commands", commands.len());
    let dir = TempDir::new("readme");
    let mut ran = 0;
    for command in &commands {
        // As written, from the repository's root; what `-o` writes goes to the temporary folder.
        let mut args: Vec<String> = command.split_whitespace().map(str::to_string).collect();
        if let Some(i) = args.iter().position(|a| a == "-o")
            && let Some(out) = args.get_mut(i + 1)
        {
            *out = dir.0.join(out.as_str()).display().to_string();
        }
        let built = |a: &String| workspace_path(a.split(':').next().unwrap_or(a)).exists();
        let missing = args.iter().find(|a| a.starts_with("target/") && !built(a));
        if let Some(missing) = missing {
            eprintln!("README: `egpu {command}` left out: {missing} is not built here");
            continue;
        }
        let root = workspace_path(".");
        let out = Command::new(egpu()).args(&args).current_dir(&root).output().expect("egpu");
        assert!(
            out.status.success(),
            "README: `egpu {command}` failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        ran += 1;
    }
    assert!(ran >= 2, "only {ran} of the README's commands ran");
}

/// A pack's probes sampled by warps (`warps 32`, as `egpu mem`'s `timeline` writes them) run in
/// a copy of each kernel that only the sampled warps take; the other copy has none of them.
#[test]
fn inject_gives_a_packs_sampled_probes_a_copy_of_each_kernel() {
    use egpu::host::mem::{PageSize, Sampling, Set, pack_sampled};
    let dir = TempDir::new("sampled");
    let sampling: Sampling = "32".parse().expect("1 in 32");
    let pack = pack_sampled(&[Set::Timeline], PageSize::default(), sampling).expect("a pack");
    assert!(pack.to_text().contains("\nwarps 32\n"));
    let path = dir.file("timeline.pack", pack.to_text());
    let r = succeeds(&[
        "inject".into(),
        saxpy().into_os_string(),
        "--probe".into(),
        path.clone().into(),
    ]);
    let kernels = PtxModule::parse(&r.stdout).expect("PTX").entries().count();
    assert_eq!(r.stdout.matches("_sampled:\n").count(), kernels, "a copy per kernel");
    let (plain, sampled) = r.stdout.split_once("_sampled:\n").expect("two copies");
    assert!(plain.contains("ld.global") && !plain.contains("atom.global"), "{plain}");
    assert!(sampled.contains("atom.global"), "{sampled}");
    // A kernel whose warps wait for each other at `bar.sync` is sampled by whole blocks: the
    // warps of a block run one copy, its test reads no thread index.
    let reduce = workspace_path("tests/ptx/reduce.ptx");
    let r = succeeds(&["inject".into(), reduce.into_os_string(), "--probe".into(), path.into()]);
    let declared = r.stdout.find(".reg .pred %egpu_sampled;").expect("copies");
    let branch = r.stdout.find("bra $egpu_sampled;").expect("the branch to the sampled copy");
    let test = &r.stdout[declared..branch];
    assert!(test.contains("%ctaid.x") && !test.contains("%tid"), "{test}");
}

/// An eBPF ELF object from clang is a program like any other: `egpu inject --probe OBJECT` and
/// `OBJECT:NAME` inject its programs; an object for another machine is refused by name.
#[test]
fn inject_takes_a_clang_object() {
    let Some(clang) = egpu_test_support::require_clang("inject_takes_a_clang_object") else {
        return;
    };
    let dir = TempDir::new("inject-object");
    let object = egpu_test_support::bpf_object(&clang, "two_programs", &dir.0);
    let r = succeeds(&[
        "inject".into(),
        saxpy().into_os_string(),
        "--probe".into(),
        object.clone().into_os_string(),
    ]);
    assert!(r.stderr.ends_with("3 sites\n"), "{}", r.stderr);
    check_ptx("egpu inject --probe two_programs.o", &r.stdout);
    let mut one = object.clone().into_os_string();
    one.push(":stores");
    let r = succeeds(&["inject".into(), saxpy().into_os_string(), "--probe".into(), one]);
    assert!(r.stderr.ends_with("1 sites\n"), "{}", r.stderr);
    let mut bytes = std::fs::read(&object).expect("the object");
    bytes[18] = 62;
    let other = dir.0.join("x86.o");
    std::fs::write(&other, bytes).expect("written");
    fails(
        &["inject".into(), saxpy().into_os_string(), "--probe".into(), other.into_os_string()],
        1,
        &["not eBPF"],
    );
}
