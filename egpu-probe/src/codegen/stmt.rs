//! Statements: assignments, stores, atomic adds, evaluation and `return`; control flow is in
//! `control`.

use egpu_ebpf::{AtomicOp, Instruction, Reg, Size};

use super::expr::{imm, size_of_ty};
use super::regalloc::{Home, need};
use super::{CompileError, Gen, mov_imm};
use crate::ir::{CallArg, Expr, Stmt, Ty, Var};

impl Gen<'_> {
    /// A statement list; after it, the mark in force is the one before it again. Statements
    /// after one that never finishes (`return`, `break`, `continue`, or branches that all end
    /// so) emit no code: no path reaches them, and the verifier only checks what a path reaches.
    pub(super) fn stmts(&mut self, stmts: &[Stmt]) -> Result<(), CompileError> {
        let outer = self.loc;
        let mut done = Ok(());
        for s in stmts {
            done = self.stmt(s);
            if done.is_err() || diverges(s) {
                break;
            }
        }
        self.loc = outer;
        done
    }

    pub(super) fn stmt(&mut self, s: &Stmt) -> Result<(), CompileError> {
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
            Stmt::If(cond, then, otherwise) => self.if_(cond, then, otherwise)?,
            Stmt::Repeat(v, count, body) => self.repeat(*v, *count, body)?,
            Stmt::Break | Stmt::Continue => self.loop_exit(matches!(s, Stmt::Break))?,
            Stmt::Lookup { map, key, ptr, found, missing } => {
                self.lookup(*map, *key, *ptr, found, missing)?
            }
            Stmt::At(loc) => self.mark(*loc),
            Stmt::Return(e) if self.depth > 0 => self.callback_return(e)?,
            Stmt::Return(e) => {
                self.take(Reg::R0);
                self.expr(e, Reg::R0)?;
                self.free(Reg::R0);
                self.insn(Instruction::Exit);
            }
        }
        Ok(())
    }
}

/// Whether `e` reads variable `v`.
pub(super) fn reads_var(e: &Expr, v: Var) -> bool {
    match e {
        Expr::Var(w) => *w == v,
        Expr::Const(..) | Expr::Load(..) => false,
        Expr::Unary(_, _, a) | Expr::Cast { arg: a, .. } => reads_var(a, v),
        Expr::Binary(_, _, a, b) | Expr::Cmp(_, _, a, b) | Expr::And(a, b) | Expr::Or(a, b) => {
            reads_var(a, v) || reads_var(b, v)
        }
        Expr::Call(_, _, args) => {
            args.iter().any(|a| matches!(a, CallArg::Value(e) if reads_var(e, v)))
        }
    }
}

/// Whether `s` never finishes: it always returns or leaves its loop iteration.
pub(super) fn diverges(s: &Stmt) -> bool {
    let any = |stmts: &[Stmt]| stmts.iter().any(diverges);
    match s {
        Stmt::Return(_) | Stmt::Break | Stmt::Continue => true,
        Stmt::If(Expr::Const(Ty::Bool, v), then, otherwise) => {
            any(if *v != 0 { then } else { otherwise })
        }
        Stmt::If(_, then, otherwise) => any(then) && any(otherwise),
        Stmt::Lookup { found, missing, .. } => any(found) && any(missing),
        _ => false,
    }
}
