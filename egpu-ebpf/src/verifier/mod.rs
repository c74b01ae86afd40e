//! The verifier: one safety check for every program, before any engine runs it.
//!
//! rbpf's JIT checks no memory access and the GPU has no memory protection at all, so egpu runs
//! only programs [`verify`] accepts. It proves, for the attach point and maps the [`Program`]
//! declares, that every run:
//!
//! - reads only registers and stack bytes it wrote before;
//! - touches memory only inside its stack frames, the context (read-only for CUDA events) and map
//!   values it looked up and checked for null, never through a number;
//! - calls only helpers of the table, with arguments of the kinds each declares;
//! - never lets an address escape: no pointer is returned, stored outside the stack, compared
//!   with a number, or turned into one;
//! - ends: every path reaches `exit` within the verifier's budget.
//!
//! # How
//!
//! As Linux does, by abstract interpretation of every path, depth first. The state of a path maps
//! each register and stack slot to what it may hold: uninitialised, a number (an unsigned and a
//! signed interval and known bits), a pointer (to the context, a stack frame or a map value, at an
//! offset that is itself such a number), a map reference, or a lookup's result not yet checked
//! for null. Branches on numbers narrow them on each side and drop the side that cannot happen,
//! which is how a bounded loop is followed to its end, iteration by iteration.
//!
//! Paths are cut where they join: at every jump target, the state is compared with states
//! already seen there. When one whose every continuation was verified holds the new one, the new
//! path is safe and stops. When the new state equals one still being explored on the same path,
//! the program loops forever. After [`JOIN_AFTER`] different states at one instruction, the next
//! is widened to hold the earlier ones that agree with it on every constant number, which keeps
//! chains of branches from doubling the work without forgetting a loop's counter.
//! Registers that are dead at a join are forgotten first (by a liveness pass), so they do not
//! keep states apart. Programs whose exploration takes more than [`INSN_BUDGET`] steps are
//! refused.
//!
//! ```
//! use egpu_ebpf::verifier::{Violation, verify};
//! use egpu_ebpf::{AttachPoint, Program, assemble};
//!
//! let program = |text| Program::new(assemble(text).unwrap(), vec![], AttachPoint::User { ctx_size: 8 });
//! assert!(verify(&program("ldxw %r0, [%r1+4]\nexit")?).is_ok());
//!
//! let error = verify(&program("ldxw %r0, [%r1+6]\nexit")?).unwrap_err();
//! assert_eq!(error.violation, Violation::ContextBounds);
//! assert_eq!(error.pc, 0);
//! # Ok::<(), egpu_ebpf::ProgramError>(())
//! ```

mod scalar;
mod state;

use std::fmt;

use crate::helpers::{ArgKind, RetKind, helper};
use crate::instruction::{
    AluOp, ByteOrder, CallTarget, Imm64, Instruction, JmpCond, Operand, Width,
};
use crate::{MapKind, Program, Reg};
use scalar::Scalar;
use state::{Frame, Region, SLOTS, Slot, State, Value};

/// Most instructions the verifier follows, over all paths, before it gives up (as in Linux).
pub const INSN_BUDGET: usize = 1_000_000;

/// Different states kept at one instruction before new ones are widened to hold them.
pub const JOIN_AFTER: usize = 8;

/// States kept at one instruction at most; beyond, new ones are explored without being kept.
const KEEP_MAX: usize = 64;

/// Most branch sides waiting to be explored (Linux's limit on a jump sequence).
const MAX_PENDING: usize = 8192;

/// Largest number a pointer may be moved by, and largest offset it may reach (as in Linux).
const MAX_OFFSET: i64 = 1 << 29;

/// Why a program is refused. Each has a stable short [`code`](Violation::code).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Violation {
    /// Reads a register that holds nothing yet.
    UninitRegister,
    /// Reads stack bytes that were never written.
    UninitStack,
    /// Accesses the stack outside its 512-byte frame.
    StackBounds,
    /// Writes to a read-only context.
    ContextWrite,
    /// Accesses the context outside its size.
    ContextBounds,
    /// Accesses a device context at an offset that is not a constant.
    ContextOffset,
    /// Uses a lookup's result before checking it for null.
    MaybeNull,
    /// Accesses a map value outside its size.
    MapValueBounds,
    /// Moves a pointer by a number without known bounds.
    UnboundedOffset,
    /// Loads or stores through something that is not a pointer.
    NotAPointer,
    /// Calls a helper with an argument of the wrong kind.
    HelperArg,
    /// Calls a helper that does not exist.
    UnknownHelper,
    /// Lets an address escape: returned, stored outside the stack, compared with a number.
    PointerLeak,
    /// Arithmetic on a pointer other than adding or subtracting a number.
    PointerArithmetic,
    /// A loop that comes back to the same state: it never ends.
    InfiniteLoop,
    /// The paths could not all be followed to their end within [`INSN_BUDGET`] steps.
    TooComplex,
    /// The frames of a chain of local calls use more than 512 bytes of stack together.
    StackLimit,
    /// A misaligned access where alignment is required (atomics; every access on the GPU).
    Misaligned,
}

impl Violation {
    /// A short stable name, e.g. `uninit-register`.
    pub const fn code(self) -> &'static str {
        match self {
            Violation::UninitRegister => "uninit-register",
            Violation::UninitStack => "uninit-stack",
            Violation::StackBounds => "stack-bounds",
            Violation::ContextWrite => "context-write",
            Violation::ContextBounds => "context-bounds",
            Violation::ContextOffset => "context-offset",
            Violation::MaybeNull => "maybe-null",
            Violation::MapValueBounds => "map-value-bounds",
            Violation::UnboundedOffset => "unbounded-offset",
            Violation::NotAPointer => "not-a-pointer",
            Violation::HelperArg => "helper-arg",
            Violation::UnknownHelper => "unknown-helper",
            Violation::PointerLeak => "pointer-leak",
            Violation::PointerArithmetic => "pointer-arithmetic",
            Violation::InfiniteLoop => "infinite-loop",
            Violation::TooComplex => "too-complex",
            Violation::StackLimit => "stack-limit",
            Violation::Misaligned => "misaligned",
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// A refused program: the instruction, why, and the registers it involves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyError {
    /// The instruction (slot index).
    pub pc: usize,
    /// Its disassembly.
    pub insn: String,
    /// The rule it breaks.
    pub violation: Violation,
    /// What happened, in words.
    pub detail: String,
    /// The registers the instruction reads, as `r2 = scalar u[0x0, 0xff]`, on the failing path.
    pub registers: Vec<String>,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "instruction {} `{}`: {} [{}]", self.pc, self.insn, self.detail, self.violation)?;
        for r in &self.registers {
            write!(f, "\n    {r}")?;
        }
        Ok(())
    }
}

impl std::error::Error for VerifyError {}

/// A program the verifier accepted, with what it learned about it.
#[derive(Clone, Debug)]
pub struct Verified {
    program: Program,
    context_bytes: usize,
    stack_bytes: Vec<u32>,
    insns_processed: usize,
    accesses: Vec<Option<Access>>,
    callx: Vec<Option<u32>>,
    calls: Vec<Option<CallFacts>>,
}

/// What the verifier learned about a helper call, over every path that reaches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CallFacts {
    /// The map passed (the index in the program's map table), when it is the same on every
    /// path; `None` for helpers without a map and when paths pass different maps.
    pub map: Option<u32>,
    /// For each argument register `r1`–`r5` that points at memory the helper reads: where.
    pub args: [Option<Access>; 5],
    /// The largest size passed with a memory argument (`bpf_ringbuf_output`'s `r3`), over every
    /// path.
    pub max_size: Option<u64>,
    /// The smallest such size, over every path.
    pub min_size: Option<u64>,
}

/// Marks a `callx` whose helper number differs between paths.
const CALLX_VARIES: u32 = u32::MAX;

/// The memory a load, store or atomic reaches, over every path the verifier followed to it.
///
/// Engines use it to choose how to address memory: the GPU translation turns a context load at
/// a constant offset into the register that holds the field, and a stack access at a constant
/// offset of the function's own frame into a direct local access.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Access {
    /// The region reached.
    pub region: AccessRegion,
    /// The offset from the region's start (for the stack, from the frame's `r10`, so negative),
    /// when it is the same constant on every path.
    pub offset: Option<i64>,
    /// Whether the access is naturally aligned on every path (relative to the region's start,
    /// which is 8-byte aligned in every engine).
    pub aligned: bool,
}

/// The region an [`Access`] reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AccessRegion {
    /// The context.
    Context,
    /// The stack frame of the function the instruction is in.
    OwnStack,
    /// The stack frame of a caller, through a pointer passed down.
    CallerStack,
    /// A value of this map (its index in the program's map table).
    MapValue(u32),
    /// Different regions on different paths.
    Mixed,
}

impl Access {
    fn join(self, other: Access) -> Access {
        Access {
            region: if self.region == other.region { self.region } else { AccessRegion::Mixed },
            offset: if self.offset == other.offset { self.offset } else { None },
            aligned: self.aligned && other.aligned,
        }
    }
}

impl Verified {
    /// The program.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// Bytes at the start of the context that the program may access.
    pub fn context_bytes(&self) -> usize {
        self.context_bytes
    }

    /// Stack bytes each function (in [`Program::functions`] order) may use below its `r10`.
    pub fn stack_bytes(&self) -> &[u32] {
        &self.stack_bytes
    }

    /// Instructions the verifier followed, over all paths.
    pub fn insns_processed(&self) -> usize {
        self.insns_processed
    }

    /// What the load, store or atomic at slot `pc` reaches; `None` for other instructions and
    /// for instructions no path reaches.
    pub fn access(&self, pc: usize) -> Option<Access> {
        self.accesses.get(pc).copied().flatten()
    }

    /// What the helper call at slot `pc` is passed; `None` for other instructions and for
    /// instructions no path reaches.
    pub fn call(&self, pc: usize) -> Option<&CallFacts> {
        self.calls.get(pc).and_then(Option::as_ref)
    }

    /// The helper that the `callx` at slot `pc` calls, when it is the same on every path.
    pub fn callx_helper(&self, pc: usize) -> Option<u32> {
        self.callx.get(pc).copied().flatten().filter(|&id| id != CALLX_VARIES)
    }
}

/// Verifies `program` against its attach point's context and its map table.
pub fn verify(program: &Program) -> Result<Verified, VerifyError> {
    let mut explorer = Explorer::new(program);
    explorer.run()?;
    explorer.check_stack_chains()?;
    Ok(Verified {
        program: program.clone(),
        context_bytes: explorer.context_bytes,
        stack_bytes: explorer.stack_bytes,
        insns_processed: explorer.processed,
        accesses: explorer.accesses,
        callx: explorer.callx,
        calls: explorer.calls,
    })
}

/// A rule broken at the current instruction, before the registers are attached.
struct Fail(Violation, String);

fn fail<T>(violation: Violation, detail: impl Into<String>) -> Result<T, Fail> {
    Err(Fail(violation, detail.into()))
}

/// A state kept at a join point.
struct Kept {
    state: State,
    fingerprint: u64,
    serial: usize,
    /// Every path from it has been followed to its end.
    complete: bool,
}

/// What an instruction leads to.
enum Next {
    /// The next instruction of the path.
    Go(usize),
    /// The path ends (the program returns, or no side of a branch can happen).
    End,
}

/// What a join point decides for the path reaching it.
enum Visit {
    /// Go on.
    Go,
    /// A verified state holds this one: the path is safe from here.
    Covered,
    /// The path is back in a state it is still exploring: it loops forever.
    Loops,
}

struct Explorer<'p> {
    program: &'p Program,
    /// Decoded instruction at each slot (the second slot of `lddw` holds `None`).
    insns: Vec<Option<Instruction>>,
    join_point: Vec<bool>,
    live: Vec<u16>,
    precise: Vec<u16>,
    live_slots: Vec<u64>,
    kept: Vec<Vec<Kept>>,
    /// Kept states still being explored: (slot, serial, work-list length when kept).
    open: Vec<(usize, usize, usize)>,
    serial: usize,
    work: Vec<(usize, State)>,
    processed: usize,
    next_id: u32,
    context_bytes: usize,
    stack_bytes: Vec<u32>,
    /// The instruction being followed.
    pc: usize,
    accesses: Vec<Option<Access>>,
    callx: Vec<Option<u32>>,
    calls: Vec<Option<CallFacts>>,
    /// Facts about the helper call being checked, on this path.
    call: CallFacts,
}

impl<'p> Explorer<'p> {
    fn new(program: &'p Program) -> Explorer<'p> {
        let len = program.insns().len();
        let mut insns = vec![None; len];
        let mut join_point = vec![false; len];
        for d in program.decoded() {
            insns[d.pc] = Some(d.insn);
            if let Some(t) = d.insn.jump_target(d.pc) {
                join_point[t as usize] = true;
                if matches!(d.insn, Instruction::Branch { .. }) {
                    join_point[d.pc + 1] = true;
                }
            }
        }
        let live = liveness(program, &insns);
        let precise = precision(program, &insns);
        let live_slots = stack_liveness(program, &insns);
        Explorer {
            program,
            insns,
            join_point,
            live,
            precise,
            live_slots,
            kept: (0..len).map(|_| Vec::new()).collect(),
            open: Vec::new(),
            serial: 0,
            work: Vec::new(),
            processed: 0,
            next_id: 0,
            context_bytes: 0,
            stack_bytes: vec![0; program.functions().len()],
            pc: 0,
            accesses: vec![None; len],
            callx: vec![None; len],
            calls: vec![None; len],
            call: CallFacts { map: None, args: [None; 5], max_size: None, min_size: None },
        }
    }

    fn run(&mut self) -> Result<(), VerifyError> {
        let mut regs = [Value::Uninit; 11];
        regs[1] = Value::Pointer { region: Region::Context, off: Scalar::constant(0) };
        regs[10] = Value::Pointer { region: Region::Stack(0), off: Scalar::constant(0) };
        let entry = Frame {
            function: 0,
            return_pc: 0,
            saved: [Value::Uninit; 4],
            slots: [Slot::EMPTY; SLOTS],
        };
        self.work.push((0, State { regs, frames: vec![entry] }));
        while let Some((mut pc, mut state)) = self.work.pop() {
            loop {
                self.processed += 1;
                if self.processed > INSN_BUDGET {
                    return Err(self.error(pc, &state, Violation::TooComplex, format!(
                        "the verifier followed {INSN_BUDGET} instructions without reaching the end \
                         of every path; bound the loops with constants it can see"
                    )));
                }
                if self.join_point[pc] {
                    match self.visit(pc, &mut state) {
                        Visit::Go => {}
                        Visit::Covered => break,
                        Visit::Loops => {
                            return Err(self.error(
                                pc,
                                &state,
                                Violation::InfiniteLoop,
                                "the loop comes back here in the same state, so it never ends",
                            ));
                        }
                    }
                }
                let insn = self.insns[pc].expect("paths visit instruction starts only");
                match self.step(pc, insn, &mut state) {
                    Ok(Next::Go(next)) => pc = next,
                    Ok(Next::End) => break,
                    Err(Fail(violation, detail)) => {
                        return Err(self.error(pc, &state, violation, detail));
                    }
                }
            }
            // Kept states with nothing of theirs left on the work list are verified.
            while let Some(&(pc, serial, len)) = self.open.last() {
                if len < self.work.len() {
                    break;
                }
                if let Some(k) = self.kept[pc].iter_mut().find(|k| k.serial == serial) {
                    k.complete = true;
                }
                self.open.pop();
            }
        }
        Ok(())
    }

    /// At a join point: compares the path's state with those kept here, widens it when many
    /// were seen, and keeps it for later paths.
    fn visit(&mut self, pc: usize, state: &mut State) -> Visit {
        let (live, precise, slots) = (self.live[pc], self.precise[pc], self.live_slots[pc]);
        if let Some(frame) = state.frames.last_mut() {
            for (i, slot) in frame.slots.iter_mut().rev().enumerate() {
                if slots & (1 << i) == 0 {
                    *slot = Slot::EMPTY;
                }
            }
        }
        for (r, v) in state.regs.iter_mut().enumerate().take(10) {
            if live & (1 << r) == 0 {
                *v = Value::Uninit;
            } else if precise & (1 << r) == 0
                && let Value::Scalar(s) = v
            {
                *s = Scalar::UNKNOWN;
            }
        }
        let kept = &self.kept[pc];
        let fingerprint = state::fingerprint(state);
        let mut complete = 0;
        for k in kept {
            if k.complete {
                if state::within(state, &k.state) {
                    return Visit::Covered;
                }
                complete += 1;
            } else if k.fingerprint == fingerprint && state::same(state, &k.state) {
                return Visit::Loops;
            }
        }
        if complete >= JOIN_AFTER {
            // Widen: hold every state verified here that agrees with this one on its constants
            // (a loop counter keeps its iterations apart), and this one, with numbers known only
            // by their known bits; the widened state replaces the states it holds.
            let joins = |k: &Kept| k.complete && state::constants_agree(state, &k.state);
            let widened = kept
                .iter()
                .filter(|k| joins(k))
                .try_fold(state.clone(), |acc, k| state::join(&acc, &k.state));
            if let Some(mut w) = widened {
                for v in w.values_mut() {
                    if let Value::Scalar(s) = v {
                        *s = s.widened();
                    }
                }
                self.kept[pc].retain(|k| !(k.complete && state::constants_agree(state, &k.state)));
                *state = w;
            }
        }
        if self.kept[pc].len() < KEEP_MAX {
            self.serial += 1;
            self.open.push((pc, self.serial, self.work.len()));
            let fingerprint = state::fingerprint(state);
            self.kept[pc].push(Kept {
                state: state.clone(),
                fingerprint,
                serial: self.serial,
                complete: false,
            });
        }
        Visit::Go
    }

    fn error(
        &self,
        pc: usize,
        state: &State,
        violation: Violation,
        detail: impl Into<String>,
    ) -> VerifyError {
        let insn = self.insns[pc].expect("errors are at instruction starts");
        let registers = Reg::all()
            .filter(|r| reads(&insn) & (1 << r.index()) != 0)
            .map(|r| format!("{r} = {}", self.describe(state.regs[usize::from(r.index())])))
            .collect();
        VerifyError { pc, insn: insn.to_string(), violation, detail: detail.into(), registers }
    }

    fn map_name(&self, map: u32) -> &str {
        &self.program.maps()[map as usize].name
    }

    fn describe(&self, v: Value) -> String {
        let off = |o: Scalar| match o.as_constant() {
            Some(c) => format!("{:+}", c as i64),
            None => format!(" + [{}, {}]", o.smin, o.smax),
        };
        match v {
            Value::Uninit => "uninitialised".into(),
            Value::Scalar(s) => s.to_string(),
            Value::Pointer { region: Region::Context, off: o } => format!("context{}", off(o)),
            Value::Pointer { region: Region::Stack(d), off: o } => {
                format!("stack of frame {d}, r10{}", off(o))
            }
            Value::Pointer { region: Region::MapValue(m), off: o } => {
                format!("value of map `{}`{}", self.map_name(m), off(o))
            }
            Value::MapRef(m) => format!("map `{}`", self.map_name(m)),
            Value::MaybeNull { map, .. } => {
                format!("value of map `{}` or null (not checked yet)", self.map_name(map))
            }
        }
    }

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

    fn operand(&self, state: &State, src: Operand) -> Result<Value, Fail> {
        match src {
            Operand::Imm(i) => Ok(Value::Scalar(Scalar::constant(i as i64 as u64))),
            Operand::Reg(r) => self.read(state, r),
        }
    }

    fn step(&mut self, pc: usize, insn: Instruction, state: &mut State) -> Result<Next, Fail> {
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
                set(state, dst, Value::Scalar(endian(x, order, bits)));
            }
            Instruction::LoadImm64 { dst, imm } => {
                let v = match imm {
                    Imm64::Value(v) => Value::Scalar(Scalar::constant(v)),
                    Imm64::Map(m) => Value::MapRef(m),
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
                        let ((first, a), (later, b)) = if target > pc + 1 {
                            ((target, taken), (pc + 1, fall))
                        } else {
                            ((pc + 1, fall), (target, taken))
                        };
                        self.work.push((later, b));
                        *state = a;
                        Next::Go(first)
                    }
                    (Some(taken), None) => {
                        *state = taken;
                        Next::Go(target)
                    }
                    (None, Some(fall)) => {
                        *state = fall;
                        Next::Go(pc + 1)
                    }
                    (None, None) => Next::End,
                });
            }
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
                let function = self
                    .program
                    .functions()
                    .iter()
                    .position(|f| f.start == target)
                    .expect("call targets start functions");
                let saved = [state.regs[6], state.regs[7], state.regs[8], state.regs[9]];
                state.frames.push(Frame {
                    function,
                    return_pc: pc + 1,
                    saved,
                    slots: [Slot::EMPTY; SLOTS],
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

    /// A register that must hold a number, for operations only numbers allow.
    fn number(&self, state: &State, reg: Reg, what: &str) -> Result<Scalar, Fail> {
        match self.read(state, reg)? {
            Value::Scalar(s) => Ok(s),
            Value::MaybeNull { .. } => {
                fail(Violation::MaybeNull, format!("{what} {reg} before its null check"))
            }
            v => fail(
                Violation::PointerArithmetic,
                format!("{what} {reg}, which is {}", self.describe(v)),
            ),
        }
    }

    fn alu(&self, op: AluOp, width: Width, a: Value, b: Value) -> Result<Value, Fail> {
        use Value::{Pointer, Scalar as Num};
        let moved = |region, off: Scalar, by: Scalar, neg: bool| -> Result<Value, Fail> {
            if by.smin < -MAX_OFFSET || by.smax > MAX_OFFSET {
                return fail(
                    Violation::UnboundedOffset,
                    format!(
                        "moves a pointer by {by}, which has no bounds within ±2^29; check or mask it first"
                    ),
                );
            }
            let off = off.alu(if neg { AluOp::Sub } else { AluOp::Add }, Width::W64, by);
            if off.smin < -MAX_OFFSET || off.smax > MAX_OFFSET {
                return fail(
                    Violation::UnboundedOffset,
                    format!("the pointer's offset reaches [{}, {}]", off.smin, off.smax),
                );
            }
            Ok(Pointer { region, off })
        };
        match (op, width, a, b) {
            (_, _, Num(x), Num(y)) => Ok(Num(x.alu(op, width, y))),
            (AluOp::Mov, Width::W64, _, v) => Ok(v),
            (_, _, Value::MaybeNull { .. }, _) | (_, _, _, Value::MaybeNull { .. }) => {
                fail(Violation::MaybeNull, "arithmetic on a lookup's result before its null check")
            }
            (AluOp::Add, Width::W64, Pointer { region, off }, Num(by))
            | (AluOp::Add, Width::W64, Num(by), Pointer { region, off }) => {
                moved(region, off, by, false)
            }
            (AluOp::Sub, Width::W64, Pointer { region, off }, Num(by)) => {
                moved(region, off, by, true)
            }
            (
                AluOp::Sub,
                Width::W64,
                Pointer { region: r, off: x },
                Pointer { region: s, off: y },
            ) if r == s && !matches!(r, Region::MapValue(_)) => {
                Ok(Num(x.alu(AluOp::Sub, Width::W64, y)))
            }
            (_, _, a, b) => {
                let p = if a.is_pointer() { a } else { b };
                fail(
                    Violation::PointerArithmetic,
                    format!(
                        "`{}{}` on {}: only 64-bit add and sub of a number may move a pointer",
                        op.mnemonic(),
                        if width == Width::W32 { "32" } else { "" },
                        self.describe(p)
                    ),
                )
            }
        }
    }

    /// Resolves `base + off` for an access of `size` bytes: the region and the interval of
    /// offsets it may start at, after checking bounds, permissions and alignment.
    fn target(
        &mut self,
        state: &State,
        base: Reg,
        off: i16,
        size: u32,
        write: bool,
        align: bool,
    ) -> Result<(Region, Scalar), Fail> {
        let (region, start) = match self.read(state, base)? {
            Value::Pointer { region, off: o } => {
                (region, o.alu(AluOp::Add, Width::W64, Scalar::constant(off as i64 as u64)))
            }
            Value::MaybeNull { .. } => {
                return fail(
                    Violation::MaybeNull,
                    format!("accesses memory through {base} before checking it for null"),
                );
            }
            v => {
                return fail(
                    Violation::NotAPointer,
                    format!(
                        "accesses memory through {base}, which is {}, not a pointer",
                        self.describe(v)
                    ),
                );
            }
        };
        let attach = self.program.attach();
        if (align || attach.is_device()) && !start.aligned(u64::from(size)) {
            return fail(
                Violation::Misaligned,
                format!(
                    "a {size}-byte access at offset {} is not {size}-byte aligned{}",
                    describe_offset(start),
                    if align { "" } else { " (the GPU requires natural alignment)" }
                ),
            );
        }
        if region == Region::Context {
            if write && !attach.context_writable() {
                return fail(
                    Violation::ContextWrite,
                    format!(
                        "writes to the {} of {attach}, which is read-only",
                        attach.context_name()
                    ),
                );
            }
            if attach.is_device() && start.as_constant().is_none() {
                return fail(
                    Violation::ContextOffset,
                    "a device context is read field by field, at constant offsets",
                );
            }
        }
        self.bounds(state, region, start, u64::from(size))?;
        let access = Access {
            region: match region {
                Region::Context => AccessRegion::Context,
                Region::Stack(d) if d == state.depth() => AccessRegion::OwnStack,
                Region::Stack(_) => AccessRegion::CallerStack,
                Region::MapValue(m) => AccessRegion::MapValue(m),
            },
            offset: start.as_constant().map(|o| o as i64),
            aligned: start.aligned(u64::from(size)),
        };
        let seen = &mut self.accesses[self.pc];
        *seen = Some(seen.map_or(access, |a| a.join(access)));
        Ok((region, start))
    }

    /// Checks that `len` bytes from `region + start` lie inside the region, and records how much
    /// of the context and of each stack frame the program uses.
    fn bounds(
        &mut self,
        state: &State,
        region: Region,
        start: Scalar,
        len: u64,
    ) -> Result<(), Fail> {
        let attach = self.program.attach();
        let (lo, hi) = (start.smin, start.smax.saturating_add(len as i64));
        let (min, max, violation, name) = match region {
            Region::Context => (
                0,
                attach.context_size() as i64,
                Violation::ContextBounds,
                format!("the {} of {} bytes", attach.context_name(), attach.context_size()),
            ),
            Region::Stack(_) => (
                -(Program::STACK_SIZE as i64),
                0,
                Violation::StackBounds,
                "the stack frame [r10-512, r10)".to_string(),
            ),
            Region::MapValue(m) => {
                let def = &self.program.maps()[m as usize];
                (
                    0,
                    i64::from(def.value_size),
                    Violation::MapValueBounds,
                    format!("the {}-byte value of map `{}`", def.value_size, def.name),
                )
            }
        };
        if lo < min || hi > max {
            return fail(
                violation,
                format!("a {len}-byte access at offset {} leaves {name}", describe_offset(start)),
            );
        }
        match region {
            Region::Context => self.context_bytes = self.context_bytes.max(hi as usize),
            Region::Stack(d) => {
                let f = state.frames[usize::from(d)].function;
                self.stack_bytes[f] = self.stack_bytes[f].max((-lo) as u32);
            }
            Region::MapValue(_) => {}
        }
        Ok(())
    }

    fn load(
        &mut self,
        state: &State,
        base: Reg,
        off: i16,
        size: u32,
        signed: bool,
    ) -> Result<Value, Fail> {
        let (region, start) = self.target(state, base, off, size, false, false)?;
        if let Region::Stack(d) = region {
            return read_stack(&state.frames[usize::from(d)], start, u64::from(size), signed);
        }
        Ok(Value::Scalar(Scalar::loaded(size, signed)))
    }

    fn store(
        &mut self,
        state: &mut State,
        base: Reg,
        off: i16,
        size: u32,
        v: Value,
    ) -> Result<(), Fail> {
        let (region, start) = self.target(state, base, off, size, true, false)?;
        match region {
            Region::Stack(d) => write_stack(&mut state.frames[usize::from(d)], start, size, v),
            _ if v.is_pointer() => fail(
                Violation::PointerLeak,
                format!(
                    "stores {} into {}; pointers may only be spilled to the stack",
                    self.describe(v),
                    if region == Region::Context { "the context" } else { "a map value" }
                ),
            ),
            _ => Ok(()),
        }
    }

    fn atomic(&mut self, state: &mut State, base: Reg, off: i16, size: u32) -> Result<(), Fail> {
        let (region, start) = self.target(state, base, off, size, true, true)?;
        if let Region::Stack(d) = region {
            let frame = &mut state.frames[usize::from(d)];
            read_stack(frame, start, u64::from(size), false)?;
            write_stack(frame, start, size, Value::Scalar(Scalar::loaded(size, false)))?;
        }
        Ok(())
    }

    /// Checks that `reg` points at `len` readable bytes (a helper reads them).
    fn readable(&mut self, state: &State, reg: Reg, len: u64) -> Result<(), Fail> {
        let (region, start) = match self.read(state, reg)? {
            Value::Pointer { region, off } => (region, off),
            Value::MaybeNull { .. } => {
                return fail(
                    Violation::MaybeNull,
                    format!("passes {reg} to a helper before checking it for null"),
                );
            }
            v => {
                return fail(
                    Violation::HelperArg,
                    format!(
                        "{reg} must point at {len} readable bytes, but is {}",
                        self.describe(v)
                    ),
                );
            }
        };
        if len == 0 {
            return Ok(());
        }
        if let Some(slot) = self.call.args.get_mut(usize::from(reg.index()).wrapping_sub(1)) {
            *slot = Some(Access {
                region: match region {
                    Region::Context => AccessRegion::Context,
                    Region::Stack(d) if d == state.depth() => AccessRegion::OwnStack,
                    Region::Stack(_) => AccessRegion::CallerStack,
                    Region::MapValue(m) => AccessRegion::MapValue(m),
                },
                offset: start.as_constant().map(|o| o as i64),
                aligned: start.aligned(8),
            });
        }
        let context = |Fail(v, d)| Fail(v, format!("{reg}, a helper argument: {d}"));
        self.bounds(state, region, start, len).map_err(context)?;
        if let Region::Stack(d) = region {
            read_stack(&state.frames[usize::from(d)], start, len, false).map_err(context)?;
        }
        Ok(())
    }

    fn call_helper(&mut self, state: &mut State, id: u32) -> Result<(), Fail> {
        let Some(h) = helper(id) else {
            return fail(Violation::UnknownHelper, format!("helper {id} does not exist"));
        };
        let mut map: Option<u32> = None;
        self.call = CallFacts { map: None, args: [None; 5], max_size: None, min_size: None };
        for (i, &kind) in h.args.iter().enumerate() {
            let reg = Reg::new(i as u8 + 1).expect("helpers take at most 5 arguments");
            let wrong = |what: &str, v: Value| {
                fail::<()>(
                    Violation::HelperArg,
                    format!(
                        "{}: argument {reg} must be {what}, but is {}",
                        h.name,
                        self.describe(v)
                    ),
                )
            };
            match kind {
                ArgKind::Scalar | ArgKind::MemSize => {
                    let v = self.read(state, reg)?;
                    if !matches!(v, Value::Scalar(_)) {
                        wrong("a number", v)?;
                    }
                }
                ArgKind::MapRef | ArgKind::RingBuf => match self.read(state, reg)? {
                    Value::MapRef(m) => {
                        let def = &self.program.maps()[m as usize];
                        let is_ring = def.kind == MapKind::RingBuf;
                        if is_ring != (kind == ArgKind::RingBuf) {
                            return fail(
                                Violation::HelperArg,
                                format!(
                                    "{} takes {}, but map `{}` is a {:?} map",
                                    h.name,
                                    if is_ring { "a map with keys" } else { "a ring buffer" },
                                    def.name,
                                    def.kind
                                ),
                            );
                        }
                        map = Some(m);
                    }
                    v => wrong("a map reference", v)?,
                },
                ArgKind::MapKey | ArgKind::MapValue => {
                    let def =
                        &self.program.maps()[map.expect("the table puts the map first") as usize];
                    let len = if kind == ArgKind::MapKey { def.key_size } else { def.value_size };
                    self.readable(state, reg, u64::from(len))?;
                }
                ArgKind::Mem => {
                    let size_reg = Reg::new(i as u8 + 2).expect("a size follows");
                    let size = match self.read(state, size_reg)? {
                        Value::Scalar(s) => s,
                        v => {
                            return fail(
                                Violation::HelperArg,
                                format!(
                                    "{}: argument {size_reg} must be a size, but is {}",
                                    h.name,
                                    self.describe(v)
                                ),
                            );
                        }
                    };
                    if size.umax > MAX_OFFSET as u64 {
                        return fail(
                            Violation::HelperArg,
                            format!(
                                "{}: the size in {size_reg} is {size}, which has no upper bound; check or mask it first",
                                h.name
                            ),
                        );
                    }
                    self.readable(state, reg, size.umax)?;
                    self.call.max_size = Some(size.umax);
                    self.call.min_size = Some(size.umin);
                }
            }
        }
        let facts = CallFacts {
            map,
            args: self.call.args,
            max_size: self.call.max_size,
            min_size: self.call.min_size,
        };
        let seen = &mut self.calls[self.pc];
        *seen = Some(match seen.take() {
            None => facts,
            Some(old) => CallFacts {
                map: if old.map == facts.map { facts.map } else { None },
                args: std::array::from_fn(|i| match (old.args[i], facts.args[i]) {
                    (Some(a), Some(b)) => Some(a.join(b)),
                    _ => None,
                }),
                max_size: old.max_size.max(facts.max_size),
                min_size: match (old.min_size, facts.min_size) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    _ => None,
                },
            },
        });
        for r in 1..=5 {
            state.regs[r] = Value::Uninit;
        }
        state.regs[0] = match h.ret {
            RetKind::Scalar => Value::Scalar(Scalar::UNKNOWN),
            RetKind::MapValueOrNull => {
                self.next_id += 1;
                Value::MaybeNull { map: map.expect("lookups take a map"), id: self.next_id }
            }
        };
        Ok(())
    }

    fn exit(&mut self, state: &mut State) -> Result<Next, Fail> {
        let r0 = self.read(state, Reg::R0)?;
        if state.frames.len() == 1 {
            if r0.is_pointer() {
                return fail(
                    Violation::PointerLeak,
                    format!("returns {}; a program returns a number", self.describe(r0)),
                );
            }
            return Ok(Next::End);
        }
        let depth = state.depth();
        if matches!(r0, Value::Pointer { region: Region::Stack(d), .. } if d >= depth) {
            return fail(
                Violation::PointerLeak,
                "returns a pointer into its own stack frame, which ends here",
            );
        }
        if state.leaks_top_frame() {
            return fail(
                Violation::PointerLeak,
                "leaves a pointer to its own stack frame in a caller's frame",
            );
        }
        let frame = state.frames.pop().expect("a callee frame");
        state.regs[6..10].copy_from_slice(&frame.saved);
        for r in 1..=5 {
            state.regs[r] = Value::Uninit;
        }
        state.regs[10] =
            Value::Pointer { region: Region::Stack(state.depth()), off: Scalar::constant(0) };
        Ok(Next::Go(frame.return_pc))
    }

    /// The states on each side of a conditional jump (`None` for a side that cannot happen).
    fn branch(
        &mut self,
        state: &State,
        cond: JmpCond,
        width: Width,
        dst: Reg,
        src: Operand,
    ) -> Result<(Option<State>, Option<State>), Fail> {
        let a = self.read(state, dst)?;
        let b = self.operand(state, src)?;
        let zero = |v: Value| matches!(v, Value::Scalar(s) if s.as_constant() == Some(0));
        let eq_ne = matches!(cond, JmpCond::Eq | JmpCond::Ne) && width == Width::W64;
        match (a, b) {
            (Value::Scalar(x), Value::Scalar(y)) => {
                let side = |holds| {
                    Scalar::refine(x, y, cond, width, holds).map(|(x, y)| {
                        let mut s = state.clone();
                        s.regs[usize::from(dst.index())] = Value::Scalar(x);
                        if let Operand::Reg(r) = src {
                            s.regs[usize::from(r.index())] = Value::Scalar(y);
                        }
                        s
                    })
                };
                Ok((side(true), side(false)))
            }
            (Value::MaybeNull { map, id }, z) if eq_ne && zero(z) => {
                let settle = |v: Value| {
                    let mut s = state.clone();
                    for slot in s.values_mut() {
                        if matches!(*slot, Value::MaybeNull { id: i, .. } if i == id) {
                            *slot = v;
                        }
                    }
                    s
                };
                let null = settle(Value::Scalar(Scalar::constant(0)));
                let value = settle(Value::Pointer {
                    region: Region::MapValue(map),
                    off: Scalar::constant(0),
                });
                Ok(if cond == JmpCond::Eq {
                    (Some(null), Some(value))
                } else {
                    (Some(value), Some(null))
                })
            }
            // A checked pointer is never null.
            (Value::Pointer { .. }, z) if eq_ne && zero(z) => Ok(if cond == JmpCond::Eq {
                (None, Some(state.clone()))
            } else {
                (Some(state.clone()), None)
            }),
            (Value::Pointer { region: r, .. }, Value::Pointer { region: s, .. })
                if r == s && width == Width::W64 && !matches!(r, Region::MapValue(_)) =>
            {
                Ok((Some(state.clone()), Some(state.clone())))
            }
            (a, b) => {
                let p = if a.is_pointer() { a } else { b };
                fail(
                    Violation::PointerLeak,
                    format!(
                        "compares {} with {}; only a null check of a lookup's result, or pointers into one region, may be compared",
                        self.describe(p),
                        self.describe(if a.is_pointer() { b } else { a })
                    ),
                )
            }
        }
    }

    /// Checks that no chain of local calls uses more than [`Program::STACK_SIZE`] bytes of stack.
    fn check_stack_chains(&self) -> Result<(), VerifyError> {
        let functions = self.program.functions();
        // Deepest use below each function, itself included; callees come after callers in no
        // particular order, so memoise depth first (the call graph has no cycles).
        let mut deepest: Vec<Option<u32>> = vec![None; functions.len()];
        fn depth(f: usize, fs: &[crate::Function], own: &[u32], memo: &mut [Option<u32>]) -> u32 {
            if let Some(d) = memo[f] {
                return d;
            }
            let d =
                own[f] + fs[f].callees.iter().map(|&c| depth(c, fs, own, memo)).max().unwrap_or(0);
            memo[f] = Some(d);
            d
        }
        let limit = Program::STACK_SIZE as u32;
        if depth(0, functions, &self.stack_bytes, &mut deepest) <= limit {
            return Ok(());
        }
        // Walk the deepest chain to the call that crosses the limit.
        let (mut f, mut used) = (0, 0);
        loop {
            used += self.stack_bytes[f];
            let callee = functions[f]
                .callees
                .iter()
                .copied()
                .max_by_key(|&c| deepest[c])
                .expect("over the limit, so a callee");
            if used + self.stack_bytes[callee] > limit {
                let site = self
                    .program
                    .decoded()
                    .iter()
                    .find(|d| {
                        (functions[f].start..functions[f].end).contains(&d.pc)
                            && d.insn.call_target(d.pc) == Some(functions[callee].start as i64)
                    })
                    .expect("a callee has a call site");
                return Err(VerifyError {
                    pc: site.pc,
                    insn: site.insn.to_string(),
                    violation: Violation::StackLimit,
                    detail: format!(
                        "the frames of this call chain use {} bytes of stack together, more than \
                         {limit}",
                        used + self.stack_bytes[callee]
                    ),
                    registers: Vec::new(),
                });
            }
            f = callee;
        }
    }
}

/// Reads `size` bytes of a stack frame at `start` (an offset from `r10`).
fn read_stack(frame: &Frame, start: Scalar, size: u64, signed: bool) -> Result<Value, Fail> {
    let base = (Program::STACK_SIZE as i64 + start.smin) as usize;
    let end = (Program::STACK_SIZE as i64 + start.smax) as usize + size as usize;
    if start.as_constant().is_some()
        && size == 8
        && base.is_multiple_of(8)
        && let Slot::Spill(v) = frame.slots[base / 8]
    {
        return Ok(v);
    }
    let mut known: Option<u64> = None;
    for byte in base..end {
        match frame.slots[byte / 8] {
            Slot::Spill(Value::Scalar(s)) => {
                // A narrow read of one spilled constant is that constant's bytes.
                if start.as_constant().is_some() && base / 8 == (end - 1) / 8 {
                    known = s.as_constant().map(|c| c >> (8 * (base % 8)));
                }
            }
            Slot::Spill(_) => {
                return fail(
                    Violation::PointerLeak,
                    format!("reads part of a pointer spilled at r10{}", byte as i64 - 512),
                );
            }
            Slot::Bytes { init, frag } => {
                let bit = 1u8 << (byte % 8);
                if frag & bit != 0 {
                    return fail(
                        Violation::PointerLeak,
                        format!(
                            "reads a piece of an overwritten pointer at r10{}",
                            byte as i64 - 512
                        ),
                    );
                }
                if init & bit == 0 {
                    return fail(
                        Violation::UninitStack,
                        format!(
                            "reads stack byte r10{}, which was never written",
                            byte as i64 - 512
                        ),
                    );
                }
            }
        }
    }
    Ok(Value::Scalar(match known {
        Some(c) if size <= 8 => {
            let bits = 8 * size as u32;
            let c = if bits == 64 { c } else { c & ((1 << bits) - 1) };
            let s = Scalar::constant(c);
            if signed { s.sign_extend(bits) } else { s }
        }
        _ if size <= 8 => Scalar::loaded(size as u32, signed),
        _ => Scalar::UNKNOWN,
    }))
}

/// Writes `v` to `size` bytes of a stack frame at `start`.
fn write_stack(frame: &mut Frame, start: Scalar, size: u32, v: Value) -> Result<(), Fail> {
    let base = (Program::STACK_SIZE as i64 + start.smin) as usize;
    let end = (Program::STACK_SIZE as i64 + start.smax) as usize + size as usize;
    let exact = start.as_constant().is_some();
    if exact && size == 8 && base.is_multiple_of(8) {
        frame.slots[base / 8] = Slot::Spill(v);
        return Ok(());
    }
    if v.is_pointer() {
        return fail(
            Violation::PointerLeak,
            if exact {
                "stores part of a pointer; pointers are spilled whole, with an aligned 8-byte store"
            } else {
                "stores a pointer at a variable stack offset"
            },
        );
    }
    for slot in base / 8..=(end - 1) / 8 {
        let (lo, hi) = (base.max(slot * 8) - slot * 8, end.min(slot * 8 + 8) - slot * 8);
        let touched = (((1u16 << hi) - 1) as u8) & !(((1u16 << lo) - 1) as u8);
        let s = &mut frame.slots[slot];
        let (mut init, mut frag) = match *s {
            Slot::Spill(Value::Scalar(_)) => (0xff, 0),
            Slot::Spill(_) => (0, 0xff),
            Slot::Bytes { init, frag } => (init, frag),
        };
        if exact {
            // The bytes now hold data; the rest keep what they held.
            init |= touched;
            frag &= !touched;
        }
        // At a variable offset, no byte is surely written; bytes that held data still do.
        *s = Slot::Bytes { init, frag };
    }
    Ok(())
}

fn describe_offset(o: Scalar) -> String {
    match o.as_constant() {
        Some(c) => (c as i64).to_string(),
        None => format!("[{}, {}]", o.smin, o.smax),
    }
}

fn endian(x: Scalar, order: ByteOrder, bits: u8) -> Scalar {
    let mask = if bits == 64 { u64::MAX } else { (1u64 << bits) - 1 };
    if let Some(v) = x.as_constant() {
        let swapped = match bits {
            16 => u64::from((v as u16).swap_bytes()),
            32 => u64::from((v as u32).swap_bytes()),
            _ => v.swap_bytes(),
        };
        return Scalar::constant(if order == ByteOrder::Le { v & mask } else { swapped });
    }
    match order {
        ByteOrder::Le => x.alu(AluOp::And, Width::W64, Scalar::constant(mask)),
        _ => Scalar::below(mask),
    }
}

/// Registers an instruction reads, as a bit set.
fn reads(insn: &Instruction) -> u16 {
    let bit = |r: Reg| 1u16 << r.index();
    let op = |o: &Operand| match o {
        Operand::Reg(r) => bit(*r),
        Operand::Imm(_) => 0,
    };
    match insn {
        Instruction::Alu { op: AluOp::Mov | AluOp::MovSx(_), src, .. } => op(src),
        Instruction::Alu { dst, src, .. } => bit(*dst) | op(src),
        Instruction::Neg { dst, .. } | Instruction::Endian { dst, .. } => bit(*dst),
        Instruction::LoadImm64 { .. } | Instruction::Jump { .. } => 0,
        Instruction::Load { base, .. } => bit(*base),
        Instruction::Store { base, src, .. } => bit(*base) | op(src),
        Instruction::Atomic { op: crate::AtomicOp::CmpXchg, base, src, .. } => {
            bit(*base) | bit(*src) | 1
        }
        Instruction::Atomic { base, src, .. } => bit(*base) | bit(*src),
        Instruction::Branch { dst, src, .. } => bit(*dst) | op(src),
        Instruction::Call(CallTarget::Helper(id)) => {
            helper(*id).map_or(0, |h| ((1u16 << h.args.len()) - 1) << 1)
        }
        Instruction::Call(CallTarget::Reg(r)) => bit(*r) | 0x3e,
        Instruction::Call(CallTarget::Local(_)) => 0x3e,
        Instruction::Exit => 1,
    }
}

/// Registers an instruction writes, as a bit set (calls clobber `r0`–`r5`).
fn writes(insn: &Instruction) -> u16 {
    match insn {
        Instruction::Call(_) => 0x3f,
        Instruction::Atomic { op: crate::AtomicOp::CmpXchg, .. } => 1,
        Instruction::Atomic { fetch: true, src, .. }
        | Instruction::Atomic { op: crate::AtomicOp::Xchg, src, .. } => 1 << src.index(),
        i => i.written_reg().map_or(0, |r| 1 << r.index()),
    }
}

/// The registers live before each instruction: read on some path before being written.
fn liveness(program: &Program, insns: &[Option<Instruction>]) -> Vec<u16> {
    backward(program, insns, |_, insn, out| reads(insn) | (out & !writes(insn)))
}

/// The registers whose numbers matter before each instruction: on some path, before being
/// written, they decide a branch, an address, a helper's pointer or size argument, a value
/// stored to memory or passed to a local function, directly or through the arithmetic that
/// computes one of those. A number that only feeds the program's result, say, does not matter:
/// at join points the verifier forgets it (any number then fits), so states that differ only in
/// such numbers do not keep paths apart. Forgetting is always sound; this analysis only keeps the
/// verifier from forgetting what it needs.
fn precision(program: &Program, insns: &[Option<Instruction>]) -> Vec<u16> {
    let bit = |r: Reg| 1u16 << r.index();
    let op = |o: &Operand| match o {
        Operand::Reg(r) => bit(*r),
        Operand::Imm(_) => 0,
    };
    backward(program, insns, |main, insn, out| {
        let used = match insn {
            Instruction::Alu { op: AluOp::Mov | AluOp::MovSx(_), dst, src, .. } => {
                if out & bit(*dst) != 0 { op(src) } else { 0 }
            }
            Instruction::Alu { dst, src, .. } => {
                if out & bit(*dst) != 0 {
                    bit(*dst) | op(src)
                } else {
                    0
                }
            }
            Instruction::Neg { dst, .. } | Instruction::Endian { dst, .. } => out & bit(*dst),
            Instruction::LoadImm64 { .. } | Instruction::Jump { .. } => 0,
            Instruction::Load { base, .. } => bit(*base),
            Instruction::Call(CallTarget::Helper(id)) => helper(*id).map_or(0, |h| {
                h.args
                    .iter()
                    .enumerate()
                    .filter(|(_, k)| {
                        !matches!(k, ArgKind::Scalar | ArgKind::MapRef | ArgKind::RingBuf)
                    })
                    .fold(0, |m, (i, _)| m | 1 << (i + 1))
            }),
            Instruction::Exit if main => 0,
            other => reads(other),
        };
        used | (out & !writes(insn))
    })
}

/// The slots of the current frame that may be read before being overwritten, before each
/// instruction, as a bit set (bit `i` is the slot at `r10 - 8 * (i + 1)`). Only for functions
/// that address their stack through `r10` and constant offsets alone: when `r10` is copied (to
/// pass a key to a helper, say), accesses through the copy are unknown here, and every slot of the
/// function counts as live. At join points the verifier forgets dead slots.
fn stack_liveness(program: &Program, insns: &[Option<Instruction>]) -> Vec<u64> {
    let len = insns.len();
    let mut live = vec![u64::MAX; len];
    let slots = |off: i16, size: u32| -> u64 {
        // Slots overlapping [r10 + off, r10 + off + size).
        let (lo, hi) = (i64::from(off), i64::from(off) + i64::from(size));
        (0..64)
            .filter(|i| {
                let (s_lo, s_hi) = (-8 * (i + 1), -8 * i);
                lo < s_hi && s_lo < hi
            })
            .fold(0u64, |m, i| m | 1 << i)
    };
    for f in program.functions() {
        let pcs: Vec<usize> = (f.start..f.end).filter(|&pc| insns[pc].is_some()).collect();
        let direct_only = pcs.iter().all(|&pc| match insns[pc].expect("filtered") {
            Instruction::Load { .. } | Instruction::Store { src: Operand::Imm(_), .. } => true,
            Instruction::Store { src: Operand::Reg(r), .. } => r != Reg::R10,
            Instruction::Atomic { src, .. } => src != Reg::R10,
            insn => reads(&insn) & (1 << 10) == 0,
        });
        if !direct_only {
            continue;
        }
        let mut changed = true;
        while changed {
            changed = false;
            for &pc in pcs.iter().rev() {
                let insn = insns[pc].expect("filtered");
                let after = |t: usize| if t < len { live[t] } else { 0 };
                let out = match insn {
                    Instruction::Exit => 0,
                    Instruction::Jump { .. } => after(insn.jump_target(pc).unwrap_or(0) as usize),
                    Instruction::Branch { .. } => {
                        after(pc + 1) | after(insn.jump_target(pc).unwrap_or(0) as usize)
                    }
                    _ => after(pc + insn.slots()),
                };
                let new =
                    match insn {
                        Instruction::Load { base: Reg::R10, off, size, .. }
                        | Instruction::Atomic { base: Reg::R10, off, size, .. } => {
                            out | slots(off, size.bytes())
                        }
                        Instruction::Store {
                            base: Reg::R10, off, size: crate::Size::DW, ..
                        } if off % 8 == 0 => out & !slots(off, 8),
                        _ => out,
                    };
                if new != live[pc] {
                    live[pc] = new;
                    changed = true;
                }
            }
        }
    }
    live
}

/// A backward dataflow over each function's instructions, to a fixed point: `transfer` gives the
/// set before an instruction from the set after it (and whether the function is the main one).
fn backward(
    program: &Program,
    insns: &[Option<Instruction>],
    transfer: impl Fn(bool, &Instruction, u16) -> u16,
) -> Vec<u16> {
    let len = insns.len();
    let mut live = vec![0u16; len];
    for (index, f) in program.functions().iter().enumerate() {
        let pcs: Vec<usize> = (f.start..f.end).filter(|&pc| insns[pc].is_some()).collect();
        let mut changed = true;
        while changed {
            changed = false;
            for &pc in pcs.iter().rev() {
                let insn = insns[pc].expect("filtered");
                let after = |t: usize| if t < len { live[t] } else { 0 };
                let out = match insn {
                    Instruction::Exit => 0,
                    Instruction::Jump { .. } => after(insn.jump_target(pc).unwrap_or(0) as usize),
                    Instruction::Branch { .. } => {
                        after(pc + 1) | after(insn.jump_target(pc).unwrap_or(0) as usize)
                    }
                    _ => after(pc + insn.slots()),
                };
                let new = transfer(index == 0, &insn, out);
                if new != live[pc] {
                    live[pc] = new;
                    changed = true;
                }
            }
        }
    }
    live
}
