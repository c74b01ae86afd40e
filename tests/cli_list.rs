//! `egpu list` (issue 18, item 4): every attach point with its context's fields and every helper,
//! printed from the definitions the engines use, checked here against those definitions, and
//! the book's listing checked against the command's output.

use egpu::ebpf::AttachPoint;
use egpu::ebpf::helpers::HELPERS;
use egpu_test_support::{compare_golden, workspace_path};

#[expect(dead_code, reason = "this file makes no temporary folders")]
mod cli_support;
use cli_support::{fails, succeeds};

/// The lines of `egpu list -v` that belong to the attach point `name`: its own line and its
/// fields' lines under it.
fn section<'a>(listing: &'a str, name: &str) -> Vec<&'a str> {
    let mut lines = listing.lines().skip_while(|l| l.split_whitespace().next() != Some(name));
    let head = lines.next().into_iter();
    head.chain(lines.take_while(|l| l.starts_with("    ") && !l.trim().is_empty())).collect()
}

#[test]
fn item4_egpu_list_prints_every_attach_point_and_helper() {
    let listing = succeeds(&["list", "-v"]).stdout;
    for a in AttachPoint::EVENTS {
        let context = a.context_type().expect("an event's context");
        let lines = section(&listing, &a.spelling());
        let head = lines.first().unwrap_or_else(|| panic!("{a} is not listed:\n{listing}"));
        let runs = if a.is_device() { "GPU" } else { "CPU VM" };
        for needle in [&format!("{} ({} bytes)", context.name, context.size), runs, a.describe()] {
            assert!(head.contains(needle), "{a}: {head:?} lacks {needle:?}");
        }
        assert_eq!(lines.len(), 1 + context.fields.len(), "{a}: one line per field");
        for (line, f) in lines[1..].iter().zip(context.fields) {
            let words: Vec<&str> = line.split_whitespace().collect();
            let (offset, size) = (f.offset.to_string(), f.size.to_string());
            let ty: Vec<&str> = f.ty.split_whitespace().collect();
            let n = ty.len();
            assert_eq!(&words[..2], [offset.as_str(), size.as_str()], "{a}.{}: {line}", f.name);
            assert_eq!(&words[2..2 + n], ty.as_slice(), "{a}.{}: {line}", f.name);
            assert_eq!(words[2 + n], f.name, "{a}: {line}");
            assert!(line.ends_with(&f.summary()), "{a}.{}: {line}", f.name);
        }
    }
    assert!(listing.lines().any(|l| l.starts_with("user(N) ")), "{listing}");
    for h in HELPERS {
        let args: Vec<&str> = h.args.iter().map(|a| a.name).collect();
        let call = format!("{}({})", h.name, args.join(", "));
        let id = h.id.to_string();
        let line = listing
            .lines()
            .find(|l| l.trim_start().strip_prefix(&id).is_some_and(|r| r.trim().starts_with(&call)))
            .unwrap_or_else(|| panic!("{id} {call} is not listed:\n{listing}"));
        assert!(line.ends_with(h.runs()), "{line}");
    }
    // Without -v: one line per attach point and helper, plus headings and a blank line.
    let short = succeeds(&["list"]).stdout;
    assert_eq!(short.lines().count(), 1 + AttachPoint::EVENTS.len() + 1 + 1 + 1 + HELPERS.len());
    assert!(!short.contains("kernel_id"), "{short}");
}

#[test]
fn item4_egpu_list_filters_as_bpftrace_does() {
    let names = |args: &[&str]| -> Vec<String> {
        let out = succeeds(args).stdout;
        out.lines()
            .filter(|l| !l.starts_with(' ') && !l.is_empty() && !l.contains("ATTACH POINT"))
            .filter_map(|l| l.split_whitespace().next().map(str::to_string))
            .filter(|w| w != "HELPER")
            .collect()
    };
    let host: Vec<String> =
        AttachPoint::EVENTS.iter().filter(|a| !a.is_device()).map(|a| a.spelling()).collect();
    assert_eq!(names(&["list", "host::*"]), host);
    assert_eq!(names(&["list", "launch"]), ["host::launch", "host::launch::exit"]);
    assert_eq!(names(&["list", "host::launch::enter"]), ["host::launch"]);
    assert_eq!(names(&["list", "KernelCtx"]), ["device::kernel_entry", "device::kernel_exit"]);
    assert_eq!(names(&["list", "*load"]), ["host::module_load", "device::global_load"]);
    // Helpers are matched by name; their lines start with a number.
    let maps = succeeds(&["list", "bpf_map_*"]).stdout;
    assert!(!maps.contains("ATTACH POINT"), "{maps}");
    assert_eq!(maps.lines().filter(|l| l.contains("bpf_map_")).count(), 3, "{maps}");
    let verbose = succeeds(&["list", "--verbose", "device::kernel_exit"]).stdout;
    assert!(verbose.contains(" launch_id "), "{verbose}");
    fails(&["list", "nosuchthing"], 1, &["no attach point or helper matches `nosuchthing`"]);
    fails(&["list", "a", "b"], 2, &["Usage:"]);
}

#[test]
fn item4_egpu_list_json_is_the_definitions() {
    let out = succeeds(&["list", "--json"]).stdout;
    let doc: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let points = doc["attach_points"].as_array().expect("attach points");
    assert_eq!(points.len(), AttachPoint::EVENTS.len() + 1, "and user(N)");
    for (p, a) in points.iter().zip(AttachPoint::EVENTS) {
        assert_eq!(p["name"], a.spelling());
        let context = a.context_type().expect("a context");
        assert_eq!(p["context"]["name"], context.name);
        assert_eq!(p["context"]["size"], context.size);
        let fields = p["context"]["fields"].as_array().expect("fields");
        assert_eq!(fields.len(), context.fields.len());
        for (j, f) in fields.iter().zip(context.fields) {
            assert_eq!((&j["name"], &j["type"]), (&f.name.into(), &f.ty.into()));
            assert_eq!((&j["offset"], &j["size"]), (&f.offset.into(), &f.size.into()));
        }
    }
    assert_eq!(points.last().map(|p| &p["context"]), Some(&serde_json::Value::Null));
    let helpers = doc["helpers"].as_array().expect("helpers");
    assert_eq!(helpers.len(), HELPERS.len());
    for (j, h) in helpers.iter().zip(HELPERS) {
        assert_eq!((&j["id"], &j["name"]), (&h.id.into(), &h.name.into()));
        assert_eq!((&j["on_cpu"], &j["on_gpu"]), (&h.on_cpu.into(), &h.on_gpu.into()));
        assert_eq!(j["args"].as_array().map(Vec::len), Some(h.args.len()));
    }
}

/// The book shows `egpu list -v` as the command prints it (EGPU_BLESS=1 rewrites it), and its
/// helper table has a row for every helper.
#[test]
fn item4_the_books_listing_is_the_commands() {
    let listing = succeeds(&["list", "-v"]).stdout;
    compare_golden(&workspace_path("book/src/egpu-list.txt"), &listing).unwrap_or_else(|e| {
        panic!("{e}");
    });
    let chapter = std::fs::read_to_string(workspace_path("book/src/assembly.md")).expect("chapter");
    assert!(chapter.contains("{{#include egpu-list.txt}}"), "assembly.md includes the listing");
    for h in HELPERS {
        let row = format!("| {} | `{}` |", h.id, h.name);
        assert!(chapter.contains(&row), "assembly.md's helper table lacks {row}");
    }
}
