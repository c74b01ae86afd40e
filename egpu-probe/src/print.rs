//! `egpu::print!`: formatted records from probes to the host.
//!
//! A probe cannot format text. `egpu::print!("launch {} took {} ns", id, ns)` records the format
//! string's number and up to six integer arguments in a ring buffer shared by every probe of the
//! process ([`PRINTS`]); the host formats the records when it reads them ([`prints`]). The
//! native twin's `print!` writes the same records, so both are read the same way.
//!
//! Formats take `{}` (decimal) and `{:x}` / `{:#x}` (hexadecimal) for each argument; `{{` and
//! `}}` are braces. A full ring drops records and counts them ([`RingBuf::drops`]).

use std::sync::Mutex;

use bytemuck::{Pod, Zeroable};
use egpu_maps::RingBuf;

/// The most arguments of one `print!`.
pub const MAX_ARGS: usize = 6;

/// One `print!`: the format's number, which arguments are signed, and the arguments.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
pub struct PrintRecord {
    /// The format string's number ([`format_id`]).
    pub format: u32,
    /// Bit `i` is set when argument `i` is signed.
    pub signed: u32,
    /// The arguments, as 64-bit values (signed ones sign-extended).
    pub args: [u64; MAX_ARGS],
}

/// The ring every probe of the process prints into.
pub static PRINTS: RingBuf<PrintRecord> = RingBuf::with_capacity(4096);

static FORMATS: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());

/// The number of format string `format`, the same for every caller in the process.
pub fn format_id(format: &'static str) -> u32 {
    let mut formats = FORMATS.lock().unwrap_or_else(|e| e.into_inner());
    match formats.iter().position(|&f| f == format) {
        Some(i) => i as u32,
        None => {
            formats.push(format);
            formats.len() as u32 - 1
        }
    }
}

/// Writes one record (the native twin's `print!`).
#[doc(hidden)]
pub fn print_native(format: &'static str, args: &[(u64, bool)]) {
    let mut record = PrintRecord { format: format_id(format), ..PrintRecord::default() };
    for (i, &(v, signed)) in args.iter().take(MAX_ARGS).enumerate() {
        record.args[i] = v;
        record.signed |= u32::from(signed) << i;
    }
    let _ = PRINTS.output(&record);
}

/// `record` formatted with its format string.
pub fn format(record: &PrintRecord) -> String {
    let formats = FORMATS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(fmt) = formats.get(record.format as usize) else {
        return format!("<unknown format {}>", record.format);
    };
    let mut out = String::new();
    let mut arg = 0;
    let mut rest = *fmt;
    while let Some(i) = rest.find(['{', '}']) {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        for (spec, hex, alt) in [
            ("{{", None, false),
            ("}}", None, false),
            ("{}", Some(false), false),
            ("{:x}", Some(true), false),
            ("{:#x}", Some(true), true),
        ] {
            if let Some(after) = rest.strip_prefix(spec) {
                match hex {
                    None => out.push(spec.chars().next().unwrap_or('{')),
                    Some(hex) => {
                        let v = record.args.get(arg).copied().unwrap_or(0);
                        let signed = record.signed & (1 << arg) != 0;
                        match (hex, alt, signed) {
                            (true, true, _) => out.push_str(&format!("{v:#x}")),
                            (true, false, _) => out.push_str(&format!("{v:x}")),
                            (false, _, true) => out.push_str(&(v as i64).to_string()),
                            (false, _, false) => out.push_str(&v.to_string()),
                        }
                        arg += 1;
                    }
                }
                rest = after;
                break;
            }
        }
        if rest.starts_with(['{', '}']) && !rest.starts_with("{{") {
            // A brace no spec took (the macro checks formats, so only for unknown records).
            out.push_str(&rest[..1]);
            rest = &rest[1..];
        }
    }
    out.push_str(rest);
    out
}

/// Takes the records printed so far, formatted, in order (per ring).
pub fn prints() -> Vec<String> {
    let Ok(mut consumer) = PRINTS.consumer() else { return Vec::new() };
    consumer.drain().map(|r| format(&r)).collect()
}
