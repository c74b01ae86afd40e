//! `egpu list`, as `bpftrace -l`: every attach point with its context (and, with `-v`, the
//! context's fields: type, name, offset, size, what it holds), then every helper with its
//! number, arguments and where it runs. Everything printed comes from egpu-ebpf's tables:
//! [`AttachPoint::EVENTS`], the contexts' field tables ([`egpu::ebpf::fields`]) and
//! [`HELPERS`], the definitions the verifier, the CPU VM and the GPU translation use.

use std::fmt::Write as _;

use egpu::ebpf::fields::{ContextType, plain};
use egpu::ebpf::helpers::{HELPERS, HelperInfo};
use egpu::ebpf::{AttachPoint, Field};

use crate::args::ListArgs;
use crate::maps::string;
use crate::{Error, failed};

/// One attach point as listed: an event's, or the user attach point, whose size is the caller's.
#[derive(Clone, Copy)]
enum Listed {
    Event(AttachPoint),
    User,
}

impl Listed {
    fn every() -> impl Iterator<Item = Listed> {
        AttachPoint::EVENTS.into_iter().map(Listed::Event).chain([Listed::User])
    }

    /// How the macro writes it (`host::launch`); `user(N)` for the user attach point.
    fn name(self) -> String {
        match self {
            Listed::Event(a) => a.spelling(),
            Listed::User => "user(N)".into(),
        }
    }

    /// The names a pattern is matched against: the macro's spelling, the full one
    /// (`host::launch::enter`) and the context type's name.
    fn names(self) -> Vec<String> {
        match self {
            Listed::Event(a) => {
                vec![a.spelling(), a.to_string(), a.context_name().to_string()]
            }
            Listed::User => vec!["user(N)".into(), "user".into()],
        }
    }

    fn context(self) -> Option<&'static ContextType> {
        match self {
            Listed::Event(a) => a.context_type(),
            Listed::User => None,
        }
    }

    /// Where its probes run.
    fn runs(self) -> &'static str {
        match self {
            Listed::Event(a) if a.is_device() => "GPU",
            Listed::Event(_) => "CPU VM",
            Listed::User => "CPU VM or GPU",
        }
    }

    /// The context's column: `LaunchCtx (128 bytes)`.
    fn context_column(self) -> String {
        match self.context() {
            Some(c) => format!("{} ({} bytes)", c.name, c.size),
            None => "N bytes of the caller's, writable".into(),
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Listed::Event(a) => a.describe(),
            Listed::User => AttachPoint::User { ctx_size: 0 }.describe(),
        }
    }
}

/// Whether `name` matches `pattern` as `bpftrace -l` matches: a glob (`*` any characters, `?` one)
/// over the whole name when the pattern has either, else a substring.
pub(crate) fn matches(pattern: &str, name: &str) -> bool {
    if !pattern.contains(['*', '?']) {
        return name.contains(pattern);
    }
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // The classic two-pointer glob: on a mismatch, let the last `*` take one more character.
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < n.len() {
        match p.get(i) {
            Some('*') => {
                star = Some((i, j));
                i += 1;
            }
            Some(&c) if c == '?' || c == n[j] => {
                i += 1;
                j += 1;
            }
            _ => match star {
                Some((si, sj)) => {
                    star = Some((si, sj + 1));
                    i = si + 1;
                    j = sj + 1;
                }
                None => return false,
            },
        }
    }
    p[i..].iter().all(|&c| c == '*')
}

/// `egpu list`.
pub(crate) fn list_cmd(a: ListArgs) -> Result<(), Error> {
    let pattern = a.pattern.as_deref();
    let keep = |names: &[String]| pattern.is_none_or(|p| names.iter().any(|n| matches(p, n)));
    let points: Vec<Listed> = Listed::every().filter(|l| keep(&l.names())).collect();
    let helpers: Vec<&HelperInfo> =
        HELPERS.iter().filter(|h| keep(&[h.name.to_string()])).collect();
    if points.is_empty() && helpers.is_empty() {
        return Err(failed(format!(
            "no attach point or helper matches `{}` (`egpu list` lists them all)",
            pattern.unwrap_or_default()
        )));
    }
    let text = if a.json { json(&points, &helpers) } else { text(&points, &helpers, a.verbose) };
    print!("{text}");
    Ok(())
}

/// The listing as text: a table of attach points, then one of helpers.
fn text(points: &[Listed], helpers: &[&HelperInfo], verbose: bool) -> String {
    let mut out = String::new();
    if !points.is_empty() {
        let name_w = points.iter().map(|l| l.name().len()).max().unwrap_or(0).max(12);
        let ctx_w = points.iter().map(|l| l.context_column().len()).max().unwrap_or(0);
        let _ =
            writeln!(out, "{:name_w$}  {:ctx_w$}  {:6}  WHEN", "ATTACH POINT", "CONTEXT", "RUNS");
        for l in points {
            let (name, ctx, runs) = (l.name(), l.context_column(), l.runs());
            let _ = writeln!(out, "{name:name_w$}  {ctx:ctx_w$}  {runs:6}  {}", l.describe());
            if let (true, Some(context)) = (verbose, l.context()) {
                fields(&mut out, context.fields);
            }
        }
    }
    if !helpers.is_empty() {
        if !points.is_empty() {
            out.push('\n');
        }
        let calls: Vec<String> = helpers.iter().map(|h| signature(h)).collect();
        let call_w = calls.iter().map(String::len).max().unwrap_or(0);
        let _ = writeln!(out, "{:>6}  {:call_w$}  RUNS", "HELPER", "CALL");
        for (h, call) in helpers.iter().zip(&calls) {
            let _ = writeln!(out, "{:>6}  {call:call_w$}  {}", h.id, h.runs());
            if verbose {
                for (r, arg) in (1..).zip(h.args) {
                    let _ = writeln!(out, "        r{r} {}: {}", arg.name, arg.kind.describe());
                }
                let _ = writeln!(out, "        r0: {}", h.ret.describe());
                let _ = writeln!(out, "        on the CPU: {}", plain(h.cpu));
                let _ = writeln!(out, "        on the GPU: {}", plain(h.gpu));
            }
        }
    }
    out
}

/// A context's fields, a line each: offset, size, type, name, what it holds.
fn fields(out: &mut String, fields: &[Field]) {
    let ty_w = fields.iter().map(|f| f.ty.len()).max().unwrap_or(0);
    let name_w = fields.iter().map(|f| f.name.len()).max().unwrap_or(0);
    for f in fields {
        let (offset, size, ty, name) = (f.offset, f.size, f.ty, f.name);
        let _ =
            writeln!(out, "    {offset:>3} {size:>2}  {ty:ty_w$}  {name:name_w$}  {}", f.summary());
    }
}

/// `bpf_map_lookup_elem(map, key)`.
fn signature(h: &HelperInfo) -> String {
    let args: Vec<&str> = h.args.iter().map(|a| a.name).collect();
    format!("{}({})", h.name, args.join(", "))
}

/// The listing as one JSON document: `{"attach_points": [...], "helpers": [...]}`.
fn json(points: &[Listed], helpers: &[&HelperInfo]) -> String {
    let points: Vec<String> = points
        .iter()
        .map(|l| {
            let context = match l.context() {
                Some(c) => {
                    let fields: Vec<String> = c
                        .fields
                        .iter()
                        .map(|f| {
                            format!(
                                "{{\"name\":{},\"type\":{},\"offset\":{},\"size\":{},\"doc\":{}}}",
                                string(f.name),
                                string(f.ty),
                                f.offset,
                                f.size,
                                string(&f.summary())
                            )
                        })
                        .collect();
                    format!(
                        "{{\"name\":{},\"size\":{},\"doc\":{},\"fields\":[{}]}}",
                        string(c.name),
                        c.size,
                        string(&c.summary()),
                        fields.join(",")
                    )
                }
                None => "null".into(),
            };
            format!(
                "{{\"name\":{},\"runs\":{},\"when\":{},\"context\":{context}}}",
                string(&l.name()),
                string(l.runs()),
                string(l.describe())
            )
        })
        .collect();
    let helpers: Vec<String> = helpers
        .iter()
        .map(|h| {
            let args: Vec<String> = h
                .args
                .iter()
                .map(|a| {
                    format!(
                        "{{\"name\":{},\"kind\":{}}}",
                        string(a.name),
                        string(a.kind.describe())
                    )
                })
                .collect();
            format!(
                "{{\"id\":{},\"name\":{},\"args\":[{}],\"returns\":{},\"runs\":{},\
                 \"on_cpu\":{},\"on_gpu\":{},\"cpu\":{},\"gpu\":{}}}",
                h.id,
                string(h.name),
                args.join(","),
                string(h.ret.describe()),
                string(h.runs()),
                h.on_cpu,
                h.on_gpu,
                string(&plain(h.cpu)),
                string(&plain(h.gpu))
            )
        })
        .collect();
    format!("{{\"attach_points\":[{}],\"helpers\":[{}]}}\n", points.join(","), helpers.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_as_bpftrace_matches() {
        assert!(matches("host::*", "host::launch::exit"));
        assert!(!matches("host::*", "device::kernel_entry"));
        assert!(matches("launch", "host::launch"));
        assert!(!matches("launch", "device::global_load"));
        assert!(matches("*load", "device::global_load"));
        assert!(!matches("*load", "host::module_load::exit"));
        assert!(!matches("bpf_map_?????_elem", "bpf_map_lookup_elem"));
        assert!(matches("bpf_map_??????_elem", "bpf_map_lookup_elem"));
        assert!(matches("*", ""));
        assert!(matches("**a*", "banana"));
        assert!(!matches("?", ""));
        for odd in ["", "*", "?", "é*", "[", "\u{0}", "***?"] {
            assert!(matches(odd, odd), "{odd:?}");
            assert!(!matches("ü", odd), "{odd:?}");
        }
    }

    #[test]
    fn the_json_names_every_field_and_helper() {
        let points: Vec<Listed> = Listed::every().collect();
        let helpers: Vec<&HelperInfo> = HELPERS.iter().collect();
        let doc = json(&points, &helpers);
        assert!(doc.contains("\"name\":\"device::kernel_entry\""), "{doc}");
        assert!(doc.contains("\"name\":\"launch_id\",\"type\":\"u64\",\"offset\":72"), "{doc}");
        assert!(doc.contains("\"name\":\"grid\",\"type\":\"[u32; 3]\",\"offset\":40,\"size\":12"));
        assert!(doc.contains("\"name\":\"user(N)\",\"runs\":\"CPU VM or GPU\""));
        assert_eq!(doc.matches("\"id\":").count(), HELPERS.len());
    }
}
