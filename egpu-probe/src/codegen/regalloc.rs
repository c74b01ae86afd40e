//! Register allocation: which IR values live in which registers.
//!
//! `r6`–`r9` survive helper calls: the context pointer, when the probe reads the context and
//! cannot keep it in `r1` (a helper call clobbers `r1`, or expressions need it), takes `r9`, and
//! the variables and map value pointers used most (uses inside loops weigh 8 times) take the
//! rest. Other variables and pointers live in
//! 8-byte stack slots (their homes). Expressions are evaluated in the temporaries `r0`–`r5`,
//! operands needing more registers first when neither side calls a helper (else left to right,
//! as Rust evaluates).

use std::collections::BTreeMap;

use egpu_ebpf::{AluOp, Instruction, Operand, Reg, Size};

use super::{CompileError, Gen, alu};
use crate::ir::{Expr, Place, Ptr, Read, Stmt, Ty, Var};

/// Where a variable or pointer lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Home {
    Reg(Reg),
    /// A stack slot of the main function's frame, at this offset from its `r10` (held by
    /// `Gen::frame` in a callback).
    Stack(i16),
    /// A stack slot of the current callback's own frame, at this offset from its `r10`.
    Local(i16),
}

/// Temporaries, in the order they are handed out.
pub(super) const TEMPS: [Reg; 6] = [Reg::R0, Reg::R1, Reg::R2, Reg::R3, Reg::R4, Reg::R5];
/// Registers that survive helper calls.
const SAVED: [Reg; 4] = [Reg::R6, Reg::R7, Reg::R8, Reg::R9];
/// The context pointer's register.
pub(super) const CTX: Reg = Reg::R9;

/// What competes for the saved registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Contender {
    Var(u32),
    Ptr(u32),
}

/// Registers an expression needs (Sethi–Ullman), and whether it calls a helper.
pub(super) fn need(e: &Expr) -> (u32, bool) {
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

impl Gen<'_> {
    /// Puts the context pointer and the busiest variables and pointers in the saved registers,
    /// the rest in stack slots; moves the context pointer to its register if it needs one.
    pub(super) fn assign_homes(&mut self, ctx_in_r1: bool) -> Result<(), CompileError> {
        let ir = self.ir;
        let mut weight: BTreeMap<Contender, u64> = BTreeMap::new();
        let mut uses_ctx = false;
        count_uses(&ir.body, 1, &mut weight, &mut uses_ctx);
        // The context pointer stays in r1 when no helper call clobbers it (r1 is then no
        // temporary); otherwise it moves to r9, which calls preserve.
        self.ctx = if ctx_in_r1 && !calls_helpers(&ir.body) { Reg::R1 } else { CTX };
        if self.ctx == Reg::R1 {
            self.busy[1] = true;
        }
        let mut free_regs: Vec<Reg> =
            SAVED.into_iter().filter(|&r| !(uses_ctx && r == self.ctx)).collect();
        let mut ranked: Vec<(Contender, u64)> = weight.into_iter().collect();
        ranked.sort_by_key(|&(h, w)| (std::cmp::Reverse(w), h));
        let mut regs: BTreeMap<Contender, Reg> = BTreeMap::new();
        for (h, _) in ranked {
            if free_regs.is_empty() {
                break;
            }
            regs.insert(h, free_regs.remove(0));
        }
        // The others share stack slots where their live ranges do not meet (a probe's inlined
        // helpers each bring their own variables; eBPF's frame is 512 bytes).
        let spans = live_spans(&ir.body);
        let mut stacked: Vec<(Contender, (u32, u32))> = (0..ir.vars.len() as u32)
            .map(Contender::Var)
            .chain((0..ir.ptrs).map(Contender::Ptr))
            .filter(|c| !regs.contains_key(c))
            .map(|c| (c, spans.get(&c).copied().unwrap_or((0, u32::MAX))))
            .collect();
        stacked.sort_by_key(|&(c, (start, _))| (start, c));
        // Each slot with the end of the last range in it.
        let mut slots: Vec<(i16, u32)> = Vec::new();
        let mut stack_home: BTreeMap<Contender, i16> = BTreeMap::new();
        for (c, (start, end)) in stacked {
            let off = match slots.iter_mut().find(|(_, last)| *last < start) {
                Some(slot) => {
                    slot.1 = end;
                    slot.0
                }
                None => {
                    let off = self.slot()?;
                    slots.push((off, end));
                    off
                }
            };
            stack_home.insert(c, off);
        }
        let home = |c: Contender| match regs.get(&c) {
            Some(&r) => Home::Reg(r),
            None => Home::Stack(stack_home[&c]),
        };
        self.vars = (0..ir.vars.len() as u32).map(|v| home(Contender::Var(v))).collect();
        self.ptrs = (0..ir.ptrs).map(|p| home(Contender::Ptr(p))).collect();
        if uses_ctx && self.ctx != Reg::R1 {
            self.insn(alu(AluOp::Mov, self.ctx, Operand::Reg(Reg::R1)));
        }
        Ok(())
    }

    /// A free temporary, the first in `TEMPS` order.
    pub(super) fn temp(&mut self) -> Result<Reg, CompileError> {
        let i = self.busy.iter().position(|b| !b).ok_or(CompileError::TooDeep)?;
        self.busy[i] = true;
        Ok(TEMPS[i])
    }

    /// Marks the temporary `r` (free) as in use.
    pub(super) fn take(&mut self, r: Reg) {
        let i = TEMPS.iter().position(|&t| t == r).expect("a temporary");
        debug_assert!(!self.busy[i], "{r} is busy");
        self.busy[i] = true;
    }

    /// Frees `r` if it is a temporary.
    pub(super) fn free(&mut self, r: Reg) {
        if let Some(i) = TEMPS.iter().position(|&t| t == r) {
            self.busy[i] = false;
        }
    }

    pub(super) fn var(&self, v: Var) -> Result<Home, CompileError> {
        self.vars.get(v.0 as usize).copied().ok_or(CompileError::Malformed(format!("{v:?}")))
    }

    pub(super) fn var_ty(&self, v: Var) -> Result<Ty, CompileError> {
        self.ir.vars.get(v.0 as usize).copied().ok_or(CompileError::Malformed(format!("{v:?}")))
    }

    pub(super) fn ptr(&self, p: Ptr) -> Result<Home, CompileError> {
        self.ptrs.get(p.0 as usize).copied().ok_or(CompileError::Malformed(format!("{p:?}")))
    }

    /// `dst = home`.
    pub(super) fn load_home(&mut self, dst: Reg, home: Home) {
        match home {
            Home::Reg(r) => self.insn(alu(AluOp::Mov, dst, Operand::Reg(r))),
            Home::Stack(off) => self.insn(Instruction::Load {
                size: Size::DW,
                signed: false,
                dst,
                base: self.frame,
                off,
            }),
            Home::Local(off) => self.insn(Instruction::Load {
                size: Size::DW,
                signed: false,
                dst,
                base: Reg::FP,
                off,
            }),
        }
    }

    /// `home = src`.
    pub(super) fn store_home(&mut self, home: Home, src: Reg) {
        match home {
            Home::Reg(r) if r == src => {}
            Home::Reg(r) => self.insn(alu(AluOp::Mov, r, Operand::Reg(src))),
            Home::Stack(off) => self.insn(Instruction::Store {
                size: Size::DW,
                base: self.frame,
                off,
                src: Operand::Reg(src),
            }),
            Home::Local(off) => self.insn(Instruction::Store {
                size: Size::DW,
                base: Reg::FP,
                off,
                src: Operand::Reg(src),
            }),
        }
    }
}

/// Whether the statements call a helper (a lookup, a call expression or a `bpf_loop`)
/// anywhere.
fn calls_helpers(stmts: &[Stmt]) -> bool {
    fn expr(e: &Expr) -> bool {
        need(e).1
    }
    stmts.iter().any(|s| match s {
        Stmt::Set(_, e) | Stmt::Eval(e) | Stmt::Return(e) => expr(e),
        Stmt::Store(_, _, e) | Stmt::AtomicAdd(_, _, e) => expr(e),
        Stmt::If(c, a, b) => expr(c) || calls_helpers(a) || calls_helpers(b),
        Stmt::Repeat(_, n, body) => calls_helpers(body) || super::callback::may_lower(*n, body),
        Stmt::Lookup { .. } => true,
        Stmt::Break | Stmt::Continue | Stmt::At(_) => false,
    })
}

/// Each variable's and pointer's live range, as positions in the statements' order: from its
/// first to its last mention, widened to a whole loop whose body mentions it when it is also
/// mentioned before the loop (its value then crosses iterations). A variable the body alone
/// mentions is set before it is read in each iteration (probes are Rust: nothing is read
/// uninitialised), so its range stays within the iteration. Two ranges that do not meet can
/// share a stack slot.
fn live_spans(stmts: &[Stmt]) -> BTreeMap<Contender, (u32, u32)> {
    struct Walk {
        at: u32,
        spans: BTreeMap<Contender, (u32, u32)>,
    }
    impl Walk {
        fn mention(&mut self, c: Contender) {
            let at = self.at;
            let span = self.spans.entry(c).or_insert((at, at));
            span.1 = at;
        }
        fn place(&mut self, p: &Place) {
            if let Place::Value(ptr, _) = p {
                self.mention(Contender::Ptr(ptr.0));
            }
        }
        fn expr(&mut self, e: &Expr) {
            e.reads(&mut |r| match r {
                Read::Var(v) => self.mention(Contender::Var(v.0)),
                Read::Place(p) => self.place(p),
            });
        }
        fn stmts(&mut self, stmts: &[Stmt]) {
            for s in stmts {
                self.at += 1;
                match s {
                    Stmt::Set(v, e) => {
                        self.expr(e);
                        self.at += 1;
                        self.mention(Contender::Var(v.0));
                    }
                    Stmt::Store(_, p, e) | Stmt::AtomicAdd(_, p, e) => {
                        self.place(p);
                        self.expr(e);
                    }
                    Stmt::Eval(e) | Stmt::Return(e) => self.expr(e),
                    Stmt::If(c, a, b) => {
                        self.expr(c);
                        self.stmts(a);
                        self.stmts(b);
                    }
                    Stmt::Repeat(v, _, body) => {
                        let start = self.at;
                        self.mention(Contender::Var(v.0));
                        self.stmts(body);
                        self.at += 1;
                        let end = self.at;
                        self.mention(Contender::Var(v.0));
                        for span in self.spans.values_mut() {
                            if span.0 < start && span.1 > start {
                                span.1 = span.1.max(end);
                            }
                        }
                    }
                    Stmt::Break | Stmt::Continue | Stmt::At(_) => {}
                    Stmt::Lookup { key, ptr, found, missing, .. } => {
                        self.place(key);
                        self.mention(Contender::Ptr(ptr.0));
                        self.stmts(found);
                        self.stmts(missing);
                    }
                }
            }
        }
    }
    let mut walk = Walk { at: 0, spans: BTreeMap::new() };
    walk.stmts(stmts);
    walk.spans
}

/// Counts the uses of variables and pointers (weighted by loop depth), and whether the context
/// is read.
fn count_uses(stmts: &[Stmt], weight: u64, out: &mut BTreeMap<Contender, u64>, ctx: &mut bool) {
    let add =
        |h: Contender, out: &mut BTreeMap<Contender, u64>| *out.entry(h).or_default() += weight;
    fn place(p: &Place, weight: u64, out: &mut BTreeMap<Contender, u64>, ctx: &mut bool) {
        match p {
            Place::Ctx(_) => *ctx = true,
            Place::Value(ptr, _) => *out.entry(Contender::Ptr(ptr.0)).or_default() += weight,
            Place::Buf(..) => {}
        }
    }
    fn expr(e: &Expr, weight: u64, out: &mut BTreeMap<Contender, u64>, ctx: &mut bool) {
        e.reads(&mut |r| match r {
            Read::Var(v) => *out.entry(Contender::Var(v.0)).or_default() += weight,
            Read::Place(p) => place(p, weight, out, ctx),
        });
    }
    for s in stmts {
        match s {
            Stmt::Set(v, e) => {
                add(Contender::Var(v.0), out);
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
                *out.entry(Contender::Var(v.0)).or_default() += weight.saturating_mul(24);
                count_uses(body, weight.saturating_mul(8), out, ctx);
            }
            Stmt::Break | Stmt::Continue | Stmt::At(_) => {}
            Stmt::Lookup { key, ptr, found, missing, .. } => {
                place(key, weight, out, ctx);
                add(Contender::Ptr(ptr.0), out);
                count_uses(found, weight, out, ctx);
                count_uses(missing, weight, out, ctx);
            }
        }
    }
}
