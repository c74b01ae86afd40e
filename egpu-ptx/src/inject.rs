//! The injector: splices translated probes into a module's PTX, at the device attach points.
//!
//! [`inject`] reads the module with the [PTX reader](crate::ptx), finds the attach points of
//! every selected kernel, translates each probe once per site (so each copy has its own names and
//! its site's constants), and writes the module back with the probes inserted between the
//! original pieces. Everything else stays byte for byte as it was, `.version` and `.target`
//! included. Probes never write the original program's registers, predicates or labels: every
//! name they declare starts with `egpu` and a site number, inside a `{ }` block of its own.
//!
//! | attach point | where the probe runs | its context |
//! |---|---|---|
//! | [`KernelEntry`](DeviceEvent::KernelEntry) | first thing in each kernel | [`KernelCtx`](egpu_ebpf::KernelCtx) |
//! | [`KernelExit`](DeviceEvent::KernelExit) | before every `ret` and `exit` of a kernel | [`KernelCtx`](egpu_ebpf::KernelCtx) |
//! | [`GlobalLoad`](DeviceEvent::GlobalLoad) | before every `ld.global` (any qualifiers: `.nc`, cache hints, vectors), and before every generic `ld` whose address is global at run time | [`MemAccessCtx`](egpu_ebpf::MemAccessCtx) |
//! | [`GlobalStore`](DeviceEvent::GlobalStore) | the same for `st.global` and generic `st` | [`MemAccessCtx`](egpu_ebpf::MemAccessCtx) |
//!
//! A guarded instruction (`@%p ld.global …`) runs its probe only when the guard holds. Loads and
//! stores inside device functions (`.func`) are observed too, with the function's own name as
//! the kernel id. Not observed: atomics and reductions on global memory (`atom`, `red`),
//! asynchronous and bulk copies (`cp.async`, `cp.async.bulk`, tensor copies), `ldu`, texture and
//! surface accesses, `prefetch`, and accesses whose address is a plain number.

use std::collections::{BTreeMap, BTreeSet};

use egpu_ebpf::verifier::Verified;
use egpu_ebpf::{AttachPoint, DeviceEvent, MapKind, kernel_id};

use crate::ptx::{FunctionKind, PieceKind, PtxError, PtxInstruction, PtxModule};
use crate::translate::{
    Context, DeviceMap, Options, TranslateError, combines, lookups_and_removals, translate,
    warp_add,
};

/// A probe to inject, and the kernels it attaches to.
#[derive(Clone, Copy, Debug)]
pub struct DeviceProbe<'a> {
    /// The verified program; its attach point says where it runs.
    pub program: &'a Verified,
    /// Which kernels: all of them, or those named (by mangled name).
    pub kernels: Kernels<'a>,
    /// The device side of each map of the program's map table, in its order.
    pub maps: &'a [DeviceMap],
}

/// The kernels a probe attaches to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernels<'a> {
    /// Every kernel of the module.
    All,
    /// The kernels with these (mangled) names.
    Named(&'a [&'a str]),
}

impl Kernels<'_> {
    fn selects(&self, name: &str) -> bool {
        match self {
            Kernels::All => true,
            Kernels::Named(names) => names.contains(&name),
        }
    }
}

/// A place where a probe was injected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    /// The kernel or device function.
    pub function: String,
    /// The line of the original instruction (or of the body's `{` for kernel entry).
    pub line: usize,
    /// The attach point.
    pub event: DeviceEvent,
    /// Bytes accessed (loads and stores; 0 otherwise).
    pub size: u32,
    /// The access's index among the function's observed accesses (`MemAccessCtx::site`).
    pub index: u32,
}

/// An instrumented module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Injection {
    /// The instrumented PTX.
    pub ptx: String,
    /// Where probes were injected, in order.
    pub sites: Vec<Site>,
    /// Global (or generic) loads and stores of instrumented functions that are not observed
    /// because their address or type could not be read (`size` is 0 when the type could not).
    pub unobserved: Vec<Site>,
}

/// Why a module could not be instrumented.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InjectError {
    /// The PTX could not be read.
    #[error("reading the PTX: {0}")]
    Ptx(#[from] PtxError),
    /// The module is not 64-bit.
    #[error("the module's `.address_size` is {0}; egpu instruments 64-bit modules only")]
    AddressSize(String),
    /// A probe does not attach to a device event.
    #[error("probe {probe} attaches to {attach}, not to a device event")]
    NotDevice {
        /// The probe's index.
        probe: usize,
        /// Its attach point.
        attach: AttachPoint,
    },
    /// A probe could not be translated.
    #[error("probe {probe}: {error}")]
    Translate {
        /// The probe's index.
        probe: usize,
        /// Why.
        error: TranslateError,
    },
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
fn address_code(operand: &str, global: bool, into: &str) -> Option<String> {
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

/// Bytes accessed by a load or store: its type's size times its vector width.
fn access_size(insn: &PtxInstruction<'_>) -> Option<u32> {
    let mut size = None;
    let mut lanes = 1;
    for q in insn.parts().skip(1) {
        match q {
            "v2" => lanes = 2,
            "v4" => lanes = 4,
            "v8" => lanes = 8,
            "b8" | "u8" | "s8" => size = Some(1),
            "b16" | "u16" | "s16" | "f16" | "bf16" => size = Some(2),
            "b32" | "u32" | "s32" | "f32" | "f16x2" | "bf16x2" => size = Some(4),
            "b64" | "u64" | "s64" | "f64" => size = Some(8),
            "b128" => size = Some(16),
            _ => {}
        }
    }
    size.map(|s| s * lanes)
}

/// At a kernel's exit (the return at piece `piece`): the per-thread sum of combined atomic adds,
/// added to memory, aggregated across the warp where the target allows.
fn flush(n: &Names, piece: usize, sm: u32) -> String {
    let (label, sum, addr) = (format!("${}_flush{piece}", n.stem), &n.sum, &n.sum_addr);
    let r = |what: &str| format!("%{}_f{what}", n.stem);
    let (fq, ft) = (r("q"), r("t"));
    let w = [r("w0"), r("w1"), r("w2"), r("w3")];
    let add = if sm >= 80 {
        warp_add(addr, sum, None, "", [&w[0], &w[1], &w[2], &w[3]], &fq, &ft, &label)
    } else {
        format!("\tred.add.u64 [{addr}], {sum};\n{label}_done:\n")
    };
    format!(
        "\t{{\n\t.reg .b32 {w0}, {w1}, {w2}, {w3};\n\t.reg .pred {fq};\n\t.reg .b64 {ft};\n\
         \tsetp.eq.u64 {fq}, {addr}, 0;\n\t@{fq} bra {label}_done;\n{add}\t}}\n",
        w0 = w[0],
        w1 = w[1],
        w2 = w[2],
        w3 = w[3],
    )
}

/// The names the injector declares in a module: all start with a stem that appears nowhere in
/// the module's text, so they cannot meet the module's own names (a module instrumented before
/// included).
struct Names {
    stem: String,
    sum_addr: String,
    sum: String,
    smid: String,
}

impl Names {
    fn new(text: &str) -> Names {
        let stem = (0..)
            .map(|i| if i == 0 { "egpu".to_string() } else { format!("egpu{i}x") })
            .find(|s| !text.contains(s.as_str()))
            .unwrap_or_default();
        Names {
            sum_addr: format!("%{stem}_sum_addr"),
            sum: format!("%{stem}_sum"),
            smid: format!("%{stem}_smid"),
            stem,
        }
    }
}

/// The hash maps (by device address, numbered) whose entries stay where they are while a kernel
/// with these probes runs, so a thread may remember where its last lookup found a key: in GPU
/// memory (nobody else writes it meanwhile), with keys of at most 8 bytes, and removed from by
/// none of the probes (device inserts never reuse a removed entry's slot).
fn lookup_caches(selected: &[(usize, &DeviceProbe<'_>, DeviceEvent)]) -> BTreeMap<u64, usize> {
    let mut removed = BTreeSet::new();
    let mut looked_up: Vec<DeviceMap> = Vec::new();
    for (_, p, _) in selected {
        let (lookups, removals) = lookups_and_removals(p.program);
        let Some(removals) = removals else { return BTreeMap::new() };
        removed.extend(removals.iter().filter_map(|&m| p.maps.get(m as usize)).map(|b| b.addr));
        looked_up.extend(lookups.iter().filter_map(|&m| p.maps.get(m as usize)).copied());
    }
    let mut caches = BTreeMap::new();
    for b in looked_up {
        let g = b.geometry;
        if matches!(g.kind, MapKind::Hash | MapKind::PerCpuHash)
            && g.key_size <= 8
            && !b.live
            && !removed.contains(&b.addr)
        {
            let next = caches.len();
            caches.entry(b.addr).or_insert(next);
        }
    }
    caches
}

/// Whether an instruction ends a path for good: `ret`, `exit`, or a jump, unguarded.
fn ends_path(insn: &PtxInstruction<'_>) -> bool {
    insn.guard.is_none() && matches!(insn.base(), "ret" | "exit" | "bra" | "trap")
}

/// Instruments `ptx` with `probes`.
pub fn inject(ptx: &str, probes: &[DeviceProbe<'_>]) -> Result<Injection, InjectError> {
    let module = PtxModule::parse(ptx)?;
    if let Some(size) = module.directive(".address_size")
        && size != "64"
    {
        return Err(InjectError::AddressSize(size.to_owned()));
    }
    // `.target sm_90a, debug`: the SM version, 90 (the GPU machine's) when unreadable.
    let sm = module
        .directive(".target")
        .and_then(|t| t.split(',').find_map(|part| part.trim().strip_prefix("sm_")))
        .and_then(|v| v.trim_end_matches(|c: char| c.is_ascii_alphabetic()).parse::<u32>().ok())
        .unwrap_or(90);
    for (i, p) in probes.iter().enumerate() {
        let attach = p.program.program().attach_point();
        if !attach.is_device() {
            return Err(InjectError::NotDevice { probe: i, attach });
        }
    }
    let mut before: BTreeMap<usize, String> = BTreeMap::new();
    let mut after: BTreeMap<usize, String> = BTreeMap::new();
    let mut functions = String::new();
    let mut sites = Vec::new();
    let mut serial = 0usize;
    let names = Names::new(ptx);
    let mut unobserved = Vec::new();
    for f in module.functions() {
        let mut index = 0u32;
        let id = kernel_id(&f.name);
        let selected: Vec<(usize, &DeviceProbe<'_>, DeviceEvent)> = probes
            .iter()
            .enumerate()
            .filter(|(_, p)| p.kernels.selects(&f.name))
            .filter_map(|(i, p)| match p.program.program().attach_point() {
                AttachPoint::Device(e) => Some((i, p, e)),
                _ => None,
            })
            .collect();
        if selected.is_empty() {
            continue;
        }
        // Per-thread combining of atomic adds needs kernel-wide registers: kernels only.
        let combine =
            f.kind == FunctionKind::Entry && selected.iter().any(|(_, p, _)| combines(p.program));
        let combine_regs = [names.sum_addr.clone(), names.sum.clone()];
        let entry = f.kind == FunctionKind::Entry;
        let caches = if entry { lookup_caches(&selected) } else { BTreeMap::new() };
        let cache_regs =
            |j: usize| [format!("%{}_hk{j}", names.stem), format!("%{}_hp{j}", names.stem)];
        let mut emit = |probe: usize,
                        p: &DeviceProbe<'_>,
                        context: Context,
                        site: Site|
         -> Result<String, InjectError> {
            let prefix = format!("{}{serial}", names.stem);
            serial += 1;
            let mut options = Options::new(prefix, context);
            options.pid = std::process::id();
            options.maps = p.maps.to_vec();
            options.sm = sm;
            if combine {
                options.combine = Some(combine_regs.clone());
            }
            if entry {
                options.smid = Some(names.smid.clone());
            }
            options.lookup_cache =
                p.maps.iter().map(|b| caches.get(&b.addr).map(|&j| cache_regs(j))).collect();
            let t = translate(p.program, &options)
                .map_err(|error| InjectError::Translate { probe, error })?;
            functions.push_str(&t.functions);
            sites.push(site);
            Ok(t.body)
        };
        if entry {
            // The SM a thread runs on never changes: read it once.
            let smid = &names.smid;
            after
                .entry(f.body.start)
                .or_default()
                .push_str(&format!("\n\t.reg .b32 {smid};\n\tmov.u32 {smid}, %smid;\n"));
        }
        for &j in caches.values() {
            let [key, value] = cache_regs(j);
            after.entry(f.body.start).or_default().push_str(&format!(
                "\t.reg .b64 {key}, {value};\n\tmov.b64 {key}, 0;\n\tmov.b64 {value}, 0;\n"
            ));
        }
        if combine {
            let (addr, sum) = (&names.sum_addr, &names.sum);
            after.entry(f.body.start).or_default().push_str(&format!(
                "\t.reg .b64 {addr}, {sum};\n\tmov.b64 {addr}, 0;\n\tmov.b64 {sum}, 0;\n"
            ));
        }
        if f.kind == FunctionKind::Entry {
            let open = f.body.start;
            for &(i, p, e) in &selected {
                if e != DeviceEvent::KernelEntry {
                    continue;
                }
                let site = Site {
                    function: f.name.clone(),
                    line: module.pieces()[open].line,
                    event: e,
                    size: 0,
                    index: 0,
                };
                let body = emit(i, p, Context::Kernel { kernel_id: id }, site)?;
                after.entry(open).or_default().push_str(&format!("\n{body}"));
            }
        }
        let instructions = module.instructions(f);
        // A kernel whose last instruction does not end its path falls off its end: an exit too.
        // So does one whose last instruction is followed by a label (a jump there reaches the end).
        let last = instructions.last().map_or(f.body.start, |(piece, _)| *piece);
        let label_after =
            (last + 1..f.body.end).any(|k| module.pieces()[k].kind == PieceKind::Label);
        let falls_off =
            entry && (label_after || instructions.last().is_none_or(|(_, i)| !ends_path(i)));
        type Emit<'e> =
            dyn FnMut(usize, &DeviceProbe<'_>, Context, Site) -> Result<String, InjectError> + 'e;
        let exit_code = |emit: &mut Emit<'_>,
                         code: &mut String,
                         line: usize,
                         piece: usize|
         -> Result<(), InjectError> {
            for &(i, p, e) in &selected {
                if e == DeviceEvent::KernelExit {
                    let site = Site { function: f.name.clone(), line, event: e, size: 0, index: 0 };
                    code.push_str(&emit(i, p, Context::Kernel { kernel_id: id }, site)?);
                }
            }
            if combine {
                code.push_str(&flush(&names, piece, sm));
            }
            Ok(())
        };
        for (piece, insn) in &instructions {
            let (piece, insn) = (*piece, insn);
            let mut code = String::new();
            let is_return = insn.is_return() && entry;
            let load = insn.is_global_load() || (insn.base() == "ld" && insn.is_generic_access());
            let store = insn.is_global_store() || (insn.base() == "st" && insn.is_generic_access());
            // Every observed access has its index, whatever probes are attached.
            let access = (load || store)
                .then(|| access_code(insn, &format!("%{}_addr{piece}", names.stem)))
                .flatten();
            let this = index;
            if access.is_some() {
                index += 1;
            } else if load || store {
                unobserved.push(Site {
                    function: f.name.clone(),
                    line: insn.line,
                    event: if store { DeviceEvent::GlobalStore } else { DeviceEvent::GlobalLoad },
                    size: access_size(insn).unwrap_or(0),
                    index: 0,
                });
            }
            if is_return {
                exit_code(&mut emit, &mut code, insn.line, piece)?;
            }
            for &(i, p, e) in &selected {
                let site = |size, index| Site {
                    function: f.name.clone(),
                    line: insn.line,
                    event: e,
                    size,
                    index,
                };
                let wanted = (e == DeviceEvent::GlobalLoad && load)
                    || (e == DeviceEvent::GlobalStore && store);
                if let (true, Some((addr_code, size, generic, addr))) = (wanted, &access) {
                    let context = Context::Access {
                        kernel_id: id,
                        addr: format!("{addr}_{i}"),
                        size: *size,
                        site: this,
                        is_store: store,
                    };
                    let body = emit(i, p, context, site(*size, this))?;
                    let label = format!("${}_skip{piece}_{i}", names.stem);
                    code.push_str(&wrap_access(
                        &format!("{addr}_{i}"),
                        addr_code,
                        *generic,
                        &body,
                        &label,
                    ));
                }
            }
            if code.is_empty() {
                continue;
            }
            let block = match &insn.guard {
                None => code,
                Some(g) => {
                    let skip = format!("${}_skip{piece}", names.stem);
                    let bang = if g.negated { "" } else { "!" };
                    format!("\t@{bang}{} bra {skip};\n{code}{skip}:\n", g.predicate)
                }
            };
            before.entry(piece).or_default().push_str(&block);
        }
        if falls_off {
            let close = f.body.end - 1;
            let mut code = String::new();
            exit_code(&mut emit, &mut code, module.pieces()[close].line, close)?;
            before.entry(close).or_default().push_str(&code);
        }
    }
    let mut out = String::with_capacity(ptx.len() * 2);
    let first_function = module.functions().first().map(|f| f.header);
    for (i, piece) in module.pieces().iter().enumerate() {
        if Some(i) == first_function && !functions.is_empty() {
            out.push_str(&functions);
            out.push('\n');
        }
        if let Some(code) = before.get(&i) {
            out.push('\n');
            out.push_str(code);
            if piece.kind == PieceKind::Statement {
                out.push('\t');
            }
        }
        out.push_str(module.piece_text(i));
        if let Some(code) = after.get(&i) {
            out.push_str(code);
        }
    }
    Ok(Injection { ptx: out, sites, unobserved })
}

/// For a load or store: the code that computes its address into a fresh register, its size,
/// whether it is generic (so global only at run time), and the register's name. `None` when the
/// access cannot be observed (its address is a number, or a variable of a generic access).
fn access_code(insn: &PtxInstruction<'_>, addr: &str) -> Option<(String, u32, bool, String)> {
    let size = access_size(insn)?;
    let operand = insn.operands.iter().find(|o| o.starts_with('['))?;
    let generic = insn.is_generic_access();
    address_code(operand, !generic, "{ADDR}").map(|code| (code, size, generic, addr.to_owned()))
}

/// A probe at an access: the address computed into its own register, and for a generic access a
/// run-time check that it is global.
fn wrap_access(addr: &str, addr_code: &str, generic: bool, body: &str, skip: &str) -> String {
    let addr_code = addr_code.replace("{ADDR}", addr);
    let mut s = format!("\t{{\n\t.reg .b64 {addr};\n{addr_code}");
    if generic {
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
