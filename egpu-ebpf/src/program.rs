//! The program type: instructions, map table and attach point, structurally checked.
//!
//! [`Program::new`] accepts only programs every engine can reason about: each slot decodes,
//! every jump lands on an instruction inside its own function, no function can run past its end,
//! nothing writes `r10`, map references name entries of the map table, and local calls form no
//! cycle and nest at most [`Program::MAX_CALL_DEPTH`] frames deep. A function reference
//! (`lddw rX, func f`, which `bpf_loop` takes) must name a function like a call does, and counts
//! as a call of two frames (the helper's and the callback's). These are the checks Linux makes
//! before its verifier runs; the dataflow checks (memory safety, initialised registers, bounded
//! loops) are the verifier's.

use crate::insn::{Insn, Reg};
use crate::instruction::{CallTarget, Decoded, Imm64, Instruction, decode};
use crate::{AttachPoint, MapDef, ProgramError};

/// A local function: slots `start..end` of the program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    /// First slot.
    pub start: usize,
    /// One past the last slot.
    pub end: usize,
    /// Indices (into [`Program::functions`]) of the functions it calls.
    pub callees: Vec<usize>,
}

/// A structurally valid eBPF program with its map table and attach point.
#[derive(Clone, Debug)]
pub struct Program {
    insns: Vec<Insn>,
    decoded: Vec<Decoded>,
    functions: Vec<Function>,
    maps: Vec<MapDef>,
    attach: AttachPoint,
}

impl Program {
    /// Most slots a program may have.
    pub const MAX_INSNS: usize = 1 << 16;
    /// Most frames a chain of local calls may have, the main function included (as in Linux).
    pub const MAX_CALL_DEPTH: usize = 8;
    /// Stack bytes of each frame.
    pub const STACK_SIZE: usize = 512;

    /// Checks and builds a program.
    pub fn new(
        insns: Vec<Insn>,
        maps: Vec<MapDef>,
        attach: AttachPoint,
    ) -> Result<Program, ProgramError> {
        if insns.is_empty() {
            return Err(ProgramError::Empty);
        }
        if insns.len() > Self::MAX_INSNS {
            return Err(ProgramError::TooLarge { len: insns.len(), max: Self::MAX_INSNS });
        }
        let decoded = decode(&insns)?;
        let functions = check_structure(&insns, &decoded, maps.len())?;
        Ok(Program { insns, decoded, functions, maps, attach })
    }

    /// Checks and builds a program from little-endian bytes.
    pub fn from_bytes(
        bytes: &[u8],
        maps: Vec<MapDef>,
        attach: AttachPoint,
    ) -> Result<Program, ProgramError> {
        Program::new(crate::insn::slots_from_bytes(bytes)?, maps, attach)
    }

    /// The slots.
    pub fn insns(&self) -> &[Insn] {
        &self.insns
    }

    /// The decoded instructions, in order, with their slot indices.
    pub fn decoded(&self) -> &[Decoded] {
        &self.decoded
    }

    /// The local functions; the first is the main function, at slot 0.
    pub fn functions(&self) -> &[Function] {
        &self.functions
    }

    /// The map table.
    pub fn maps(&self) -> &[MapDef] {
        &self.maps
    }

    /// The attach point.
    pub fn attach_point(&self) -> AttachPoint {
        self.attach
    }

    /// The program as little-endian bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        crate::insn::slots_to_bytes(&self.insns)
    }

    /// The program as assembly text that [`assemble`](crate::assemble) turns back into the same
    /// slots.
    pub fn disassemble(&self) -> String {
        crate::disasm::listing(&self.decoded, self.insns.len())
    }
}

fn check_structure(
    insns: &[Insn],
    decoded: &[Decoded],
    n_maps: usize,
) -> Result<Vec<Function>, ProgramError> {
    let len = insns.len();
    let mut is_start = vec![false; len];
    for d in decoded {
        is_start[d.pc] = true;
    }
    let in_program = |target: i64| -> Option<usize> {
        (0..len as i64).contains(&target).then_some(target as usize)
    };

    // Function entries: slot 0 and every local call target.
    let mut starts = vec![0usize];
    for d in decoded {
        if let Some(target) = d.insn.call_target(d.pc) {
            match in_program(target) {
                Some(t) if is_start[t] => starts.push(t),
                _ => return Err(ProgramError::CallOutOfRange { pc: d.pc, target }),
            }
        }
    }
    starts.sort_unstable();
    starts.dedup();
    let function_of = |pc: usize| starts.partition_point(|&s| s <= pc) - 1;
    let mut functions: Vec<Function> = starts
        .iter()
        .enumerate()
        .map(|(i, &start)| Function {
            start,
            end: starts.get(i + 1).copied().unwrap_or(len),
            callees: Vec::new(),
        })
        .collect();

    for d in decoded {
        let func = function_of(d.pc);
        if let Some(target) = d.insn.jump_target(d.pc) {
            let Some(t) = in_program(target) else {
                return Err(ProgramError::JumpOutOfRange { pc: d.pc, target, len });
            };
            if !is_start[t] {
                return Err(ProgramError::JumpIntoLddw { pc: d.pc, target: t });
            }
            if function_of(t) != func {
                return Err(ProgramError::JumpAcrossFunctions {
                    pc: d.pc,
                    target: t,
                    function: functions[func].start,
                });
            }
        }
        if let Some(target) = d.insn.call_target(d.pc) {
            let callee = function_of(target as usize);
            if !functions[func].callees.contains(&callee) {
                functions[func].callees.push(callee);
            }
        }
        if d.insn.written_reg() == Some(Reg::R10) {
            return Err(ProgramError::WritesFramePointer { pc: d.pc });
        }
        if let Instruction::LoadImm64 {
            imm: Imm64::Map(index) | Imm64::MapValue { map: index, .. },
            ..
        } = d.insn
            && index as usize >= n_maps
        {
            return Err(ProgramError::UnknownMap { pc: d.pc, index, len: n_maps });
        }
        if d.pc + d.insn.slots() == functions[func].end && !d.insn.ends_block() {
            return Err(ProgramError::FallsOffEnd { pc: d.pc, function: functions[func].start });
        }
    }

    check_call_graph(decoded, &functions, &function_of)?;
    Ok(functions)
}

/// Rejects recursion and call chains deeper than [`Program::MAX_CALL_DEPTH`]. A function
/// reference counts as a call of two frames: `bpf_loop`, which takes it, runs the callback from
/// a frame of its own (as Linux counts callbacks).
fn check_call_graph(
    decoded: &[Decoded],
    functions: &[Function],
    function_of: &dyn Fn(usize) -> usize,
) -> Result<(), ProgramError> {
    // The call sites of each function, to name the instruction in errors: (pc, callee, frames).
    let mut sites: Vec<Vec<Site>> = vec![Vec::new(); functions.len()];
    for d in decoded {
        let frames = match d.insn {
            Instruction::Call(CallTarget::Local(_)) => 1,
            Instruction::LoadImm64 { imm: Imm64::Func(_), .. } => 2,
            _ => continue,
        };
        let target = d.insn.call_target(d.pc).unwrap_or_default() as usize;
        sites[function_of(d.pc)].push(Site { pc: d.pc, callee: function_of(target), frames });
    }
    // Every function is a root in turn (main first), so cycles among functions that main never
    // reaches are found too.
    let mut mark = vec![Mark::New; functions.len()];
    for root in 0..functions.len() {
        if mark[root] != Mark::New {
            continue;
        }
        mark[root] = Mark::Open;
        depth_first(root, &sites, functions, &mut mark)?;
    }
    Ok(())
}

#[derive(Clone, Copy)]
struct Site {
    pc: usize,
    callee: usize,
    /// Frames the call adds: 1 for a call, 2 for a callback.
    frames: usize,
}

#[derive(Clone, Copy, PartialEq)]
enum Mark {
    New,
    Open,
    /// Frames in the deepest call chain starting at the function, itself included.
    Done(usize),
}

fn depth_first(
    root: usize,
    sites: &[Vec<Site>],
    functions: &[Function],
    mark: &mut [Mark],
) -> Result<(), ProgramError> {
    // (function, next site, frames down to and including it)
    let mut stack: Vec<(usize, usize, usize)> = vec![(root, 0, 1)];
    while let Some(&mut (func, ref mut next, depth)) = stack.last_mut() {
        if let Some(&Site { pc, callee, frames }) = sites[func].get(*next) {
            *next += 1;
            let too_deep = |depth: usize| {
                Err(ProgramError::CallTooDeep { pc, depth, max: Program::MAX_CALL_DEPTH })
            };
            match mark[callee] {
                Mark::Open => {
                    return Err(ProgramError::Recursion { pc, function: functions[callee].start });
                }
                Mark::New => {
                    if depth + frames > Program::MAX_CALL_DEPTH {
                        return too_deep(depth + frames);
                    }
                    mark[callee] = Mark::Open;
                    stack.push((callee, 0, depth + frames));
                }
                Mark::Done(below) => {
                    if depth + frames - 1 + below > Program::MAX_CALL_DEPTH {
                        return too_deep(depth + frames - 1 + below);
                    }
                }
            }
        } else {
            let below = sites[func]
                .iter()
                .map(|s| match mark[s.callee] {
                    Mark::Done(d) => d + s.frames - 1,
                    _ => 0,
                })
                .max()
                .unwrap_or(0)
                + 1;
            mark[func] = Mark::Done(below);
            stack.pop();
        }
    }
    Ok(())
}
