//! Control flow: conditions, `if`, counted loops and map lookups. A loop whose body branches
//! becomes a `bpf_loop` call instead (see `callback`).
//!
//! Conditions compile to jumps, with `&&` and `||` short-circuiting; a `bool` is only
//! materialised where a value is needed (in `expr`).

use egpu_ebpf::{AluOp, AtomicOp, Instruction, JmpCond, Operand, Reg, Size};

use super::regalloc::{Home, need};
use super::stmt::{diverges, reads_var};
use super::{CompileError, Gen, Label, alu, code};
use crate::ir::{CallArg, CmpOp, Expr, MapRef, Place, Ptr, Stmt, Ty, UnOp, Var};

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

impl Gen<'_> {
    /// Jumps to `to` when `e` (a `bool`) is `when`; falls through otherwise.
    pub(super) fn branch(&mut self, e: &Expr, when: bool, to: Label) -> Result<(), CompileError> {
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

    /// `if cond { then } else { otherwise }`.
    pub(super) fn if_(
        &mut self,
        cond: &Expr,
        then: &[Stmt],
        otherwise: &[Stmt],
    ) -> Result<(), CompileError> {
        // A constant condition: only the branch taken (the other would be dead code).
        if let Expr::Const(Ty::Bool, v) = cond {
            return self.stmts(if *v != 0 { then } else { otherwise });
        }
        // `v = if c { a } else { b }` with constants: `v = b`, then `v = a` when `c` holds (one
        // jump instead of two).
        if matches!(
            (code(then).as_slice(), code(otherwise).as_slice()),
            ([Stmt::Set(v, Expr::Const(..))], [Stmt::Set(w, Expr::Const(..))])
                if v == w && !reads_var(cond, *v)
        ) {
            self.stmts(otherwise)?;
            let skip = self.label();
            self.branch(cond, false, skip)?;
            self.stmts(then)?;
            self.bind(skip);
            return Ok(());
        }
        let (no, end) = (self.label(), self.label());
        self.branch(cond, false, no)?;
        self.stmts(then)?;
        if !code(otherwise).is_empty() && !then.iter().any(diverges) {
            self.jump(None, end);
        }
        self.bind(no);
        self.stmts(otherwise)?;
        self.bind(end);
        Ok(())
    }

    /// `for v in 0..count { body }`, `v` a `u32` variable: a `bpf_loop` call when the body
    /// branches and the callback can reach all it uses, else a plain loop.
    pub(super) fn repeat(&mut self, v: Var, count: u32, body: &[Stmt]) -> Result<(), CompileError> {
        if count == 0 {
            return Ok(());
        }
        let home = self.var(v)?;
        if self.var_ty(v)? != Ty::U32 {
            return Err(CompileError::Malformed("a loop counter that is not a u32".into()));
        }
        // The loop's code, its counter's included, is the loop's: the mark in force.
        let outer_loop = std::mem::replace(&mut self.loop_loc, self.loc);
        let done = if self.lowers_to_bpf_loop(v, count, body) {
            self.bpf_loop(v, count, body)
        } else {
            let labels = (self.label(), self.label(), self.label());
            self.counted(v, home, count, labels, body)
        };
        self.loop_loc = outer_loop;
        done
    }

    /// The code of `repeat`, with its labels.
    fn counted(
        &mut self,
        v: Var,
        home: Home,
        count: u32,
        (top, next, end): (Label, Label, Label),
        body: &[Stmt],
    ) -> Result<(), CompileError> {
        self.stmt(&Stmt::Set(v, Expr::Const(Ty::U32, 0)))?;
        self.bind(top);
        self.loops.push((next, end));
        self.counters.push((v, count));
        let body = self.stmts(body);
        self.counters.pop();
        self.loops.pop();
        body?;
        self.bind(next);
        let bound =
            i32::try_from(count).map_err(|_| CompileError::Malformed("a loop bound".into()))?;
        match home {
            Home::Reg(r) => {
                self.insn(alu(AluOp::Add, r, Operand::Imm(1)));
                self.jump(Some((JmpCond::Lt, r, Operand::Imm(bound))), top);
            }
            Home::Stack(_) | Home::Local(_) => {
                let t = self.temp()?;
                self.load_home(t, home);
                self.insn(alu(AluOp::Add, t, Operand::Imm(1)));
                self.store_home(home, t);
                self.jump(Some((JmpCond::Lt, t, Operand::Imm(bound))), top);
                self.free(t);
            }
        }
        self.bind(end);
        Ok(())
    }

    /// `break` (to the innermost loop's end) or `continue` (to its next iteration).
    pub(super) fn loop_exit(&mut self, is_break: bool) -> Result<(), CompileError> {
        let &(next, end) = self.loops.last().ok_or_else(|| {
            CompileError::Malformed("`break` or `continue` outside a loop".into())
        })?;
        self.jump(None, if is_break { end } else { next });
        Ok(())
    }

    /// `bpf_map_lookup_elem`: `found` runs with `ptr` at the value, `missing` when there is none.
    pub(super) fn lookup(
        &mut self,
        map: MapRef,
        key: Place,
        ptr: Ptr,
        found: &[Stmt],
        missing: &[Stmt],
    ) -> Result<(), CompileError> {
        let home = self.ptr(ptr)?;
        let r0 = Reg::R0;
        self.take(r0);
        self.call(1, &[CallArg::Map(map), CallArg::Addr(key)], r0)?;
        let (no, end) = (self.label(), self.label());
        self.jump(Some((JmpCond::Eq, r0, Operand::Imm(0))), no);
        match code(found).as_slice() {
            // The usual counter: one atomic add on the value found, whose amount calls no
            // helper nor reads a map value (the pointer is not in its home). The pointer is used
            // where the lookup left it, in r0.
            [Stmt::AtomicAdd(ty, Place::Value(p, off), value)]
                if *p == ptr && !need(value).1 && !reads_value(value) =>
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
        if !code(missing).is_empty() {
            self.jump(None, end);
        }
        self.bind(no);
        self.stmts(missing)?;
        self.bind(end);
        Ok(())
    }
}

/// Whether `e` reads a map value.
fn reads_value(e: &Expr) -> bool {
    match e {
        Expr::Load(_, Place::Value(..)) => true,
        Expr::Const(..) | Expr::Var(_) | Expr::Load(..) => false,
        Expr::Unary(_, _, a) | Expr::Cast { arg: a, .. } => reads_value(a),
        Expr::Binary(_, _, a, b) | Expr::Cmp(_, _, a, b) | Expr::And(a, b) | Expr::Or(a, b) => {
            reads_value(a) || reads_value(b)
        }
        Expr::Call(_, _, args) => args.iter().any(|a| match a {
            CallArg::Value(e) => reads_value(e),
            CallArg::Addr(p) => matches!(p, Place::Value(..)),
            CallArg::Map(_) => false,
        }),
    }
}
