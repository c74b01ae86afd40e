//! The transfer functions: what each instruction does to the abstract state of a path, and the
//! rules it must keep. [`Explorer::step`] dispatches on the instruction; the effects of ALU
//! operations, memory accesses, calls and conditional jumps are in the submodules.

mod alu;
mod call;
mod callback;
mod jump;
mod memory;

use super::Violation;
use super::error::{Fail, fail};
use super::explore::{Explorer, MAX_PENDING, Next};
use super::facts::CALLX_VARIES;
use super::scalar::Scalar;
use super::state::{Frame, Region, SLOTS, Slot, State, Value};
pub(crate) use callback::{LoopEntry, MAX_LOOPS};

use crate::helpers::id as helper_id;
use crate::instruction::{AluOp, CallTarget, Imm64, Instruction, Operand};
use crate::{MapKind, Reg};

/// Largest number a pointer may be moved by, and largest offset it may reach (as in Linux).
const MAX_OFFSET: i64 = 1 << 29;

impl Explorer<'_> {
    fn read(&self, state: &State, reg: Reg) -> Result<Value, Fail> {
        match state.regs[usize::from(reg.index())] {
            Value::Uninit => {
                fail(Violation::UninitRegister, format!("{reg} is read before it is written"))
            }
            v => Ok(v),
        }
    }

    fn read_scalar(&self, state: &State, reg: Reg, what: &str) -> Result<Scalar, Fail> {
        match self.read(state, reg)? {
            Value::Scalar(s) => Ok(s),
            v => fail(
                Violation::PointerLeak,
                format!("{what} {reg} is {}, not a number", self.describe(v)),
            ),
        }
    }

    /// The function starting at slot `start` (a call or function reference's target).
    fn function_at(&self, start: usize) -> usize {
        self.program
            .functions()
            .iter()
            .position(|f| f.start == start)
            .expect("call and function targets start functions")
    }

    fn operand(&self, state: &State, src: Operand) -> Result<Value, Fail> {
        match src {
            Operand::Imm(i) => Ok(Value::Scalar(Scalar::constant(i as i64 as u64))),
            Operand::Reg(r) => self.read(state, r),
        }
    }

    pub(super) fn step(
        &mut self,
        pc: usize,
        insn: Instruction,
        state: &mut State,
    ) -> Result<Next, Fail> {
        self.pc = pc;
        let set = |state: &mut State, reg: Reg, v: Value| state.regs[usize::from(reg.index())] = v;
        match insn {
            Instruction::Alu { op, width, dst, src } => {
                let b = self.operand(state, src)?;
                let a = match op {
                    AluOp::Mov | AluOp::MovSx(_) => Value::Scalar(Scalar::constant(0)),
                    _ => self.read(state, dst)?,
                };
                let v = self.alu(op, width, a, b)?;
                set(state, dst, v);
            }
            Instruction::Neg { width, dst } => {
                let x = self.number(state, dst, "negates")?;
                set(state, dst, Value::Scalar(Scalar::constant(0).alu(AluOp::Sub, width, x)));
            }
            Instruction::Endian { order, bits, dst } => {
                let x = self.number(state, dst, "swaps the bytes of")?;
                set(state, dst, Value::Scalar(alu::endian(x, order, bits)));
            }
            Instruction::LoadImm64 { dst, imm } => {
                let v = match imm {
                    Imm64::Value(v) => Value::Scalar(Scalar::constant(v)),
                    Imm64::Map(m) => Value::MapRef(m),
                    Imm64::MapValue { map, offset } => {
                        let def = &self.program.maps()[map as usize];
                        if def.kind != MapKind::Array || def.capacity != 1 {
                            return fail(
                                Violation::MapValueBounds,
                                format!(
                                    "takes the address of the value of map `{}` directly, which                                      only an array of one entry has (global data)",
                                    def.name
                                ),
                            );
                        }
                        if offset >= def.value_size {
                            return fail(
                                Violation::MapValueBounds,
                                format!(
                                    "takes the address of byte {offset} of the {}-byte value of                                      map `{}`",
                                    def.value_size, def.name
                                ),
                            );
                        }
                        let off = Scalar::constant(u64::from(offset));
                        Value::Pointer { region: Region::MapValue(map), off }
                    }
                    Imm64::Func(_) => {
                        let target = insn.call_target(pc).expect("a function reference") as usize;
                        Value::FuncRef(self.function_at(target) as u32)
                    }
                };
                set(state, dst, v);
            }
            Instruction::Load { size, signed, dst, base, off } => {
                let v = self.load(state, base, off, size.bytes(), signed)?;
                set(state, dst, v);
            }
            Instruction::Store { size, base, off, src } => {
                let v = self.operand(state, src)?;
                self.store(state, base, off, size.bytes(), v)?;
            }
            Instruction::Atomic { op, fetch, size, base, off, src } => {
                use crate::AtomicOp;
                self.read_scalar(state, src, "the atomic operand")?;
                if op == AtomicOp::CmpXchg {
                    self.read_scalar(state, Reg::R0, "the compared value")?;
                }
                self.atomic(state, base, off, size.bytes())?;
                let old = Value::Scalar(Scalar::loaded(size.bytes(), false));
                match op {
                    AtomicOp::CmpXchg => set(state, Reg::R0, old),
                    _ if fetch || op == AtomicOp::Xchg => set(state, src, old),
                    _ => {}
                }
            }
            Instruction::Jump { off, .. } => {
                return Ok(Next::Go((pc as i64 + 1 + off as i64) as usize));
            }
            Instruction::Branch { cond, width, dst, src, off } => {
                // The path goes on with the side further down the program and the other waits
                // on the work list: in a loop, the exit is followed to its end before the next
                // iteration starts, so the list does not grow with the iterations.
                let target = (pc as i64 + 1 + off as i64) as usize;
                return Ok(match self.branch(state, cond, width, dst, src)? {
                    (Some(taken), Some(fall)) => {
                        if self.work.len() >= MAX_PENDING {
                            return fail(
                                Violation::TooComplex,
                                format!("more than {MAX_PENDING} branches wait to be explored"),
                            );
                        }
                        // One copy: the side explored later gets it, this path goes on with
                        // the state it has.
                        let ((first, a), (later, b)) = if target > pc + 1 {
                            ((target, taken), (pc + 1, fall))
                        } else {
                            ((pc + 1, fall), (target, taken))
                        };
                        let mut waiting = state.clone();
                        b.apply(&mut waiting);
                        self.work.push((later, waiting));
                        a.apply(state);
                        Next::Go(first)
                    }
                    (Some(taken), None) => {
                        taken.apply(state);
                        Next::Go(target)
                    }
                    (None, Some(fall)) => {
                        fall.apply(state);
                        Next::Go(pc + 1)
                    }
                    (None, None) => Next::End,
                });
            }
            Instruction::Call(CallTarget::Helper(helper_id::LOOP)) => return self.call_loop(state),
            Instruction::Call(CallTarget::Helper(id)) => self.call_helper(state, id)?,
            Instruction::Call(CallTarget::Reg(reg)) => {
                let id = match self.read(state, reg)? {
                    Value::Scalar(s) => s.as_constant().filter(|&id| id <= u64::from(u32::MAX)),
                    _ => None,
                };
                match id {
                    Some(id) => {
                        let id = id as u32;
                        let seen = &mut self.callx[pc];
                        *seen = Some(if seen.is_none_or(|s| s == id) { id } else { CALLX_VARIES });
                        if id == helper_id::LOOP {
                            return self.call_loop(state);
                        }
                        self.call_helper(state, id)?
                    }
                    None => {
                        return fail(
                            Violation::UnknownHelper,
                            format!("`callx` needs {reg} to hold a known helper number"),
                        );
                    }
                }
            }
            Instruction::Call(CallTarget::Local(_)) => {
                let target = insn.call_target(pc).expect("a local call has a target") as usize;
                let function = self.function_at(target);
                let saved = [state.regs[6], state.regs[7], state.regs[8], state.regs[9]];
                state.frames.push(Frame {
                    function,
                    return_pc: pc + 1,
                    saved,
                    slots: [Slot::EMPTY; SLOTS],
                    loop_entry: None,
                });
                for r in [0, 6, 7, 8, 9] {
                    state.regs[r] = Value::Uninit;
                }
                state.regs[10] = Value::Pointer {
                    region: Region::Stack(state.depth()),
                    off: Scalar::constant(0),
                };
                return Ok(Next::Go(target));
            }
            Instruction::Exit => return self.exit(state),
        }
        Ok(Next::Go(pc + insn.slots()))
    }
}
