//! Loops whose bodies branch, lowered to Linux's `bpf_loop` helper with a callback function.
//!
//! The verifier follows a plain loop iteration by iteration, and both sides of each branch in
//! it, so the paths of a branching body double with every iteration. A callback of `bpf_loop` is
//! verified a few times, not once per iteration, in time linear in the body. So
//! `Repeat(v, count, body)` becomes `bpf_loop(count, callback, frame, 0)` when the loop makes
//! more than [`PLAIN_BRANCHES`] conditional jumps in all (iterations × the body's `if`s,
//! lookups, `break`s, `continue`s, `return`s, comparisons and `&&`/`||`, a nested loop counting
//! its own) and can be lowered; a straight-line body, or a short loop with few branches, stays
//! a plain loop, cheap to verify and faster to run.
//!
//! # The lowering
//! - The callback is a function of its own, laid out after the main function (and the callbacks
//!   before it). It gets the main frame's pointer as `bpf_loop`'s context (`r3 = r10` in the
//!   main function) and keeps it in `r6`; every place of the main frame (buffers, stack homes,
//!   scratch slots) is reached through `r6` at the offsets the main function uses with `r10`.
//!   A nested loop passes the same pointer on (`r3 = r6`).
//! - The loop variable is the callback's `r1`, the iteration's index, moved to `r7`: the
//!   verifier always knows its bounds.
//! - The other variables the body reads or writes live in the main frame while the callback
//!   runs: one in a register of the caller is stored to its slot before the call (its stack
//!   home, or a spill slot) and, when the body may write it, loaded again after. A probe with a
//!   lowered loop sets its variables' registers to 0 first, so none is stored uninitialised.
//! - The context pointer is stored to a slot of the main frame before the outermost call; a
//!   callback whose body reads the context loads it into `r8` on entry.
//! - Map value pointers the body binds (its lookups) live in `r9`, `r8` when the context does
//!   not take it, then slots of the callback's own frame.
//! - `continue` and the end of the body return 0, `break` returns 1. `return e` stores `e` and
//!   a flag in the main frame and returns 1; after the call, the caller tests the flag and
//!   returns the value (the main function) or 1 (a callback, passing the return outwards).
//! - After the loop, its variable is `count`, or the index `break` left at (the plain loop's
//!   value), when code outside the body reads it: the caller stores `count` to its slot before
//!   the call, and `break` stores the index.
//!
//! A loop stays plain when its body uses a map value pointer bound outside it (the callback
//! cannot reach the caller's registers), writes its own variable, or is nested in three
//! callbacks already (each `bpf_loop` costs two frames of eBPF's eight). Results are those of
//! the plain loop in every case: the IR's semantics of `Repeat` do not change.

use std::collections::BTreeSet;

use egpu_ebpf::{AluOp, CallTarget, Instruction, JmpCond, Operand, Reg, Size};

use super::regalloc::Home;
use super::{CompileError, Gen, Label, Op, alu, mov_imm};
use crate::ir::{CallArg, Expr, Place, Ptr, Read, Stmt, Var};

/// `bpf_loop`'s helper id.
const LOOP: u32 = egpu_ebpf::helpers::id::LOOP;
/// The most callbacks nested in one another.
const MAX_DEPTH: u32 = 3;
/// The most iterations `bpf_loop` runs.
const MAX_LOOPS: u32 = 1 << 23;
/// The callback's registers: the main frame's pointer, the loop variable, the context pointer.
const FRAME: Reg = Reg::R6;
const INDEX: Reg = Reg::R7;
const CTX: Reg = Reg::R8;

/// What a loop body uses, nested loops included.
#[derive(Default)]
struct Uses {
    reads: BTreeSet<Var>,
    writes: BTreeSet<Var>,
    ptrs_bound: BTreeSet<Ptr>,
    ptrs_used: BTreeSet<Ptr>,
    ctx: bool,
    returns: bool,
    breaks: bool,
}

impl Uses {
    fn of(stmts: &[Stmt]) -> Uses {
        let mut u = Uses::default();
        u.stmts(stmts);
        u
    }

    fn stmts(&mut self, stmts: &[Stmt]) {
        for s in stmts {
            match s {
                Stmt::Set(v, e) => {
                    self.writes.insert(*v);
                    self.expr(e);
                }
                Stmt::Store(_, p, e) | Stmt::AtomicAdd(_, p, e) => {
                    self.place(p);
                    self.expr(e);
                }
                Stmt::Eval(e) => self.expr(e),
                Stmt::Return(e) => {
                    self.returns = true;
                    self.expr(e);
                }
                Stmt::If(c, a, b) => {
                    self.expr(c);
                    self.stmts(a);
                    self.stmts(b);
                }
                Stmt::Repeat(v, _, body) => {
                    self.writes.insert(*v);
                    // A `break` in a nested loop leaves that loop.
                    let breaks = self.breaks;
                    self.stmts(body);
                    self.breaks = breaks;
                }
                Stmt::Break => self.breaks = true,
                Stmt::Continue | Stmt::At(_) => {}
                Stmt::Lookup { key, ptr, found, missing, .. } => {
                    self.place(key);
                    self.ptrs_bound.insert(*ptr);
                    self.stmts(found);
                    self.stmts(missing);
                }
            }
        }
    }

    fn place(&mut self, p: &Place) {
        match p {
            Place::Ctx(_) => self.ctx = true,
            Place::Value(ptr, _) => {
                self.ptrs_used.insert(*ptr);
            }
            Place::Buf(..) => {}
        }
    }

    fn expr(&mut self, e: &Expr) {
        e.reads(&mut |r| match r {
            Read::Var(v) => {
                self.reads.insert(v);
            }
            Read::Place(p) => self.place(p),
        });
    }
}

/// Most branch points (iterations × conditional places in the body) a loop may have and stay a
/// plain loop: the verifier follows a plain loop iteration by iteration, at most 2^8 paths
/// here, and a plain loop is smaller and faster than a callback called per iteration (a
/// 6-iteration loop with one `if` is 33 instructions plain, 51 as a callback).
const PLAIN_BRANCHES: u64 = 8;

/// How many places of the statements make conditional jumps; a nested loop counts its body's
/// once per iteration.
fn branch_points(stmts: &[Stmt]) -> u64 {
    fn expr(e: &Expr) -> u64 {
        match e {
            Expr::Const(..) | Expr::Var(_) | Expr::Load(..) => 0,
            Expr::Cmp(_, _, a, b) => 1 + expr(a) + expr(b),
            Expr::And(a, b) | Expr::Or(a, b) => 1 + expr(a) + expr(b),
            Expr::Unary(_, _, a) | Expr::Cast { arg: a, .. } => expr(a),
            Expr::Binary(_, _, a, b) => expr(a) + expr(b),
            Expr::Call(_, _, args) => args
                .iter()
                .map(|a| match a {
                    CallArg::Value(e) => expr(e),
                    _ => 0,
                })
                .sum(),
        }
    }
    stmts
        .iter()
        .map(|s| match s {
            Stmt::Set(_, e) | Stmt::Eval(e) | Stmt::Store(_, _, e) | Stmt::AtomicAdd(_, _, e) => {
                expr(e)
            }
            Stmt::At(_) => 0,
            // A comparison as the condition is the `if`'s own jump.
            Stmt::If(Expr::Cmp(_, _, l, r), a, b) => {
                1 + expr(l) + expr(r) + branch_points(a) + branch_points(b)
            }
            Stmt::If(c, a, b) => 1 + expr(c) + branch_points(a) + branch_points(b),
            Stmt::Lookup { found, missing, .. } => {
                1 + branch_points(found) + branch_points(missing)
            }
            Stmt::Repeat(_, n, body) => u64::from(*n).saturating_mul(branch_points(body)),
            Stmt::Break | Stmt::Continue => 1,
            Stmt::Return(e) => 1 + expr(e),
        })
        .fold(0, u64::saturating_add)
}

/// Whether a loop of `count` iterations of `body` has more than [`PLAIN_BRANCHES`] branch
/// points, so that it becomes a `bpf_loop` unless something keeps it plain.
pub(super) fn may_lower(count: u32, body: &[Stmt]) -> bool {
    u64::from(count) * branch_points(body) > PLAIN_BRANCHES
}

/// The variables the bodies of loops with more than [`PLAIN_BRANCHES`] branch points (which
/// may become `bpf_loop`s) read or write, but the loops' own variables: those a caller may store for a callback.
fn shared_with_callbacks(stmts: &[Stmt], out: &mut BTreeSet<Var>) {
    for s in stmts {
        match s {
            Stmt::Repeat(v, count, body) => {
                if may_lower(*count, body) {
                    let u = Uses::of(body);
                    out.extend(u.reads.union(&u.writes).filter(|&x| x != v));
                }
                shared_with_callbacks(body, out);
            }
            Stmt::If(_, a, b) | Stmt::Lookup { found: a, missing: b, .. } => {
                shared_with_callbacks(a, out);
                shared_with_callbacks(b, out);
            }
            _ => {}
        }
    }
}

/// How many times the statements read `v`.
fn reads_of(stmts: &[Stmt], v: Var) -> usize {
    fn expr(e: &Expr, v: Var) -> usize {
        match e {
            Expr::Var(w) => usize::from(*w == v),
            Expr::Const(..) | Expr::Load(..) => 0,
            Expr::Unary(_, _, a) | Expr::Cast { arg: a, .. } => expr(a, v),
            Expr::Binary(_, _, a, b) | Expr::Cmp(_, _, a, b) | Expr::And(a, b) | Expr::Or(a, b) => {
                expr(a, v) + expr(b, v)
            }
            Expr::Call(_, _, args) => {
                args.iter().map(|a| if let CallArg::Value(e) = a { expr(e, v) } else { 0 }).sum()
            }
        }
    }
    stmts
        .iter()
        .map(|s| match s {
            Stmt::Set(_, e)
            | Stmt::Eval(e)
            | Stmt::Return(e)
            | Stmt::Store(_, _, e)
            | Stmt::AtomicAdd(_, _, e) => expr(e, v),
            Stmt::If(c, a, b) => expr(c, v) + reads_of(a, v) + reads_of(b, v),
            Stmt::Repeat(_, _, body) => reads_of(body, v),
            Stmt::Lookup { found, missing, .. } => reads_of(found, v) + reads_of(missing, v),
            Stmt::Break | Stmt::Continue | Stmt::At(_) => 0,
        })
        .sum()
}

fn store_imm(base: Reg, off: i16, imm: i32) -> Instruction {
    Instruction::Store { size: Size::DW, base, off, src: Operand::Imm(imm) }
}

impl Gen<'_> {
    /// Whether `Repeat(v, count, body)` becomes a `bpf_loop` call.
    pub(super) fn lowers_to_bpf_loop(&self, v: Var, count: u32, body: &[Stmt]) -> bool {
        if self.depth >= MAX_DEPTH || count == 0 || count > MAX_LOOPS || !may_lower(count, body) {
            return false;
        }
        let u = Uses::of(body);
        !u.writes.contains(&v) && u.ptrs_used.is_subset(&u.ptrs_bound)
    }

    /// Sets the registers of the variables a callback may use to 0, so that storing one before
    /// a `bpf_loop` call never reads an uninitialised register.
    pub(super) fn zero_var_registers(&mut self) {
        let mut shared = BTreeSet::new();
        shared_with_callbacks(&self.ir.body, &mut shared);
        let mut done = Vec::new();
        for v in shared {
            if let Ok(Home::Reg(r)) = self.var(v)
                && !done.contains(&r)
            {
                self.insn(mov_imm(r, 0));
                done.push(r);
            }
        }
    }

    /// The slot of the main frame where variable `v` is while a callback runs.
    fn stack_home(&mut self, v: Var) -> Result<i16, CompileError> {
        let i = v.0 as usize;
        match self.main_vars.get(i) {
            Some(Home::Stack(s)) => Ok(*s),
            Some(_) => match self.spills[i] {
                Some(s) => Ok(s),
                None => {
                    let s = self.slot()?;
                    self.spills[i] = Some(s);
                    Ok(s)
                }
            },
            None => Err(CompileError::Malformed(format!("{v:?}"))),
        }
    }

    /// The main frame's slots for a `return` in a callback: its flag and its value.
    fn ret_slots(&mut self) -> Result<(i16, i16), CompileError> {
        if self.ret_slots.is_none() {
            self.ret_slots = Some((self.slot()?, self.slot()?));
        }
        Ok(self.ret_slots.expect("set"))
    }

    /// `for v in 0..count { body }` as `bpf_loop(count, callback, frame, 0)`.
    pub(super) fn bpf_loop(
        &mut self,
        v: Var,
        count: u32,
        body: &[Stmt],
    ) -> Result<(), CompileError> {
        let u = Uses::of(body);
        // Variables in the caller's registers go to the main frame for the callback.
        for &x in u.reads.union(&u.writes) {
            if x != v
                && let Home::Reg(r) = self.var(x)?
            {
                let slot = self.stack_home(x)?;
                self.store_home(Home::Stack(slot), r);
            }
        }
        let count_imm =
            i32::try_from(count).map_err(|_| CompileError::Malformed("a loop bound".into()))?;
        // The loop's variable after the loop: `count`, unless `break` stores its index.
        let v_slot = if reads_of(&self.ir.body, v) > reads_of(body, v) {
            let s = self.stack_home(v)?;
            self.insn(store_imm(self.frame, s, count_imm));
            Some(s)
        } else {
            None
        };
        if u.ctx && self.depth == 0 {
            let s = match self.ctx_slot {
                Some(s) => s,
                None => {
                    let s = self.slot()?;
                    *self.ctx_slot.insert(s)
                }
            };
            self.store_home(Home::Stack(s), self.ctx);
        }
        let ret = if u.returns { Some(self.ret_slots()?) } else { None };
        if let Some((flag, value)) = ret {
            // Both written, for the verifier's paths where the callback never runs.
            self.insn(store_imm(self.frame, flag, 0));
            self.insn(store_imm(self.frame, value, 0));
        }
        let entry = self.label();
        self.callback(entry, v, count, body, &u, v_slot)?;
        self.insn(mov_imm(Reg::R1, count_imm));
        self.push_op(Op::FuncRef(Reg::R2, entry));
        self.insn(alu(AluOp::Mov, Reg::R3, Operand::Reg(self.frame)));
        self.insn(mov_imm(Reg::R4, 0));
        self.insn(Instruction::Call(CallTarget::Helper(LOOP)));
        if let Some((flag, value)) = ret {
            let go_on = self.label();
            self.load_home(Reg::R1, Home::Stack(flag));
            self.jump(Some((JmpCond::Eq, Reg::R1, Operand::Imm(0))), go_on);
            if self.depth == 0 {
                self.load_home(Reg::R0, Home::Stack(value));
            } else {
                self.insn(mov_imm(Reg::R0, 1));
            }
            self.insn(Instruction::Exit);
            self.bind(go_on);
        }
        let written = u.writes.iter().copied().chain(v_slot.map(|_| v));
        for x in written.collect::<Vec<_>>() {
            if let Home::Reg(r) = self.var(x)? {
                let slot = self.stack_home(x)?;
                self.load_home(r, Home::Stack(slot));
            }
        }
        Ok(())
    }

    /// Generates the callback of `bpf_loop` for `Repeat(v, count, body)` as a function of its
    /// own, starting at `entry`.
    fn callback(
        &mut self,
        entry: Label,
        v: Var,
        count: u32,
        body: &[Stmt],
        u: &Uses,
        v_slot: Option<i16>,
    ) -> Result<(), CompileError> {
        // Where everything is in the callback: unused variables and pointers get `r10`, which
        // no code may write (the verifier would refuse a bug here).
        let mut vars = vec![Home::Reg(Reg::FP); self.vars.len()];
        for &x in u.reads.union(&u.writes) {
            vars[x.0 as usize] = Home::Stack(self.stack_home(x)?);
        }
        vars[v.0 as usize] = Home::Reg(INDEX);
        let mut ptrs = vec![Home::Reg(Reg::FP); self.ptrs.len()];
        let mut regs = if u.ctx { vec![Reg::R9] } else { vec![Reg::R9, Reg::R8] };
        let mut local_low = 0i16;
        for &p in &u.ptrs_bound {
            ptrs[p.0 as usize] = if regs.is_empty() {
                local_low -= 8;
                Home::Local(local_low)
            } else {
                Home::Reg(regs.remove(0))
            };
        }
        let caller_ops = std::mem::take(&mut self.ops);
        let caller_locs = std::mem::take(&mut self.op_locs);
        let caller_vars = std::mem::replace(&mut self.vars, vars);
        let caller_ptrs = std::mem::replace(&mut self.ptrs, ptrs);
        let caller_frame = std::mem::replace(&mut self.frame, FRAME);
        let caller_ctx = std::mem::replace(&mut self.ctx, CTX);
        let caller_loops = std::mem::take(&mut self.loops);
        self.depth += 1;

        self.bind(entry);
        self.insn(alu(AluOp::Mov, FRAME, Operand::Reg(Reg::R2)));
        if u.reads.contains(&v) || v_slot.is_some() {
            self.insn(alu(AluOp::Mov, INDEX, Operand::Reg(Reg::R1)));
        }
        if u.ctx {
            let s = self.ctx_slot.ok_or(CompileError::Malformed("no context slot".into()))?;
            self.load_home(CTX, Home::Stack(s));
        }
        let (next, end) = (self.label(), self.label());
        self.loops.push((next, end));
        self.counters.push((v, count));
        let done = self.stmts(body);
        self.counters.pop();
        self.loops.pop();
        done?;
        self.bind(next);
        self.insn(mov_imm(Reg::R0, 0));
        self.insn(Instruction::Exit);
        if u.breaks {
            self.bind(end);
            if let Some(s) = v_slot {
                self.store_home(Home::Stack(s), INDEX);
            }
            self.insn(mov_imm(Reg::R0, 1));
            self.insn(Instruction::Exit);
        }

        self.depth -= 1;
        self.loops = caller_loops;
        self.ctx = caller_ctx;
        self.frame = caller_frame;
        self.ptrs = caller_ptrs;
        self.vars = caller_vars;
        let ops = std::mem::replace(&mut self.ops, caller_ops);
        let locs = std::mem::replace(&mut self.op_locs, caller_locs);
        self.funcs.push((ops, locs));
        Ok(())
    }

    /// `return e` in a callback: `e` and the flag to the main frame, and stop the loop.
    pub(super) fn callback_return(&mut self, e: &Expr) -> Result<(), CompileError> {
        let (flag, value) = self.ret_slots()?;
        let t = self.temp()?;
        self.expr(e, t)?;
        self.store_home(Home::Stack(value), t);
        self.free(t);
        self.insn(store_imm(self.frame, flag, 1));
        self.insn(mov_imm(Reg::R0, 1));
        self.insn(Instruction::Exit);
        Ok(())
    }
}
