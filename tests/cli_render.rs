//! `egpu mem render`: the files it writes from the recordings of a real H200, without a GPU.

mod cli_support;

use std::path::Path;

use cli_support::{TempDir, fails, run, succeeds};
use egpu_test_support::{compare_golden, workspace_path};

const PICTURES: [&str; 5] = ["heatmap", "bandwidth", "durations", "sms", "allocations"];

/// A PNG's width and height, after checking its signature and that it decodes.
fn png_size(path: &Path) -> (u32, u32) {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut reader = png::Decoder::new(std::io::BufReader::new(file))
        .read_info()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut buffer = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buffer).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (info.width, info.height)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn render_writes_every_file_of_every_recording() {
    let out = TempDir::new("render");
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/mem");
    let names = ["mem_timing-h200", "mem_timing-pattern-h200", "mem_timing-timeline-h200"];
    let mut args: Vec<String> = vec!["mem".into(), "render".into()];
    args.extend(names.iter().map(|n| data.join(format!("{n}.egpumem")).display().to_string()));
    args.extend(["--out".into(), out.0.display().to_string()]);
    let r = run(&args);
    assert_eq!(r.code, 0, "stdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    // Progress goes to stderr, a line per recording and per picture; stdout is only the pages.
    let pages: Vec<String> =
        names.iter().map(|n| out.0.join(n).join("index.html").display().to_string()).collect();
    assert_eq!(r.stdout.lines().collect::<Vec<_>>(), pages, "stdout:\n{}", r.stdout);
    for (n, name) in names.iter().enumerate() {
        let line = format!("egpu: rendering {} of 3: ", n + 1);
        assert!(r.stderr.contains(&format!("{line}{}", data.join(name).display())), "{}", r.stderr);
        for picture in PICTURES {
            assert!(r.stderr.contains(&format!("{line}{picture}\n")), "{}", r.stderr);
        }
    }
    assert_eq!(r.stderr.lines().filter(|l| l.starts_with("egpu: rendering ")).count(), 3 * 6);
    let top = read(&out.0.join("index.html"));
    for name in names {
        let dir = out.0.join(name);
        assert!(top.contains(&format!("href=\"{name}/index.html\"")), "{top}");
        let report = read(&dir.join("report.txt"));
        assert!(report.contains("kernel") && report.contains("NVIDIA H200"), "{report}");
        let index = read(&dir.join("index.html"));
        assert!(index.starts_with("<!DOCTYPE html>"), "{index}");
        for picture in PICTURES {
            assert_eq!(png_size(&dir.join(format!("{picture}.png"))), (1200, 720));
            let svg = read(&dir.join(format!("{picture}.svg")));
            assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "{picture}");
            assert!(index.contains(&format!("<img src=\"{picture}.svg\"")), "{index}");
        }
    }
    // The pictures with data carry their axes' labels; those without say which set to run.
    let timeline = out.0.join("mem_timing-timeline-h200");
    let heatmap = read(&timeline.join("heatmap.svg"));
    assert!(heatmap.contains("device time") && heatmap.contains("address ("), "heatmap axes");
    let bandwidth = read(&timeline.join("bandwidth.svg"));
    assert!(bandwidth.contains("bandwidth (GB/s)") && bandwidth.contains("device peak"));
    let sms = read(&timeline.join("sms.svg"));
    assert!(sms.contains("sampled warp requests") && sms.contains("4000 samples"), "sms axes");
    let durations = read(&out.0.join("mem_timing-h200").join("durations.svg"));
    assert!(durations.contains("launch duration") && durations.contains("38 launches"));
    let pattern = out.0.join("mem_timing-pattern-h200");
    assert!(read(&pattern.join("heatmap.svg")).contains("run with --sets timeline"));
    assert!(read(&pattern.join("sms.svg")).contains("run with --sets timeline"));
    assert!(read(&pattern.join("allocations.svg")).contains("run with --sets allocs"));
    assert!(read(&pattern.join("report.txt")).contains("durations: no launches timed"));
    // The table in the page is escaped (mangled names hold no `<`, the header's `(` stays).
    let index = read(&timeline.join("index.html"));
    assert!(index.contains("<pre>process ") && index.contains("_Z6phasesPKfPfxPKiiPi"));
}

#[test]
fn one_recording_is_rendered_into_the_folder_itself() {
    let out = TempDir::new("render-one");
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/mem");
    let file = data.join("mem_timing-timeline-h200.egpumem");
    succeeds(&[
        "mem".as_ref(),
        "render".as_ref(),
        file.as_os_str(),
        "--out".as_ref(),
        out.0.as_os_str(),
    ]);
    for f in ["report.txt", "index.html", "heatmap.png", "heatmap.svg", "bandwidth.png", "sms.png"]
    {
        assert!(out.0.join(f).is_file(), "{f}");
    }
}

#[test]
fn bad_recordings_are_refused() {
    let dir = TempDir::new("render-bad");
    let bad = dir.file("bad.egpumem", "{\"type\":\"kernel\"}\n");
    let out = dir.0.join("out");
    let (bad, out) = (bad.display().to_string(), out.display().to_string());
    fails(&["mem", "render", &bad, "--out", &out], 1, &["bad.egpumem", "line 1"]);
    fails(&["mem", "render", "/nonexistent.egpumem", "--out", &out], 1, &["nonexistent"]);
    fails(&["mem", "render", &bad], 2, &["--out"]);
}

/// Headless Chromium: `EGPU_CHROMIUM`, else `chromium` or `chromium-browser` on `PATH`; `None`
/// after saying why the test skips, or a failure when `EGPU_REQUIRE_CHROMIUM=1` (scripts/test,
/// after scripts/chromium installed it).
fn chromium() -> Option<std::path::PathBuf> {
    let on_path = |name: &str| {
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    };
    let found = match std::env::var_os("EGPU_CHROMIUM").filter(|v| !v.is_empty()) {
        Some(path) => Some(std::path::PathBuf::from(path)).filter(|p| p.is_file()),
        None => on_path("chromium").or_else(|| on_path("chromium-browser")),
    };
    if found.is_none() {
        let why = "no chromium (EGPU_CHROMIUM, or chromium on PATH; scripts/chromium installs it)";
        assert!(std::env::var("EGPU_REQUIRE_CHROMIUM").as_deref() != Ok("1"), "{why}");
        eprintln!("egpu: skipping test that needs chromium: {why}");
    }
    found
}

/// A screenshot of `page` by headless Chromium, 1280×2000, as RGB pixels.
fn screenshot(chromium: &Path, page: &Path, dir: &Path) -> Vec<[u8; 3]> {
    let shot = dir.join(format!("{}.png", page.parent().unwrap().file_name().unwrap().display()));
    let mut child = std::process::Command::new(chromium)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .arg(format!("--screenshot={}", shot.display()))
        .arg("--window-size=1280,2000")
        .arg(format!("file://{}", page.display()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", chromium.display()));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while child.try_wait().expect("chromium").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("chromium took over 120 s on {}", page.display());
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let output = child.wait_with_output().expect("chromium");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(shot.is_file(), "no screenshot of {} ({}):\n{stderr}", page.display(), output.status);
    let mut reader =
        png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap()))
            .read_info()
            .unwrap_or_else(|e| panic!("{}: {e}", shot.display()));
    let mut buffer = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buffer).unwrap_or_else(|e| panic!("{}: {e}", shot.display()));
    assert_eq!((info.width, info.height), (1280, 2000), "{}", shot.display());
    assert_eq!(info.bit_depth, png::BitDepth::Eight);
    let step = match info.color_type {
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        other => panic!("{}: colour type {other:?}", shot.display()),
    };
    buffer[..info.buffer_size()].chunks_exact(step).map(|p| [p[0], p[1], p[2]]).collect()
}

/// `index.html` in headless Chromium shows the table and the pictures: its screenshot is far
/// from blank, and differs from one of the same page whose pictures are missing by the plots and the
/// heatmap's yellow cells.
#[test]
fn index_html_renders_in_headless_chromium() {
    let Some(chromium) = chromium() else { return };
    let out = TempDir::new("render-chromium");
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data/mem/mem_timing-timeline-h200.egpumem");
    let full = out.0.join("full");
    succeeds(&[
        "mem".as_ref(),
        "render".as_ref(),
        file.as_os_str(),
        "--out".as_ref(),
        full.as_os_str(),
    ]);
    // The same page without its pictures.
    let bare = out.0.join("bare");
    std::fs::create_dir_all(&bare).unwrap();
    std::fs::copy(full.join("index.html"), bare.join("index.html")).unwrap();
    let shown = screenshot(&chromium, &full.join("index.html"), &out.0);
    let missing = screenshot(&chromium, &bare.join("index.html"), &out.0);
    let total = shown.len();
    let white = |p: &&[u8; 3]| p.iter().all(|&c| c >= 245);
    let inked = shown.iter().filter(|p| !white(p)).count();
    assert!(inked * 20 > total, "only {inked} of {total} pixels are not white");
    let differ = shown.iter().zip(&missing).filter(|(a, b)| a != b).count();
    assert!(differ * 20 > total, "only {differ} of {total} pixels show the pictures");
    // The heatmap's light cells, yellow (255, 237, 160) to olive: nothing else on the page is.
    let yellow = |p: &&[u8; 3]| p[0] > 150 && p[1] > 140 && u16::from(p[2]) + 40 < u16::from(p[0]);
    let (with, without) =
        (shown.iter().filter(yellow).count(), missing.iter().filter(yellow).count());
    assert!(
        with > 2000 && without < 50,
        "heatmap pixels: {with} shown, {without} without pictures"
    );
    eprintln!(
        "chromium: {inked} of {total} pixels inked, {differ} differ from the page without pictures, \
         {with} of the heatmap"
    );
}

/// The README and the book show pictures of real H200 runs as the command draws them now
/// (`EGPU_BLESS=1` rewrites them after a deliberate change): `book/src/images/NAME-h200.svg`.
#[test]
fn the_books_pictures_are_the_commands() {
    let out = TempDir::new("render-book");
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/mem");
    for (recording, pictures) in [
        ("mem_timing-timeline-h200", &["heatmap", "bandwidth", "sms"][..]),
        ("mem_timing-h200", &["durations"][..]),
    ] {
        let file = data.join(format!("{recording}.egpumem"));
        let dir = out.0.join(recording);
        succeeds(&[
            "mem".as_ref(),
            "render".as_ref(),
            file.as_os_str(),
            "--out".as_ref(),
            dir.as_os_str(),
        ]);
        for picture in pictures {
            let svg = read(&dir.join(format!("{picture}.svg")));
            let golden = workspace_path(format!("book/src/images/{picture}-h200.svg"));
            compare_golden(&golden, &svg).unwrap_or_else(|e| panic!("{e}"));
        }
    }
    // One kernel of a recording alone (`--kernel`): the hot page, and strided reads.
    let file = data.join("mem_timing-hot-strided-h200.egpumem");
    for kernel in ["hot", "strided"] {
        let dir = out.0.join(kernel);
        let args = ["mem", "render", "--kernel", kernel, "--out"];
        let mut args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
        args.extend([dir.as_os_str(), file.as_os_str()]);
        succeeds(&args);
        let svg = read(&dir.join("heatmap.svg"));
        let golden = workspace_path(format!("book/src/images/heatmap-{kernel}-h200.svg"));
        compare_golden(&golden, &svg).unwrap_or_else(|e| panic!("{e}"));
    }
    let readme = std::fs::read_to_string(workspace_path("README.md")).expect("README");
    let chapter = std::fs::read_to_string(workspace_path("book/src/pictures.md")).expect("chapter");
    for picture in ["heatmap", "bandwidth"] {
        assert!(
            readme.contains(&format!("book/src/images/{picture}-h200.svg")),
            "README: {picture}"
        );
    }
    for picture in ["heatmap", "bandwidth", "durations", "sms", "heatmap-hot", "heatmap-strided"] {
        assert!(chapter.contains(&format!("images/{picture}-h200.svg")), "pictures.md: {picture}");
    }
}

/// The allocations picture and the table's managed-memory section, from the `allocs` set's
/// recordings of two H200 runs (alloc_check.py: `alloc_traffic.cu`, `managed_touch.cu`).
#[test]
fn allocations_of_h200_recordings() {
    let out = TempDir::new("render-allocs");
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/mem");
    let traffic = data.join("alloc_traffic-allocs-h200.egpumem");
    succeeds(&[
        "mem".as_ref(),
        "render".as_ref(),
        traffic.as_os_str(),
        "--out".as_ref(),
        out.0.as_os_str(),
    ]);
    let svg = read(&out.0.join("allocations.svg"));
    // The five buffers: the one read in a loop hottest (20.97 MB), the one never touched an
    // empty row, each kernel a column.
    assert!(svg.contains("bytes per allocation × kernel"), "title");
    assert!(svg.contains("#2 4.19 MB") && svg.contains("#4 4.19 MB"), "rows");
    assert!(svg.contains("_Z11read_loopedPKfPf") && svg.contains("4.19 MB to 20.97 MB, log scale"));
    assert_eq!(png_size(&out.0.join("allocations.png")), (1200, 720));
    // A decoder's inference (examples/llm_memory.py): many kernels, their names down the
    // columns; the hottest rows its weights (2.10 MB, read 64 times).
    let llm = data.join("llm_memory-allocs-h200.egpumem");
    let many = TempDir::new("render-allocs-llm");
    let args = ["mem".as_ref(), "render".as_ref(), llm.as_os_str(), "--out".as_ref()];
    succeeds(&[&args[..], &[many.0.as_os_str()]].concat());
    let svg = read(&many.0.join("allocations.svg"));
    assert!(svg.contains("#62 2.10 MB, freed") && svg.contains("more allocations not drawn"));
    assert!(svg.contains("rotate(90") && svg.contains("triton_tem_fused_addmm_gelu_t_view"));
    let managed = data.join("managed_touch-allocs-h200.egpumem");
    let r = succeeds(&["mem".as_ref(), "report".as_ref(), managed.as_os_str()]);
    for line in [
        "64 of 64 pages of 4 KiB touched by kernels",
        "first touched by _Z11write_pagesPjii (launch 1): 16 pages (0..=15)",
        "first touched by _Z10read_pagesPKjiiS0_Pj (launch 2): 24 pages (16..=39)",
        "first touched by _Z10bump_pagesPjii (launch 3): 24 pages (40..=63)",
        "prefetched to a device 131.07 kB; advice: read mostly",
    ] {
        assert!(r.stdout.contains(line), "{line}\n{}", r.stdout);
    }
}
