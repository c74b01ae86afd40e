//! What the injector observes of one instruction: whether it touches global memory (by the
//! PTX ISA's table, [`crate::ptx::memops`]), and for the accesses egpu observes, the attach
//! point they fire, their context's class, operation and size, and the PTX that computes their
//! address (and size, when it is known at run time only) into registers of the probe's block.

use egpu_ebpf::{DeviceEvent, MemAccessCtx};

use crate::ptx::{Bytes, GlobalAccess, MemClass, PtxInstruction, Touch, global_access};

/// An access egpu observes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Observed {
    /// The attach point it fires.
    pub(super) event: DeviceEvent,
    /// [`MemAccessCtx::class`].
    pub(super) class: u32,
    /// [`MemAccessCtx::op`].
    pub(super) op: u32,
    /// [`MemAccessCtx::fetch`].
    pub(super) fetch: bool,
    /// Whether it writes global memory.
    pub(super) is_store: bool,
    /// Whether its address is generic (checked to be global at run time).
    pub(super) generic: bool,
    /// PTX that computes the address into the register `{ADDR}`.
    pub(super) addr_code: String,
    /// A tensor copy's tensor map register (the address of its map).
    pub(super) tensor_map: Option<String>,
    /// Bytes, when known when instrumenting.
    pub(super) size: u32,
    /// PTX that computes the bytes into the 32-bit register `{SIZE}` (after the address, which
    /// it may read in `{ADDR}`; its labels start with `{LABEL}`), when they are known at run
    /// time only.
    pub(super) size_code: Option<String>,
}

/// What the injector makes of an instruction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Observation {
    /// It does not touch global memory.
    None,
    /// A hint about global memory (`prefetch`, `discard`, `applypriority`): no data moves.
    Hint,
    /// A global memory instruction egpu observes.
    Observed(Observed),
    /// A global memory instruction egpu does not observe, and why.
    Unobserved(MemClass, &'static str),
}

/// What `insn` is to the injector; `is_predicate` says whether an operand is a predicate
/// register (to tell `cp.async`'s `ignore-src` from its `src-size`).
pub(super) fn observe(
    insn: &PtxInstruction<'_>,
    is_predicate: &dyn Fn(&str) -> bool,
) -> Observation {
    let access = match global_access(insn) {
        None => return Observation::None,
        Some(Touch::Hint) => return Observation::Hint,
        Some(Touch::Data(a)) => a,
    };
    let reason = match access.class {
        MemClass::Texture => "a texture fetch names a texture, not an address",
        MemClass::Surface => "a surface access names a surface, not an address",
        MemClass::Multimem => "a multimem address names memory on several GPUs at once",
        MemClass::Matrix => "a wmma fragment is spread over the warp's threads with a stride",
        MemClass::Unknown => "egpu's table of the PTX ISA does not know this opcode",
        _ => match observed(insn, &access, is_predicate) {
            Some(o) => return Observation::Observed(o),
            None => {
                "its address or size is not understood (a number, or a variable of a \
                     generic access)"
            }
        },
    };
    Observation::Unobserved(access.class, reason)
}

/// The observed access of a load, store, atomic or copy; `None` when its operands are not
/// understood.
fn observed(
    insn: &PtxInstruction<'_>,
    access: &GlobalAccess,
    is_predicate: &dyn Fn(&str) -> bool,
) -> Option<Observed> {
    let operand = *insn.operands.get(access.operand)?;
    let class = match access.class {
        MemClass::Atomic => MemAccessCtx::ATOMIC,
        MemClass::AsyncCopy => MemAccessCtx::ASYNC_COPY,
        MemClass::BulkCopy => MemAccessCtx::BULK_COPY,
        MemClass::TensorCopy => MemAccessCtx::TENSOR_COPY,
        MemClass::TensorMap => MemAccessCtx::TENSOR_MAP,
        _ => MemAccessCtx::LOAD_STORE,
    };
    let event = match access.class {
        MemClass::Atomic => DeviceEvent::GlobalAtomic,
        _ if access.writes => DeviceEvent::GlobalStore,
        _ => DeviceEvent::GlobalLoad,
    };
    let mut tensor_map = None;
    let addr_code = if access.class == MemClass::TensorCopy {
        // `[tensor_map, {coordinates}]`: the tensor map's address, in a register.
        let inner = operand.strip_prefix('[')?.split(',').next()?.trim();
        tensor_map = Some(inner.to_owned());
        inner.starts_with('%').then(|| format!("\tmov.b64 {{ADDR}}, {inner};\n"))?
    } else {
        address_code(operand, !access.generic, "{ADDR}")?
    };
    let (size, size_code) = match access.bytes {
        Bytes::Typed(n) => (n, None),
        Bytes::Unknown => (0, None),
        Bytes::Operand(i) => value(insn.operands.get(i)?)?,
        Bytes::AsyncCopy => {
            // [dst], [src], cp-size{, src-size | ignore-src}{, cache-policy}
            let mut ops = &insn.operands[..];
            if insn.parts().any(|q| q == "L2::cache_hint") {
                ops = ops.split_last()?.1;
            }
            let (copied, _) = value(ops.get(2)?)?;
            match ops.get(3) {
                None => (copied, None),
                Some(p) if is_predicate(p) => {
                    (0, Some(format!("\tselp.u32 {{SIZE}}, 0, {copied}, {p};\n")))
                }
                Some(read) => value(read)?,
            }
        }
    };
    let op = match access.class {
        MemClass::Atomic | MemClass::BulkCopy | MemClass::TensorCopy => {
            insn.parts().skip(1).find_map(MemAccessCtx::op_of).unwrap_or(0)
        }
        _ => 0,
    };
    Some(Observed {
        event,
        class,
        op,
        fetch: insn.base() == "atom",
        is_store: access.writes,
        generic: access.generic,
        addr_code,
        tensor_map,
        size,
        size_code,
    })
}

/// A size operand: a constant, or a 32-bit register copied into `{SIZE}`.
fn value(operand: &str) -> Option<(u32, Option<String>)> {
    if operand.starts_with('%') {
        return Some((0, Some(format!("\tmov.u32 {{SIZE}}, {operand};\n"))));
    }
    parse_int(operand).and_then(|v| u32::try_from(v).ok()).map(|v| (v, None))
}

/// A probe at an access: its address (and size, when known at run time only) computed into
/// registers of its own, and for a generic address a run-time check that it is global.
pub(super) fn wrap_access(o: &Observed, addr: &str, size: &str, body: &str, skip: &str) -> String {
    let mut s = format!("\t{{\n\t.reg .b64 {addr};\n{}", o.addr_code.replace("{ADDR}", addr));
    if let Some(code) = &o.size_code {
        let label = format!("${}", size.trim_start_matches('%'));
        let code = code.replace("{SIZE}", size).replace("{ADDR}", addr).replace("{LABEL}", &label);
        s.push_str(&format!("\t.reg .b32 {size};\n{code}"));
    }
    if o.generic {
        let p = format!("{addr}_global");
        s.push_str(&format!(
            "\t.reg .pred {p};\n\tisspacep.global {p}, {addr};\n\t@!{p} bra {skip};\n{body}{skip}:\n"
        ));
    } else {
        s.push_str(body);
    }
    s.push_str("\t}\n");
    s
}

/// `text` without its `/* */` and `//` comments.
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("/*") {
            rest = r.find("*/").map_or("", |end| &r[end + 2..]);
        } else if rest.starts_with("//") {
            rest = rest.find('\n').map_or("", |end| &rest[end..]);
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// A PTX integer literal: decimal, hexadecimal (`0x`), octal (leading `0`) or binary (`0b`),
/// with an optional `U` suffix and sign.
fn parse_int(text: &str) -> Option<i64> {
    let text = text.strip_prefix('+').unwrap_or(text);
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let digits = digits.strip_suffix(['U', 'u']).unwrap_or(digits);
    let value = if let Some(hex) = digits.strip_prefix("0x").or_else(|| digits.strip_prefix("0X")) {
        u64::from_str_radix(hex, 16).ok()?
    } else if let Some(bin) = digits.strip_prefix("0b").or_else(|| digits.strip_prefix("0B")) {
        u64::from_str_radix(bin, 2).ok()?
    } else if digits.len() > 1 && digits.starts_with('0') {
        u64::from_str_radix(&digits[1..], 8).ok()?
    } else {
        digits.parse::<u64>().ok()?
    };
    let value = value as i64;
    Some(if negative { value.wrapping_neg() } else { value })
}

/// The address operand of a load or store, as PTX that computes it into a 64-bit register.
pub(super) fn address_code(operand: &str, global: bool, into: &str) -> Option<String> {
    let inner: String = strip_comments(operand.strip_prefix('[')?.strip_suffix(']')?)
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let (base, offset) = match inner.find(['+', '-']).filter(|&i| i > 0) {
        Some(i) => (&inner[..i], parse_int(&inner[i..])?),
        None => (inner.as_str(), 0),
    };
    let ident = |s: &str| {
        s.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || "_$%".contains(c))
            && s.chars().all(|c| c.is_ascii_alphanumeric() || "_$%.".contains(c))
    };
    if !ident(base) {
        return None;
    }
    if base.starts_with('%') {
        return Some(format!("\tadd.s64 {into}, {base}, {offset};\n"));
    }
    // A variable: its address in its own state space, made generic.
    if !global {
        return None;
    }
    Some(format!(
        "\tmov.u64 {into}, {base};\n\tcvta.global.u64 {into}, {into};\n\tadd.s64 {into}, {into}, {offset};\n"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        let code = |o: &str| address_code(o, true, "%a");
        assert_eq!(code("[%rd1+8]").as_deref(), Some("\tadd.s64 %a, %rd1, 8;\n"));
        assert_eq!(code("[ %rd1 + 0 ]").as_deref(), Some("\tadd.s64 %a, %rd1, 0;\n"));
        assert_eq!(code("[%rd1+-16]").as_deref(), Some("\tadd.s64 %a, %rd1, -16;\n"));
        assert_eq!(code("[%rd1-16]").as_deref(), Some("\tadd.s64 %a, %rd1, -16;\n"));
        assert_eq!(code("[%rd1+0x10]").as_deref(), Some("\tadd.s64 %a, %rd1, 16;\n"));
        assert_eq!(code("[%rd1+010]").as_deref(), Some("\tadd.s64 %a, %rd1, 8;\n"));
        assert_eq!(code("[%rd1+8U]").as_deref(), Some("\tadd.s64 %a, %rd1, 8;\n"));
        assert_eq!(code("[%rd1+0b1000]").as_deref(), Some("\tadd.s64 %a, %rd1, 8;\n"));
        assert_eq!(code("[%rd1 /* base */ + 8]").as_deref(), Some("\tadd.s64 %a, %rd1, 8;\n"));
        assert!(code("[table+4]").unwrap().contains("cvta.global.u64 %a, %a;"));
        assert_eq!(address_code("[table]", false, "%a"), None);
        assert_eq!(code("[4096]"), None);
        assert_eq!(code("[%rd1+x]"), None);
        assert_eq!(code("%rd1"), None);
    }
}
