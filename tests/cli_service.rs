//! The example service (issue 28, part 5: `examples/service/`) against the stand-in driver: its
//! check (`check.py`) runs `server.py` under `egpu run --otlp` with the `stand-in` backend
//! (kernels launched through `ctypes` into egpu-preload's stand-in driver), sends concurrent
//! requests with `traceparent` headers and compares each request's spans with what the server
//! launched for it. This test runs it, then decodes the `/v1/traces` bodies it kept with the
//! messages of `otlp_support.rs` (apart from the check's own decoder) and compares again; and
//! runs it once more with a server that sets no tags, which the check must find wrong.
#![cfg(feature = "otlp")]

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::process::Command;

use prost::Message as _;

#[expect(dead_code, reason = "this file makes no temporary folders")]
mod cli_support;
use cli_support::egpu;

/// Builds the stand-in driver and the preloaded library (egpu-preload's tests).
#[path = "../egpu-preload/tests/support/mod.rs"]
mod support;

mod otlp_support;
use otlp_support::{Any, Request, attribute};

const REQUESTS: usize = 8;

/// Runs the check with `extra` arguments, its results in `out`: its exit status and output.
fn check(python: &str, driver: &Path, out: &Path, extra: &[&str]) -> (bool, String) {
    let script = egpu_test_support::workspace_path("examples/service/check.py");
    let output = Command::new(python)
        .arg(script)
        .args(["--backend", "stand-in", "--requests", &REQUESTS.to_string()])
        .args(["--timeout", "120"])
        .arg("--driver")
        .arg(driver)
        .arg("--egpu")
        .arg(egpu())
        .arg("--preload")
        .arg(support::preload_library())
        .arg("--python")
        .arg(python)
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .expect("running check.py");
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), text)
}

#[test]
fn each_request_of_the_service_has_exactly_its_own_kernels_as_spans() {
    let python = std::env::var("EGPU_PYTHON").unwrap_or_else(|_| "python3".into());
    if Command::new(&python).arg("--version").output().is_err() {
        println!("skipped: no {python} to run the example service (EGPU_PYTHON names another)");
        return;
    }
    let dir = support::build("cli-service");
    let driver = dir.join("libcuda.so.1");
    let out = dir.join("out");
    let (ok, text) = check(&python, &driver, &out, &[]);
    println!("{text}");
    let line = format!("request attribution exact: {REQUESTS}/{REQUESTS} requests");
    assert!(ok && text.contains(&line), "check.py failed:\n{text}");

    // The same spans, decoded here: per request, its kernels (as a multiset), its span as every
    // span's parent, its number as the tag.
    let expected: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("expected.json")).expect("expected.json"),
    )
    .expect("JSON");
    let expected = expected.as_array().expect("a list");
    assert_eq!(expected.len(), REQUESTS);
    let mut by_trace: BTreeMap<String, Vec<otlp_support::Span>> = BTreeMap::new();
    for entry in std::fs::read_dir(&out).expect("the check's folder") {
        let path = entry.expect("an entry").path();
        if path.extension().is_some_and(|e| e == "pb") {
            let body = std::fs::read(&path).expect("a body");
            let request = Request::decode(body.as_slice()).expect("an OTLP trace request");
            for span in request.resource_spans.into_iter().flat_map(|r| r.scope_spans) {
                for s in span.spans {
                    by_trace.entry(hex(&s.trace_id)).or_default().push(s);
                }
            }
        }
    }
    let mut ids = HashSet::new();
    let mut exact = 0;
    for e in expected {
        let trace = e["trace_id"].as_str().expect("a trace id");
        let mine = by_trace.remove(trace).unwrap_or_default();
        let mut want: Vec<&str> =
            e["kernels"].as_array().expect("kernels").iter().filter_map(|k| k.as_str()).collect();
        let mut have: Vec<&str> = mine.iter().map(|s| s.name.as_str()).collect();
        want.sort_unstable();
        have.sort_unstable();
        let tag = e["tag"].as_i64().expect("a tag");
        let right = !want.is_empty()
            && want == have
            && mine.iter().all(|s| {
                hex(&s.parent_span_id) == e["span_id"].as_str().expect("a span id")
                    && attribute(&s.attributes, "egpu.tag_id") == Some(Any::Int(tag))
                    && ids.insert(s.span_id.clone())
            });
        if right {
            exact += 1;
        } else {
            eprintln!("request {tag}: kernels {want:?}, spans {have:?}: {mine:?}");
        }
    }
    println!("request attribution exact (decoded here): {exact}/{REQUESTS} requests");
    assert_eq!(exact, REQUESTS);
    assert!(by_trace.is_empty(), "spans of no request: {by_trace:?}");

    // A server that sets no tags: its kernels are nobody's, and the check says so.
    let (ok, text) = check(&python, &driver, &dir.join("untagged"), &["--server-arg=--untagged"]);
    assert!(!ok, "the check passed a server that sets no tags:\n{text}");
    assert!(text.contains(&format!("request attribution exact: 0/{REQUESTS} requests")), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
