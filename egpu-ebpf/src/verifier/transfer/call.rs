//! Helper calls (each argument checked against the kind the helper declares, the facts engines
//! need recorded) and returns from functions.

use super::MAX_OFFSET;
use super::memory::read_stack;
use crate::helpers::{ArgKind, MAX_DELAY_NS, RetKind, helper};
use crate::verifier::Violation;
use crate::verifier::error::{Fail, fail};
use crate::verifier::explore::{Explorer, Next};
use crate::verifier::facts::{Access, AccessRegion, CallFacts};
use crate::verifier::scalar::Scalar;
use crate::verifier::state::{Region, State, Value};
use crate::{MapKind, Reg};

impl Explorer<'_> {
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

    pub(super) fn call_helper(&mut self, state: &mut State, id: u32) -> Result<(), Fail> {
        let Some(h) = helper(id) else {
            return fail(Violation::UnknownHelper, format!("helper {id} does not exist"));
        };
        let mut map: Option<u32> = None;
        self.call = CallFacts { map: None, args: [None; 5], max_size: None, min_size: None };
        for (i, kind) in h.args.iter().map(|a| a.kind).enumerate() {
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
                ArgKind::Nanoseconds => match self.read(state, reg)? {
                    Value::Scalar(ns) if ns.umax <= MAX_DELAY_NS => {}
                    Value::Scalar(ns) => {
                        return fail(
                            Violation::UnboundedDelay,
                            format!(
                                "{}: the nanoseconds in {reg} are {ns}, which may be over the \
                                 most one call waits ({MAX_DELAY_NS}); bound them first \
                                 (a jump around the call, or one that caps them)",
                                h.name
                            ),
                        );
                    }
                    v => wrong("a number of nanoseconds", v)?,
                },
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
                ArgKind::Count | ArgKind::Func | ArgKind::StackOrNull => {
                    // Only bpf_loop takes these, and `call_loop` checks its calls.
                    return fail(
                        Violation::HelperArg,
                        format!("{}: calls back into the program; only bpf_loop does", h.name),
                    );
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
        self.record_call(facts);
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

    /// Joins what this path passes to the call at `self.pc` into what other paths passed.
    pub(super) fn record_call(&mut self, facts: CallFacts) {
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
    }

    pub(super) fn exit(&mut self, state: &mut State) -> Result<Next, Fail> {
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
        if let Some(e) = state.frames.last().and_then(|f| f.loop_entry) {
            return self.callback_exit(state, e);
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
}
