//! Jumps, conditional branches, calls and `exit`. A branch compares in 64 or 32 bits and
//! branches on the predicate; a call of a helper (by number, or through `callx` when the
//! verifier found the same helper on every path) is inlined; a local call is a PTX `call` of the
//! function's `.func`. `exit` leaves the main function's block (its end copies `r0` to the
//! result register), or returns `r0` from a local function.

use egpu_ebpf::{CallTarget, Instruction, JmpCond, Operand, Reg, Width};

use super::emit::Emitter;
use super::{Context, TranslateError};

impl Emitter<'_> {
    /// `ja`: a jump to the instruction at `target`.
    pub(super) fn jump(&mut self, target: usize) {
        let l = self.label(target);
        self.line(format!("bra {l};"));
    }

    /// A conditional jump to `target`: `dst cond src`, in 64 or 32 bits.
    pub(super) fn branch(
        &mut self,
        cond: JmpCond,
        width: Width,
        dst: Reg,
        src: Operand,
        target: usize,
    ) {
        let q0 = self.pred(0);
        let l = self.label(target);
        let (a, b, bits) = match width {
            Width::W64 => (self.reg(dst), self.operand64(src), 64),
            Width::W32 => {
                let [w0, w1] = [self.tmp32(0), self.tmp32(1)];
                let d = self.reg(dst);
                self.line(format!("cvt.u32.u64 {w0}, {d};"));
                let b = match src {
                    Operand::Imm(i) => i.to_string(),
                    Operand::Reg(r) => {
                        let s = self.reg(r);
                        self.line(format!("cvt.u32.u64 {w1}, {s};"));
                        w1
                    }
                };
                (w0, b, 32)
            }
        };
        let (cmp, signed) = match cond {
            JmpCond::Eq => ("eq", false),
            JmpCond::Ne => ("ne", false),
            JmpCond::Gt => ("gt", false),
            JmpCond::Ge => ("ge", false),
            JmpCond::Lt => ("lt", false),
            JmpCond::Le => ("le", false),
            JmpCond::Sgt => ("gt", true),
            JmpCond::Sge => ("ge", true),
            JmpCond::Slt => ("lt", true),
            JmpCond::Sle => ("le", true),
            JmpCond::Set => {
                let t = if bits == 64 { self.tmp64(0) } else { self.tmp32(2) };
                self.line(format!("and.b{bits} {t}, {a}, {b};"));
                self.line(format!("setp.ne.u{bits} {q0}, {t}, 0;"));
                self.line(format!("@{q0} bra {l};"));
                return;
            }
        };
        let ty = if signed { "s" } else { "u" };
        self.line(format!("setp.{cmp}.{ty}{bits} {q0}, {a}, {b};"));
        self.line(format!("@{q0} bra {l};"));
    }

    /// `call`: of a helper, inlined (through `callx`, the helper the verifier found in the
    /// register on every path), or of a local function.
    pub(super) fn call(
        &mut self,
        pc: usize,
        insn: Instruction,
        target: CallTarget,
    ) -> Result<(), TranslateError> {
        match target {
            CallTarget::Helper(id) => self.helper(pc, id)?,
            CallTarget::Reg(_) => {
                let id =
                    self.verified.callx_helper(pc).ok_or(TranslateError::VaryingCallx { pc })?;
                self.helper(pc, id)?;
            }
            CallTarget::Local(_) => {
                let target = insn.call_target(pc).expect("a local call has a target") as usize;
                let f = self
                    .program
                    .functions()
                    .iter()
                    .position(|f| f.start == target)
                    .expect("call targets start functions");
                let name = self.func_name(f);
                let mut args: Vec<String> =
                    (1..=5).map(|i| self.reg(Reg::new(i).expect("r1-r5"))).collect();
                if let Context::Access { addr, size_reg, .. } = self.context() {
                    args.push(addr);
                    args.extend(size_reg);
                }
                let r0 = self.reg(Reg::R0);
                self.line(format!("call ({r0}), {name}, ({});", args.join(", ")));
            }
        }
        Ok(())
    }

    /// `exit`: to the end of the main function's block, or a return from a local function.
    pub(super) fn exit(&mut self) {
        if self.function == 0 {
            let exit = self.exit_label();
            self.line(format!("bra {exit};"));
        } else {
            let (ret, r0) = (self.ret_param(), self.reg(Reg::R0));
            self.line(format!("mov.b64 {ret}, {r0};"));
            self.line("ret;");
        }
    }
}
