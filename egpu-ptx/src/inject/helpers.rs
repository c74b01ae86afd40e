//! The injector's small helpers: the names it declares, zeroed registers, an access's
//! context, the module's predicate registers, and the instructions that end a path.

use super::access::Observed;
use crate::ptx::{PieceKind, PtxInstruction, PtxModule};
use crate::translate::Context;

/// The names the injector declares in a module: all start with a stem that appears nowhere in
/// the module's text, so they cannot meet the module's own names (a module instrumented before
/// included).
pub(super) struct Names {
    pub(super) stem: String,
    /// The combining slots' registers: address and sum, newer slot first.
    pub(super) sums: [String; 4],
    pub(super) smid: String,
    /// The register of the launch's tag (`launch_tags.rs`).
    pub(super) tag: String,
}

impl Names {
    pub(super) fn new(text: &str) -> Names {
        let stem = (0..)
            .map(|i| if i == 0 { "egpu".to_string() } else { format!("egpu{i}x") })
            .find(|s| !text.contains(s.as_str()))
            .unwrap_or_default();
        Names {
            sums: [
                format!("%{stem}_sum_addr"),
                format!("%{stem}_sum"),
                format!("%{stem}_sum_addr1"),
                format!("%{stem}_sum1"),
            ],
            smid: format!("%{stem}_smid"),
            tag: format!("%{stem}_tag"),
            stem,
        }
    }
}

/// 64-bit registers of the kernel, declared and set to 0.
pub(super) fn zeroed(regs: &[String]) -> String {
    let zeros: String = regs.iter().map(|r| format!("\tmov.b64 {r}, 0;\n")).collect();
    format!("\t.reg .b64 {};\n{zeros}", regs.join(", "))
}

/// The context of a probe at observed access `o`, whose address (and size) the probe's block
/// computes into `addr` (and `size`).
pub(super) fn access_context(
    o: &Observed,
    kernel_id: u64,
    addr: &str,
    size: &str,
    site: u32,
) -> Context {
    Context::Access {
        kernel_id,
        addr: addr.to_owned(),
        size: o.size,
        size_reg: o.size_code.as_ref().map(|_| size.to_owned()),
        site,
        is_store: o.is_store,
        class: o.class,
        op: o.op,
        fetch: o.fetch,
    }
}

/// Whether an operand names a predicate register: the names `.reg .pred` declares in the module,
/// one by one (`%p, %q`) or as a range (`%p<8>`).
pub(super) fn predicates(module: &PtxModule) -> impl Fn(&str) -> bool + use<> {
    let mut names: Vec<(String, bool)> = Vec::new();
    for (i, piece) in module.pieces().iter().enumerate() {
        let text = module.piece_text(i).trim();
        if piece.kind != PieceKind::Statement || !text.starts_with(".reg") {
            continue;
        }
        let mut words = text.trim_end_matches(';').split([' ', '\t', '\n', ',']);
        if !words.any(|w| w == ".pred") {
            continue;
        }
        for w in words.filter(|w| !w.is_empty()) {
            match w.split_once('<') {
                Some((prefix, _)) => names.push((prefix.to_owned(), true)),
                None => names.push((w.to_owned(), false)),
            }
        }
    }
    move |operand: &str| {
        let operand = operand.trim_start_matches('!');
        names.iter().any(|(name, range)| match operand.strip_prefix(name.as_str()) {
            Some("") => !range,
            Some(digits) => *range && digits.chars().all(|c| c.is_ascii_digit()),
            None => false,
        })
    }
}

/// Whether an instruction ends a path for good: `ret`, `exit`, or a jump, unguarded.
pub(super) fn ends_path(insn: &PtxInstruction<'_>) -> bool {
    insn.guard.is_none() && matches!(insn.base(), "ret" | "exit" | "bra" | "trap")
}
