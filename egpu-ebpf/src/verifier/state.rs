//! The abstract state of one path: registers, and the stack slots of every frame.

use super::scalar::Scalar;
use crate::Program;

/// Where a pointer points.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Region {
    /// The context (`r1` at entry).
    Context,
    /// The stack frame at this call depth (0 is the main function's).
    Stack(u8),
    /// A value of this map, found by a lookup and checked for null.
    MapValue(u32),
}

/// What a register or a spilled stack slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Value {
    /// Never written: reading it is an error.
    Uninit,
    /// A number.
    Scalar(Scalar),
    /// A pointer to `region` + `off`.
    Pointer { region: Region, off: Scalar },
    /// A map reference (`lddw rX, map[n]`): only helpers take it.
    MapRef(u32),
    /// A function reference (`lddw rX, func f`), by index in [`Program::functions`]: only
    /// `bpf_loop` takes it.
    FuncRef(u32),
    /// A lookup's result: a value of `map`, or null. Copies share `id`, so one null check
    /// settles them all.
    MaybeNull { map: u32, id: u32 },
}

impl Value {
    pub(crate) fn is_pointer(self) -> bool {
        matches!(
            self,
            Value::Pointer { .. } | Value::MapRef(_) | Value::FuncRef(_) | Value::MaybeNull { .. }
        )
    }

    fn points_into_frame(self, depth: u8) -> bool {
        matches!(self, Value::Pointer { region: Region::Stack(d), .. } if d >= depth)
    }
}

/// One 8-byte slot of a stack frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    /// A register stored whole, by an aligned 8-byte store.
    Spill(Value),
    /// Bytes stored piecewise: bit `i` of `init` is set when byte `i` holds data, of `frag`
    /// when it holds a piece of an overwritten pointer (which must never be read).
    Bytes { init: u8, frag: u8 },
}

impl Slot {
    pub(crate) const EMPTY: Slot = Slot::Bytes { init: 0, frag: 0 };

    fn is_spill(&self) -> bool {
        matches!(self, Slot::Spill(_))
    }
}

/// Slots in a frame.
pub(crate) const SLOTS: usize = Program::STACK_SIZE / 8;

/// A call frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Frame {
    /// Index of the function in [`Program::functions`].
    pub(crate) function: usize,
    /// Where the caller resumes (unused for the main function).
    pub(crate) return_pc: usize,
    /// The caller's `r6`–`r9`, restored on return.
    pub(crate) saved: [Value; 4],
    pub(crate) slots: [Slot; SLOTS],
    /// For a `bpf_loop` callback: the loop it runs for (an index into the explorer's loops),
    /// whose call it returns to.
    pub(crate) loop_entry: Option<u32>,
}

/// Everything known at one point of one path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct State {
    pub(crate) regs: [Value; 11],
    pub(crate) frames: Vec<Frame>,
    /// `bpf_loop` callback rounds this path went through (the callback returned and was called
    /// again): a path that comes back to a state it is still exploring after such a round is
    /// bounded by the helper, not stuck. Not part of what the state stands for: comparisons,
    /// joins and fingerprints ignore it.
    pub(crate) rounds: u32,
}

impl State {
    pub(crate) fn depth(&self) -> u8 {
        (self.frames.len() - 1) as u8
    }

    /// Calls `f` on every value of the state, registers, then each frame's saved registers and
    /// spilled slots, for updates that follow a value wherever it was copied. (Loops rather
    /// than an iterator chain, which a user's debug build leaves unoptimised.)
    pub(crate) fn each_value_mut(&mut self, mut f: impl FnMut(&mut Value)) {
        let mut r = 0;
        while r < self.regs.len() {
            f(&mut self.regs[r]);
            r += 1;
        }
        let mut d = 0;
        while d < self.frames.len() {
            let frame = &mut self.frames[d];
            let mut i = 0;
            while i < frame.saved.len() {
                f(&mut frame.saved[i]);
                i += 1;
            }
            let mut i = 0;
            while i < SLOTS {
                if let Slot::Spill(v) = &mut frame.slots[i] {
                    f(v);
                }
                i += 1;
            }
            d += 1;
        }
    }

    /// Every value of the state, in the order of [`State::each_value_mut`].
    pub(crate) fn values(&self) -> impl Iterator<Item = &Value> {
        self.regs.iter().chain(self.frames.iter().flat_map(|f| {
            f.saved.iter().chain(f.slots.iter().filter_map(|s| match s {
                Slot::Spill(v) => Some(v),
                Slot::Bytes { .. } => None,
            }))
        }))
    }

    /// Whether a frame below the top holds a pointer into the top frame (which is about to
    /// return, so the pointer would dangle).
    pub(crate) fn leaks_top_frame(&self) -> bool {
        let depth = self.depth();
        self.frames[..self.frames.len() - 1].iter().any(|f| {
            f.saved.iter().any(|v| v.points_into_frame(depth))
                || f.slots.iter().any(|s| matches!(s, Slot::Spill(v) if v.points_into_frame(depth)))
        })
    }
}

/// Whether `a` and `b` hold the same constant wherever either holds a constant number (in the
/// registers of every frame and in spilled slots). States that disagree on a constant, such as
/// a loop counter in two iterations, are never joined: the join would forget what bounds the
/// loop.
pub(crate) fn constants_agree(a: &State, b: &State) -> bool {
    // Values pair up in the order of `each_value_mut`: registers, then each frame's saved registers
    // and spilled slots. When the two spill the same slots (the common case) that is slot by
    // slot; otherwise the spilled values pair up in order, as they come.
    let same_shape = a.frames.len() == b.frames.len()
        && a.frames.iter().zip(&b.frames).all(|(fa, fb)| {
            fa.slots.iter().zip(&fb.slots).all(|(x, y)| x.is_spill() == y.is_spill())
        });
    if !same_shape {
        let (mut va, mut vb) = (a.values(), b.values());
        return loop {
            match (va.next(), vb.next()) {
                (None, None) => break true,
                (Some(x), Some(y)) if constant_agrees(x, y) => {}
                _ => break false,
            }
        };
    }
    if !a.regs.iter().zip(&b.regs).all(|(x, y)| constant_agrees(x, y)) {
        return false;
    }
    for (fa, fb) in a.frames.iter().zip(&b.frames) {
        if !fa.saved.iter().zip(&fb.saved).all(|(x, y)| constant_agrees(x, y)) {
            return false;
        }
        for (x, y) in fa.slots.iter().zip(&fb.slots) {
            if let (Slot::Spill(x), Slot::Spill(y)) = (x, y)
                && !constant_agrees(x, y)
            {
                return false;
            }
        }
    }
    true
}

/// A hash of the constants of `state`, in the order [`constants_agree`] pairs values: states
/// that agree on their constants have the same key, so a different key settles that they do
/// not, without the comparison.
pub(crate) fn constants_key(state: &State) -> u64 {
    use std::hash::Hasher;
    let mut h = FastHasher(0);
    let mut add = |v: &Value| match v {
        Value::Scalar(s) => match s.as_constant() {
            Some(c) => {
                h.write_u64(1);
                h.write_u64(c);
            }
            None => h.write_u64(0),
        },
        _ => h.write_u64(0),
    };
    let mut r = 0;
    while r < state.regs.len() {
        add(&state.regs[r]);
        r += 1;
    }
    let mut f = 0;
    while f < state.frames.len() {
        let frame = &state.frames[f];
        let mut i = 0;
        while i < frame.saved.len() {
            add(&frame.saved[i]);
            i += 1;
        }
        let mut i = 0;
        while i < SLOTS {
            if let Slot::Spill(v) = &frame.slots[i] {
                add(v);
            }
            i += 1;
        }
        f += 1;
    }
    h.finish()
}

/// Whether two values hold the same constant, or neither holds a constant number.
fn constant_agrees(x: &Value, y: &Value) -> bool {
    let constant = |v: &Value| match v {
        Value::Scalar(s) => s.as_constant(),
        _ => None,
    };
    constant(x) == constant(y)
}

/// Pairs of lookup ids found to correspond while comparing two states.
#[derive(Default)]
pub(crate) struct IdMap(Vec<(u32, u32)>);

impl IdMap {
    fn pair(&mut self, a: u32, b: u32) -> bool {
        for &(x, y) in &self.0 {
            if x == a || y == b {
                return x == a && y == b;
            }
        }
        self.0.push((a, b));
        true
    }
}

/// Whether every concrete state `cur` stands for is one `old` stands for, so that a path from
/// `cur` does nothing a path from `old` did not. A register or byte `old` never initialised was
/// never read on any path from it, so anything in `cur` fits there.
pub(crate) fn within(cur: &State, old: &State) -> bool {
    // Index loops rather than iterator chains: a user's debug build compiles this crate
    // unoptimised, and this runs for every kept state at every join point.
    if cur.frames.len() != old.frames.len() {
        return false;
    }
    let mut ids = IdMap::default();
    let mut r = 0;
    while r < cur.regs.len() {
        if !value_within(&cur.regs[r], &old.regs[r], &mut ids) {
            return false;
        }
        r += 1;
    }
    let mut f = 0;
    while f < cur.frames.len() {
        let (c, o) = (&cur.frames[f], &old.frames[f]);
        if c.function != o.function || c.return_pc != o.return_pc || c.loop_entry != o.loop_entry {
            return false;
        }
        let mut i = 0;
        while i < c.saved.len() {
            if !value_within(&c.saved[i], &o.saved[i], &mut ids) {
                return false;
            }
            i += 1;
        }
        let mut i = 0;
        while i < SLOTS {
            if !slot_within(&c.slots[i], &o.slots[i], &mut ids) {
                return false;
            }
            i += 1;
        }
        f += 1;
    }
    true
}

/// The same state, up to the numbering of lookups.
pub(crate) fn same(a: &State, b: &State) -> bool {
    within(a, b) && within(b, a)
}

/// A hash of the state that ignores the numbering of lookups, so [`same`] states have the same
/// fingerprint and most different ones do not.
pub(crate) fn fingerprint(state: &State) -> u64 {
    // Written out rather than derived: a user's debug build compiles this crate unoptimised,
    // and this runs at every join point.
    use std::hash::Hasher;
    fn value(v: &Value, h: &mut FastHasher) {
        let scalar = |s: &Scalar, h: &mut FastHasher| {
            let words = s.words();
            let mut i = 0;
            while i < words.len() {
                h.write_u64(words[i]);
                i += 1;
            }
        };
        match v {
            Value::Uninit => h.write_u64(0),
            Value::Scalar(s) => {
                h.write_u64(1);
                scalar(s, h);
            }
            Value::Pointer { region, off } => {
                h.write_u64(match region {
                    Region::Context => 2,
                    Region::Stack(d) => 3 | u64::from(*d) << 8,
                    Region::MapValue(m) => 4 | u64::from(*m) << 8,
                });
                scalar(off, h);
            }
            Value::MapRef(m) => h.write_u64(5 | u64::from(*m) << 8),
            Value::FuncRef(f) => h.write_u64(8 | u64::from(*f) << 8),
            Value::MaybeNull { map, .. } => h.write_u64(6 | u64::from(*map) << 8),
        }
    }
    let mut h = FastHasher(0);
    let mut r = 0;
    while r < state.regs.len() {
        value(&state.regs[r], &mut h);
        r += 1;
    }
    let mut f = 0;
    while f < state.frames.len() {
        let frame = &state.frames[f];
        h.write_u64(frame.function as u64);
        h.write_u64(frame.return_pc as u64);
        h.write_u64(frame.loop_entry.map_or(0, |e| u64::from(e) + 1));
        let mut i = 0;
        while i < frame.saved.len() {
            value(&frame.saved[i], &mut h);
            i += 1;
        }
        let mut i = 0;
        while i < SLOTS {
            match &frame.slots[i] {
                Slot::Spill(v) => value(v, &mut h),
                Slot::Bytes { init, frag } => {
                    h.write_u64(7 | u64::from(*init) << 8 | u64::from(*frag) << 16)
                }
            }
            i += 1;
        }
        f += 1;
    }
    h.finish()
}

/// The numbers a state pins to a constant (in registers and spilled slots, of every frame):
/// a state [`within`] it holds the same constant in each of these places, so checking them
/// first turns most states away after a few reads.
pub(crate) struct Pins(Vec<(u8, u8, Scalar)>);

impl Pins {
    /// Where `state` holds a constant number: (frame, register or `11 +` slot, the number).
    pub(crate) fn of(state: &State) -> Pins {
        let mut pins = Vec::new();
        for (r, v) in state.regs.iter().enumerate() {
            if let Value::Scalar(s) = v
                && s.as_constant().is_some()
            {
                pins.push((0, r as u8, *s));
            }
        }
        for (f, frame) in state.frames.iter().enumerate() {
            for (i, slot) in frame.slots.iter().enumerate() {
                if let Slot::Spill(Value::Scalar(s)) = slot
                    && s.as_constant().is_some()
                {
                    pins.push((f as u8, 11 + i as u8, *s));
                }
            }
        }
        Pins(pins)
    }

    /// Whether `cur` may be within the state the pins were taken of: `false` only when
    /// [`within`] is (a number within a constant is that constant; anything else is not
    /// within a number).
    pub(crate) fn admit(&self, cur: &State) -> bool {
        let mut p = 0;
        while p < self.0.len() {
            let (f, at, old) = self.0[p];
            let value = if at < 11 {
                Some(&cur.regs[usize::from(at)])
            } else {
                match cur.frames.get(usize::from(f)) {
                    Some(frame) => match &frame.slots[usize::from(at - 11)] {
                        Slot::Spill(v) => Some(v),
                        Slot::Bytes { .. } => None,
                    },
                    None => None,
                }
            };
            match value {
                Some(Value::Scalar(s)) if s.within(old) => {}
                _ => return false,
            }
            p += 1;
        }
        true
    }
}

fn value_within(cur: &Value, old: &Value, ids: &mut IdMap) -> bool {
    match (*cur, *old) {
        (_, Value::Uninit) => true,
        (Value::Scalar(c), Value::Scalar(o)) => c.within(o),
        (Value::Pointer { region: rc, off: oc }, Value::Pointer { region: ro, off: oo }) => {
            rc == ro && oc.within(oo)
        }
        (Value::MapRef(a), Value::MapRef(b)) => a == b,
        (Value::FuncRef(a), Value::FuncRef(b)) => a == b,
        (Value::MaybeNull { map: a, id: x }, Value::MaybeNull { map: b, id: y }) => {
            a == b && ids.pair(x, y)
        }
        _ => false,
    }
}

fn slot_within(cur: &Slot, old: &Slot, ids: &mut IdMap) -> bool {
    match (cur, old) {
        (_, Slot::Bytes { init: 0, .. }) => true,
        (Slot::Spill(c), Slot::Spill(o)) => value_within(c, o, ids),
        // Data bytes read as unknown numbers, which any spilled number is within.
        (Slot::Spill(c), Slot::Bytes { .. }) => matches!(c, Value::Scalar(_)),
        (Slot::Bytes { init: ci, .. }, Slot::Bytes { init: oi, .. }) => ci & oi == *oi,
        (Slot::Bytes { .. }, Slot::Spill(_)) => false,
    }
}

/// A multiply-rotate hash (as in rustc's FxHasher): fingerprints are compared, never exposed, so
/// speed matters more than resistance to crafted collisions (which only cost a full comparison).
struct FastHasher(u64);

impl std::hash::Hasher for FastHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }

    fn write_u8(&mut self, b: u8) {
        self.write_u64(u64::from(b));
    }

    fn write_u32(&mut self, w: u32) {
        self.write_u64(u64::from(w));
    }

    fn write_i64(&mut self, w: i64) {
        self.write_u64(w as u64);
    }

    fn write_usize(&mut self, w: usize) {
        self.write_u64(w as u64);
    }
}

/// Makes `out` a state holding itself and `b` (by [`within`]), when the two are in the same
/// calls (else returns `false`, leaving `out` partly joined): numbers and offsets become
/// intervals holding both, and whatever the two disagree on otherwise becomes unreadable (a
/// register uninitialised, a stack byte unwritten), which a path from the result may then not
/// read.
pub(crate) fn join_into(out: &mut State, b: &State) -> bool {
    if out.frames.len() != b.frames.len() {
        return false;
    }
    for (o, v) in out.regs.iter_mut().zip(&b.regs) {
        *o = join_value(*o, *v);
    }
    for (fo, fb) in out.frames.iter_mut().zip(&b.frames) {
        if (fo.function, fo.return_pc, fo.loop_entry) != (fb.function, fb.return_pc, fb.loop_entry)
        {
            return false;
        }
        for (o, v) in fo.saved.iter_mut().zip(&fb.saved) {
            *o = join_value(*o, *v);
        }
        for (o, s) in fo.slots.iter_mut().zip(&fb.slots) {
            *o = match (*o, *s) {
                (Slot::Spill(x), Slot::Spill(y)) if join_value(x, y) != Value::Uninit => {
                    Slot::Spill(join_value(x, y))
                }
                (x, y) => {
                    let bytes = |s: Slot| match s {
                        Slot::Spill(Value::Scalar(_)) => (0xff, 0),
                        Slot::Spill(_) => (0, 0xff),
                        Slot::Bytes { init, frag } => (init, frag),
                    };
                    let ((ia, fa), (ib, fb)) = (bytes(x), bytes(y));
                    Slot::Bytes { init: ia & ib, frag: (fa | fb) & !(ia & ib) }
                }
            };
        }
    }
    true
}

/// Widens the numbers of `out` that differ from `before` (two states in the same calls, `out`
/// a join of `before` with another): to their known bits, or to any number when `forget`. The
/// caller's state at a `bpf_loop` call grows this way round after round, so it settles within a
/// few rounds.
pub(crate) fn widen_changed(out: &mut State, before: &State, forget: bool) {
    let widen = |v: &mut Value, b: &Value| {
        if *v != *b
            && let Value::Scalar(s) = v
        {
            *s = if forget { Scalar::UNKNOWN } else { s.widened() };
        }
    };
    for (v, b) in out.regs.iter_mut().zip(&before.regs) {
        widen(v, b);
    }
    for (fo, fb) in out.frames.iter_mut().zip(&before.frames) {
        for (v, b) in fo.saved.iter_mut().zip(&fb.saved) {
            widen(v, b);
        }
        for (o, b) in fo.slots.iter_mut().zip(&fb.slots) {
            match (o, b) {
                (Slot::Spill(v), Slot::Spill(b)) => widen(v, b),
                (Slot::Spill(v), Slot::Bytes { .. }) => widen(v, &Value::Uninit),
                _ => {}
            }
        }
    }
}

fn join_value(a: Value, b: Value) -> Value {
    match (a, b) {
        (Value::Scalar(x), Value::Scalar(y)) => Value::Scalar(x.union(y)),
        (Value::Pointer { region: r, off: x }, Value::Pointer { region: s, off: y }) if r == s => {
            Value::Pointer { region: r, off: x.union(y) }
        }
        (x, y) if x == y => x,
        _ => Value::Uninit,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(regs: [Value; 11], spills: &[(usize, Value)]) -> State {
        let mut frame = Frame {
            function: 0,
            return_pc: 0,
            saved: [Value::Uninit; 4],
            slots: [Slot::EMPTY; SLOTS],
            loop_entry: None,
        };
        for &(i, v) in spills {
            frame.slots[i] = Slot::Spill(v);
        }
        State { regs, frames: vec![frame], rounds: 0 }
    }

    /// The shortcuts only ever agree with the full comparisons they stand before.
    #[test]
    fn pins_and_constant_keys_agree_with_the_comparisons() {
        let c = |v| Value::Scalar(Scalar::constant(v));
        let any = Value::Scalar(Scalar::below(100));
        let mut regs = [Value::Uninit; 11];
        regs[6] = c(3);
        let mut other = regs;
        other[6] = c(4);
        let mut wide = regs;
        wide[6] = any;
        let states = [
            state(regs, &[]),
            state(other, &[]),
            state(wide, &[]),
            state(regs, &[(5, c(7))]),
            state(regs, &[(5, c(8))]),
            state(regs, &[(6, c(7))]),
            state(regs, &[(5, any)]),
        ];
        let (mut admitted, mut refused) = (0, 0);
        for a in &states {
            for b in &states {
                let pins = Pins::of(b);
                if pins.admit(a) {
                    admitted += 1;
                } else {
                    refused += 1;
                    assert!(!within(a, b), "pins refuse only what `within` refuses");
                }
                if constants_agree(a, b) {
                    assert_eq!(constants_key(a), constants_key(b));
                }
            }
            assert!(Pins::of(a).admit(a) && within(a, a));
        }
        assert!(admitted > 0 && refused > 0, "both outcomes occur: {admitted} {refused}");
        // A different constant in the same place is turned away before the full comparison.
        assert!(!Pins::of(&states[0]).admit(&states[1]));
        assert!(!Pins::of(&states[3]).admit(&states[4]));
        // Agreeing constants, spilled at different slots, pair up in order.
        assert!(constants_agree(&states[3], &states[5]));
        assert_ne!(constants_key(&states[0]), constants_key(&states[1]));
    }
}
