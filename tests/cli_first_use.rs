//! What a new user hit with the `egpu` command line (issue 18), one test per item: map keys
//! printed blank (1), a conventional command line (2), one way to name a program (3), the
//! attach points' spellings (5), silent no-ops (8), and the smaller points (11).

use std::path::{Path, PathBuf};

use egpu::ebpf::verifier::verify;
use egpu::ebpf::{AttachPoint, DeviceEvent, HostEvent, MapDef, MapKind, Phase, Program, assemble};
use egpu::pack::Pack;
use egpu_device::ptx::PtxModule;
use egpu_maps::layout::Geometry;
use egpu_test_support::workspace_path;

mod cli_support;
use cli_support::{TempDir, fails, run, succeeds};

fn saxpy() -> PathBuf {
    workspace_path("tests/ptx/saxpy.ptx")
}

fn page_count() -> PathBuf {
    workspace_path("tests/probes/page_count.s")
}

/// Reads the kernel id and a thread index of a `KernelCtx`.
const ENTRY_PROBE: &str = "ldxdw %r0, [%r1+0]\nldxw %r2, [%r1+8]\nadd %r0, %r2\nexit\n";

/// A stand-in for the preloaded library, for what happens before or around the command: the
/// dynamic loader says it cannot preload it and runs the command all the same.
fn no_library(dir: &TempDir) -> PathBuf {
    dir.file("libnothing.so", "")
}

/// A pack of two probes: `entry` (device::kernel_entry, counting into a hash map `COUNTS`) and
/// `launch` (host::launch::enter).
fn pack(dir: &TempDir) -> PathBuf {
    let counts = MapDef {
        name: "COUNTS".into(),
        kind: MapKind::Hash,
        key_size: 8,
        value_size: 8,
        capacity: 64,
    };
    let count = "ldxdw %r6, [%r1+0]\nstxdw [%r10-8], %r6\nlddw %r1, map[0]\nmov %r2, %r10\n\
                 add %r2, -8\ncall 1\nmov %r0, 0\nexit";
    let entry = AttachPoint::Device(DeviceEvent::KernelEntry);
    let program =
        Program::new(assemble(count).expect("assembles"), vec![counts], entry).expect("a program");
    let g = Geometry::new(MapKind::Hash, 8, 8, 64, 1, 0).expect("a geometry");
    let launch = AttachPoint::Host(HostEvent::Launch, Phase::Enter);
    let host = Program::new(assemble("mov %r0, 0\nexit").expect("assembles"), vec![], launch)
        .expect("a program");
    let mut pack = Pack::new();
    pack.push("entry", verify(&program).expect("verifies"), vec![g]).expect("pushed");
    pack.push("launch", verify(&host).expect("verifies"), vec![]).expect("pushed");
    dir.file("probes.pack", pack.to_text())
}

fn s(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}

// ---------------------------------------------------------------------------------------------
// 1. User maps' keys
// ---------------------------------------------------------------------------------------------

/// A map keyed by grid size printed `map PER_GRID  2`: keys that are no kernel's id print as
/// numbers, 8-byte and 4-byte keys alike, in their order; `--json` gives the same entries.
#[test]
fn item1_user_map_keys_print_as_numbers() {
    use egpu::host::builtin::{Builtin, unlink, user_map_name};
    use egpu_maps::{Placement, RawMap, UpdateFlags};
    // This test's own process, with egpu's maps in shared memory as the preloaded library makes
    // them, and two user maps.
    let pid = std::process::id();
    let _builtin = Builtin::create(pid, true).expect("maps in shared memory");
    let mut made = Vec::new();
    for (map, key_size, entries) in [
        ("PER_GRID", 8, &[(2u64, 3u64), (4, 1), (10, 7)][..]),
        ("PER_BLOCK", 4, &[(128, 5), (32, 9)][..]),
    ] {
        let g = Geometry::new(MapKind::Hash, key_size, 8, 16, 1, 0).expect("a geometry");
        let name = user_map_name(pid, map);
        let raw = RawMap::create(g, &Placement::Shared(name.clone().into())).expect("a map");
        for (k, v) in entries {
            let key = &k.to_le_bytes()[..key_size as usize];
            raw.update(key, &v.to_le_bytes(), UpdateFlags::Any).expect("an entry");
        }
        made.push((name, raw));
    }
    // A ring of four 16-byte records, six written: what it holds and dropped, not its records.
    let g = Geometry::new(MapKind::RingBuf, 0, 16, 4, 1, 0).expect("a geometry");
    let name = user_map_name(pid, "EVENTS");
    let ring = RawMap::create(g, &Placement::Shared(name.clone().into())).expect("a ring");
    for i in 0..6u64 {
        let _ = ring.output(&i.to_le_bytes());
    }
    made.push((name, ring));
    let pid = pid.to_string();
    let text = succeeds(&["maps", &pid]).stdout;
    for want in [
        "map PER_GRID 2 3\nmap PER_GRID 4 1\nmap PER_GRID 10 7\n",
        "map PER_BLOCK 32 9\nmap PER_BLOCK 128 5\n",
        "ring EVENTS records of 16 B: pending 4 dropped 2\n",
    ] {
        assert!(text.contains(want), "{want:?} in\n{text}");
    }
    let json = succeeds(&["maps", &pid, "--json"]).stdout;
    let doc: serde_json::Value = serde_json::from_str(&json).expect("one JSON document");
    let maps = doc["maps"].as_array().expect("maps");
    let grid = maps.iter().find(|m| m["name"] == "PER_GRID").expect("PER_GRID");
    assert_eq!(grid["key_size"], 8);
    let keys: Vec<&str> = grid["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| e["key"].as_str())
        .collect();
    assert_eq!(keys, ["2", "4", "10"], "{json}");
    let events = maps.iter().find(|m| m["name"] == "EVENTS").expect("EVENTS");
    assert_eq!((&events["pending"], &events["dropped"]), (&4.into(), &2.into()), "{json}");
    drop(made);
    unlink(pid.parse().expect("a pid"));
}

/// Builds the stand-in driver and the launcher, and the preloaded library (egpu-preload's tests).
#[path = "../egpu-preload/tests/support/mod.rs"]
mod support;

/// The stand-in launcher run under `egpu run --probes PROBES --summary`: the summary of its
/// parent process (which launched `_Z5kernAPf`), with map `map`'s lines.
fn launcher_summary(
    dir: &std::path::Path,
    library: &std::path::Path,
    probes: &std::path::Path,
    map: &str,
) -> String {
    let summary = dir.join("summary");
    succeeds(&[
        "run".as_ref(),
        "--library".as_ref(),
        library.as_os_str(),
        "--probes".as_ref(),
        probes.as_os_str(),
        "--summary".as_ref(),
        summary.as_os_str(),
        "--".as_ref(),
        dir.join("launcher").as_os_str(),
    ]);
    std::fs::read_dir(dir)
        .expect("the directory")
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .find(|text| text.contains("_Z5kernAPf") && text.contains(&format!("map {map}")))
        .expect("the parent's summary")
}

/// The case end to end: a host probe of a pack counts launches by grid size, under
/// `egpu run --probes PACK --summary PATH`; the summary prints each grid size as a number.
#[test]
fn item1_user_map_keys_print_as_numbers_in_the_summary() {
    let dir = support::build("cli-per-grid");
    let library = support::preload_library();
    // Counts by `LaunchCtx::grid[0]` (byte 40), as an 8-byte key.
    let per_grid = "ldxw %r6, [%r1+40]\nstxdw [%r10-8], %r6\nlddw %r1, map[0]\nmov %r2, %r10\n\
                    add %r2, -8\ncall 1\njeq %r0, 0, missing\nmov %r1, 1\nlock add [%r0+0], %r1\n\
                    ja out\nmissing:\nstdw [%r10-16], 1\nlddw %r1, map[0]\nmov %r2, %r10\n\
                    add %r2, -8\nmov %r3, %r10\nadd %r3, -16\nmov %r4, 0\ncall 2\nout:\n\
                    mov %r0, 0\nexit";
    let def = MapDef {
        name: "PER_GRID".into(),
        kind: MapKind::Hash,
        key_size: 8,
        value_size: 8,
        capacity: 64,
    };
    let launch = AttachPoint::Host(HostEvent::Launch, Phase::Enter);
    let program =
        Program::new(assemble(per_grid).expect("assembles"), vec![def], launch).expect("a program");
    let g = Geometry::new(MapKind::Hash, 8, 8, 64, 1, 0).expect("a geometry");
    let mut pack = Pack::new();
    pack.push("per_grid", verify(&program).expect("verifies"), vec![g]).expect("pushed");
    let pack_path = dir.join("per_grid.pack");
    std::fs::write(&pack_path, pack.to_text()).expect("the pack");
    let parent = launcher_summary(&dir, &library, &pack_path, "PER_GRID");
    let lines: Vec<&str> = parent.lines().filter(|l| l.starts_with("map PER_GRID")).collect();
    assert!(lines.len() > 1, "launches of several grid sizes:\n{parent}");
    let mut keys = Vec::new();
    for line in lines {
        let words: Vec<&str> = line.split(' ').collect();
        let [_, _, key, count] = words.as_slice() else { panic!("{line:?} in\n{parent}") };
        let key = key.parse::<u32>().unwrap_or_else(|_| panic!("a grid size: {line:?}\n{parent}"));
        assert!(count.parse::<u64>().is_ok_and(|n| n > 0), "a count: {line:?}");
        keys.push(key);
    }
    assert!(keys.is_sorted(), "in the keys' order: {keys:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------------------------
// 2. A conventional command line
// ---------------------------------------------------------------------------------------------

#[test]
fn item2_version_and_help_exit_0() {
    let r = succeeds(&["--version"]);
    assert_eq!(r.stdout, format!("egpu {}\n", env!("CARGO_PKG_VERSION")));
    for args in [&["run", "--help"][..], &["help", "inject"], &["maps", "-h"], &["help"]] {
        let r = succeeds(args);
        let sub = args.iter().find(|a| !a.starts_with('-') && **a != "help");
        let usage = format!("Usage: egpu {}", sub.copied().unwrap_or(""));
        assert!(r.stdout.contains(usage.trim_end()), "{args:?}: {}", r.stdout);
        assert!(r.stderr.is_empty(), "{args:?}: {}", r.stderr);
    }
}

#[test]
fn item2_unknown_flag_exits_2_with_one_usage_line() {
    for args in [
        &["translate", "x.s", "--bogus"][..],
        &["maps", "--frobnicate"],
        &["inject", "m.ptx"],
        &["run", "--summary", "x"],
        &["frobnicate"],
    ] {
        let r = fails(args, 2, &["error: "]);
        let usage: Vec<&str> = r.stderr.lines().filter(|l| l.starts_with("Usage: egpu ")).collect();
        assert_eq!(usage.len(), 1, "{args:?}: one usage line:\n{}", r.stderr);
        assert!(!r.stderr.contains("Options:"), "{args:?}: not the whole help:\n{}", r.stderr);
        assert!(r.stdout.is_empty());
    }
    // A misspelt flag gets a suggestion.
    fails(&["maps", "--jsn"], 2, &["--json"]);
}

#[test]
fn item2_flags_take_their_values_after_an_equals_sign() {
    let dir = TempDir::new("equals");
    let entry = dir.file("entry.s", ENTRY_PROBE);
    let spaced =
        succeeds(&["translate", s(&entry), "--attach", "device::kernel_entry", "--kernel", "k"]);
    let joined = succeeds(&["translate", s(&entry), "--attach=device::kernel_entry", "--kernel=k"]);
    assert_eq!(spaced.stdout, joined.stdout);
    assert!(joined.stdout.contains(".entry k("), "{}", joined.stdout);
}

#[test]
fn item2_completions_for_the_shells() {
    let bash = succeeds(&["completions", "bash"]).stdout;
    assert!(bash.contains("_egpu()") && bash.contains("translate") && bash.contains("--probes"));
    let zsh = succeeds(&["completions", "zsh"]).stdout;
    assert!(zsh.starts_with("#compdef egpu"), "{zsh}");
    assert!(succeeds(&["completions", "fish"]).stdout.contains("complete -c egpu"));
    fails(&["completions", "tcsh"], 2, &["invalid value 'tcsh'"]);
}

#[test]
fn item2_run_exits_as_its_command_does() {
    let dir = TempDir::new("exits");
    let library = no_library(&dir);
    let lib = s(&library);
    let status = |command: &[&str]| {
        let mut args = vec!["run", "--library", lib, "--"];
        args.extend_from_slice(command);
        run(&args)
    };
    assert_eq!(status(&["sh", "-c", "exit 3"]).code, 3);
    assert_eq!(status(&["sh", "-c", "kill -TERM $$"]).code, 128 + 15);
    let missing = status(&["/no/such/command"]);
    assert_eq!(missing.code, 127, "{}", missing.stderr);
    assert!(missing.stderr.contains("/no/such/command: command not found"), "{}", missing.stderr);
    let plain = dir.file("not-executable", "#!/bin/sh\nexit 0\n");
    let refused = status(&[s(&plain)]);
    assert_eq!(refused.code, 126, "{}", refused.stderr);
    assert!(refused.stderr.contains("not-executable"), "{}", refused.stderr);
    // Without `--`, the command starts at the first word that is not egpu's.
    assert_eq!(run(&["run", "--library", lib, "sh", "-c", "exit 4"]).code, 4);
}

// ---------------------------------------------------------------------------------------------
// 3. One way to name a program
// ---------------------------------------------------------------------------------------------

#[test]
fn item3_a_pack_probe_is_named_pack_colon_name() {
    let dir = TempDir::new("packs");
    let pack = pack(&dir);
    let entry = format!("{}:entry", s(&pack));
    let ptx = succeeds(&["translate", &entry]).stdout;
    PtxModule::parse(&ptx).unwrap_or_else(|e| panic!("{e}\n{ptx}"));
    assert!(ptx.contains(".entry probe(") && ptx.contains("%tid.x"), "{ptx}");
    // Bytecode of the same program, its map declared where the pack's first map is placed: the
    // same PTX.
    let text = std::fs::read_to_string(&pack).expect("the pack");
    let back = Pack::parse(&text).expect("parses");
    let bytes = dir.file("entry.bin", back.probes()[0].program.program().to_bytes());
    let same = succeeds(&[
        "translate",
        s(&bytes),
        "--attach",
        "device::kernel_entry",
        "--map",
        "COUNTS=hash:8:8:64@7f0000000000",
    ]);
    assert_eq!(same.stdout, ptx);
    // What is not one probe of a pack is refused, saying what there is.
    fails(&["translate", s(&pack)], 1, &["holds 2 probes", "`entry` (device::kernel_entry)"]);
    let launch = format!("{}:launch", s(&pack));
    fails(&["translate", &launch], 1, &["host::launch::enter", "runs on the host"]);
    let nope = format!("{}:nope", s(&pack));
    fails(&["translate", &nope], 1, &["no probe `nope`", "`launch` (host::launch::enter)"]);
    fails(&["translate", &entry, "--map", "X=hash:8:8:4"], 2, &["carries its own"]);
    fails(&["translate", &entry, "--attach", "device::kernel_exit"], 2, &["kernel_entry probe"]);
    let asm = dir.file("entry.s", ENTRY_PROBE);
    let not_a_pack = format!("{}:entry", s(&asm));
    fails(&["translate", &not_a_pack], 1, &["entry.s is not a probe pack"]);
    // `inject` takes the same names: a pack alone means its device probes.
    let r = succeeds(&["inject", s(&saxpy()), "--probe", s(&pack)]);
    assert!(r.stderr.contains("device::kernel_entry in saxpy\n"), "{}", r.stderr);
    assert!(r.stderr.ends_with("observed 3 of 3 global memory instructions\n1 sites\n"));
    let r = succeeds(&["inject", s(&saxpy()), "--probe", &entry]);
    assert!(r.stderr.ends_with("1 sites\n"), "{}", r.stderr);
    fails(&["inject", s(&saxpy()), "--probe", &launch], 1, &["not a device probe"]);
    let at_exit = format!("device::kernel_exit={}", s(&pack));
    fails(&["inject", s(&saxpy()), "--probe", &at_exit], 1, &["no device probes at"]);
    // And `run --probes`: a pack, or one of its probes.
    let library = no_library(&dir);
    let r = succeeds(&["run", "--library", s(&library), "--probes", &entry, "--", "true"]);
    assert!(r.stderr.contains(&format!("egpu: 1 probes from {entry}")), "{}", r.stderr);
    fails(&["run", "--library", s(&library), "--probes", &nope, "--", "true"], 1, &["nope"]);
}

#[test]
fn a_packs_probes_share_each_map_by_name() {
    // `entry` counts in COUNTS; `exit`'s table is [OTHER, COUNTS] and it counts in COUNTS: one
    // map, at the first placeholder address (0x7f0000000000) in both; OTHER is at the next.
    let def = |name: &str| MapDef {
        name: name.into(),
        kind: MapKind::Hash,
        key_size: 8,
        value_size: 8,
        capacity: 64,
    };
    let g = Geometry::new(MapKind::Hash, 8, 8, 64, 1, 0).expect("a geometry");
    let count = |map: usize| {
        format!(
            "ldxdw %r6, [%r1+0]\nstxdw [%r10-8], %r6\nlddw %r1, map[{map}]\nmov %r2, %r10\n\
             add %r2, -8\ncall 1\nmov %r0, 0\nexit"
        )
    };
    let program = |code: String, maps: Vec<MapDef>, event| {
        let p = Program::new(assemble(&code).expect("assembles"), maps, AttachPoint::Device(event))
            .expect("a program");
        verify(&p).expect("verifies")
    };
    let mut pack = Pack::new();
    let entry = program(count(0), vec![def("COUNTS")], DeviceEvent::KernelEntry);
    let exit = program(count(1), vec![def("OTHER"), def("COUNTS")], DeviceEvent::KernelExit);
    pack.push("entry", entry, vec![g]).expect("pushed");
    pack.push("exit", exit, vec![g, g]).expect("pushed");
    let dir = TempDir::new("shared-maps");
    let pack = dir.file("probes.pack", pack.to_text());
    let r = succeeds(&["inject", s(&saxpy()), "--probe", s(&pack)]);
    // A hash map's table follows its 128-byte header.
    let table = |base: u64| format!(" {};", base + 128);
    let (counts, other) = (0x7f00_0000_0000_u64, 0x7f01_0000_0000_u64);
    let entry_code = &r.stdout[..r.stdout.find("ld.global.f32").expect("saxpy's first load")];
    let exit_code = &r.stdout[r.stdout.rfind("ld.global.f32").expect("saxpy's last load")..];
    for code in [entry_code, exit_code] {
        assert!(code.contains(&table(counts)), "{}", r.stdout);
        assert!(!code.contains(&table(other)), "{}", r.stdout);
    }
}

/// A key size smaller than the program's keys is refused, not truncated: `page_count.s` keys
/// its map by an 8-byte page number.
#[test]
fn item3_maps_narrower_than_the_programs_keys_are_refused() {
    let pages = page_count();
    let r = fails(
        &["translate", s(&pages), "--map", "pages=hash:4:8:16"],
        1,
        &["page_count.s", "map `pages` is declared with 4-byte keys", "writes 8 bytes"],
    );
    assert!(r.stdout.is_empty());
    let probe = format!("device::global_load={}", s(&pages));
    fails(
        &["inject", s(&saxpy()), "--probe", &probe, "--map", "pages=hash:4:8:16"],
        1,
        &["4-byte"],
    );
    // The keys the program writes fit: accepted.
    succeeds(&["translate", s(&pages), "--map", "pages=hash:8:8:16"]);
}

// ---------------------------------------------------------------------------------------------
// 5. Attach points
// ---------------------------------------------------------------------------------------------

/// `#[egpu::probe(host::launch)]` is the macro's spelling: the command line and packs read it.
#[test]
fn item5_attach_points_are_spelled_as_in_the_macro() {
    let dir = TempDir::new("attach");
    let entry = dir.file("entry.s", ENTRY_PROBE);
    fails(
        &["translate", s(&entry), "--attach", "host::launch"],
        2,
        &["host::launch::enter runs on the host"],
    );
    let probe = format!("host::memcpy={}", s(&entry));
    fails(&["inject", s(&saxpy()), "--probe", &probe], 2, &["host::memcpy::enter is not a device"]);
    fails(&["translate", s(&entry), "--attach", "user"], 2, &["user(N)"]);
    // A pack written with the macro's spelling.
    let pack = dir.file(
        "short.pack",
        "egpu-probes 2\nprobe p host::launch\ncode b7000000000000009500000000000000\nend\n",
    );
    let p = format!("{}:p", s(&pack));
    fails(&["translate", &p], 1, &["host::launch::enter probe"]);
}

// ---------------------------------------------------------------------------------------------
// 8. Silent no-ops
// ---------------------------------------------------------------------------------------------

/// `--summary` in a folder that does not exist fails before the command runs, rather than
/// writing nothing and saying nothing (egpu does not make folders it was not asked to).
#[test]
fn item8_run_summary_in_a_missing_folder_fails() {
    let dir = TempDir::new("summary");
    let library = no_library(&dir);
    let marker = dir.0.join("ran");
    let touch = format!("touch {}", marker.display());
    fails(
        &[
            "run",
            "--library",
            s(&library),
            "--summary",
            "/nonexistent/dir/s",
            "--",
            "sh",
            "-c",
            &touch,
        ],
        1,
        &["--summary /nonexistent/dir/s", "/nonexistent/dir does not exist"],
    );
    assert!(!marker.exists(), "the command did not run");
    let file = dir.file("plain", "");
    let inside = format!("{}/s", s(&file));
    fails(
        &["run", "--library", s(&library), "--summary", &inside, "--", "true"],
        1,
        &["is not a folder"],
    );
    // A folder that exists: the command runs.
    let fine = dir.0.join("s");
    succeeds(&["run", "--library", s(&library), "--summary", s(&fine), "--", "sh", "-c", &touch]);
    assert!(marker.exists());
}

#[test]
fn item8_maps_with_nothing_to_show_says_so() {
    let r = succeeds(&["maps"]);
    // Other processes may have egpu maps: then they are listed; else it says there are none.
    assert!(
        !r.stdout.is_empty() || r.stderr.contains("no process has egpu maps in shared memory"),
        "stdout {:?}, stderr {:?}",
        r.stdout,
        r.stderr
    );
    let json = succeeds(&["maps", "--json"]).stdout;
    let list: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert!(list.is_array(), "{json}");
}

#[test]
fn item8_maps_watch_without_a_pid_is_a_usage_error() {
    fails(&["maps", "--watch", "1"], 2, &["<PID>", "Usage: egpu maps"]);
}

#[test]
fn item8_inject_an_unknown_kernel_fails() {
    let dir = TempDir::new("kernel");
    let entry = dir.file("entry.s", ENTRY_PROBE);
    let probe = format!("device::kernel_entry={}", s(&entry));
    let out = dir.0.join("out.ptx");
    let r = fails(
        &["inject", s(&saxpy()), "--probe", &probe, "--kernel", "nosuchkernel", "-o", s(&out)],
        1,
        &["no kernel `nosuchkernel`", "its kernels: saxpy"],
    );
    assert!(r.stdout.is_empty() && !out.exists(), "nothing written");
}

// ---------------------------------------------------------------------------------------------
// 11. Smaller points
// ---------------------------------------------------------------------------------------------

#[test]
fn item11_probes_names_the_file_it_refused() {
    let dir = TempDir::new("refused");
    let ok = dir.file("ok.s", ENTRY_PROBE);
    let library = no_library(&dir);
    fails(
        &["run", "--library", s(&library), "--probes", s(&ok), "--", "true"],
        1,
        &[&format!("{}: not a probe pack", s(&ok))],
    );
    let bad = dir.file("bad.pack", "egpu-probes 2\nprobe p device::nowhere\nend\n");
    fails(
        &["run", "--library", s(&library), "--probes", s(&bad), "--", "true"],
        1,
        &[&format!("{}: line 2", s(&bad))],
    );
}

/// A C probe from clang runs under `egpu run --probes OBJECT` as a pack's does: memcpy_exit.c
/// adds the stand-in launcher's copies' bytes by direction, which the summary prints.
#[test]
fn a_clang_objects_host_probe_runs_under_egpu_run() {
    let Some(clang) =
        egpu_test_support::require_clang("a_clang_objects_host_probe_runs_under_egpu_run")
    else {
        return;
    };
    let dir = support::build("cli-clang-object");
    let library = support::preload_library();
    let object = egpu_test_support::bpf_object(&clang, "memcpy_exit", &dir);
    let parent = launcher_summary(&dir, &library, &object, "COPIED");
    let lines: Vec<&str> = parent.lines().filter(|l| l.starts_with("map COPIED")).collect();
    println!("{}", lines.join("\n"));
    // By kind: 0, the sets (cuMemsetD32 of 1024 words, cudaMemset of 1000 bytes); 1, host to
    // device (4096 three ways, cuMemcpy's 512, the 2D copy's 256); 2, device to host (100, and
    // cudaMemcpy's 256); 3, device to device (cudaMemcpy's default kind, 128).
    let want = ["map COPIED 0 5096", "map COPIED 1 13056", "map COPIED 2 356", "map COPIED 3 128"];
    assert_eq!(lines, want, "{parent}");
    let _ = std::fs::remove_dir_all(&dir);
}
