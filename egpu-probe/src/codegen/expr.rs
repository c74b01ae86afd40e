//! Expressions, evaluated into a temporary.
//!
//! Values stay canonical (see the IR's docs): after an operation that can leave the type's
//! range, `and` (unsigned) or a pair of shifts (signed) brings the value back. Comparisons and
//! `&&`/`||` are materialised from the jumps of `control`; helper calls are in `calls`.

use egpu_ebpf::{AluOp, Imm64, Instruction, Operand, Reg, Size, Width};

use super::regalloc::{Home, need};
use super::{CompileError, Gen, alu, mov_imm};
use crate::ir::{BinOp, Expr, Ty, UnOp};

/// The size of a memory access of type `ty`.
pub(super) fn size_of_ty(ty: Ty) -> Result<Size, CompileError> {
    Ok(match ty.bytes() {
        1 => Size::B,
        2 => Size::H,
        4 => Size::W,
        8 => Size::DW,
        _ => return Err(CompileError::Malformed(format!("no memory access of type {ty:?}"))),
    })
}

/// The immediate equal to `v` (sign-extended, as eBPF extends immediates), if there is one.
pub(super) fn imm(v: u64) -> Option<i32> {
    i32::try_from(v as i64).ok()
}

/// The eBPF operation of `op` on `ty`.
fn alu_op(op: BinOp, ty: Ty) -> AluOp {
    match (op, ty.signed()) {
        (BinOp::Add, _) => AluOp::Add,
        (BinOp::Sub, _) => AluOp::Sub,
        (BinOp::Mul, _) => AluOp::Mul,
        (BinOp::Div, false) => AluOp::Div,
        (BinOp::Div, true) => AluOp::SDiv,
        (BinOp::Rem, false) => AluOp::Mod,
        (BinOp::Rem, true) => AluOp::SMod,
        (BinOp::And, _) => AluOp::And,
        (BinOp::Or, _) => AluOp::Or,
        (BinOp::Xor, _) => AluOp::Xor,
        (BinOp::Shl, _) => AluOp::Lsh,
        (BinOp::Shr, false) => AluOp::Rsh,
        (BinOp::Shr, true) => AluOp::Arsh,
    }
}

/// Whether `op` on canonical values of `ty` gives a canonical value: and, or, xor, unsigned
/// division, remainders and right shifts do.
fn keeps_canonical(op: BinOp, ty: Ty) -> bool {
    match op {
        BinOp::And | BinOp::Or | BinOp::Xor | BinOp::Rem | BinOp::Shr => true,
        BinOp::Div => !ty.signed(),
        _ => false,
    }
}

impl Gen<'_> {
    /// Brings `dst`, holding the 64-bit result of an operation, back to canonical form.
    fn canonical(&mut self, ty: Ty, dst: Reg) {
        match (ty.bits(), ty.signed()) {
            (64, _) | (1, _) => {}
            (32, false) => self.insn(Instruction::Alu {
                op: AluOp::And,
                width: Width::W32,
                dst,
                src: Operand::Imm(-1),
            }),
            (bits, false) => self.insn(alu(AluOp::And, dst, Operand::Imm((1 << bits) - 1))),
            (bits, true) => {
                let shift = Operand::Imm(64 - bits as i32);
                self.insn(alu(AluOp::Lsh, dst, shift));
                self.insn(alu(AluOp::Arsh, dst, shift));
            }
        }
    }

    /// `e` as an operand: an immediate when it is a constant that fits, else a temporary (which
    /// the caller frees).
    pub(super) fn operand(&mut self, e: &Expr) -> Result<Operand, CompileError> {
        if let Expr::Const(_, v) = e
            && let Some(i) = imm(*v)
        {
            return Ok(Operand::Imm(i));
        }
        // A variable in a saved register is used where it is (freeing it later is a no-op).
        if let Expr::Var(v) = e
            && let Home::Reg(r) = self.var(*v)?
        {
            return Ok(Operand::Reg(r));
        }
        let t = self.temp()?;
        self.expr(e, t)?;
        Ok(Operand::Reg(t))
    }

    pub(super) fn free_operand(&mut self, o: Operand) {
        if let Operand::Reg(r) = o {
            self.free(r);
        }
    }

    /// Evaluates `e` into `dst` (a temporary the caller holds).
    pub(super) fn expr(&mut self, e: &Expr, dst: Reg) -> Result<(), CompileError> {
        match e {
            Expr::Const(_, v) => match imm(*v) {
                Some(i) => self.insn(mov_imm(dst, i)),
                None => self.insn(Instruction::LoadImm64 { dst, imm: Imm64::Value(*v) }),
            },
            Expr::Var(v) => {
                let home = self.var(*v)?;
                self.load_home(dst, home);
            }
            Expr::Load(ty, place) => {
                if *ty == Ty::Bool {
                    return Err(CompileError::Malformed("a `bool` read from memory".into()));
                }
                let (base, off) = self.address(*place, dst)?;
                let size = size_of_ty(*ty)?;
                self.insn(Instruction::Load {
                    size,
                    signed: ty.signed() && size != Size::DW,
                    dst,
                    base,
                    off,
                });
            }
            Expr::Unary(op, ty, arg) => {
                self.expr(arg, dst)?;
                match (op, ty) {
                    (UnOp::Not, Ty::Bool) => self.insn(alu(AluOp::Xor, dst, Operand::Imm(1))),
                    (UnOp::Not, _) => {
                        self.insn(alu(AluOp::Xor, dst, Operand::Imm(-1)));
                        self.canonical(*ty, dst);
                    }
                    (UnOp::Neg, _) => {
                        self.insn(Instruction::Neg { width: Width::W64, dst });
                        self.canonical(*ty, dst);
                    }
                }
            }
            Expr::Binary(op, ty, lhs, rhs) => self.binary(*op, *ty, lhs, rhs, dst)?,
            Expr::Cast { to, from, arg } => {
                self.expr(arg, dst)?;
                let widening = from.bits() < to.bits() && (!from.signed() || to.signed());
                if !(widening || to.bits() == 64 && from.bits() == 64) && from != to {
                    self.canonical(*to, dst);
                }
            }
            Expr::Cmp(..) | Expr::And(..) | Expr::Or(..) => {
                let (no, end) = (self.label(), self.label());
                self.branch(e, false, no)?;
                self.insn(mov_imm(dst, 1));
                self.jump(None, end);
                self.bind(no);
                self.insn(mov_imm(dst, 0));
                self.bind(end);
            }
            Expr::Call(ty, helper, args) => {
                self.call(*helper, args, dst)?;
                self.canonical(*ty, dst);
            }
        }
        Ok(())
    }

    fn binary(
        &mut self,
        op: BinOp,
        ty: Ty,
        lhs: &Expr,
        rhs: &Expr,
        dst: Reg,
    ) -> Result<(), CompileError> {
        let shift = matches!(op, BinOp::Shl | BinOp::Shr);
        let ((nl, cl), (nr, cr)) = (need(lhs), need(rhs));
        let rhs_first = !(cl || cr) && nr > nl;
        let src = if rhs_first {
            let src = self.shift_amount_or_operand(rhs, shift, ty)?;
            self.expr(lhs, dst)?;
            src
        } else {
            self.expr(lhs, dst)?;
            self.shift_amount_or_operand(rhs, shift, ty)?
        };
        self.insn(alu(alu_op(op, ty), dst, src));
        self.free_operand(src);
        if !keeps_canonical(op, ty) {
            self.canonical(ty, dst);
        }
        Ok(())
    }

    /// `dst = dst op rhs`, `dst` holding a canonical value of `ty`.
    pub(super) fn binary_in_place(
        &mut self,
        op: BinOp,
        ty: Ty,
        rhs: &Expr,
        dst: Reg,
    ) -> Result<(), CompileError> {
        let shift = matches!(op, BinOp::Shl | BinOp::Shr);
        let src = self.shift_amount_or_operand(rhs, shift, ty)?;
        self.insn(alu(alu_op(op, ty), dst, src));
        self.free_operand(src);
        if !keeps_canonical(op, ty) {
            self.canonical(ty, dst);
        }
        Ok(())
    }

    /// The right operand; for a shift, the amount modulo the width.
    fn shift_amount_or_operand(
        &mut self,
        rhs: &Expr,
        shift: bool,
        ty: Ty,
    ) -> Result<Operand, CompileError> {
        if !shift {
            return self.operand(rhs);
        }
        let mask = ty.bits() as i64 - 1;
        if let Expr::Const(_, v) = rhs {
            return Ok(Operand::Imm((*v as i64 & mask) as i32));
        }
        // A loop counter that stays below the width needs no mask (`x >> i` for i in 0..8).
        let mut amount = rhs;
        while let Expr::Cast { arg, from, to } = amount
            && to.bits() >= from.bits()
        {
            amount = arg;
        }
        if let Expr::Var(v) = amount
            && self.counters.iter().any(|&(c, bound)| c == *v && bound <= ty.bits())
        {
            return self.operand(rhs);
        }
        let t = self.temp()?;
        self.expr(rhs, t)?;
        self.insn(alu(AluOp::And, t, Operand::Imm(mask as i32)));
        Ok(Operand::Reg(t))
    }
}
