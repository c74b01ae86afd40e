//! Legalisation: rewriting a program into instructions rbpf 0.4.1 executes correctly, identically
//! in its interpreter and its JIT.
//!
//! rbpf lacks atomics, sign-extending loads and moves, `bswap`, long jumps and `callx`; it
//! computes `sdiv`/`smod` as unsigned; its JIT copies all 64 bits on `mov32` and ignores `le`;
//! its interpreter zero-extends the immediate of 64-bit unsigned jumps and leaves the upper half
//! on `mod32` by zero; neither gives a local function its own stack frame in the same way. Each
//! of these is rewritten here into instructions that both engines get right:
//!
//! | instruction | becomes |
//! |---|---|
//! | `mov32 dst, src` | `mov32` then `and32 dst, -1` (zero-extends in the JIT too) |
//! | `mod32` | `mod32` then `and32 dst, -1`; by the immediate 0, only the `and32` |
//! | `le16`, `le32`, `le64` | `and32 dst, 0xffff`, `and32 dst, -1`, nothing |
//! | `bswapN` | `beN` (a byte swap on a little-endian host) |
//! | `movsx` | a move and a pair of shifts |
//! | `ldxs{b,h,w}` | the zero-extending load and a pair of shifts |
//! | `sdiv`, `smod` | unsigned `div`/`mod` on magnitudes, with the signs handled by branches |
//! | 64-bit `jeq/jne/jgt/jge/jlt/jle` with a negative immediate | one or two signed jumps |
//! | `ja32` | `ja` when the offset fits in 16 bits |
//! | `callx` | a chain of `jeq` over the bound helpers |
//! | atomics | a call to an egpu helper, with `r0`–`r5` saved in the frame's scratch area |
//! | `call local` | `r10` moved down one frame around the call |
//! | `lddw rX, map[n]` | `lddw rX, <address of the VM's binding of map n>` |
//! | 64-bit `neg` | `xor dst, -1` and `add dst, 1` (the interpreter's `neg` panics on `i64::MIN` in debug builds) |
//!
//! egpu gives the program its own stack instead of rbpf's: a block of
//! [`Program::MAX_CALL_DEPTH`] frames owned by the VM, each [`FRAME_BYTES`] long: 512 bytes of
//! program stack below `r10` and [`SCRATCH_BYTES`] of scratch above it. The legalised program
//! starts with `lddw r10, <top of frame 0>` and clears every register, but `r1`, that it may read
//! before writing. Functions are laid out callers first, so every
//! local call jumps forward.

use std::collections::HashMap;

use egpu_ebpf::{
    AluOp, AtomicOp, ByteOrder, CallTarget, Imm64, Instruction, JmpCond, Operand, Program, Reg,
    Size, Width,
};

use super::LoadError;
use super::helpers;

/// Scratch bytes above `r10` in every frame: the six caller-saved registers.
pub(crate) const SCRATCH_BYTES: usize = 48;
/// Bytes of one frame: the program's stack and the scratch area.
pub(crate) const FRAME_BYTES: usize = Program::STACK_SIZE + SCRATCH_BYTES;
/// Bytes of the stack block of a VM.
pub(crate) const STACK_BYTES: usize = FRAME_BYTES * Program::MAX_CALL_DEPTH;
/// Most slots rbpf's interpreter runs correctly: it computes jump targets in `i16`.
pub(crate) const MAX_LEGAL_SLOTS: usize = i16::MAX as usize;

/// A legalised program.
#[derive(Debug)]
pub(crate) struct Legalised {
    /// The instructions, ready for rbpf.
    pub(crate) insns: Vec<Instruction>,
    /// For each legalised slot, the original instruction it came from.
    pub(crate) origin: Vec<usize>,
    /// Whether it calls egpu's internal helpers, which need the run's state.
    pub(crate) uses_internal_helpers: bool,
    /// Whether it has a legalised `callx`, whose fallback reports a fault through the run's
    /// state (on both engines).
    pub(crate) uses_callx: bool,
}

/// A position in the output, bound once the layout is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Label(usize);

type Cond = (JmpCond, Width, Reg, Operand);

#[derive(Clone, Copy, Debug)]
enum Op {
    /// An instruction without a target.
    Insn(Instruction),
    /// `ja` (no condition) or a conditional jump to a label.
    Jump(Option<Cond>, Label),
    /// A local call to a label.
    CallLocal(Label),
    /// Binds a label to the next instruction.
    Bind(Label),
}

struct Emitter {
    ops: Vec<(Op, usize)>,
    next_label: usize,
    origin: usize,
}

impl Emitter {
    fn label(&mut self) -> Label {
        self.next_label += 1;
        Label(self.next_label - 1)
    }
    fn op(&mut self, op: Op) {
        self.ops.push((op, self.origin));
    }
    fn insn(&mut self, insn: Instruction) {
        self.op(Op::Insn(insn));
    }
    fn bind(&mut self, label: Label) {
        self.op(Op::Bind(label));
    }
    fn ja(&mut self, to: Label) {
        self.op(Op::Jump(None, to));
    }
    fn branch(&mut self, cond: JmpCond, width: Width, dst: Reg, src: Operand, to: Label) {
        self.op(Op::Jump(Some((cond, width, dst, src)), to));
    }
    fn alu(&mut self, op: AluOp, width: Width, dst: Reg, src: Operand) {
        self.insn(Instruction::Alu { op, width, dst, src });
    }
    fn alu_imm(&mut self, op: AluOp, width: Width, dst: Reg, imm: i32) {
        self.alu(op, width, dst, Operand::Imm(imm));
    }
    /// `dst = -dst`. rbpf's interpreter negates a 64-bit value with an overflow-checked `-`,
    /// which panics on `i64::MIN` in debug builds, so a 64-bit negation is `!dst + 1`.
    fn neg(&mut self, width: Width, dst: Reg) {
        match width {
            Width::W32 => self.insn(Instruction::Neg { width, dst }),
            Width::W64 => {
                self.alu_imm(AluOp::Xor, Width::W64, dst, -1);
                self.alu_imm(AluOp::Add, Width::W64, dst, 1);
            }
        }
    }
    /// Zero-extends the low half of `dst` (`and32 dst, -1`).
    fn zext32(&mut self, dst: Reg) {
        self.alu_imm(AluOp::And, Width::W32, dst, -1);
    }
    fn store_scratch(&mut self, reg: Reg, slot: u8) {
        self.insn(Instruction::Store {
            size: Size::DW,
            base: Reg::FP,
            off: 8 * i16::from(slot),
            src: Operand::Reg(reg),
        });
    }
    fn load_scratch(&mut self, reg: Reg, slot: u8) {
        self.insn(Instruction::Load {
            size: Size::DW,
            signed: false,
            dst: reg,
            base: Reg::FP,
            off: 8 * i16::from(slot),
        });
    }
}

/// Where the VM keeps a map of the program's table.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MapAddress {
    /// What `lddw rX, map[n]` loads: the address of the VM's binding of the map, which the map
    /// helpers take as their first argument.
    pub(crate) binding: u64,
    /// The address of the map's first value in its memory, to which `lddw rX, map[n]+OFF`
    /// (global data, an array of one entry) adds `OFF`.
    pub(crate) value: u64,
}

/// Legalises `program` for a VM whose frame 0 has `r10 = frame_top`. `bound` lists the helper
/// numbers the VM provides, for `callx`; `maps[n]` says where map `n` of its table is.
pub(crate) fn legalise(
    program: &Program,
    frame_top: u64,
    bound: &[u32],
    maps: &[MapAddress],
) -> Result<Legalised, LoadError> {
    let n = program.insns().len();
    // Labels 0..n are the original instruction starts.
    let mut e = Emitter { ops: Vec::new(), next_label: n, origin: 0 };
    e.insn(Instruction::LoadImm64 { dst: Reg::FP, imm: Imm64::Value(frame_top) });
    // rbpf's JIT enters with the host's registers in r0 and r2–r9; the verifier has proved the
    // program writes each before reading it, so no host value reaches the program.
    for func in layout_order(program) {
        let f = &program.functions()[func];
        for d in program.decoded().iter().filter(|d| (f.start..f.end).contains(&d.pc)) {
            e.origin = d.pc;
            e.bind(Label(d.pc));
            rewrite(&mut e, d.pc, d.insn, bound, maps)?;
        }
    }
    assemble(e.ops)
}

/// Functions reachable from the main function, callers before callees (main first).
fn layout_order(program: &Program) -> Vec<usize> {
    let funcs = program.functions();
    let mut seen = vec![false; funcs.len()];
    let mut post = Vec::new();
    // Iterative post-order depth-first search from main.
    let mut stack = vec![(0usize, 0usize)];
    seen[0] = true;
    while let Some((f, i)) = stack.last_mut() {
        if let Some(&callee) = funcs[*f].callees.get(*i) {
            *i += 1;
            if !seen[callee] {
                seen[callee] = true;
                stack.push((callee, 0));
            }
        } else {
            post.push(*f);
            stack.pop();
        }
    }
    post.reverse();
    post
}

fn rewrite(
    e: &mut Emitter,
    pc: usize,
    insn: Instruction,
    bound: &[u32],
    maps: &[MapAddress],
) -> Result<(), LoadError> {
    use Instruction as I;
    match insn {
        I::Alu { op: AluOp::Mov, width: Width::W32, dst, src: Operand::Reg(src) } => {
            e.alu(AluOp::Mov, Width::W32, dst, Operand::Reg(src));
            e.zext32(dst);
        }
        I::Alu { op: AluOp::Mod, width: Width::W32, dst, src: Operand::Imm(0) } => e.zext32(dst),
        I::Alu { op: AluOp::Mod, width: Width::W32, dst, src } => {
            e.alu(AluOp::Mod, Width::W32, dst, src);
            e.zext32(dst);
        }
        I::Alu { op: AluOp::MovSx(bits), width, dst, src: Operand::Reg(src) } => {
            e.alu(AluOp::Mov, Width::W64, dst, Operand::Reg(src));
            let shift = i32::from(width_bits(width)) - i32::from(bits);
            e.alu_imm(AluOp::Lsh, width, dst, shift);
            e.alu_imm(AluOp::Arsh, width, dst, shift);
        }
        I::Alu { op: op @ (AluOp::SDiv | AluOp::SMod), width, dst, src } => {
            signed_div(e, op == AluOp::SMod, width, dst, src);
        }
        I::Neg { width, dst } => e.neg(width, dst),
        I::Endian { order: ByteOrder::Le, bits, dst } => match bits {
            16 => e.alu_imm(AluOp::And, Width::W32, dst, 0xffff),
            32 => e.zext32(dst),
            _ => {}
        },
        I::Endian { order: ByteOrder::Swap, bits, dst } => {
            e.insn(I::Endian { order: ByteOrder::Be, bits, dst });
        }
        I::LoadImm64 { dst, imm: Imm64::Map(n) } => {
            // `Program::new` checked the index against the map table, which the VM binds whole.
            let addr = maps[n as usize].binding;
            e.insn(I::LoadImm64 { dst, imm: Imm64::Value(addr) });
        }
        I::LoadImm64 { dst, imm: Imm64::MapValue { map, offset } } => {
            // The verifier checked the offset against the value's size.
            let addr = maps[map as usize].value + u64::from(offset);
            e.insn(I::LoadImm64 { dst, imm: Imm64::Value(addr) });
        }
        I::Load { size, signed: true, dst, base, off } => {
            e.insn(I::Load { size, signed: false, dst, base, off });
            let shift = 64 - 8 * size.bytes() as i32;
            e.alu_imm(AluOp::Lsh, Width::W64, dst, shift);
            e.alu_imm(AluOp::Arsh, Width::W64, dst, shift);
        }
        I::Atomic { op, fetch, size, base, off, src } => atomic(e, op, fetch, size, base, off, src),
        I::Jump { off, .. } => e.ja(Label(target(pc, off))),
        I::Branch { cond, width: Width::W64, dst, src: Operand::Imm(imm), off } if imm < 0 => {
            let to = Label(target(pc, off.into()));
            negative_unsigned_branch(e, cond, dst, imm, to);
        }
        I::Branch { cond, width, dst, src, off } => {
            e.branch(cond, width, dst, src, Label(target(pc, off.into())));
        }
        I::Call(CallTarget::Helper(id)) => {
            if !bound.contains(&id) {
                return Err(LoadError::UnknownHelper { pc, id });
            }
            e.insn(insn);
        }
        I::Call(CallTarget::Local(off)) => {
            e.alu_imm(AluOp::Add, Width::W64, Reg::FP, -(FRAME_BYTES as i32));
            e.op(Op::CallLocal(Label(target(pc, off))));
            e.alu_imm(AluOp::Add, Width::W64, Reg::FP, FRAME_BYTES as i32);
        }
        I::Call(CallTarget::Reg(reg)) => {
            let end = e.label();
            let arms: Vec<(u32, Label)> = bound.iter().map(|&id| (id, e.label())).collect();
            for &(id, arm) in &arms {
                e.branch(JmpCond::Eq, Width::W64, reg, Operand::Imm(id as i32), arm);
            }
            e.insn(I::Call(CallTarget::Helper(helpers::BAD_CALLX)));
            e.ja(end);
            for (id, arm) in arms {
                e.bind(arm);
                e.insn(I::Call(CallTarget::Helper(id)));
                e.ja(end);
            }
            e.bind(end);
        }
        other => e.insn(other),
    }
    Ok(())
}

fn target(pc: usize, off: i32) -> usize {
    (pc as i64 + 1 + i64::from(off)) as usize
}

const fn width_bits(width: Width) -> u8 {
    match width {
        Width::W32 => 32,
        Width::W64 => 64,
    }
}

/// A 64-bit unsigned comparison with a negative immediate `imm`, i.e. with the constant
/// `c = 2^64 + imm` in the top half of the range, expressed with signed comparisons (which both
/// engines sign-extend correctly): `x >u c` exactly when `imm <s x <s 0`.
fn negative_unsigned_branch(e: &mut Emitter, cond: JmpCond, dst: Reg, imm: i32, to: Label) {
    let w = Width::W64;
    let imm_op = Operand::Imm(imm);
    let zero = Operand::Imm(0);
    let skip = e.label();
    match cond {
        JmpCond::Eq => {
            e.branch(JmpCond::Slt, w, dst, imm_op, skip);
            e.branch(JmpCond::Sle, w, dst, imm_op, to);
        }
        JmpCond::Ne => {
            e.branch(JmpCond::Slt, w, dst, imm_op, to);
            e.branch(JmpCond::Sgt, w, dst, imm_op, to);
        }
        JmpCond::Gt => {
            e.branch(JmpCond::Sle, w, dst, imm_op, skip);
            e.branch(JmpCond::Slt, w, dst, zero, to);
        }
        JmpCond::Ge => {
            e.branch(JmpCond::Slt, w, dst, imm_op, skip);
            e.branch(JmpCond::Slt, w, dst, zero, to);
        }
        JmpCond::Lt => {
            e.branch(JmpCond::Slt, w, dst, imm_op, to);
            e.branch(JmpCond::Sge, w, dst, zero, to);
        }
        JmpCond::Le => {
            e.branch(JmpCond::Sle, w, dst, imm_op, to);
            e.branch(JmpCond::Sge, w, dst, zero, to);
        }
        // Signed conditions and `jset` sign-extend correctly in both engines.
        other => e.branch(other, w, dst, imm_op, to),
    }
    e.bind(skip);
}

/// Signed division and remainder as unsigned operations on magnitudes.
///
/// The signs are kept in control flow, not in registers, so nothing but `dst` changes: a negative
/// register divisor is negated with a 64-bit `neg` and negated back (exact, even for the most
/// negative value, and it leaves the upper half of a 32-bit operand as it was).
fn signed_div(e: &mut Emitter, rem: bool, width: Width, dst: Reg, src: Operand) {
    let w = width;
    let unsigned = if rem { AluOp::Mod } else { AluOp::Div };
    let slt0 =
        |e: &mut Emitter, r: Reg, to: Label| e.branch(JmpCond::Slt, w, r, Operand::Imm(0), to);
    let end = e.label();
    match src {
        Operand::Reg(s) if s == dst => {
            // x / x is 1 (0 for x = 0); x % x is 0.
            if rem {
                e.alu_imm(AluOp::Mov, w, dst, 0);
            } else {
                let zero = e.label();
                e.branch(JmpCond::Eq, w, dst, Operand::Imm(0), zero);
                e.alu_imm(AluOp::Mov, w, dst, 1);
                e.ja(end);
                e.bind(zero);
                e.alu_imm(AluOp::Mov, w, dst, 0);
            }
        }
        Operand::Reg(s) => {
            let (dn, sn, dn_sn) = (e.label(), e.label(), e.label());
            slt0(e, s, sn);
            slt0(e, dst, dn);
            // dst >= 0, src >= 0.
            e.alu(unsigned, w, dst, src);
            e.ja(end);
            // dst < 0, src >= 0: the result is negative.
            e.bind(dn);
            e.neg(w, dst);
            e.alu(unsigned, w, dst, src);
            e.neg(w, dst);
            e.ja(end);
            // src < 0.
            e.bind(sn);
            e.neg(Width::W64, s);
            slt0(e, dst, dn_sn);
            // dst >= 0, src < 0: a quotient is negative, a remainder is not.
            e.alu(unsigned, w, dst, src);
            if !rem {
                e.neg(w, dst);
            }
            e.neg(Width::W64, s);
            e.ja(end);
            // dst < 0, src < 0: a quotient is positive, a remainder negative.
            e.bind(dn_sn);
            e.neg(w, dst);
            e.alu(unsigned, w, dst, src);
            if rem {
                e.neg(w, dst);
            }
            e.neg(Width::W64, s);
        }
        Operand::Imm(0) => {
            // x / 0 = 0; x % 0 = x.
            if !rem {
                e.alu_imm(AluOp::Mov, w, dst, 0);
            }
        }
        Operand::Imm(imm) => {
            // Divide the magnitude of dst by |imm|. For a 64-bit operation |i32::MIN| = 2^31 is
            // no immediate (it would be sign-extended), so divide by shifting or masking instead.
            let magnitude = |e: &mut Emitter| match (w, imm == i32::MIN) {
                (Width::W64, true) if rem => e.alu_imm(AluOp::And, w, dst, i32::MAX),
                (Width::W64, true) => e.alu_imm(AluOp::Rsh, w, dst, 31),
                _ => e.alu_imm(unsigned, w, dst, imm.unsigned_abs() as i32),
            };
            let dn = e.label();
            let negative_quotient = !rem && imm < 0;
            slt0(e, dst, dn);
            magnitude(e);
            if negative_quotient {
                e.neg(w, dst);
            }
            e.ja(end);
            e.bind(dn);
            e.neg(w, dst);
            magnitude(e);
            if rem || !negative_quotient {
                e.neg(w, dst);
            }
        }
    }
    e.bind(end);
    if rem && w == Width::W32 {
        // mod32 by zero leaves the upper half in rbpf; the result is zero-extended.
        e.zext32(dst);
    }
}

/// Caller-saved registers, each with its scratch slot (its number).
const SAVED: [Reg; 6] = [Reg::R0, Reg::R1, Reg::R2, Reg::R3, Reg::R4, Reg::R5];

/// An atomic read-modify-write as a call to an egpu helper, which checks the address and uses a
/// real atomic instruction (map memory is shared with other threads, processes and the GPU).
fn atomic(e: &mut Emitter, op: AtomicOp, fetch: bool, size: Size, base: Reg, off: i16, src: Reg) {
    let saved = |r: Reg| r.index() <= 5;
    for r in SAVED {
        e.store_scratch(r, r.index());
    }
    // r1 = address, r2 = operand, r3 = expected value (cmpxchg): read the saved copies, since
    // setting r1 may overwrite the operand.
    let fetch_into = |e: &mut Emitter, dst: Reg, r: Reg| {
        if saved(r) {
            e.load_scratch(dst, r.index());
        } else {
            e.alu(AluOp::Mov, Width::W64, dst, Operand::Reg(r));
        }
    };
    fetch_into(e, Reg::R1, base);
    if off != 0 {
        e.alu_imm(AluOp::Add, Width::W64, Reg::R1, off.into());
    }
    fetch_into(e, Reg::R2, src);
    e.load_scratch(Reg::R3, 0);
    e.insn(Instruction::Call(CallTarget::Helper(helpers::atomic_helper(op, size))));
    // r0 = the old value.
    let result_into = match op {
        AtomicOp::CmpXchg => Some(Reg::R0),
        _ if fetch => Some(src),
        _ => None,
    };
    match result_into {
        Some(r) if saved(r) => e.store_scratch(Reg::R0, r.index()),
        Some(r) => e.alu(AluOp::Mov, Width::W64, r, Operand::Reg(Reg::R0)),
        None => {}
    }
    for r in SAVED {
        e.load_scratch(r, r.index());
    }
}

/// Lays the operations out and resolves labels.
fn assemble(ops: Vec<(Op, usize)>) -> Result<Legalised, LoadError> {
    let mut at: HashMap<Label, usize> = HashMap::new();
    let mut pc = 0usize;
    for (op, _) in &ops {
        match op {
            Op::Bind(l) => {
                at.insert(*l, pc);
            }
            Op::Insn(i) => pc += i.slots(),
            Op::Jump(..) | Op::CallLocal(_) => pc += 1,
        }
    }
    if pc > MAX_LEGAL_SLOTS {
        return Err(LoadError::TooLarge { slots: pc, max: MAX_LEGAL_SLOTS });
    }
    let mut insns = Vec::with_capacity(ops.len());
    let mut origin = Vec::with_capacity(pc);
    let mut pc = 0usize;
    for (op, orig) in ops {
        let offset = |l: Label| at[&l] as i64 - pc as i64 - 1;
        let insn = match op {
            Op::Bind(_) => continue,
            Op::Insn(i) => i,
            Op::Jump(cond, to) => {
                let off =
                    i16::try_from(offset(to)).map_err(|_| LoadError::JumpTooFar { pc: orig })?;
                match cond {
                    None => Instruction::Jump { off: off.into(), long: false },
                    Some((cond, width, dst, src)) => {
                        Instruction::Branch { cond, width, dst, src, off }
                    }
                }
            }
            Op::CallLocal(to) => Instruction::Call(CallTarget::Local(offset(to) as i32)),
        };
        for _ in 0..insn.slots() {
            origin.push(orig);
        }
        pc += insn.slots();
        insns.push(insn);
    }
    let uses_internal_helpers = insns.iter().any(
        |i| matches!(i, Instruction::Call(CallTarget::Helper(id)) if helpers::is_internal(*id)),
    );
    let uses_callx = insns.iter().any(
        |i| matches!(i, Instruction::Call(CallTarget::Helper(id)) if *id == helpers::BAD_CALLX),
    );
    Ok(Legalised { insns, origin, uses_internal_helpers, uses_callx })
}
