//! Launch sites and context tags (issue 28) against the stand-in driver: a C launcher
//! (`tests/fixture/sites.c`) launching and copying from known functions, a Python launcher
//! through `ctypes` (`tests/fixture/sites.py`) from known functions and lines, and a Rust
//! program (this test binary, run again under the library) with `egpu::host::tags`' scope
//! guards. A host probe records each call's `site_id`, `tag_id`, `trace_id` and `span_id` in
//! maps keyed by the call (a launch's grid along x, a copy's bytes / 8, an allocation's bytes /
//! 4096), which the summary prints with the sites symbolised; each call is checked against
//! what the launcher printed it should be. Prints `launch sites attributed: N/N` and
//! `tags exact: N/N` for each launcher.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use egpu::ebpf::{AllocCtx, LaunchCtx, MemcpyCtx};
use egpu::maps::HashMap;
use support::{build, cc, fixture, preload_library};

/// Per call: its site, tag, trace id (high, low) and span, each in a map keyed by the call.
static SITE_OF: HashMap<u64, u64> = HashMap::with_capacity(256);
static TAG_OF: HashMap<u64, u64> = HashMap::with_capacity(256);
static TRACE_HIGH_OF: HashMap<u64, u64> = HashMap::with_capacity(256);
static TRACE_LOW_OF: HashMap<u64, u64> = HashMap::with_capacity(256);
static SPAN_OF: HashMap<u64, u64> = HashMap::with_capacity(256);

/// Launch `I` (grid `I` along x): key `I`.
#[egpu::probe(host::launch)]
fn launched(ctx: &LaunchCtx) {
    let k = ctx.grid[0] as u64;
    SITE_OF.insert(&k, &ctx.site_id);
    TAG_OF.insert(&k, &ctx.tag_id);
    TRACE_HIGH_OF.insert(&k, &ctx.trace_id[0]);
    TRACE_LOW_OF.insert(&k, &ctx.trace_id[1]);
    SPAN_OF.insert(&k, &ctx.span_id);
}

/// Copy `J` (`8 J` bytes): key `1000 + J`.
#[egpu::probe(host::memcpy)]
fn copied(ctx: &MemcpyCtx) {
    let k = 1000 + ctx.bytes / 8;
    SITE_OF.insert(&k, &ctx.site_id);
    TAG_OF.insert(&k, &ctx.tag_id);
    TRACE_HIGH_OF.insert(&k, &ctx.trace_id[0]);
    TRACE_LOW_OF.insert(&k, &ctx.trace_id[1]);
    SPAN_OF.insert(&k, &ctx.span_id);
}

/// Allocation `K` (`4096 K` bytes): key `2000 + K`.
#[egpu::probe(host::alloc)]
fn allocating(ctx: &AllocCtx) {
    if ctx.op == AllocCtx::ALLOC {
        let k = 2000 + ctx.bytes / 4096;
        SITE_OF.insert(&k, &ctx.site_id);
        TAG_OF.insert(&k, &ctx.tag_id);
        TRACE_HIGH_OF.insert(&k, &ctx.trace_id[0]);
        TRACE_LOW_OF.insert(&k, &ctx.trace_id[1]);
        SPAN_OF.insert(&k, &ctx.span_id);
    }
}

/// Writes the probes' pack into `dir`: its path.
fn pack(dir: &Path) -> PathBuf {
    let mut pack = egpu::pack::Pack::new();
    for probe in [launched::probe(), copied::probe(), allocating::probe()] {
        pack.add(probe).expect("the probe packs");
    }
    let path = dir.join("sites.pack");
    std::fs::write(&path, pack.to_text()).expect("the pack file");
    path
}

/// What one process's summary says: the maps' values by name and key, the sites' native and
/// Python frames by id, and the `sites` lines.
#[derive(Debug, Default)]
struct Seen {
    maps: BTreeMap<(String, u64), u64>,
    native: BTreeMap<u64, Vec<String>>,
    python: BTreeMap<u64, Vec<String>>,
    lines: Vec<String>,
}

impl Seen {
    fn read(text: &str) -> Seen {
        let mut seen = Seen::default();
        for line in text.lines() {
            let words: Vec<&str> = line.splitn(4, ' ').collect();
            match words.as_slice() {
                ["map", name, key, value] => {
                    let (Ok(k), Ok(v)) = (key.parse(), value.parse()) else { continue };
                    seen.maps.insert((name.to_string(), k), v);
                }
                ["site", id, kind, frames] => {
                    let frames = frames.split(" <- ").map(str::to_string).collect();
                    let id = id.parse().expect("a site id");
                    match *kind {
                        "native" => seen.native.insert(id, frames),
                        _ => seen.python.insert(id, frames),
                    };
                }
                ["sites", ..] => seen.lines.push(line.to_string()),
                _ => {}
            }
        }
        seen
    }

    fn value(&self, map: &str, key: u64) -> Option<u64> {
        self.maps.get(&(map.to_string(), key)).copied()
    }

    /// The tags call `key` carried: tag, trace high, trace low, span.
    fn tags(&self, key: u64) -> [Option<u64>; 4] {
        ["TAG_OF", "TRACE_HIGH_OF", "TRACE_LOW_OF", "SPAN_OF"].map(|m| self.value(m, key))
    }
}

/// The one summary in `dir` whose name starts with `prefix.`.
fn summary(dir: &Path, prefix: &str) -> String {
    for entry in std::fs::read_dir(dir).expect("the directory") {
        let path = entry.expect("an entry").path();
        let name = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
        if name.starts_with(&format!("{prefix}.")) {
            return std::fs::read_to_string(&path).expect("a summary");
        }
    }
    panic!("no summary {prefix} in {}", dir.display());
}

/// Runs `command` under the library with the probes' pack, sites captured (`sites`, as
/// `EGPU_SITES` takes it): its standard output and what its summary says.
fn run(dir: &Path, mut command: Command, name: &str, sites: &str) -> (String, Seen, String) {
    let out = command
        .env("LD_PRELOAD", preload_library())
        .env("LD_LIBRARY_PATH", dir)
        .env("EGPU_PROBES", pack(dir))
        .env("EGPU_SITES", sites)
        .env("EGPU_SUMMARY", dir.join(name))
        .output()
        .expect("running the launcher");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{name}: {stdout}\n{stderr}");
    let text = summary(dir, name);
    (stdout, Seen::read(&text), text)
}

/// Whether `frame` (`symbol+0xOFFSET`) is in `function`.
fn in_function(frame: Option<&String>, function: &str) -> bool {
    frame.is_some_and(|f| f.starts_with(&format!("{function}+")))
}

/// Tags as the launchers print them: tag in decimal, trace high and low and span in hex.
fn printed_tags(words: &[&str]) -> [Option<u64>; 4] {
    [
        words[0].parse().ok(),
        u64::from_str_radix(words[1], 16).ok(),
        u64::from_str_radix(words[2], 16).ok(),
        u64::from_str_radix(words[3], 16).ok(),
    ]
}

fn key(kind: &str, i: u64) -> u64 {
    match kind {
        "launch" => i,
        "copy" => 1000 + i,
        _ => 2000 + i,
    }
}

/// What a launcher's calls came to: how many, how many with their site found, with their tags
/// exact.
#[derive(Default)]
struct Tally {
    calls: usize,
    attributed: usize,
    exact: usize,
}

impl Tally {
    /// One call (`line`, the launcher's key `k`): whether its site is `here` (`site` and `frames`
    /// said otherwise), and whether the tags seen are those printed.
    fn call(
        &mut self,
        line: &str,
        here: bool,
        (site, frames): (Option<u64>, &dyn std::fmt::Debug),
        tags: (&[Option<u64>; 4], &[Option<u64>; 4]),
    ) {
        self.calls += 1;
        if here {
            self.attributed += 1;
        } else {
            eprintln!("{line}: site {site:?}, frames {frames:?}");
        }
        if tags.0 == tags.1 {
            self.exact += 1;
        } else {
            eprintln!("{line}: tags {:?}", tags.0);
        }
    }

    /// The two lines, under `title`, and every call attributed and exact (`text`: what to show).
    fn report(&self, title: &str, text: &str) {
        println!("{title}");
        println!("launch sites attributed: {}/{}", self.attributed, self.calls);
        println!("tags exact: {}/{}", self.exact, self.calls);
        assert_eq!((self.attributed, self.exact), (self.calls, self.calls), "{text}");
    }
}

/// The C launcher: every call's site is its function and that function's caller, by name; its
/// tags are the thread's when it was made.
#[test]
fn c_launches_carry_their_sites_and_tags() {
    let dir = build("sites");
    let d = dir.to_str().expect("a UTF-8 path");
    let exe = dir.join("sites");
    let src = fixture("sites.c");
    let rpath = format!("-Wl,--disable-new-dtags,-rpath,{d}");
    cc(&[
        "-O1",
        "-fno-omit-frame-pointer",
        "-rdynamic",
        "-o",
        exe.to_str().expect("a UTF-8 path"),
        src.to_str().expect("a UTF-8 path"),
        &format!("{d}/libcuda.so.1"),
        &rpath,
        "-ldl",
        "-pthread",
    ]);
    let (stdout, seen, text) = run(&dir, Command::new(&exe), "summary", "1");
    let mut tally = Tally::default();
    for line in stdout.lines() {
        let words: Vec<&str> = line.split(' ').collect();
        let [kind, i, function, caller, tags @ ..] = words.as_slice() else { continue };
        let k = key(kind, i.parse().expect("a call number"));
        let site = seen.value("SITE_OF", k).filter(|&s| s != 0);
        let frames = site.and_then(|s| seen.native.get(&s));
        let here = frames.is_some_and(|f| {
            in_function(f.first(), function) && (*caller == "-" || in_function(f.get(1), caller))
        });
        tally.call(line, here, (site, &frames), (&seen.tags(k), &printed_tags(tags)));
    }
    assert_eq!(tally.calls, 20, "{stdout}");
    let calls = tally.calls;
    tally.report(&format!("C launcher ({calls} launches, copies and allocations):"), &text);
    // The runtime's copies at least were unwound (no trampoline saw them).
    let unwound = seen.lines.iter().find_map(|l| l.split(" unwound ").nth(1));
    let unwound: u64 = unwound.and_then(|u| u.split(' ').next()?.parse().ok()).unwrap_or(0);
    assert!(unwound >= 2, "{:?}", seen.lines);

    // One call in 3 per thread: the others carry no site, the sampled ones the right one.
    let (stdout, seen, _) = run(&dir, Command::new(&exe), "sampled", "3");
    let (mut sampled, mut right) = (0, 0);
    for line in stdout.lines() {
        let words: Vec<&str> = line.split(' ').collect();
        let [kind, i, function, ..] = words.as_slice() else { continue };
        let site = seen.value("SITE_OF", key(kind, i.parse().expect("a number")));
        if let Some(site) = site.filter(|&s| s != 0) {
            sampled += 1;
            right += usize::from(in_function(seen.native[&site].first(), function));
        }
    }
    assert_eq!(right, sampled);
    assert_eq!(sampled, 7, "17 calls on one thread, 3 on the other: one in 3 per thread");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The Python launcher: each launch, made with the GIL held (`ctypes.PyDLL`) or released
/// (`ctypes.CDLL`, as PyTorch's operators release it; one from a thread of its own while the
/// main thread runs Python code), has its function and line and its caller's as its innermost
/// Python frames.
#[test]
fn python_launches_carry_their_frames_and_tags() {
    let python = std::env::var("EGPU_PYTHON").unwrap_or_else(|_| "python3".into());
    let Ok(version) = Command::new(&python).arg("--version").output() else {
        println!("skipped: no {python} to run the Python launcher (EGPU_PYTHON names another)");
        return;
    };
    let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
    let dir = build("sites-py");
    let script = fixture("sites.py");
    let mut command = Command::new(&python);
    let root = egpu_test_support::workspace_root();
    command.arg(&script).arg(dir.join("libcuda.so.1")).arg(&root).arg("egpu");
    let (stdout, seen, text) = run(&dir, command, "summary", "1");
    let number = version.trim_start_matches("Python ");
    let read = number.starts_with("3.11.") || number.starts_with("3.12.");
    if !read {
        // Another version is refused, cleanly: native frames only, and the summary says why.
        assert!(text.contains("sites python refused: Python"), "{text}");
        println!("skipped the frames: {version} is refused (CPython 3.11 and 3.12 are read)");
    } else {
        assert!(text.contains("sites python CPython 3.1"), "{text}");
    }
    let file = script.to_str().expect("a UTF-8 path");
    let mut tally = Tally::default();
    for line in stdout.lines() {
        let words: Vec<&str> = line.split(' ').collect();
        let ["launch", i, function, at, caller, caller_at, tags @ ..] = words.as_slice() else {
            continue;
        };
        let k = i.parse().expect("a launch number");
        let site = seen.value("SITE_OF", k).filter(|&s| s != 0);
        let frames = site.and_then(|s| seen.python.get(&s));
        let here = match frames {
            Some(f) if read => {
                f.first() == Some(&format!("{file}:{at}:{function}"))
                    && f.get(1) == Some(&format!("{file}:{caller_at}:{caller}"))
            }
            _ => !read && site.is_some(),
        };
        tally.call(line, here, (site, &frames), (&seen.tags(k), &printed_tags(tags)));
    }
    assert_eq!(tally.calls, 10, "{stdout}");
    let calls = tally.calls;
    tally.report(&format!("Python launcher ({version}, {calls} launches through ctypes):"), &text);

    // Without the library the module does nothing, and says so.
    let out = Command::new(&python)
        .arg(&script)
        .arg(dir.join("libcuda.so.1"))
        .arg(&root)
        .arg("bare")
        .env("LD_LIBRARY_PATH", &dir)
        .output()
        .expect("running the launcher");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}

/// What the Rust child launches: (launch, tags it carries) in order.
const RUST_LAUNCHES: [(u32, [u64; 4]); 4] = [
    (1, [77, 0, 0, 0]),
    (2, [77, 0x4bf9_2f35_77b3_4da6, 0xa3ce_929d_0e0e_4736, 0x00f0_67aa_0ba9_02b7]),
    (3, [77, 0, 0, 0]),
    (4, [0, 0, 0, 0]),
];

/// The Rust program: this test binary run again under the library (`EGPU_SITES_CHILD` names
/// the stand-in driver), launching inside `egpu::host::tags`' guards.
#[test]
fn rust_scope_guards_tag_the_launches_inside_them() {
    if let Ok(driver) = std::env::var("EGPU_SITES_CHILD") {
        return rust_child(&driver);
    }
    let dir = build("sites-rust");
    let mut child = Command::new(std::env::current_exe().expect("this test"));
    child
        .args(["--exact", "rust_scope_guards_tag_the_launches_inside_them", "--test-threads=1"])
        .env("EGPU_SITES_CHILD", dir.join("libcuda.so.1"));
    let (_, seen, text) = run(&dir, child, "summary", "1");
    let mut exact = 0;
    for (i, tags) in RUST_LAUNCHES {
        let k = u64::from(i);
        if seen.tags(k) == tags.map(Some) {
            exact += 1;
        } else {
            eprintln!("launch {i}: tags {:?}, want {tags:?}", seen.tags(k));
        }
    }
    // Each site's innermost frame is this test's launching function, by its mangled name.
    let attributed = RUST_LAUNCHES
        .iter()
        .filter(|(i, _)| {
            let site = seen.value("SITE_OF", u64::from(*i)).filter(|&s| s != 0);
            let first = site.and_then(|s| seen.native.get(&s)).and_then(|f| f.first());
            first.is_some_and(|f| f.contains("launch_from_rust"))
        })
        .count();
    println!("Rust scope guards ({} launches):", RUST_LAUNCHES.len());
    println!("launch sites attributed: {attributed}/{}", RUST_LAUNCHES.len());
    println!("tags exact: {exact}/{}", RUST_LAUNCHES.len());
    assert_eq!((attributed, exact), (RUST_LAUNCHES.len(), RUST_LAUNCHES.len()), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

type LaunchFn = unsafe extern "C" fn(
    *mut std::ffi::c_void,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    *mut std::ffi::c_void,
    *mut *mut std::ffi::c_void,
    *mut *mut std::ffi::c_void,
) -> i32;

/// Launch `i` of the stand-in driver's kernel, from a function of its own.
#[inline(never)]
fn launch_from_rust(launch: LaunchFn, f: *mut std::ffi::c_void, i: u32) {
    let null = std::ptr::null_mut();
    // SAFETY: the stand-in driver's `cuLaunchKernel` (interposed), with a function it made.
    let r = unsafe { launch(f, i, 1, 1, 32, 1, 1, 0, null, null.cast(), null.cast()) };
    assert_eq!(std::hint::black_box(r), 0);
}

fn rust_child(driver: &str) {
    use egpu::host::tags;
    let path = std::ffi::CString::new(driver).expect("a path");
    // SAFETY: loading the stand-in driver and looking its functions up by name (through the
    // library's `dlsym`, which hands out its own `cuLaunchKernel`).
    unsafe {
        let lib = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL);
        assert!(!lib.is_null(), "the stand-in driver loads");
        let init: unsafe extern "C" fn(u32) -> i32 =
            std::mem::transmute(libc::dlsym(lib, c"cuInit".as_ptr()));
        let get: unsafe extern "C" fn(*mut *mut std::ffi::c_void, usize, *const i8) -> i32 =
            std::mem::transmute(libc::dlsym(lib, c"cuModuleGetFunction".as_ptr()));
        let launch: LaunchFn = std::mem::transmute(libc::dlsym(lib, c"cuLaunchKernel".as_ptr()));
        assert_eq!(init(0), 0);
        let mut f = std::ptr::null_mut();
        assert_eq!(get(&mut f, 0, c"_Z5kernAPf".as_ptr()), 0);
        let outer = tags::tag(77);
        launch_from_rust(launch, f, 1);
        {
            let _trace =
                tags::traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
                    .expect("a traceparent");
            launch_from_rust(launch, f, 2);
        }
        launch_from_rust(launch, f, 3);
        drop(outer);
        launch_from_rust(launch, f, 4);
    }
}
