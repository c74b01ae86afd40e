//! The assembler for the text syntax of bpf_conformance and uBPF.
//!
//! ```text
//! # a comment; `#` starts a comment anywhere on a line
//! start:                      # a label
//!     mov %r0, 0              # ALU: add sub mul div sdiv or and lsh rsh mod smod xor mov arsh,
//!     add32 %r0, %r1          #   with `32` for 32-bit (a `64` suffix is accepted too)
//!     movsx1664 %r2, %r1      # sign-extending moves: movsx{8,16}{32,64}, movsx3264
//!     neg %r0                 # neg, neg32
//!     be16 %r0                # le16/32/64, be16/32/64, bswap16/32/64 (also swap16/32/64)
//!     lddw %r1, 0x1122334455667788
//!     lddw %r1, map[0]        # address of entry 0 of the map table
//!     lddw %r2, func body     # a reference to the local function at a label (or `+n`)
//!     ldxw %r2, [%r1+4]       # ldxb ldxh ldxw ldxdw, sign-extending ldxsb ldxsh ldxsw
//!     stxdw [%r10-8], %r2     # stxb stxh stxw stxdw
//!     stw [%r10-16], 7        # stb sth stw stdw
//!     lock add [%r10-8], %r1  # lock [fetch] add|or|and|xor[32], lock xchg|cmpxchg[32]
//!     jne %r0, 0, done        # jeq jgt jge jset jne jsgt jsge jlt jle jslt jsle, and …32
//!     ja +1                   # targets: a label, `+n`/`-n` slots, or `exit` (the first exit)
//!     ja32 done               # jump with a 32-bit offset
//!     call 5                  # a helper by number
//!     call %r2                # a helper whose number is in a register
//!     call local func         # a local function
//! done:
//!     exit
//! ```
//!
//! Numbers are decimal or `0x` hexadecimal, with an optional sign. A 32-bit immediate may be
//! written as a signed value or as its unsigned bit pattern (`-1` and `0xffffffff` are the same).

use std::collections::HashMap;

use crate::AsmError;
use crate::insn::{Insn, Reg};
use crate::instruction::{
    AluOp, AtomicOp, ByteOrder, CallTarget, Imm64, Instruction, JmpCond, Operand, Size, Width,
};

/// Assembles text into instruction slots.
pub fn assemble(text: &str) -> Result<Vec<Insn>, AsmError> {
    let mut asm = Assembler::default();
    for (i, line) in text.lines().enumerate() {
        asm.line(i + 1, line)?;
    }
    asm.finish()
}

/// A jump or call whose target is a label, patched once all labels are known.
struct Fixup {
    index: usize,
    pc: usize,
    line: usize,
    label: String,
}

#[derive(Default)]
struct Assembler {
    insns: Vec<Instruction>,
    pc: usize,
    labels: HashMap<String, usize>,
    first_exit: Option<usize>,
    fixups: Vec<Fixup>,
}

/// A parsed target before resolution.
enum Target {
    Relative(i64),
    Label(String),
}

impl Assembler {
    fn err(&self, line: usize, message: impl Into<String>) -> AsmError {
        AsmError { line, pc: self.pc, message: message.into() }
    }

    fn line(&mut self, line_no: usize, line: &str) -> Result<(), AsmError> {
        let code = line.split('#').next().unwrap_or("");
        let mut tokens = tokenize(code);
        // Leading labels.
        while let Some(label) = tokens.first().and_then(|t| t.strip_suffix(':')) {
            if !is_label(label) {
                return Err(self.err(line_no, format!("`{label}` is not a valid label name")));
            }
            if self.labels.insert(label.to_string(), self.pc).is_some() {
                return Err(self.err(line_no, format!("label `{label}` is defined twice")));
            }
            tokens.remove(0);
        }
        let Some((mnemonic, operands)) = tokens.split_first() else {
            return Ok(());
        };
        let insn = self.instruction(line_no, &mnemonic.to_ascii_lowercase(), operands)?;
        if insn == Instruction::Exit && self.first_exit.is_none() {
            self.first_exit = Some(self.pc);
        }
        self.pc += insn.slots();
        self.insns.push(insn);
        Ok(())
    }

    fn finish(mut self) -> Result<Vec<Insn>, AsmError> {
        for fix in std::mem::take(&mut self.fixups) {
            let target = match self.labels.get(&fix.label) {
                Some(&t) => t,
                None if fix.label == "exit" => self.first_exit.ok_or_else(|| AsmError {
                    line: fix.line,
                    pc: fix.pc,
                    message: "jump to `exit`, but the program has no `exit` instruction".into(),
                })?,
                None => {
                    return Err(AsmError {
                        line: fix.line,
                        pc: fix.pc,
                        message: format!("undefined label `{}`", fix.label),
                    });
                }
            };
            let off = target as i64 - fix.pc as i64 - 1;
            let err = |what: &str| AsmError {
                line: fix.line,
                pc: fix.pc,
                message: format!("offset {off} to `{}` does not fit {what}", fix.label),
            };
            match &mut self.insns[fix.index] {
                Instruction::Branch { off: o, .. } => {
                    *o = i16::try_from(off).map_err(|_| err("in 16 bits"))?;
                }
                Instruction::Jump { off: o, long: false } => {
                    *o = i16::try_from(off).map_err(|_| err("in 16 bits (use `ja32`)"))?.into();
                }
                Instruction::Jump { off: o, long: true }
                | Instruction::Call(CallTarget::Local(o))
                | Instruction::LoadImm64 { imm: Imm64::Func(o), .. } => {
                    *o = i32::try_from(off).map_err(|_| err("in 32 bits"))?;
                }
                _ => unreachable!("fixups are only recorded for jumps, local calls and functions"),
            }
        }
        Ok(crate::instruction::encode(&self.insns))
    }

    fn target(&mut self, line: usize, tok: &str) -> Result<Target, AsmError> {
        if tok.starts_with('+') || tok.starts_with('-') {
            let v = parse_int(tok)
                .and_then(|v| i64::try_from(v).ok())
                .ok_or_else(|| self.err(line, format!("offset `{tok}` does not fit in 64 bits")))?;
            return Ok(Target::Relative(v));
        }
        if !is_label(tok) {
            return Err(self.err(line, format!("expected a label or `+n`/`-n`, found `{tok}`")));
        }
        Ok(Target::Label(tok.to_string()))
    }

    /// Records the fixup for a label target; returns the offset to encode for a relative one.
    fn resolve(&mut self, line: usize, target: Target, max_bits: u32) -> Result<i64, AsmError> {
        match target {
            Target::Relative(v) => {
                let range = -(1i64 << (max_bits - 1))..(1i64 << (max_bits - 1));
                if !range.contains(&v) {
                    return Err(
                        self.err(line, format!("offset {v} does not fit in {max_bits} bits"))
                    );
                }
                Ok(v)
            }
            Target::Label(label) => {
                self.fixups.push(Fixup { index: self.insns.len(), pc: self.pc, line, label });
                Ok(0)
            }
        }
    }

    fn instruction(
        &mut self,
        line: usize,
        mnemonic: &str,
        ops: &[String],
    ) -> Result<Instruction, AsmError> {
        let count = |n: usize| -> Result<(), AsmError> {
            if ops.len() == n {
                Ok(())
            } else {
                Err(AsmError {
                    line,
                    pc: self.pc,
                    message: format!("`{mnemonic}` takes {n} operand(s), found {}", ops.len()),
                })
            }
        };
        let (base, width) = split_width(mnemonic);

        if mnemonic == "exit" {
            count(0)?;
            return Ok(Instruction::Exit);
        }
        if mnemonic == "lock" {
            return self.atomic(line, ops);
        }
        if mnemonic == "call" {
            return self.call(line, ops);
        }
        if mnemonic == "ja" || mnemonic == "ja32" {
            count(1)?;
            let long = mnemonic == "ja32";
            let target = self.target(line, &ops[0])?;
            let off = self.resolve(line, target, if long { 32 } else { 16 })?;
            return Ok(Instruction::Jump { off: off as i32, long });
        }
        if mnemonic == "lddw" && ops.len() == 3 && ops[1].eq_ignore_ascii_case("func") {
            let dst = self.reg(line, &ops[0])?;
            let target = self.target(line, &ops[2])?;
            let off = self.resolve(line, target, 32)?;
            return Ok(Instruction::LoadImm64 { dst, imm: Imm64::Func(off as i32) });
        }
        if mnemonic == "lddw" {
            count(2)?;
            let dst = self.reg(line, &ops[0])?;
            if let Some(rest) = ops[1].strip_prefix("map[") {
                let (idx, offset) = rest.split_once(']').unwrap_or((rest, "?"));
                let number = |text: &str, what: &str| {
                    parse_int(text)
                        .and_then(|v| u32::try_from(v).ok())
                        .ok_or_else(|| self.err(line, format!("bad {what} `{text}`")))
                };
                let map = number(idx, "map index")?;
                let imm = match offset {
                    "" => Imm64::Map(map),
                    // `map[N]+OFF`: the address of byte OFF of the map's value.
                    _ => match offset.strip_prefix('+') {
                        Some(off) => Imm64::MapValue { map, offset: number(off, "value offset")? },
                        None => return Err(self.err(line, format!("bad map `{}`", ops[1]))),
                    },
                };
                return Ok(Instruction::LoadImm64 { dst, imm });
            }
            let v = self.imm64(line, &ops[1])?;
            return Ok(Instruction::LoadImm64 { dst, imm: Imm64::Value(v) });
        }
        if let Some(order_bits) = endian(mnemonic) {
            count(1)?;
            let (order, bits) = order_bits;
            return Ok(Instruction::Endian { order, bits, dst: self.reg(line, &ops[0])? });
        }
        if base == "neg" {
            count(1)?;
            return Ok(Instruction::Neg { width, dst: self.reg(line, &ops[0])? });
        }
        if let Some(rest) = mnemonic.strip_prefix("movsx") {
            let (bits, width) = match rest {
                "832" => (8, Width::W32),
                "1632" => (16, Width::W32),
                "864" => (8, Width::W64),
                "1664" => (16, Width::W64),
                "3264" => (32, Width::W64),
                _ => return Err(self.err(line, format!("unknown mnemonic `{mnemonic}`"))),
            };
            count(2)?;
            let dst = self.reg(line, &ops[0])?;
            let src = self.reg(line, &ops[1])?;
            return Ok(Instruction::Alu {
                op: AluOp::MovSx(bits),
                width,
                dst,
                src: Operand::Reg(src),
            });
        }
        if let Some(op) = alu_op(base) {
            count(2)?;
            let dst = self.reg(line, &ops[0])?;
            let src = self.operand(line, &ops[1])?;
            return Ok(Instruction::Alu { op, width, dst, src });
        }
        if let Some(cond) = JmpCond::ALL.iter().copied().find(|c| c.mnemonic() == base) {
            count(3)?;
            let dst = self.reg(line, &ops[0])?;
            let src = self.operand(line, &ops[1])?;
            let target = self.target(line, &ops[2])?;
            let off = self.resolve(line, target, 16)?;
            return Ok(Instruction::Branch { cond, width, dst, src, off: off as i16 });
        }
        if let Some((signed, size)) = load_kind(mnemonic) {
            count(2)?;
            let dst = self.reg(line, &ops[0])?;
            let (base, off) = self.mem(line, &ops[1])?;
            return Ok(Instruction::Load { size, signed, dst, base, off });
        }
        if let Some((is_reg, size)) = store_kind(mnemonic) {
            count(2)?;
            let (base, off) = self.mem(line, &ops[0])?;
            let src = if is_reg {
                Operand::Reg(self.reg(line, &ops[1])?)
            } else {
                Operand::Imm(self.imm32(line, &ops[1])?)
            };
            return Ok(Instruction::Store { size, base, off, src });
        }
        Err(self.err(line, format!("unknown mnemonic `{mnemonic}`")))
    }

    fn atomic(&mut self, line: usize, ops: &[String]) -> Result<Instruction, AsmError> {
        let (fetch, rest) = match ops.split_first() {
            Some((f, rest)) if f.eq_ignore_ascii_case("fetch") => (true, rest),
            _ => (false, ops),
        };
        let [op, mem, src] = rest else {
            return Err(self.err(line, "expected `lock [fetch] <op> [reg+off], reg`"));
        };
        let op = op.to_ascii_lowercase();
        let (name, size) = match op.strip_suffix("32") {
            Some(name) => (name, Size::W),
            None => (op.strip_suffix("64").unwrap_or(&op), Size::DW),
        };
        let (aop, fetch) = match name {
            "add" => (AtomicOp::Add, fetch),
            "or" => (AtomicOp::Or, fetch),
            "and" => (AtomicOp::And, fetch),
            "xor" => (AtomicOp::Xor, fetch),
            "xchg" => (AtomicOp::Xchg, true),
            "cmpxchg" => (AtomicOp::CmpXchg, true),
            _ => return Err(self.err(line, format!("unknown atomic operation `{op}`"))),
        };
        let (base, off) = self.mem(line, mem)?;
        let src = self.reg(line, src)?;
        Ok(Instruction::Atomic { op: aop, fetch, size, base, off, src })
    }

    fn call(&mut self, line: usize, ops: &[String]) -> Result<Instruction, AsmError> {
        match ops {
            [mode, target] if mode.eq_ignore_ascii_case("local") => {
                let target = self.target(line, target)?;
                let off = self.resolve(line, target, 32)?;
                Ok(Instruction::Call(CallTarget::Local(off as i32)))
            }
            [mode, id] if mode.eq_ignore_ascii_case("helper") => {
                Ok(Instruction::Call(CallTarget::Helper(self.imm32(line, id)? as u32)))
            }
            [target] if target.starts_with('%') => {
                Ok(Instruction::Call(CallTarget::Reg(self.reg(line, target)?)))
            }
            [id] => Ok(Instruction::Call(CallTarget::Helper(self.imm32(line, id)? as u32))),
            _ => Err(self.err(line, "expected `call <n>`, `call %rN` or `call local <target>`")),
        }
    }

    fn reg(&self, line: usize, tok: &str) -> Result<Reg, AsmError> {
        tok.strip_prefix("%r")
            .or_else(|| tok.strip_prefix('r'))
            .and_then(|n| n.parse::<u8>().ok())
            .and_then(Reg::new)
            .ok_or_else(|| self.err(line, format!("expected a register %r0..%r10, found `{tok}`")))
    }

    fn operand(&self, line: usize, tok: &str) -> Result<Operand, AsmError> {
        if tok.starts_with('%') {
            Ok(Operand::Reg(self.reg(line, tok)?))
        } else {
            Ok(Operand::Imm(self.imm32(line, tok)?))
        }
    }

    fn imm32(&self, line: usize, tok: &str) -> Result<i32, AsmError> {
        match parse_int(tok) {
            Some(v) if (i32::MIN as i128..=u32::MAX as i128).contains(&v) => Ok(v as u32 as i32),
            Some(_) => Err(self.err(line, format!("immediate `{tok}` does not fit in 32 bits"))),
            None => Err(self.err(line, format!("expected a number, found `{tok}`"))),
        }
    }

    fn imm64(&self, line: usize, tok: &str) -> Result<u64, AsmError> {
        match parse_int(tok) {
            Some(v) if (i64::MIN as i128..=u64::MAX as i128).contains(&v) => Ok(v as u64),
            Some(_) => Err(self.err(line, format!("immediate `{tok}` does not fit in 64 bits"))),
            None => Err(self.err(line, format!("expected a number, found `{tok}`"))),
        }
    }

    /// `[%rN]`, `[%rN+off]` or `[%rN-off]`.
    fn mem(&self, line: usize, tok: &str) -> Result<(Reg, i16), AsmError> {
        let bad =
            || self.err(line, format!("expected a memory operand `[%rN+off]`, found `{tok}`"));
        let inner = tok.strip_prefix('[').and_then(|t| t.strip_suffix(']')).ok_or_else(bad)?;
        let split = inner.find(['+', '-']);
        let (reg, off) = match split {
            Some(i) => (&inner[..i], &inner[i..]),
            None => (inner, "+0"),
        };
        let reg = self.reg(line, reg)?;
        let off = parse_int(off).ok_or_else(bad)?;
        let off = match off {
            v if (i16::MIN as i128..=u16::MAX as i128).contains(&v) => v as u16 as i16,
            _ => return Err(self.err(line, format!("offset `{off}` does not fit in 16 bits"))),
        };
        Ok((reg, off))
    }
}

/// Splits a line into tokens on whitespace and commas, keeping `[…]` together.
fn tokenize(code: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut cur = String::new();
    let mut depth = 0;
    for c in code.chars() {
        match c {
            '[' => {
                depth += 1;
                cur.push(c);
            }
            ']' => {
                depth -= 1;
                cur.push(c);
            }
            c if depth > 0 && c.is_whitespace() => {}
            c if depth == 0 && (c.is_whitespace() || c == ',') => {
                if !cur.is_empty() {
                    tokens.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        tokens.push(cur);
    }
    tokens
}

fn is_label(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == '.')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
}

/// A signed decimal or `0x` hexadecimal integer.
pub(crate) fn parse_int(tok: &str) -> Option<i128> {
    let (neg, digits) = match tok.as_bytes().first()? {
        b'-' => (true, &tok[1..]),
        b'+' => (false, &tok[1..]),
        _ => (false, tok),
    };
    let (radix, digits) = match digits.strip_prefix("0x").or_else(|| digits.strip_prefix("0X")) {
        Some(hex) => (16, hex),
        None => (10, digits),
    };
    // `from_str_radix` accepts a sign of its own; only the one before the digits is ours.
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let v = i128::from_str_radix(digits, radix).ok()?;
    if neg { v.checked_neg() } else { Some(v) }
}

fn split_width(mnemonic: &str) -> (&str, Width) {
    if let Some(base) = mnemonic.strip_suffix("32") {
        (base, Width::W32)
    } else {
        (mnemonic.strip_suffix("64").unwrap_or(mnemonic), Width::W64)
    }
}

fn alu_op(base: &str) -> Option<AluOp> {
    Some(match base {
        "add" => AluOp::Add,
        "sub" => AluOp::Sub,
        "mul" => AluOp::Mul,
        "div" => AluOp::Div,
        "sdiv" => AluOp::SDiv,
        "or" => AluOp::Or,
        "and" => AluOp::And,
        "lsh" => AluOp::Lsh,
        "rsh" => AluOp::Rsh,
        "mod" => AluOp::Mod,
        "smod" => AluOp::SMod,
        "xor" => AluOp::Xor,
        "mov" => AluOp::Mov,
        "arsh" => AluOp::Arsh,
        _ => return None,
    })
}

fn endian(mnemonic: &str) -> Option<(ByteOrder, u8)> {
    let (order, bits) = if let Some(b) = mnemonic.strip_prefix("bswap") {
        (ByteOrder::Swap, b)
    } else if let Some(b) = mnemonic.strip_prefix("swap") {
        (ByteOrder::Swap, b)
    } else if let Some(b) = mnemonic.strip_prefix("le") {
        (ByteOrder::Le, b)
    } else if let Some(b) = mnemonic.strip_prefix("be") {
        (ByteOrder::Be, b)
    } else {
        return None;
    };
    match bits {
        "16" => Some((order, 16)),
        "32" => Some((order, 32)),
        "64" => Some((order, 64)),
        _ => None,
    }
}

fn size_suffix(s: &str) -> Option<Size> {
    Some(match s {
        "b" => Size::B,
        "h" => Size::H,
        "w" => Size::W,
        "dw" => Size::DW,
        _ => return None,
    })
}

fn load_kind(mnemonic: &str) -> Option<(bool, Size)> {
    let rest = mnemonic.strip_prefix("ldx")?;
    match rest.strip_prefix('s') {
        Some(s) => size_suffix(s).filter(|&s| s != Size::DW).map(|s| (true, s)),
        None => size_suffix(rest).map(|s| (false, s)),
    }
}

fn store_kind(mnemonic: &str) -> Option<(bool, Size)> {
    if let Some(rest) = mnemonic.strip_prefix("stx") {
        return size_suffix(rest).map(|s| (true, s));
    }
    size_suffix(mnemonic.strip_prefix("st")?).map(|s| (false, s))
}
