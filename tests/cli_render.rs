//! `egpu mem render`: the files it writes from the recordings of a real H200, without a GPU.

mod cli_support;

use std::path::Path;

use cli_support::{TempDir, fails, run, succeeds};

const PICTURES: [&str; 4] = ["heatmap", "bandwidth", "durations", "sms"];

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
    assert_eq!(r.stderr.lines().filter(|l| l.starts_with("egpu: rendering ")).count(), 3 * 5);
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
