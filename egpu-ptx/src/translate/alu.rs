//! ALU and ALU64 instructions, `neg`, byte swaps, and `lddw`. Arithmetic follows RFC 9669
//! exactly where PTX differs: division by zero gives 0 and the remainder by zero the dividend,
//! `MIN / -1` is `MIN`, shift counts are masked to the operand width, and 32-bit operations
//! zero-extend their result.

use egpu_ebpf::{AluOp, ByteOrder, Imm64, Operand, Reg, Width};

use super::TranslateError;
use super::emit::Emitter;

impl Emitter<'_> {
    /// A 64-bit ALU instruction: `dst = dst op src`, or `dst = src` for the moves.
    pub(super) fn alu64(&mut self, op: AluOp, dst: Reg, src: Operand) {
        let d = self.reg(dst);
        let s = self.operand64(src);
        let simple = match op {
            AluOp::Add => Some("add.s64"),
            AluOp::Sub => Some("sub.s64"),
            AluOp::Mul => Some("mul.lo.s64"),
            AluOp::Or => Some("or.b64"),
            AluOp::And => Some("and.b64"),
            AluOp::Xor => Some("xor.b64"),
            _ => None,
        };
        if let Some(opcode) = simple {
            self.line(format!("{opcode} {d}, {d}, {s};"));
            return;
        }
        match op {
            AluOp::Mov => self.line(format!("mov.b64 {d}, {s};")),
            AluOp::MovSx(bits) => {
                let shift = 64 - u32::from(bits);
                self.line(format!("shl.b64 {d}, {s}, {shift};"));
                self.line(format!("shr.s64 {d}, {d}, {shift};"));
            }
            AluOp::Lsh | AluOp::Rsh | AluOp::Arsh => {
                let opcode = match op {
                    AluOp::Lsh => "shl.b64",
                    AluOp::Rsh => "shr.u64",
                    _ => "shr.s64",
                };
                let count = match src {
                    Operand::Imm(i) => (i & 63).to_string(),
                    Operand::Reg(_) => {
                        let w0 = self.tmp32(0);
                        self.line(format!("cvt.u32.u64 {w0}, {s};"));
                        self.line(format!("and.b32 {w0}, {w0}, 63;"));
                        w0
                    }
                };
                self.line(format!("{opcode} {d}, {d}, {count};"));
            }
            AluOp::Div | AluOp::SDiv | AluOp::Mod | AluOp::SMod if positive(src) => {
                // A constant divisor, neither 0 nor -1: no test, and ptxas divides by
                // multiplying (a divisor in a register is a call of a division routine).
                self.line(format!("{}.{}64 {d}, {d}, {s};", div_opcode(op), div_type(op)));
            }
            AluOp::Div | AluOp::SDiv | AluOp::Mod | AluOp::SMod => {
                let [t0, t1] = [self.tmp64(0), self.tmp64(1)];
                self.line(format!("mov.b64 {t1}, {s};"));
                self.divide(op, &d, &t0, &t1, 64);
                self.line(format!("mov.b64 {d}, {t0};"));
            }
            _ => unreachable!("handled above"),
        }
    }

    /// `t = d op divisor` with eBPF's rules for zero and `-1` divisors; `divisor` is a register
    /// other than `d` and `t`, and `d` is left as it was.
    fn divide(&mut self, op: AluOp, d: &str, t: &str, divisor: &str, bits: u32) {
        let [q0, q1, q2] = [self.pred(0), self.pred(1), self.pred(2)];
        let (s, u, b) = (format!("s{bits}"), format!("u{bits}"), format!("b{bits}"));
        self.line(format!("setp.eq.{s} {q0}, {divisor}, 0;"));
        match op {
            AluOp::Div | AluOp::Mod => {
                self.line(format!("selp.{b} {divisor}, 1, {divisor}, {q0};"));
                let opcode = if op == AluOp::Div { "div" } else { "rem" };
                self.line(format!("{opcode}.{u} {t}, {d}, {divisor};"));
                if op == AluOp::Div {
                    self.line(format!("@{q0} mov.{b} {t}, 0;"));
                } else {
                    self.line(format!("@{q0} mov.{b} {t}, {d};"));
                }
            }
            _ => {
                self.line(format!("setp.eq.{s} {q1}, {divisor}, -1;"));
                self.line(format!("or.pred {q2}, {q0}, {q1};"));
                self.line(format!("selp.{b} {divisor}, 1, {divisor}, {q2};"));
                if op == AluOp::SDiv {
                    self.line(format!("div.{s} {t}, {d}, {divisor};"));
                    self.line(format!("@{q1} neg.{s} {t}, {d};"));
                    self.line(format!("@{q0} mov.{b} {t}, 0;"));
                } else {
                    self.line(format!("rem.{s} {t}, {d}, {divisor};"));
                    self.line(format!("@{q1} mov.{b} {t}, 0;"));
                    self.line(format!("@{q0} mov.{b} {t}, {d};"));
                }
            }
        }
    }

    /// A 32-bit ALU instruction, on the low halves, its result zero-extended into `dst`.
    pub(super) fn alu32(&mut self, op: AluOp, dst: Reg, src: Operand) {
        let d = self.reg(dst);
        let [w0, w1, w2] = [self.tmp32(0), self.tmp32(1), self.tmp32(2)];
        let b = match src {
            Operand::Imm(i) => i.to_string(),
            Operand::Reg(r) => {
                let s = self.reg(r);
                self.line(format!("cvt.u32.u64 {w1}, {s};"));
                w1.clone()
            }
        };
        if !matches!(op, AluOp::Mov | AluOp::MovSx(_)) {
            self.line(format!("cvt.u32.u64 {w0}, {d};"));
        }
        match op {
            AluOp::Add => self.line(format!("add.s32 {w0}, {w0}, {b};")),
            AluOp::Sub => self.line(format!("sub.s32 {w0}, {w0}, {b};")),
            AluOp::Mul => self.line(format!("mul.lo.s32 {w0}, {w0}, {b};")),
            AluOp::Or => self.line(format!("or.b32 {w0}, {w0}, {b};")),
            AluOp::And => self.line(format!("and.b32 {w0}, {w0}, {b};")),
            AluOp::Xor => self.line(format!("xor.b32 {w0}, {w0}, {b};")),
            AluOp::Mov => self.line(format!("mov.b32 {w0}, {b};")),
            AluOp::MovSx(bits) => {
                let shift = 32 - u32::from(bits);
                self.line(format!("shl.b32 {w0}, {b}, {shift};"));
                self.line(format!("shr.s32 {w0}, {w0}, {shift};"));
            }
            AluOp::Lsh | AluOp::Rsh | AluOp::Arsh => {
                let opcode = match op {
                    AluOp::Lsh => "shl.b32",
                    AluOp::Rsh => "shr.u32",
                    _ => "shr.s32",
                };
                let count = match src {
                    Operand::Imm(i) => (i & 31).to_string(),
                    Operand::Reg(_) => {
                        self.line(format!("and.b32 {w1}, {w1}, 31;"));
                        w1.clone()
                    }
                };
                self.line(format!("{opcode} {w0}, {w0}, {count};"));
            }
            AluOp::Div | AluOp::SDiv | AluOp::Mod | AluOp::SMod if positive(src) => {
                self.line(format!("{}.{}32 {w0}, {w0}, {b};", div_opcode(op), div_type(op)));
            }
            AluOp::Div | AluOp::SDiv | AluOp::Mod | AluOp::SMod => {
                self.line(format!("mov.b32 {w2}, {b};"));
                let w3 = self.tmp32(3);
                self.divide(op, &w0, &w3, &w2, 32);
                self.line(format!("mov.b32 {w0}, {w3};"));
            }
        }
        self.line(format!("cvt.u64.u32 {d}, {w0};"));
    }

    /// `dst = -dst`, in 64 or 32 bits.
    pub(super) fn neg(&mut self, width: Width, dst: Reg) {
        let d = self.reg(dst);
        match width {
            Width::W64 => self.line(format!("neg.s64 {d}, {d};")),
            Width::W32 => {
                let w0 = self.tmp32(0);
                self.line(format!("cvt.u32.u64 {w0}, {d};"));
                self.line(format!("neg.s32 {w0}, {w0};"));
                self.line(format!("cvt.u64.u32 {d}, {w0};"));
            }
        }
    }

    /// `le` (truncation only: the GPU is little-endian), `be` and `bswap`, of `bits` bits.
    pub(super) fn endian(&mut self, order: ByteOrder, bits: u8, dst: Reg) {
        let d = self.reg(dst);
        let [w0, w1, w2, w3] = [self.tmp32(0), self.tmp32(1), self.tmp32(2), self.tmp32(3)];
        match (order, bits) {
            (ByteOrder::Le, 16) => self.line(format!("and.b64 {d}, {d}, 65535;")),
            (ByteOrder::Le, 32) => self.line(format!("and.b64 {d}, {d}, 4294967295;")),
            (ByteOrder::Le, _) => {}
            (_, 16) => {
                self.line(format!("cvt.u32.u64 {w0}, {d};"));
                self.line(format!("mov.b32 {w1}, 0;"));
                self.line(format!("prmt.b32 {w0}, {w0}, {w1}, 0x4401;"));
                self.line(format!("cvt.u64.u32 {d}, {w0};"));
            }
            (_, 32) => {
                self.line(format!("cvt.u32.u64 {w0}, {d};"));
                self.line(format!("prmt.b32 {w0}, {w0}, {w0}, 0x0123;"));
                self.line(format!("cvt.u64.u32 {d}, {w0};"));
            }
            _ => {
                self.line(format!("mov.b64 {{{w0}, {w1}}}, {d};"));
                self.line(format!("prmt.b32 {w2}, {w0}, {w0}, 0x0123;"));
                self.line(format!("prmt.b32 {w3}, {w1}, {w1}, 0x0123;"));
                self.line(format!("mov.b64 {d}, {{{w3}, {w2}}};"));
            }
        }
    }

    /// `lddw`: a 64-bit constant, the device address of a map, or of a place in its value.
    pub(super) fn load_imm64(
        &mut self,
        pc: usize,
        dst: Reg,
        imm: Imm64,
    ) -> Result<(), TranslateError> {
        let d = self.reg(dst);
        match imm {
            Imm64::Value(v) => self.line(format!("mov.b64 {d}, {};", v as i64)),
            Imm64::Map(m) => {
                let map = self.map(pc, Some(m))?;
                self.line(format!("mov.b64 {d}, {};", map.addr as i64));
            }
            Imm64::MapValue { map: m, offset } => {
                // The verifier checked: an array of one entry, the offset inside its value.
                let map = self.map(pc, Some(m))?;
                let g = map.geometry;
                let value = g.slot_offset(0, 0) as u64 + u64::from(g.value_offset + offset);
                self.line(format!("mov.b64 {d}, {};", map.addr.wrapping_add(value) as i64));
            }
            // Only bpf_loop reads a function reference, and the program translated is the
            // runnable one, where those calls are loops and the references plain numbers.
            Imm64::Func(_) => self.line(format!("mov.b64 {d}, 0;")),
        }
        Ok(())
    }
}

/// Whether `src` is a constant above 0: a divisor with none of eBPF's special cases (0, -1),
/// the same read as signed or unsigned.
fn positive(src: Operand) -> bool {
    matches!(src, Operand::Imm(i) if i > 0)
}

/// The PTX instruction of a division or remainder.
fn div_opcode(op: AluOp) -> &'static str {
    if matches!(op, AluOp::Div | AluOp::SDiv) { "div" } else { "rem" }
}

/// The PTX type letter of a division or remainder: signed or unsigned.
fn div_type(op: AluOp) -> &'static str {
    if matches!(op, AluOp::SDiv | AluOp::SMod) { "s" } else { "u" }
}
