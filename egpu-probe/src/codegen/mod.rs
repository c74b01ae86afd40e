//! The code generator: probe IR to eBPF.
//!
//! [`compile`] drives a `Gen`, which emits instructions and jumps to labels and lays them out
//! at the end. Its parts, by concept:
//!
//! - `frame`: the stack frame (buffers, variable homes, scratch slots) and the places in it;
//! - `regalloc`: which variables and pointers live in which registers, the temporaries
//!   expressions are evaluated in, and the stack homes of the rest;
//! - `expr`: expressions, kept canonical;
//! - `calls`: helper calls, saving the live temporaries around them;
//! - `control`: conditions as jumps, `if`, loops and map lookups;
//! - `callback`: loops whose bodies branch, lowered to `bpf_loop` with a callback function;
//! - `stmt`: the other statements.
//!
//! Every instruction is recorded with the [`Stmt::At`] mark in force where it was emitted and the
//! mark of the innermost loop around it, which makes the program's [`SourceMap`].

mod callback;
mod calls;
mod control;
mod expr;
mod frame;
mod regalloc;
mod stmt;

use egpu_ebpf::{
    AluOp, Imm64, Instruction, JmpCond, Operand, Program, ProgramError, Reg, Width,
    instruction::encode,
};
use thiserror::Error;

use super::ir::{ProbeIr, SourceLoc, Stmt, Var};
use crate::SourceMap;
use regalloc::{CTX, Home};

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
    compile_mapped(ir).map(|(program, _)| program)
}

/// Compiles `ir` into a program (not yet verified) and the map from its instructions to the
/// Rust source the IR's [`Stmt::At`] marks name.
pub fn compile_mapped(ir: &ProbeIr) -> Result<(Program, SourceMap), CompileError> {
    // With the context pointer left in r1, expressions have one temporary fewer; a probe whose
    // expressions need it gets r9 for the context instead.
    match compile_with(ir, true) {
        Err(CompileError::TooDeep) => compile_with(ir, false),
        other => other,
    }
}

fn compile_with(ir: &ProbeIr, ctx_in_r1: bool) -> Result<(Program, SourceMap), CompileError> {
    let mut g = Gen::new(ir, ctx_in_r1)?;
    g.zero_var_registers();
    g.stmts(&ir.body)?;
    // Code that ends with `exit` needs no epilogue (nothing jumps past its end: no label is
    // bound after it).
    if !matches!(g.ops.last(), Some(Op::Insn(Instruction::Exit))) {
        g.insn(mov_imm(Reg::R0, 0));
        g.insn(Instruction::Exit);
    }
    // The callbacks of `bpf_loop`, one function each, after the main function.
    for (ops, locs) in std::mem::take(&mut g.funcs) {
        g.ops.extend(ops);
        g.op_locs.extend(locs);
    }
    let (insns, map) = g.assemble()?;
    Ok((Program::new(encode(&insns), ir.maps.clone(), ir.attach)?, map))
}

/// The statements of a list that emit code: all but the [`Stmt::At`] marks.
fn code(stmts: &[Stmt]) -> Vec<&Stmt> {
    stmts.iter().filter(|s| !matches!(s, Stmt::At(_))).collect()
}

/// No location (an index of `Gen::locs`).
const NO_LOC: u32 = u32::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Label(usize);

enum Op {
    Insn(Instruction),
    /// `ja` (no condition) or a conditional jump to a label.
    Jump(Option<(JmpCond, Reg, Operand)>, Label),
    Bind(Label),
    /// `lddw dst, <function>`: a reference to the function whose first instruction is at a
    /// label, for `bpf_loop`.
    FuncRef(Reg, Label),
}

/// A function's code: its ops, and the location of each.
type Func = (Vec<Op>, Vec<(u32, u32)>);

/// The state of the generator: the code so far, and where everything lives.
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
    /// The locations of the [`Stmt::At`] marks met so far.
    locs: Vec<SourceLoc>,
    /// The mark in force, and the innermost loop's (indices in `locs`, `NO_LOC` for none).
    loc: u32,
    loop_loc: u32,
    /// For each of `ops`, the `loc` and `loop_loc` in force when it was emitted.
    op_locs: Vec<(u32, u32)>,
    /// The register holding the main function's frame pointer: `r10` in the main function, a
    /// saved register in a callback. Stack homes, buffers and scratch slots are all in the main
    /// function's frame, at the same offsets from it.
    frame: Reg,
    /// The callbacks generated so far (their ops and locations), laid out after the main code.
    funcs: Vec<Func>,
    /// How many callbacks the code being generated is nested in (0: the main function).
    depth: u32,
    /// The homes of the variables in the main function.
    main_vars: Vec<Home>,
    /// For a variable in a register of the main function, its slot in the main frame while a
    /// callback runs.
    spills: Vec<Option<i16>>,
    /// The main frame's slot for the context pointer, while a callback runs.
    ctx_slot: Option<i16>,
    /// The main frame's slots for a `return` inside a callback: its flag and its value.
    ret_slots: Option<(i16, i16)>,
}

fn mov_imm(dst: Reg, imm: i32) -> Instruction {
    Instruction::Alu { op: AluOp::Mov, width: Width::W64, dst, src: Operand::Imm(imm) }
}

fn alu(op: AluOp, dst: Reg, src: Operand) -> Instruction {
    Instruction::Alu { op, width: Width::W64, dst, src }
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
            locs: Vec::new(),
            loc: NO_LOC,
            loop_loc: NO_LOC,
            op_locs: Vec::new(),
            frame: Reg::FP,
            funcs: Vec::new(),
            depth: 0,
            main_vars: Vec::new(),
            spills: vec![None; ir.vars.len()],
            ctx_slot: None,
            ret_slots: None,
        };
        g.lay_out_buffers()?;
        g.assign_homes(ctx_in_r1)?;
        g.main_vars = g.vars.clone();
        Ok(g)
    }

    fn insn(&mut self, insn: Instruction) {
        self.push_op(Op::Insn(insn));
    }

    fn push_op(&mut self, op: Op) {
        self.ops.push(op);
        self.op_locs.push((self.loc, self.loop_loc));
    }

    /// Makes `loc` the mark in force.
    fn mark(&mut self, loc: SourceLoc) {
        self.loc = u32::try_from(self.locs.len()).unwrap_or(NO_LOC);
        self.locs.push(loc);
    }

    fn label(&mut self) -> Label {
        self.labels += 1;
        Label(self.labels - 1)
    }

    fn bind(&mut self, l: Label) {
        self.push_op(Op::Bind(l));
    }

    fn jump(&mut self, cond: Option<(JmpCond, Reg, Operand)>, to: Label) {
        self.push_op(Op::Jump(cond, to));
    }

    /// Lays the code out: jump offsets in slots, and each slot's location.
    fn assemble(self) -> Result<(Vec<Instruction>, SourceMap), CompileError> {
        let mut at = vec![usize::MAX; self.labels];
        let mut pc = 0;
        for op in &self.ops {
            match op {
                Op::Insn(i) => pc += i.slots(),
                Op::Jump(..) => pc += 1,
                Op::FuncRef(..) => pc += 2,
                Op::Bind(l) => at[l.0] = pc,
            }
        }
        let mut out = Vec::with_capacity(self.ops.len());
        let mut slots = Vec::with_capacity(pc);
        let mut pc = 0usize;
        for (op, loc) in self.ops.into_iter().zip(self.op_locs) {
            match op {
                Op::Insn(i) => {
                    pc += i.slots();
                    slots.extend(std::iter::repeat_n(loc, i.slots()));
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
                    slots.push(loc);
                    pc += 1;
                }
                Op::FuncRef(dst, l) => {
                    let off = i32::try_from(at[l.0] as i64 - (pc as i64 + 1))
                        .map_err(|_| CompileError::Malformed("a function too far".into()))?;
                    out.push(Instruction::LoadImm64 { dst, imm: Imm64::Func(off) });
                    slots.extend([loc, loc]);
                    pc += 2;
                }
                Op::Bind(_) => {}
            }
        }
        Ok((out, SourceMap::new(self.locs, slots)))
    }
}
