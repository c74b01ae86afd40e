//! The search: every path of the program followed depth first from a work list, with the states
//! seen at join points kept to cut paths that a verified state already holds, to find loops that
//! never end, and to widen when too many differ.

use super::error::{Fail, VerifyError};
use super::facts::{Access, CallFacts};
use super::liveness::{liveness, precision, stack_liveness};
use super::scalar::Scalar;
use super::state::{self, Frame, Pins, Region, SLOTS, Slot, State, Value};
use super::transfer::LoopEntry;
use super::{INSN_BUDGET, JOIN_AFTER, Violation};
use crate::Program;
use crate::instruction::Instruction;

/// States kept at one instruction at most; beyond, new ones are explored without being kept.
/// At most 64: widening marks the kept states it joins with the bits of a `u64`.
const KEEP_MAX: usize = 64;
const _: () = assert!(KEEP_MAX <= 64);

/// Most branch sides waiting to be explored (Linux's limit on a jump sequence).
pub(super) const MAX_PENDING: usize = 8192;

/// A state kept at a join point.
struct Kept {
    state: State,
    fingerprint: u64,
    /// [`state::constants_key`] of the state.
    constants: u64,
    /// Its constants, checked before the whole state.
    pins: Pins,
    serial: usize,
    /// Every path from it has been followed to its end.
    complete: bool,
}

/// What an instruction leads to.
pub(super) enum Next {
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

/// The search over one program's paths, and what it learned on them so far.
pub(super) struct Explorer<'p> {
    pub(super) program: &'p Program,
    /// Decoded instruction at each slot (the second slot of `lddw` holds `None`).
    pub(super) insns: Vec<Option<Instruction>>,
    join_point: Vec<bool>,
    live: Vec<u16>,
    precise: Vec<u16>,
    live_slots: Vec<u64>,
    kept: Vec<Vec<Kept>>,
    /// Kept states still being explored: (slot, serial, work-list length when kept).
    open: Vec<(usize, usize, usize)>,
    serial: usize,
    pub(super) work: Vec<(usize, State)>,
    pub(super) processed: usize,
    pub(super) next_id: u32,
    pub(super) context_bytes: usize,
    pub(super) stack_bytes: Vec<u32>,
    /// The instruction being followed.
    pub(super) pc: usize,
    pub(super) accesses: Vec<Option<Access>>,
    pub(super) callx: Vec<Option<u32>>,
    pub(super) calls: Vec<Option<CallFacts>>,
    /// Per slot: whether a path reached it.
    pub(super) reached: Vec<bool>,
    /// Facts about the helper call being checked, on this path.
    pub(super) call: CallFacts,
    /// The `bpf_loop` calls reached, each with the caller's state as its callback grows it.
    pub(crate) loops: Vec<LoopEntry>,
    /// Loops whose path after the call waits on the work list: (its index there, the loop).
    pub(crate) loop_exits: Vec<(usize, u32)>,
    /// For each `bpf_loop` call: the first slot of the callback it is passed.
    pub(crate) loop_callbacks: Vec<Option<usize>>,
}

impl<'p> Explorer<'p> {
    pub(super) fn new(program: &'p Program) -> Explorer<'p> {
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
            reached: vec![false; len],
            call: CallFacts { map: None, args: [None; 5], max_size: None, min_size: None },
            loops: Vec::new(),
            loop_exits: Vec::new(),
            loop_callbacks: vec![None; len],
        }
    }

    pub(super) fn run(&mut self) -> Result<(), VerifyError> {
        let mut regs = [Value::Uninit; 11];
        regs[1] = Value::Pointer { region: Region::Context, off: Scalar::constant(0) };
        regs[10] = Value::Pointer { region: Region::Stack(0), off: Scalar::constant(0) };
        let entry = Frame {
            function: 0,
            return_pc: 0,
            saved: [Value::Uninit; 4],
            slots: [Slot::EMPTY; SLOTS],
            loop_entry: None,
        };
        self.work.push((0, State { regs, frames: vec![entry], rounds: 0 }));
        while let Some((mut pc, mut state)) = self.work.pop() {
            if let Some(&(at, e)) = self.loop_exits.last()
                && at == self.work.len()
            {
                // Every round of the loop's callback is done: its entry has settled.
                self.loop_exits.pop();
                state = self.leave_loop(e);
            }
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
                self.reached[pc] = true;
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
                // Kept states are in the order they were kept, so by serial.
                if let Ok(i) = self.kept[pc].binary_search_by_key(&serial, |k| k.serial) {
                    self.kept[pc][i].complete = true;
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
            // Bit `i` stands for the slot `8 * (i + 1)` bytes below the frame's top.
            let mut i = 0;
            while i < SLOTS {
                if slots & (1 << i) == 0 {
                    frame.slots[SLOTS - 1 - i] = Slot::EMPTY;
                }
                i += 1;
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
                if k.pins.admit(state) && state::within(state, &k.state) {
                    return Visit::Covered;
                }
                complete += 1;
            } else if k.fingerprint == fingerprint && state::same(state, &k.state) {
                // Back through a bpf_loop callback round, the helper bounds the repeats.
                return if state.rounds > k.state.rounds { Visit::Covered } else { Visit::Loops };
            }
        }
        let mut widened_here = false;
        if complete >= JOIN_AFTER {
            // Widen: hold every state verified here that agrees with this one on its constants
            // (a loop counter keeps its iterations apart), and this one, with numbers known only
            // by their known bits; the widened state replaces the states it holds.
            let key = state::constants_key(state);
            // Which kept states join (at most KEEP_MAX of them, so a bit each).
            let mut joins = 0u64;
            for (i, k) in kept.iter().enumerate() {
                if k.complete && k.constants == key && state::constants_agree(state, &k.state) {
                    joins |= 1 << i;
                }
            }
            let mut widened = Some(state.clone());
            for (i, k) in kept.iter().enumerate() {
                if joins & (1 << i) != 0
                    && let Some(acc) = &mut widened
                    && !state::join_into(acc, &k.state)
                {
                    widened = None;
                }
            }
            if let Some(mut w) = widened {
                widened_here = true;
                w.each_value_mut(|v| {
                    if let Value::Scalar(s) = v {
                        *s = s.widened();
                    }
                });
                let mut i = 0;
                self.kept[pc].retain(|_| {
                    i += 1;
                    joins & (1 << (i - 1)) == 0
                });
                *state = w;
            }
        }
        if self.kept[pc].len() < KEEP_MAX {
            self.serial += 1;
            self.open.push((pc, self.serial, self.work.len()));
            let fingerprint = if widened_here { state::fingerprint(state) } else { fingerprint };
            let constants = state::constants_key(state);
            self.kept[pc].push(Kept {
                state: state.clone(),
                fingerprint,
                constants,
                pins: Pins::of(state),
                serial: self.serial,
                complete: false,
            });
        }
        Visit::Go
    }

    /// Checks that no chain of local calls uses more than [`Program::STACK_SIZE`] bytes of stack.
    pub(super) fn check_stack_chains(&self) -> Result<(), VerifyError> {
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
