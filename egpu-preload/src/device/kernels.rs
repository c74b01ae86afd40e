//! `EGPU_KERNELS`: a regular expression (`regex-lite`'s syntax) that picks the kernels the
//! device probes go into, by mangled name (`_Z5saxpyfPKfPfx`), matched anywhere in it
//! (`egpu mem run --kernel`). Without it, every kernel. An expression that does not compile is
//! reported once, and no kernel is instrumented: the user asked for some, not all.

use std::sync::OnceLock;

use egpu::device::ptx::PtxModule;
use regex_lite::Regex;

/// What `EGPU_KERNELS` asks for.
enum Filter {
    All,
    Matching(Regex),
    None,
}

fn filter() -> &'static Filter {
    static FILTER: OnceLock<Filter> = OnceLock::new();
    FILTER.get_or_init(|| {
        let Some(text) = std::env::var("EGPU_KERNELS").ok().filter(|t| !t.is_empty()) else {
            return Filter::All;
        };
        match Regex::new(&text) {
            Ok(regex) => Filter::Matching(regex),
            Err(e) => {
                eprintln!("egpu: EGPU_KERNELS: {e}; no kernel is instrumented");
                Filter::None
            }
        }
    })
}

/// Whether `EGPU_KERNELS` picks the kernel named `name` (every kernel without it).
pub(super) fn chosen(name: &str) -> bool {
    match filter() {
        Filter::All => true,
        Filter::None => false,
        Filter::Matching(regex) => regex.is_match(name),
    }
}

/// The kernels of the module `ptx` to instrument, by name; `None`: every one (no filter, or
/// PTX the reader refuses, which the injection then reports).
pub(super) fn selected(ptx: &str) -> Option<Vec<String>> {
    let regex = match filter() {
        Filter::All => return None,
        Filter::None => return Some(Vec::new()),
        Filter::Matching(regex) => regex,
    };
    let module = PtxModule::parse(ptx).ok()?;
    Some(module.entries().map(|f| f.name.clone()).filter(|n| regex.is_match(n)).collect())
}
