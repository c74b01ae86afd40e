//! The disassembler: instruction slots to the assembler's text syntax.
//!
//! The listing names jump and call targets with labels (`L<pc>` for jump targets, `fn<pc>` for
//! functions), prints helper names in comments, and assembles back into the same slots.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::DecodeError;
use crate::insn::Insn;
use crate::instruction::{
    AluOp, ByteOrder, CallTarget, Decoded, Imm64, Instruction, Operand, Width, decode,
};

/// Disassembles slots into assembly text.
///
/// Fails only where a slot does not decode; jump targets outside the program are printed as
/// relative offsets (`+n`), so any decodable sequence can be listed.
pub fn disassemble(slots: &[Insn]) -> Result<String, DecodeError> {
    Ok(listing(&decode(slots)?, slots.len()))
}

pub(crate) fn listing(decoded: &[Decoded], len: usize) -> String {
    let starts: std::collections::HashSet<usize> = decoded.iter().map(|d| d.pc).collect();
    let valid = |t: i64| (0..len as i64).contains(&t) && starts.contains(&(t as usize));
    let mut labels: BTreeMap<usize, String> = BTreeMap::new();
    for d in decoded {
        if let Some(t) = d.insn.call_target(d.pc).filter(|&t| valid(t)) {
            labels.insert(t as usize, format!("fn{t}"));
        }
    }
    for d in decoded {
        if let Some(t) = d.insn.jump_target(d.pc).filter(|&t| valid(t)) {
            labels.entry(t as usize).or_insert_with(|| format!("L{t}"));
        }
    }
    let target =
        |pc: usize, t: Option<i64>, off: i64| match t.and_then(|t| labels.get(&(t as usize))) {
            Some(name) if t.is_some_and(valid) => name.clone(),
            _ => {
                let _ = pc;
                format!("{off:+}")
            }
        };
    let mut out = String::new();
    for d in decoded {
        if let Some(name) = labels.get(&d.pc) {
            let _ = writeln!(out, "{name}:");
        }
        let text = match d.insn {
            Instruction::Jump { off, long } => {
                let t = target(d.pc, d.insn.jump_target(d.pc), off.into());
                format!("{} {t}", if long { "ja32" } else { "ja" })
            }
            Instruction::Branch { cond, width, dst, src, off } => {
                let t = target(d.pc, d.insn.jump_target(d.pc), off.into());
                format!("{}{} {dst}, {}, {t}", cond.mnemonic(), suffix(width), operand(src))
            }
            Instruction::Call(CallTarget::Local(off)) => {
                format!("call local {}", target(d.pc, d.insn.call_target(d.pc), off.into()))
            }
            Instruction::LoadImm64 { dst, imm: Imm64::Func(off) } => {
                format!("lddw {dst}, func {}", target(d.pc, d.insn.call_target(d.pc), off.into()))
            }
            other => instruction_text(&other),
        };
        let _ = writeln!(out, "    {text}");
    }
    out
}

fn suffix(width: Width) -> &'static str {
    match width {
        Width::W32 => "32",
        Width::W64 => "",
    }
}

fn operand(op: Operand) -> String {
    match op {
        Operand::Reg(r) => r.to_string(),
        Operand::Imm(i) => i.to_string(),
    }
}

fn mem(base: crate::Reg, off: i16) -> String {
    match off {
        0 => format!("[{base}]"),
        o if o < 0 => format!("[{base}{o}]"),
        o => format!("[{base}+{o}]"),
    }
}

/// The text of one instruction; jump and call targets are printed as relative offsets.
pub fn instruction_text(insn: &Instruction) -> String {
    match *insn {
        Instruction::Alu { op: AluOp::MovSx(bits), width, dst, src } => {
            let to = match width {
                Width::W32 => 32,
                Width::W64 => 64,
            };
            format!("movsx{bits}{to} {dst}, {}", operand(src))
        }
        Instruction::Alu { op, width, dst, src } => {
            format!("{}{} {dst}, {}", op.mnemonic(), suffix(width), operand(src))
        }
        Instruction::Neg { width, dst } => format!("neg{} {dst}", suffix(width)),
        Instruction::Endian { order, bits, dst } => {
            let name = match order {
                ByteOrder::Le => "le",
                ByteOrder::Be => "be",
                ByteOrder::Swap => "bswap",
            };
            format!("{name}{bits} {dst}")
        }
        Instruction::LoadImm64 { dst, imm: Imm64::Value(v) } => format!("lddw {dst}, {v:#x}"),
        Instruction::LoadImm64 { dst, imm: Imm64::Map(i) } => format!("lddw {dst}, map[{i}]"),
        Instruction::LoadImm64 { dst, imm: Imm64::MapValue { map, offset } } => {
            format!("lddw {dst}, map[{map}]+{offset}")
        }
        Instruction::LoadImm64 { dst, imm: Imm64::Func(off) } => {
            format!("lddw {dst}, func {off:+}")
        }
        Instruction::Load { size, signed, dst, base, off } => {
            format!(
                "ldx{}{} {dst}, {}",
                if signed { "s" } else { "" },
                size.suffix(),
                mem(base, off)
            )
        }
        Instruction::Store { size, base, off, src: Operand::Reg(r) } => {
            format!("stx{} {}, {r}", size.suffix(), mem(base, off))
        }
        Instruction::Store { size, base, off, src: Operand::Imm(i) } => {
            format!("st{} {}, {i}", size.suffix(), mem(base, off))
        }
        Instruction::Atomic { op, fetch, size, base, off, src } => {
            let implicit = matches!(op, crate::AtomicOp::Xchg | crate::AtomicOp::CmpXchg);
            format!(
                "lock {}{}{} {}, {src}",
                if fetch && !implicit { "fetch " } else { "" },
                op.mnemonic(),
                if size == crate::Size::W { "32" } else { "" },
                mem(base, off)
            )
        }
        Instruction::Jump { off, long } => {
            format!("{} {off:+}", if long { "ja32" } else { "ja" })
        }
        Instruction::Branch { cond, width, dst, src, off } => {
            format!("{}{} {dst}, {}, {off:+}", cond.mnemonic(), suffix(width), operand(src))
        }
        Instruction::Call(CallTarget::Helper(id)) => match crate::helpers::helper(id) {
            Some(h) => format!("call {id} # {}", h.name),
            None => format!("call {id}"),
        },
        Instruction::Call(CallTarget::Local(off)) => format!("call local {off:+}"),
        Instruction::Call(CallTarget::Reg(r)) => format!("call {r}"),
        Instruction::Exit => "exit".into(),
    }
}

impl std::fmt::Display for Instruction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&instruction_text(self))
    }
}
