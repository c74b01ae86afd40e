//! `bpf_loop`: a helper that calls a function of the program back, up to a number of times.
//!
//! The callback is verified as a function called from the `bpf_loop` call, with `r1` an index
//! below the count and `r2` the caller's context pointer, not once per iteration: its body is
//! followed a few times whatever the count, so a loop whose body branches costs what its body
//! costs. The callback may write the caller's stack through the context pointer, so what the
//! caller's frames hold at the call changes from one iteration to the next. The verifier keeps,
//! for each `bpf_loop` call it reaches, a *loop entry*: the caller's state at the call, grown by
//! each state the callback returns with that it does not already hold. A callback that returns
//! within the entry ends its path; one that returns outside it joins it (numbers that changed
//! become intervals, then known bits, then any number after [`FORGET_AFTER`] rounds) and the
//! callback is followed again from the grown entry, until it settles (at most [`MAX_ROUNDS`]
//! rounds). The path after the call starts from the settled entry, once every round is done.
//!
//! The loop ends because the helper ends it (after at most 2^23 calls), not because the verifier
//! saw it end: a path that comes back, through a callback round, to a state it is still
//! exploring is safe by the state it repeats rather than a loop that never ends.

use crate::Reg;
use crate::verifier::Violation;
use crate::verifier::error::{Fail, fail};
use crate::verifier::explore::{Explorer, MAX_PENDING, Next};
use crate::verifier::facts::{Access, AccessRegion, CallFacts};
use crate::verifier::scalar::Scalar;
use crate::verifier::state::{self, Frame, Region, SLOTS, Slot, State, Value};

/// Most calls `bpf_loop` makes (Linux's `BPF_MAX_LOOPS`); a larger count returns `-E2BIG`.
pub(crate) const MAX_LOOPS: u64 = 1 << 23;

/// Rounds of a callback after which the numbers that still change become any number.
const FORGET_AFTER: u32 = 3;

/// Most rounds of a callback before the verifier gives up on its settling.
const MAX_ROUNDS: u32 = 16;

/// The caller's state at one `bpf_loop` call, as the callback's rounds grow it.
pub(crate) struct LoopEntry {
    pub(crate) state: State,
    /// Slot of the call.
    pub(crate) pc: usize,
    /// The callback (index in the program's functions).
    pub(crate) callback: usize,
    /// Largest index the callback is called with, plus one.
    pub(crate) count: u64,
    /// Times the state grew.
    pub(crate) rounds: u32,
}

impl Explorer<'_> {
    /// `call bpf_loop` at `self.pc`: checks the arguments, opens a loop entry, queues the path
    /// after the call for when the callback settles, and follows the callback.
    pub(super) fn call_loop(&mut self, state: &mut State) -> Result<Next, Fail> {
        let pc = self.pc;
        let wrong = |this: &Self, reg: Reg, what: &str, v: Value| {
            fail::<Next>(
                Violation::HelperArg,
                format!("bpf_loop: argument {reg} must be {what}, but is {}", this.describe(v)),
            )
        };
        let n = match self.read(state, Reg::R1)? {
            Value::Scalar(s) => s,
            v => return wrong(self, Reg::R1, "the number of iterations", v),
        };
        let callback = match self.read(state, Reg::R2)? {
            Value::FuncRef(f) => f as usize,
            v => return wrong(self, Reg::R2, "a function (`lddw r2, func f`)", v),
        };
        let mut ctx = None;
        match self.read(state, Reg::R3)? {
            Value::Pointer { region: Region::Stack(d), off } => {
                ctx = Some(Access {
                    region: if d == state.depth() {
                        AccessRegion::OwnStack
                    } else {
                        AccessRegion::CallerStack
                    },
                    offset: off.as_constant().map(|o| o as i64),
                    aligned: off.aligned(8),
                });
            }
            Value::Scalar(s) if s.as_constant() == Some(0) => {}
            v => return wrong(self, Reg::R3, "a pointer to the stack, or 0", v),
        }
        match self.read(state, Reg::R4)? {
            Value::Scalar(s) if s.as_constant() == Some(0) => {}
            v => return wrong(self, Reg::R4, "the flags 0", v),
        }
        let cb_start = self.program.functions()[callback].start;
        match self.loop_callbacks[pc] {
            Some(f) if f != cb_start => {
                return fail(
                    Violation::HelperArg,
                    "bpf_loop: paths reaching this call pass different callbacks; pass one",
                );
            }
            _ => self.loop_callbacks[pc] = Some(cb_start),
        }
        let args = [None, None, ctx, None, None];
        self.record_call(CallFacts { map: None, args, max_size: None, min_size: None });
        // The low 32 bits count; more than MAX_LOOPS calls nothing.
        let count = if n.umax <= u64::from(u32::MAX) { n.umax } else { u64::from(u32::MAX) };
        let count = count.min(MAX_LOOPS);
        if self.work.len() >= MAX_PENDING {
            return fail(
                Violation::TooComplex,
                format!("more than {MAX_PENDING} branches wait to be explored"),
            );
        }
        if count == 0 {
            after_loop(state);
            return Ok(Next::Go(pc + 1));
        }
        let e = self.loops.len() as u32;
        self.loops.push(LoopEntry { state: state.clone(), pc, callback, count, rounds: 0 });
        // The path after the call waits under everything the callback's rounds push.
        self.loop_exits.push((self.work.len(), e));
        self.work
            .push((pc + 1, State { regs: [Value::Uninit; 11], frames: Vec::new(), rounds: 0 }));
        Ok(self.enter_callback(e, state))
    }

    /// Starts a round of loop `e`'s callback from its entry: `state` becomes the callback's.
    fn enter_callback(&mut self, e: u32, state: &mut State) -> Next {
        let entry = &self.loops[e as usize];
        let rounds = state.rounds;
        state.clone_from(&entry.state);
        state.rounds = rounds;
        let saved = [state.regs[6], state.regs[7], state.regs[8], state.regs[9]];
        let ctx = state.regs[3];
        state.frames.push(Frame {
            function: entry.callback,
            return_pc: entry.pc,
            saved,
            slots: [Slot::EMPTY; SLOTS],
            loop_entry: Some(e),
        });
        state.regs = [Value::Uninit; 11];
        state.regs[1] = Value::Scalar(Scalar::below(entry.count - 1));
        state.regs[2] = ctx;
        state.regs[10] =
            Value::Pointer { region: Region::Stack(state.depth()), off: Scalar::constant(0) };
        Next::Go(self.program.functions()[entry.callback].start)
    }

    /// The path after loop `e`'s call, once its callback has settled: the entry's state, with
    /// the helper's result.
    pub(crate) fn leave_loop(&self, e: u32) -> State {
        let mut state = self.loops[e as usize].state.clone();
        after_loop(&mut state);
        state
    }

    /// `exit` of a callback, whose frame is still on `state`: checks its result and joins what
    /// it leaves in the caller's frames into the loop's entry, following the callback again
    /// when that grew the entry.
    pub(super) fn callback_exit(&mut self, state: &mut State, e: u32) -> Result<Next, Fail> {
        match self.read(state, Reg::R0)? {
            Value::Scalar(s) if s.umax <= 1 => {}
            v => {
                return fail(
                    Violation::CallbackReturn,
                    format!(
                        "a bpf_loop callback returns 0 (go on) or 1 (stop), but r0 is {}",
                        self.describe(v)
                    ),
                );
            }
        }
        state.frames.pop();
        let entry = &mut self.loops[e as usize];
        // Back at the call: the caller's registers are the entry's (the helper keeps them).
        state.regs = entry.state.regs;
        if state::within(state, &entry.state) {
            return Ok(Next::End);
        }
        entry.rounds += 1;
        if entry.rounds > MAX_ROUNDS {
            return fail(
                Violation::TooComplex,
                format!(
                    "the callback of this bpf_loop leaves the caller's stack different after \
                     each of {MAX_ROUNDS} rounds"
                ),
            );
        }
        let before = entry.state.clone();
        if !state::join_into(&mut entry.state, state) {
            return fail(Violation::TooComplex, "the callback returns to different calls");
        }
        if entry.rounds >= 2 {
            state::widen_changed(&mut entry.state, &before, entry.rounds >= FORGET_AFTER);
        }
        self.pc = entry.pc;
        state.rounds += 1;
        Ok(self.enter_callback(e, state))
    }
}

/// The state after a `bpf_loop` call: a number in `r0` (the calls made, or a negative error),
/// `r1`–`r5` clobbered.
fn after_loop(state: &mut State) {
    for r in 1..=5 {
        state.regs[r] = Value::Uninit;
    }
    state.regs[0] = Value::Scalar(Scalar::UNKNOWN);
}
