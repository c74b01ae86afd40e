//! Helper calls.
//!
//! Around a call, the temporaries still live are saved in scratch slots of the frame and loaded
//! again after it; arguments that are not simple are computed into scratch slots first, so that
//! an argument's own call cannot clobber another's register.

use egpu_ebpf::{AluOp, CallTarget, Imm64, Instruction, Operand, Reg};

use super::regalloc::{Home, TEMPS};
use super::{CompileError, Gen, alu};
use crate::ir::{CallArg, Expr};

impl Gen<'_> {
    /// Calls helper `id` with `args`, its result in `dst`.
    pub(super) fn call(&mut self, id: u32, args: &[CallArg], dst: Reg) -> Result<(), CompileError> {
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
                CallArg::Value(e) if !matches!(e, Expr::Const(..) | Expr::Var(_)) => {
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
                (CallArg::Value(e), None) => self.expr(e, r)?,
                (CallArg::Map(m), None) => {
                    self.insn(Instruction::LoadImm64 { dst: r, imm: Imm64::Map(m.0) })
                }
                (CallArg::Addr(place), None) => {
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
}
