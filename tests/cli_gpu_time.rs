//! `egpu run --kernel-times --gpu-time-report` (issue 28): the GPU time of a C program's launches
//! against the stand-in driver (1000 ns of its event clock per one-block kernel), made from two
//! known functions under two tags, per call site and per tag exactly, its folded stacks naming
//! the functions, and its flame graph an SVG that parses and names them; and the comparison of
//! `egpu-preload/tests/programs/sites_check.py` (Python launch sites per frame) on the report
//! of a Python launcher.

use std::process::Command;

#[expect(dead_code, reason = "this file makes no temporary folders")]
mod cli_support;
use cli_support::egpu;

/// Builds the stand-in driver and the preloaded library (egpu-preload's tests).
#[path = "../egpu-preload/tests/support/mod.rs"]
mod support;

#[test]
fn gpu_time_per_site_and_tag_is_the_launches_kernel_time() {
    let dir = support::build("cli-gpu-time");
    let d = dir.to_str().expect("a UTF-8 path");
    let exe = dir.join("gpu_time");
    let src = support::fixture("gpu_time.c");
    support::cc(&[
        "-O1",
        "-fno-omit-frame-pointer",
        "-rdynamic",
        "-o",
        exe.to_str().expect("a UTF-8 path"),
        src.to_str().expect("a UTF-8 path"),
        &format!("{d}/libcuda.so.1"),
        &format!("-Wl,--disable-new-dtags,-rpath,{d}"),
        "-ldl",
    ]);
    let report = dir.join("gpu-time.txt");
    let out = Command::new(egpu())
        .args(["run".as_ref(), "--library".as_ref(), support::preload_library().as_os_str()])
        .args(["--kernel-times".as_ref(), "--gpu-time-report".as_ref(), report.as_os_str()])
        .arg("--")
        .arg(&exe)
        .env("EGPU_SITES", "1")
        .output()
        .expect("egpu run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let text = std::fs::read_to_string(&report).expect("the report");
    let folded = std::fs::read_to_string(dir.join("gpu-time.txt.folded")).expect("folded");
    let svg = std::fs::read_to_string(dir.join("gpu-time.txt.svg")).expect("the SVG");

    print!("{text}");
    // Per site: the report's row whose stack starts with the function, and its folded line.
    let row = |first: &str| {
        text.lines().find(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            words.len() > 6 && words[0] == first && words[4] == first
        })
    };
    let sites = [("launch_alpha", 3u64), ("launch_beta", 6)];
    let mut site_exact = 0;
    for (function, launches) in sites {
        let row = row(function).unwrap_or_else(|| panic!("no site row for {function}:\n{text}"));
        let words: Vec<&str> = row.split_whitespace().collect();
        let seconds = format!("{:.9}", (launches * 1000) as f64 / 1e9);
        let ns = launches * 1000;
        let line = folded.lines().find(|l| {
            l.split(' ').next().is_some_and(|s| s.ends_with(&format!(";main;{function}")))
        });
        let right = words[1] == seconds
            && words[2] == launches.to_string()
            && words[5] == "<-"
            && words[6] == "main"
            && line.is_some_and(|l| l.ends_with(&format!(" {ns}")));
        assert!(right, "{function}: {row}\n{line:?}\n{text}\n{folded}");
        site_exact += 1;
    }
    println!("gpu time per site exact: {site_exact}/{}", sites.len());
    assert_eq!(folded.lines().count(), sites.len(), "{folded}");

    let tags = [(11u64, 5u64), (12, 4)];
    let mut tag_exact = 0;
    for (tag, launches) in tags {
        let expected = format!("{tag} {:.9} {launches}", (launches * 1000) as f64 / 1e9);
        let found =
            text.lines().any(|l| l.split_whitespace().collect::<Vec<_>>().join(" ") == expected);
        assert!(found, "tag {tag}: expected `{expected}` in\n{text}");
        tag_exact += 1;
    }
    println!("gpu time per tag exact: {tag_exact}/{}", tags.len());
    let tag_rows = text
        .lines()
        .filter(|l| {
            l.split_whitespace().count() == 3 && l.starts_with(|c: char| c.is_ascii_digit())
        })
        .count();
    assert_eq!(tag_rows, tags.len(), "{text}");

    // The flame graph: well-formed XML naming both functions.
    let mut reader = quick_xml::Reader::from_str(&svg);
    let mut texts = String::new();
    loop {
        match reader.read_event() {
            Ok(quick_xml::events::Event::Eof) => break,
            Ok(quick_xml::events::Event::Text(t)) => texts.push_str(&String::from_utf8_lossy(&t)),
            Ok(_) => {}
            Err(e) => panic!("the SVG is not XML at {}: {e}", reader.buffer_position()),
        }
    }
    for (function, _) in sites {
        assert!(texts.contains(function), "{function} not in the SVG's text");
    }
    println!("flame graph: XML, names launch_alpha and launch_beta");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `egpu-preload/tests/programs/sites_check.py`'s comparison (its `--from`), on a real report:
/// the Python launcher of `tests/sites.rs` (`sites.py`, launches through `ctypes` from known
/// functions, the GIL held and released, one from a thread of its own) under `egpu run
/// --kernel-times --gpu-time-report` with sites on, and a profile written here from what the
/// launcher says of each launch, as the training script writes torch.profiler's. On a GPU the
/// check compares a PyTorch program's launches with the profiler's frames the same way.
#[test]
fn sites_check_matches_the_launches_of_a_python_launcher_per_frame() {
    let python = std::env::var("EGPU_PYTHON").unwrap_or_else(|_| "python3".into());
    let Ok(version) = Command::new(&python).arg("--version").output() else {
        println!("skipped: no {python} to run the Python launcher (EGPU_PYTHON names another)");
        return;
    };
    let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
    if !(version.starts_with("Python 3.11.") || version.starts_with("Python 3.12.")) {
        println!("skipped: {version} is not read (CPython 3.11 and 3.12 are)");
        return;
    }
    let dir = support::build("cli-sites-check");
    let script = support::fixture("sites.py");
    let root = egpu_test_support::workspace_root();
    let report = dir.join("gpu-time.txt");
    let out = Command::new(egpu())
        .args(["run".as_ref(), "--library".as_ref(), support::preload_library().as_os_str()])
        .args(["--kernel-times".as_ref(), "--gpu-time-report".as_ref(), report.as_os_str()])
        .arg("--summary")
        .arg(dir.join("summary"))
        .arg("--")
        .arg(&python)
        .arg(&script)
        .arg(dir.join("libcuda.so.1"))
        .arg(&root)
        .arg("egpu")
        .env("EGPU_SITES", "1")
        .env("LD_LIBRARY_PATH", &dir)
        .output()
        .expect("egpu run");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));

    // The profile: each launch's innermost frame, as the launcher printed it.
    let file = script.to_str().expect("a UTF-8 path");
    let frames: Vec<[&str; 2]> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("launch "))
        .map(|l| [file, l.split(' ').nth(1).expect("a function")])
        .collect();
    assert_eq!(frames.len(), 10, "{stdout}");
    let profile = |frames: &[[&str; 2]]| {
        let kernels: Vec<serde_json::Value> = frames
            .iter()
            .map(|f| serde_json::json!({"name": "k", "op": "op", "thread": 1, "frame": f, "stack": []}))
            .collect();
        let profile = serde_json::json!({"kernels_total": frames.len(), "kernels": kernels,
            "unlinked": [], "losses": [], "torch": "-", "python": version});
        std::fs::write(dir.join("profile.json"), profile.to_string()).expect("profile.json");
    };
    let check = || {
        let out = Command::new(&python)
            .arg(egpu_test_support::workspace_path("egpu-preload/tests/programs/sites_check.py"))
            .args(["--egpu", "-", "--preload", "-", "--from"])
            .arg(&dir)
            .output()
            .expect("sites_check.py");
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    profile(&frames);
    let (ok, text) = check();
    println!("{text}");
    assert!(
        ok && text.contains("python launch sites match torch.profiler: 10/10 kernels"),
        "{text}"
    );

    // One launch put at another frame: the check finds it.
    let mut wrong = frames.clone();
    wrong[0][1] = "elsewhere";
    profile(&wrong);
    let (ok, text) = check();
    assert!(
        !ok && text.contains("python launch sites match torch.profiler: 9/10 kernels"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
