//! The program engines run: the verified program with each `bpf_loop` call made an explicit
//! loop, so that neither rbpf nor the GPU translation needs a helper that calls back.
//!
//! Each call site gets a function of its own, appended after the program's functions, and the
//! `call bpf_loop` becomes a local call of it (one slot for one, so no other slot moves and the
//! verifier's facts stay where they were). The function keeps the count, the context and the
//! index in its own `r6`–`r8` (a local call preserves the caller's):
//!
//! ```text
//!     mov32 r6, r1            ; the low 32 bits of nr_loops
//!     mov r7, r3              ; callback_ctx
//!     mov r8, 0               ; i
//!     jle r6, 0x800000, +2
//!     mov r0, -7              ; more than 1 << 23: -E2BIG, no call
//!     exit
//! next:
//!     jge r8, r6, done
//!     mov r1, r8
//!     mov r2, r7
//!     call local callback
//!     add r8, 1
//!     jne r0, 0, done         ; 1 stops (after counting the call)
//!     ja next
//! done:
//!     mov r0, r8              ; the calls made
//!     exit
//! ```
//!
//! The function references (`lddw rX, func f`) become plain numbers, which nothing reads any
//! more, and a `call bpf_loop` that no path reaches becomes `mov r0, 0`. These functions are egpu's, not the program's: the verifier proved the callback safe
//! for every index below the count, which is what they call it with.

use super::facts::Verified;
use super::transfer::MAX_LOOPS;
use crate::instruction::{AluOp, CallTarget, Imm64, Instruction, JmpCond, Operand, Width};
use crate::{Program, ProgramError, Reg};

/// Slots of one loop function.
const LOOP_SLOTS: usize = 15;

/// The runnable form of `verified`, whose `bpf_loop` calls are at `sites` (call slot, callback's
/// first slot); `None` when it has none.
pub(super) fn expand(
    verified: &Verified,
    sites: &[(usize, usize)],
) -> Result<Option<Verified>, ProgramError> {
    let program = verified.program();
    let is_loop_call = |insn: &Instruction| {
        matches!(insn, Instruction::Call(CallTarget::Helper(crate::helpers::id::LOOP)))
    };
    if sites.is_empty() && !program.decoded().iter().any(|d| is_loop_call(&d.insn)) {
        return Ok(None);
    }
    let len = program.insns().len();
    let mut insns: Vec<Instruction> = Vec::with_capacity(program.decoded().len());
    for d in program.decoded() {
        insns.push(match d.insn {
            Instruction::LoadImm64 { dst, imm: Imm64::Func(_) } => {
                let target = d.insn.call_target(d.pc).unwrap_or_default() as u64;
                Instruction::LoadImm64 { dst, imm: Imm64::Value(target) }
            }
            // A call no path reaches (the verifier proved the way to it never taken): an
            // instruction as inert as any, so no engine meets the helper.
            ref call if is_loop_call(call) && !sites.iter().any(|s| s.0 == d.pc) => {
                Instruction::Alu {
                    op: AluOp::Mov,
                    width: Width::W64,
                    dst: Reg::R0,
                    src: Operand::Imm(0),
                }
            }
            other => other,
        });
    }
    let slot_index: std::collections::HashMap<usize, usize> =
        program.decoded().iter().enumerate().map(|(i, d)| (d.pc, i)).collect();
    let mut calls = verified.calls.clone();
    for (n, &(pc, callback)) in sites.iter().enumerate() {
        let start = len + n * LOOP_SLOTS;
        let Some(&i) = slot_index.get(&pc) else { continue };
        insns[i] = Instruction::Call(CallTarget::Local(rel(pc, start)));
        calls[pc] = None;
        insns.extend(loop_function(start, callback));
    }
    let slots = crate::instruction::encode(&insns);
    let total = slots.len();
    let runnable = Program::new(slots, program.maps().to_vec(), program.attach_point())?;
    let mut stack_bytes = verified.stack_bytes.clone();
    stack_bytes.resize(runnable.functions().len(), 0);
    let mut accesses = verified.accesses.clone();
    accesses.resize(total, None);
    let mut callx = verified.callx.clone();
    callx.resize(total, None);
    calls.resize(total, None);
    // The loops' functions added are reached as their callbacks were.
    let mut reached = verified.reached.clone();
    reached.resize(total, true);
    Ok(Some(Verified {
        program: runnable,
        context_bytes: verified.context_bytes,
        stack_bytes,
        insns_processed: verified.insns_processed,
        accesses,
        callx,
        calls,
        reached,
        runnable: None,
    }))
}

/// The offset a jump or call at `pc` encodes to reach `target`.
fn rel(pc: usize, target: usize) -> i32 {
    (target as i64 - pc as i64 - 1) as i32
}

/// The loop function at slot `start`, calling the function at slot `callback`.
fn loop_function(start: usize, callback: usize) -> [Instruction; LOOP_SLOTS] {
    let r = |n| Reg::new(n).expect("r0..r8");
    let alu = |op, width, dst: u8, src| Instruction::Alu { op, width, dst: r(dst), src };
    let mov = |dst, src| alu(AluOp::Mov, Width::W64, dst, src);
    let branch = |cond, dst: u8, src, off| Instruction::Branch {
        cond,
        width: Width::W64,
        dst: r(dst),
        src,
        off,
    };
    [
        alu(AluOp::Mov, Width::W32, 6, Operand::Reg(r(1))),
        mov(7, Operand::Reg(r(3))),
        mov(8, Operand::Imm(0)),
        branch(JmpCond::Le, 6, Operand::Imm(MAX_LOOPS as i32), 2),
        mov(0, Operand::Imm(-7)),
        Instruction::Exit,
        branch(JmpCond::Ge, 8, Operand::Reg(r(6)), 6),
        mov(1, Operand::Reg(r(8))),
        mov(2, Operand::Reg(r(7))),
        Instruction::Call(CallTarget::Local(rel(start + 9, callback))),
        alu(AluOp::Add, Width::W64, 8, Operand::Imm(1)),
        branch(JmpCond::Ne, 0, Operand::Imm(0), 1),
        Instruction::Jump { off: -7, long: false },
        mov(0, Operand::Reg(r(8))),
        Instruction::Exit,
    ]
}
