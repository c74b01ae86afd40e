//! The code generator: probe IR to eBPF.
//!
//! - **Registers.** `r6`–`r9` survive helper calls: the context pointer (when the probe reads the
//!   context) takes `r9`, and the variables and map value pointers used most (uses inside loops
//!   weigh 8 times) take the rest. Other variables live in 8-byte stack slots. Expressions are
//!   evaluated in `r0`–`r5`, operands needing more registers first when neither side calls a
//!   helper (else left to right, as Rust evaluates).
//! - **Calls.** Around a helper call, the temporaries still live are saved in scratch slots of
//!   the frame and loaded again after it; arguments that are not simple are computed into
//!   scratch slots first, so that an argument's own call cannot clobber another's register.
//! - **Stack.** Buffers first (each aligned), then variable homes, then scratch slots, all below
//!   `r10`; more than 512 bytes is [`CompileError::StackTooLarge`], naming the largest buffers.
//! - **Values** stay canonical (see the IR's docs): after an operation that can leave the type's
//!   range, `and` (unsigned) or a pair of shifts (signed) brings the value back.
//! - **Conditions** compile to jumps, with `&&` and `||` short-circuiting; a `bool` is only
//!   materialised where a value is needed.

use std::collections::BTreeMap;

use egpu_ebpf::{
    AluOp, AtomicOp, CallTarget, Imm64, Instruction, JmpCond, Operand, Program, ProgramError, Reg,
    Size, Width, instruction::encode,
};
use thiserror::Error;

use super::ir::{Arg, BinOp, CmpOp, Expr, Place, ProbeIr, Ptr, Stmt, Ty, UnOp, Var};

/// Why a probe could not be compiled.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum CompileError {
    /// The probe's stack frame exceeds eBPF's 512 bytes.
    #[error("the probe needs {need} bytes of stack, more than eBPF's {limit}; the largest locals: {}", largest.join(", "))]
    StackTooLarge {
        /// Bytes needed.
        need: u32,
        /// The limit.
        limit: u32,
        /// The largest buffers, as `name (N bytes)`.
        largest: Vec<String>,
    },
    /// An expression needs more registers than eBPF has for temporaries.
    #[error("an expression is too deep for the registers of eBPF: split it with `let`")]
    TooDeep,
    /// The IR refers to something it does not declare, or uses a construct wrongly.
    #[error("malformed probe IR: {0}")]
    Malformed(String),
    /// The generated program failed the structural checks (a bug in the code generator).
    #[error("the generated program is malformed: {0}")]
    Program(#[from] ProgramError),
}

/// Compiles `ir` into a program (not yet verified).
pub fn compile(ir: &ProbeIr) -> Result<Program, CompileError> {
    // With the context pointer left in r1, expressions have one temporary fewer; a probe whose
    // expressions need it gets r9 for the context instead.
    match compile_with(ir, true) {
        Err(CompileError::TooDeep) => compile_with(ir, false),
        other => other,
    }
}

fn compile_with(ir: &ProbeIr, ctx_in_r1: bool) -> Result<Program, CompileError> {
    let mut g = Gen::new(ir, ctx_in_r1)?;
    g.stmts(&ir.body)?;
    // A body that ends with `return` needs no epilogue (nothing jumps past its end: jumps only
    // target labels bound inside it).
    if !matches!(ir.body.last(), Some(Stmt::Return(_))) {
        g.insn(mov_imm(Reg::R0, 0));
        g.insn(Instruction::Exit);
    }
    let insns = g.assemble()?;
    Ok(Program::new(encode(&insns), ir.maps.clone(), ir.attach)?)
}

/// Where a variable or pointer lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Home {
    Reg(Reg),
    /// A stack slot at this offset from `r10`.
    Stack(i16),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Label(usize);

enum Op {
    Insn(Instruction),
    /// `ja` (no condition) or a conditional jump to a label.
    Jump(Option<(JmpCond, Reg, Operand)>, Label),
    Bind(Label),
}

/// Temporaries, in the order they are handed out.
const TEMPS: [Reg; 6] = [Reg::R0, Reg::R1, Reg::R2, Reg::R3, Reg::R4, Reg::R5];
/// Registers that survive helper calls.
const SAVED: [Reg; 4] = [Reg::R6, Reg::R7, Reg::R8, Reg::R9];
/// The context pointer's register.
const CTX: Reg = Reg::R9;

struct Gen<'a> {
    ir: &'a ProbeIr,
    ops: Vec<Op>,
    labels: usize,
    vars: Vec<Home>,
    ptrs: Vec<Home>,
    /// Offset of each buffer from `r10`.
    bufs: Vec<i16>,
    /// Which temporaries are in use.
    busy: [bool; 6],
    /// The frame's lowest offset in use so far (negative), and the scratch slots free.
    frame_low: i32,
    scratch_free: Vec<i16>,
    /// The loops around the code being generated: where `continue` and `break` go.
    loops: Vec<(Label, Label)>,
    /// Where the context pointer is.
    ctx: Reg,
    /// The counters of the loops around the code, with their bounds: a counter is below its
    /// bound inside the loop body.
    counters: Vec<(Var, u32)>,
}

fn mov_imm(dst: Reg, imm: i32) -> Instruction {
    Instruction::Alu { op: AluOp::Mov, width: Width::W64, dst, src: Operand::Imm(imm) }
}

fn alu(op: AluOp, dst: Reg, src: Operand) -> Instruction {
    Instruction::Alu { op, width: Width::W64, dst, src }
}

fn size_of_ty(ty: Ty) -> Result<Size, CompileError> {
    Ok(match ty.bytes() {
        1 => Size::B,
        2 => Size::H,
        4 => Size::W,
        8 => Size::DW,
        _ => return Err(CompileError::Malformed(format!("no memory access of type {ty:?}"))),
    })
}

/// The immediate equal to `v` (sign-extended, as eBPF extends immediates), if there is one.
fn imm(v: u64) -> Option<i32> {
    i32::try_from(v as i64).ok()
}

/// Registers an expression needs (Sethi–Ullman), and whether it calls a helper.
fn need(e: &Expr) -> (u32, bool) {
    match e {
        Expr::Const(..) | Expr::Var(_) | Expr::Load(..) => (1, false),
        Expr::Unary(_, _, a) | Expr::Cast { arg: a, .. } => need(a),
        Expr::Binary(_, _, a, b) | Expr::Cmp(_, _, a, b) | Expr::And(a, b) | Expr::Or(a, b) => {
            let ((na, ca), (nb, cb)) = (need(a), need(b));
            (if na == nb { na + 1 } else { na.max(nb) }, ca || cb)
        }
        Expr::Call(..) => (1, true),
    }
}

impl<'a> Gen<'a> {
    fn new(ir: &'a ProbeIr, ctx_in_r1: bool) -> Result<Gen<'a>, CompileError> {
        let mut g = Gen {
            ir,
            ops: Vec::new(),
            labels: 0,
            vars: Vec::new(),
            ptrs: Vec::new(),
            bufs: Vec::new(),
            busy: [false; 6],
            frame_low: 0,
            scratch_free: Vec::new(),
            loops: Vec::new(),
            ctx: CTX,
            counters: Vec::new(),
        };
        // Buffers, largest alignment first, each aligned.
        let mut order: Vec<usize> = (0..ir.bufs.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(ir.bufs[i].align));
        let mut offsets = vec![0i32; ir.bufs.len()];
        for i in order {
            let b = &ir.bufs[i];
            if !matches!(b.align, 1 | 2 | 4 | 8) {
                return Err(CompileError::Malformed(format!(
                    "buffer `{}` aligned to {}",
                    b.name, b.align
                )));
            }
            let low = g.frame_low - b.size as i32;
            g.frame_low = low - low.rem_euclid(b.align as i32);
            offsets[i] = g.frame_low;
        }
        g.check_frame()?;
        g.bufs = offsets.into_iter().map(|o| o as i16).collect();

        // Homes: the busiest variables and pointers in the saved registers.
        let mut weight: BTreeMap<Home2, u64> = BTreeMap::new();
        let mut uses_ctx = false;
        count_uses(&ir.body, 1, &mut weight, &mut uses_ctx);
        // The context pointer stays in r1 when no helper call clobbers it (r1 is then no
        // temporary); otherwise it moves to r9, which calls preserve.
        g.ctx = if ctx_in_r1 && !calls_helpers(&ir.body) { Reg::R1 } else { CTX };
        if g.ctx == Reg::R1 {
            g.busy[1] = true;
        }
        let mut free_regs: Vec<Reg> =
            SAVED.into_iter().filter(|&r| !(uses_ctx && r == g.ctx)).collect();
        let mut ranked: Vec<(Home2, u64)> = weight.into_iter().collect();
        ranked.sort_by_key(|&(h, w)| (std::cmp::Reverse(w), h));
        let mut regs: BTreeMap<Home2, Reg> = BTreeMap::new();
        for (h, _) in ranked {
            if free_regs.is_empty() {
                break;
            }
            regs.insert(h, free_regs.remove(0));
        }
        for v in 0..ir.vars.len() {
            let home = match regs.get(&Home2::Var(v as u32)) {
                Some(&r) => Home::Reg(r),
                None => Home::Stack(g.slot()?),
            };
            g.vars.push(home);
        }
        for p in 0..ir.ptrs {
            let home = match regs.get(&Home2::Ptr(p)) {
                Some(&r) => Home::Reg(r),
                None => Home::Stack(g.slot()?),
            };
            g.ptrs.push(home);
        }
        if uses_ctx && g.ctx != Reg::R1 {
            g.insn(alu(AluOp::Mov, g.ctx, Operand::Reg(Reg::R1)));
        }
        Ok(g)
    }

    /// A new 8-byte slot of the frame.
    fn slot(&mut self) -> Result<i16, CompileError> {
        self.frame_low -= 8;
        self.frame_low -= self.frame_low.rem_euclid(8);
        self.check_frame()?;
        Ok(self.frame_low as i16)
    }

    fn check_frame(&self) -> Result<(), CompileError> {
        let need = (-self.frame_low) as u32;
        let limit = Program::STACK_SIZE as u32;
        if need <= limit {
            return Ok(());
        }
        let mut bufs: Vec<_> = self.ir.bufs.iter().collect();
        bufs.sort_by_key(|b| std::cmp::Reverse(b.size));
        let largest =
            bufs.iter().take(3).map(|b| format!("`{}` ({} bytes)", b.name, b.size)).collect();
        Err(CompileError::StackTooLarge { need, limit, largest })
    }

    fn scratch(&mut self) -> Result<i16, CompileError> {
        match self.scratch_free.pop() {
            Some(s) => Ok(s),
            None => self.slot(),
        }
    }

    fn insn(&mut self, insn: Instruction) {
        self.ops.push(Op::Insn(insn));
    }

    fn label(&mut self) -> Label {
        self.labels += 1;
        Label(self.labels - 1)
    }

    fn bind(&mut self, l: Label) {
        self.ops.push(Op::Bind(l));
    }

    fn jump(&mut self, cond: Option<(JmpCond, Reg, Operand)>, to: Label) {
        self.ops.push(Op::Jump(cond, to));
    }

    fn temp(&mut self) -> Result<Reg, CompileError> {
        let i = self.busy.iter().position(|b| !b).ok_or(CompileError::TooDeep)?;
        self.busy[i] = true;
        Ok(TEMPS[i])
    }

    fn take(&mut self, r: Reg) {
        let i = TEMPS.iter().position(|&t| t == r).expect("a temporary");
        debug_assert!(!self.busy[i], "{r} is busy");
        self.busy[i] = true;
    }

    fn free(&mut self, r: Reg) {
        if let Some(i) = TEMPS.iter().position(|&t| t == r) {
            self.busy[i] = false;
        }
    }

    fn var(&self, v: Var) -> Result<Home, CompileError> {
        self.vars.get(v.0 as usize).copied().ok_or(CompileError::Malformed(format!("{v:?}")))
    }

    fn var_ty(&self, v: Var) -> Result<Ty, CompileError> {
        self.ir.vars.get(v.0 as usize).copied().ok_or(CompileError::Malformed(format!("{v:?}")))
    }

    fn ptr(&self, p: Ptr) -> Result<Home, CompileError> {
        self.ptrs.get(p.0 as usize).copied().ok_or(CompileError::Malformed(format!("{p:?}")))
    }

    /// `dst = home`.
    fn load_home(&mut self, dst: Reg, home: Home) {
        match home {
            Home::Reg(r) => self.insn(alu(AluOp::Mov, dst, Operand::Reg(r))),
            Home::Stack(off) => self.insn(Instruction::Load {
                size: Size::DW,
                signed: false,
                dst,
                base: Reg::FP,
                off,
            }),
        }
    }

    /// `home = src`.
    fn store_home(&mut self, home: Home, src: Reg) {
        match home {
            Home::Reg(r) if r == src => {}
            Home::Reg(r) => self.insn(alu(AluOp::Mov, r, Operand::Reg(src))),
            Home::Stack(off) => self.insn(Instruction::Store {
                size: Size::DW,
                base: Reg::FP,
                off,
                src: Operand::Reg(src),
            }),
        }
    }

    /// The base register and offset of `place`; `tmp` holds a spilled pointer if needed.
    fn address(&mut self, place: Place, tmp: Reg) -> Result<(Reg, i16), CompileError> {
        let fit = |off: i64| {
            i16::try_from(off)
                .map_err(|_| CompileError::Malformed(format!("offset {off} of {place:?}")))
        };
        match place {
            Place::Ctx(off) => Ok((self.ctx, fit(off.into())?)),
            Place::Buf(b, off) => {
                let base = *self
                    .bufs
                    .get(b.0 as usize)
                    .ok_or(CompileError::Malformed(format!("{b:?}")))?;
                Ok((Reg::FP, fit(i64::from(base) + i64::from(off))?))
            }
            Place::Value(p, off) => match self.ptr(p)? {
                Home::Reg(r) => Ok((r, fit(off.into())?)),
                home => {
                    self.load_home(tmp, home);
                    Ok((tmp, fit(off.into())?))
                }
            },
        }
    }

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
    fn operand(&mut self, e: &Expr) -> Result<Operand, CompileError> {
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

    fn free_operand(&mut self, o: Operand) {
        if let Operand::Reg(r) = o {
            self.free(r);
        }
    }

    /// Evaluates `e` into `dst` (a temporary the caller holds).
    fn expr(&mut self, e: &Expr, dst: Reg) -> Result<(), CompileError> {
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
    fn binary_in_place(
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

    /// Jumps to `to` when `e` (a `bool`) is `when`; falls through otherwise.
    fn branch(&mut self, e: &Expr, when: bool, to: Label) -> Result<(), CompileError> {
        match e {
            Expr::Const(Ty::Bool, v) => {
                if (*v != 0) == when {
                    self.jump(None, to);
                }
            }
            Expr::Unary(UnOp::Not, Ty::Bool, arg) => self.branch(arg, !when, to)?,
            Expr::And(a, b) | Expr::Or(a, b) => {
                // `a && b` is false when a is false or b is; true when both are. Dually for `||`.
                let is_and = matches!(e, Expr::And(..));
                if is_and != when {
                    // Jump when either side decides: the side's value equals `when`.
                    self.branch(a, when, to)?;
                    self.branch(b, when, to)?;
                } else {
                    let skip = self.label();
                    self.branch(a, !when, skip)?;
                    self.branch(b, when, to)?;
                    self.bind(skip);
                }
            }
            Expr::Cmp(op, ty, lhs, rhs) => {
                let op = if when { *op } else { op.negated() };
                let l = match self.operand(lhs)? {
                    Operand::Reg(r) => r,
                    Operand::Imm(_) => {
                        let t = self.temp()?;
                        self.expr(lhs, t)?;
                        t
                    }
                };
                let r = self.operand(rhs)?;
                self.jump(Some((jmp_cond(op, ty.signed()), l, r)), to);
                self.free_operand(r);
                self.free(l);
            }
            other => {
                let t = self.temp()?;
                self.expr(other, t)?;
                let cond = if when { JmpCond::Ne } else { JmpCond::Eq };
                self.jump(Some((cond, t, Operand::Imm(0))), to);
                self.free(t);
            }
        }
        Ok(())
    }

    /// Calls helper `id` with `args`, its result in `dst`.
    fn call(&mut self, id: u32, args: &[Arg], dst: Reg) -> Result<(), CompileError> {
        if args.len() > 5 {
            return Err(CompileError::Malformed(format!(
                "helper {id} with {} arguments",
                args.len()
            )));
        }
        // Save the live temporaries (but `dst`, which holds nothing yet).
        let live: Vec<Reg> =
            TEMPS.iter().zip(self.busy).filter(|&(&r, b)| b && r != dst).map(|(&r, _)| r).collect();
        let mut saved = Vec::new();
        for &r in &live {
            let s = self.scratch()?;
            self.store_home(Home::Stack(s), r);
            saved.push((r, s));
            self.free(r);
        }
        let dst_was_busy = {
            let i = TEMPS.iter().position(|&t| t == dst);
            i.map(|i| self.busy[i])
        };
        self.free(dst);
        // Arguments that need computing go to scratch slots first.
        let mut staged: Vec<Option<i16>> = Vec::new();
        for a in args {
            match a {
                Arg::Value(e) if !matches!(e, Expr::Const(..) | Expr::Var(_)) => {
                    let t = self.temp()?;
                    self.expr(e, t)?;
                    let s = self.scratch()?;
                    self.store_home(Home::Stack(s), t);
                    self.free(t);
                    staged.push(Some(s));
                }
                _ => staged.push(None),
            }
        }
        // Everything is in memory or a saved register now: load r1..r5.
        for (i, (a, s)) in args.iter().zip(&staged).enumerate() {
            let r = TEMPS[i + 1];
            match (a, s) {
                (_, Some(s)) => self.load_home(r, Home::Stack(*s)),
                (Arg::Value(e), None) => self.expr(e, r)?,
                (Arg::Map(m), None) => {
                    self.insn(Instruction::LoadImm64 { dst: r, imm: Imm64::Map(m.0) })
                }
                (Arg::Addr(place), None) => {
                    let (base, off) = self.address(*place, r)?;
                    if base != r {
                        self.insn(alu(AluOp::Mov, r, Operand::Reg(base)));
                    }
                    if off != 0 {
                        self.insn(alu(AluOp::Add, r, Operand::Imm(off.into())));
                    }
                }
            }
        }
        for s in staged.into_iter().flatten() {
            self.scratch_free.push(s);
        }
        self.insn(Instruction::Call(CallTarget::Helper(id)));
        if dst != Reg::R0 {
            self.insn(alu(AluOp::Mov, dst, Operand::Reg(Reg::R0)));
        }
        if dst_was_busy == Some(true) {
            self.take(dst);
        }
        for (r, s) in saved {
            self.load_home(r, Home::Stack(s));
            self.take(r);
            self.scratch_free.push(s);
        }
        Ok(())
    }

    fn stmts(&mut self, stmts: &[Stmt]) -> Result<(), CompileError> {
        stmts.iter().try_for_each(|s| self.stmt(s))
    }

    fn stmt(&mut self, s: &Stmt) -> Result<(), CompileError> {
        debug_assert!(
            self.busy.iter().enumerate().all(|(i, &b)| !b || (i == 1 && self.ctx == Reg::R1)),
            "temporaries live across statements"
        );
        match s {
            Stmt::Set(v, e) => {
                let home = self.var(*v)?;
                match (home, e) {
                    (Home::Reg(r), Expr::Const(_, c)) if imm(*c).is_some() => {
                        self.insn(mov_imm(r, imm(*c).expect("checked")));
                    }
                    // Straight into the variable's register, when the value does not read the
                    // variable and calls no helper (which would see the register half-computed
                    // only if it were a temporary, but keeps the rule simple).
                    (Home::Reg(r), e) if !reads_var(e, *v) && !need(e).1 => self.expr(e, r)?,
                    // `v = v op rhs` in place: `op r, rhs` (a compound assignment).
                    (Home::Reg(r), Expr::Binary(op, ty, lhs, rhs))
                        if matches!(**lhs, Expr::Var(w) if w == *v)
                            && !reads_var(rhs, *v)
                            && !need(rhs).1 =>
                    {
                        self.binary_in_place(*op, *ty, rhs, r)?;
                    }
                    _ => {
                        let t = self.temp()?;
                        self.expr(e, t)?;
                        self.store_home(home, t);
                        self.free(t);
                    }
                }
            }
            Stmt::Store(ty, place, e) => {
                let size = size_of_ty(*ty)?;
                let src = self.operand(e)?;
                let tmp = self.temp()?;
                let (base, off) = self.address(*place, tmp)?;
                self.insn(Instruction::Store { size, base, off, src });
                self.free(tmp);
                self.free_operand(src);
            }
            Stmt::AtomicAdd(ty, place, e) => {
                let size = match ty {
                    Ty::U32 | Ty::I32 => Size::W,
                    Ty::U64 | Ty::I64 => Size::DW,
                    other => {
                        return Err(CompileError::Malformed(format!("an atomic add on {other:?}")));
                    }
                };
                let src = self.temp()?;
                self.expr(e, src)?;
                let tmp = self.temp()?;
                let (base, off) = self.address(*place, tmp)?;
                self.insn(Instruction::Atomic {
                    op: AtomicOp::Add,
                    fetch: false,
                    size,
                    base,
                    off,
                    src,
                });
                self.free(tmp);
                self.free(src);
            }
            Stmt::Eval(e) => {
                let t = self.temp()?;
                self.expr(e, t)?;
                self.free(t);
            }
            // `v = if c { a } else { b }` with constants: `v = b`, then `v = a` when `c` holds
            // (one jump instead of two).
            Stmt::If(cond, then, otherwise)
                if matches!(
                    (then.as_slice(), otherwise.as_slice()),
                    ([Stmt::Set(v, Expr::Const(..))], [Stmt::Set(w, Expr::Const(..))])
                        if v == w && !reads_var(cond, *v)
                ) =>
            {
                self.stmt(&otherwise[0])?;
                let skip = self.label();
                self.branch(cond, false, skip)?;
                self.stmt(&then[0])?;
                self.bind(skip);
            }
            Stmt::If(cond, then, otherwise) => {
                let (no, end) = (self.label(), self.label());
                self.branch(cond, false, no)?;
                self.stmts(then)?;
                if !otherwise.is_empty() {
                    self.jump(None, end);
                }
                self.bind(no);
                self.stmts(otherwise)?;
                self.bind(end);
            }
            Stmt::Repeat(v, count, body) => {
                if *count == 0 {
                    return Ok(());
                }
                let home = self.var(*v)?;
                if self.var_ty(*v)? != Ty::U32 {
                    return Err(CompileError::Malformed("a loop counter that is not a u32".into()));
                }
                let (top, next, end) = (self.label(), self.label(), self.label());
                self.stmt(&Stmt::Set(*v, Expr::Const(Ty::U32, 0)))?;
                self.bind(top);
                self.loops.push((next, end));
                self.counters.push((*v, *count));
                let body = self.stmts(body);
                self.counters.pop();
                self.loops.pop();
                body?;
                self.bind(next);
                let bound = i32::try_from(*count)
                    .map_err(|_| CompileError::Malformed("a loop bound".into()))?;
                match home {
                    Home::Reg(r) => {
                        self.insn(alu(AluOp::Add, r, Operand::Imm(1)));
                        self.jump(Some((JmpCond::Lt, r, Operand::Imm(bound))), top);
                    }
                    Home::Stack(_) => {
                        let t = self.temp()?;
                        self.load_home(t, home);
                        self.insn(alu(AluOp::Add, t, Operand::Imm(1)));
                        self.store_home(home, t);
                        self.jump(Some((JmpCond::Lt, t, Operand::Imm(bound))), top);
                        self.free(t);
                    }
                }
                self.bind(end);
            }
            Stmt::Break | Stmt::Continue => {
                let &(next, end) = self.loops.last().ok_or_else(|| {
                    CompileError::Malformed("`break` or `continue` outside a loop".into())
                })?;
                self.jump(None, if matches!(s, Stmt::Break) { end } else { next });
            }
            Stmt::Lookup { map, key, ptr, found, missing } => {
                let home = self.ptr(*ptr)?;
                let r0 = Reg::R0;
                self.take(r0);
                self.call(1, &[Arg::Map(*map), Arg::Addr(*key)], r0)?;
                let (no, end) = (self.label(), self.label());
                self.jump(Some((JmpCond::Eq, r0, Operand::Imm(0))), no);
                match found.as_slice() {
                    // The usual counter: one atomic add on the value found, whose amount calls
                    // no helper. The pointer is used where the lookup left it, in r0.
                    [Stmt::AtomicAdd(ty, Place::Value(p, off), value)]
                        if p == ptr && !need(value).1 =>
                    {
                        let size = match ty {
                            Ty::U32 | Ty::I32 => Size::W,
                            _ => Size::DW,
                        };
                        let src = self.temp()?;
                        self.expr(value, src)?;
                        let off = i16::try_from(*off)
                            .map_err(|_| CompileError::Malformed("a value offset".into()))?;
                        self.insn(Instruction::Atomic {
                            op: AtomicOp::Add,
                            fetch: false,
                            size,
                            base: r0,
                            off,
                            src,
                        });
                        self.free(src);
                        self.free(r0);
                    }
                    _ => {
                        self.store_home(home, r0);
                        self.free(r0);
                        self.stmts(found)?;
                    }
                }
                if !missing.is_empty() {
                    self.jump(None, end);
                }
                self.bind(no);
                self.stmts(missing)?;
                self.bind(end);
            }
            Stmt::Return(e) => {
                self.take(Reg::R0);
                self.expr(e, Reg::R0)?;
                self.free(Reg::R0);
                self.insn(Instruction::Exit);
            }
        }
        Ok(())
    }

    /// Lays the code out: jump offsets in slots.
    fn assemble(self) -> Result<Vec<Instruction>, CompileError> {
        let mut at = vec![usize::MAX; self.labels];
        let mut pc = 0;
        for op in &self.ops {
            match op {
                Op::Insn(i) => pc += i.slots(),
                Op::Jump(..) => pc += 1,
                Op::Bind(l) => at[l.0] = pc,
            }
        }
        let mut out = Vec::with_capacity(self.ops.len());
        let mut pc = 0usize;
        for op in self.ops {
            match op {
                Op::Insn(i) => {
                    pc += i.slots();
                    out.push(i);
                }
                Op::Jump(cond, l) => {
                    let off = at[l.0] as i64 - (pc as i64 + 1);
                    let off = i16::try_from(off)
                        .map_err(|_| CompileError::Malformed("a jump too far".into()))?;
                    out.push(match cond {
                        None => Instruction::Jump { off: off.into(), long: false },
                        Some((cond, dst, src)) => {
                            Instruction::Branch { cond, width: Width::W64, dst, src, off }
                        }
                    });
                    pc += 1;
                }
                Op::Bind(_) => {}
            }
        }
        Ok(out)
    }
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

fn jmp_cond(op: CmpOp, signed: bool) -> JmpCond {
    match (op, signed) {
        (CmpOp::Eq, _) => JmpCond::Eq,
        (CmpOp::Ne, _) => JmpCond::Ne,
        (CmpOp::Lt, false) => JmpCond::Lt,
        (CmpOp::Le, false) => JmpCond::Le,
        (CmpOp::Gt, false) => JmpCond::Gt,
        (CmpOp::Ge, false) => JmpCond::Ge,
        (CmpOp::Lt, true) => JmpCond::Slt,
        (CmpOp::Le, true) => JmpCond::Sle,
        (CmpOp::Gt, true) => JmpCond::Sgt,
        (CmpOp::Ge, true) => JmpCond::Sge,
    }
}

/// Whether the statements call a helper (a lookup or a call expression) anywhere.
fn calls_helpers(stmts: &[Stmt]) -> bool {
    fn expr(e: &Expr) -> bool {
        need(e).1
    }
    stmts.iter().any(|s| match s {
        Stmt::Set(_, e) | Stmt::Eval(e) | Stmt::Return(e) => expr(e),
        Stmt::Store(_, _, e) | Stmt::AtomicAdd(_, _, e) => expr(e),
        Stmt::If(c, a, b) => expr(c) || calls_helpers(a) || calls_helpers(b),
        Stmt::Repeat(_, _, body) => calls_helpers(body),
        Stmt::Lookup { .. } => true,
        Stmt::Break | Stmt::Continue => false,
    })
}

/// Whether `e` reads variable `v`.
fn reads_var(e: &Expr, v: Var) -> bool {
    match e {
        Expr::Var(w) => *w == v,
        Expr::Const(..) | Expr::Load(..) => false,
        Expr::Unary(_, _, a) | Expr::Cast { arg: a, .. } => reads_var(a, v),
        Expr::Binary(_, _, a, b) | Expr::Cmp(_, _, a, b) | Expr::And(a, b) | Expr::Or(a, b) => {
            reads_var(a, v) || reads_var(b, v)
        }
        Expr::Call(_, _, args) => {
            args.iter().any(|a| matches!(a, Arg::Value(e) if reads_var(e, v)))
        }
    }
}

/// What competes for the saved registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Home2 {
    Var(u32),
    Ptr(u32),
}

/// Counts the uses of variables and pointers (weighted by loop depth), and whether the context
/// is read.
fn count_uses(stmts: &[Stmt], weight: u64, out: &mut BTreeMap<Home2, u64>, ctx: &mut bool) {
    let add = |h: Home2, out: &mut BTreeMap<Home2, u64>| *out.entry(h).or_default() += weight;
    fn place(p: &Place, weight: u64, out: &mut BTreeMap<Home2, u64>, ctx: &mut bool) {
        match p {
            Place::Ctx(_) => *ctx = true,
            Place::Value(ptr, _) => *out.entry(Home2::Ptr(ptr.0)).or_default() += weight,
            Place::Buf(..) => {}
        }
    }
    fn expr(e: &Expr, weight: u64, out: &mut BTreeMap<Home2, u64>, ctx: &mut bool) {
        match e {
            Expr::Const(..) => {}
            Expr::Var(v) => *out.entry(Home2::Var(v.0)).or_default() += weight,
            Expr::Load(_, p) => place(p, weight, out, ctx),
            Expr::Unary(_, _, a) | Expr::Cast { arg: a, .. } => expr(a, weight, out, ctx),
            Expr::Binary(_, _, a, b) | Expr::Cmp(_, _, a, b) | Expr::And(a, b) | Expr::Or(a, b) => {
                expr(a, weight, out, ctx);
                expr(b, weight, out, ctx);
            }
            Expr::Call(_, _, args) => {
                for a in args {
                    match a {
                        Arg::Value(e) => expr(e, weight, out, ctx),
                        Arg::Addr(p) => place(p, weight, out, ctx),
                        Arg::Map(_) => {}
                    }
                }
            }
        }
    }
    for s in stmts {
        match s {
            Stmt::Set(v, e) => {
                add(Home2::Var(v.0), out);
                expr(e, weight, out, ctx);
            }
            Stmt::Store(_, p, e) | Stmt::AtomicAdd(_, p, e) => {
                place(p, weight, out, ctx);
                expr(e, weight, out, ctx);
            }
            Stmt::Eval(e) | Stmt::Return(e) => expr(e, weight, out, ctx),
            Stmt::If(c, a, b) => {
                expr(c, weight, out, ctx);
                count_uses(a, weight, out, ctx);
                count_uses(b, weight, out, ctx);
            }
            Stmt::Repeat(v, _, body) => {
                // The counter is read, incremented and compared on every iteration.
                *out.entry(Home2::Var(v.0)).or_default() += weight.saturating_mul(24);
                count_uses(body, weight.saturating_mul(8), out, ctx);
            }
            Stmt::Break | Stmt::Continue => {}
            Stmt::Lookup { key, ptr, found, missing, .. } => {
                place(key, weight, out, ctx);
                add(Home2::Ptr(ptr.0), out);
                count_uses(found, weight, out, ctx);
                count_uses(missing, weight, out, ctx);
            }
        }
    }
}
