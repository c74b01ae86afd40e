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
    /// A lookup's result: a value of `map`, or null. Copies share `id`, so one null check
    /// settles them all.
    MaybeNull { map: u32, id: u32 },
}

impl Value {
    pub(crate) fn is_pointer(self) -> bool {
        matches!(self, Value::Pointer { .. } | Value::MapRef(_) | Value::MaybeNull { .. })
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
}

/// Everything known at one point of one path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct State {
    pub(crate) regs: [Value; 11],
    pub(crate) frames: Vec<Frame>,
}

impl State {
    pub(crate) fn depth(&self) -> u8 {
        (self.frames.len() - 1) as u8
    }

    /// Every value of the state, registers of all frames and spilled slots, for updates that
    /// follow a value wherever it was copied.
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut Value> {
        let State { regs, frames } = self;
        regs.iter_mut().chain(frames.iter_mut().flat_map(|f| {
            f.saved.iter_mut().chain(f.slots.iter_mut().filter_map(|s| match s {
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
    let values = |s: &State| -> Vec<Value> {
        let mut s = s.clone();
        s.values_mut().map(|v| *v).collect()
    };
    let (va, vb) = (values(a), values(b));
    va.len() == vb.len()
        && va.iter().zip(&vb).all(|(x, y)| {
            let constant = |v: &Value| match v {
                Value::Scalar(s) => s.as_constant(),
                _ => None,
            };
            match (constant(x), constant(y)) {
                (None, None) => true,
                (c, d) => c == d,
            }
        })
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
    let mut ids = IdMap::default();
    cur.frames.len() == old.frames.len()
        && cur.regs.iter().zip(&old.regs).all(|(c, o)| value_within(*c, *o, &mut ids))
        && cur.frames.iter().zip(&old.frames).all(|(c, o)| {
            c.function == o.function
                && c.return_pc == o.return_pc
                && c.saved.iter().zip(&o.saved).all(|(c, o)| value_within(*c, *o, &mut ids))
                && c.slots.iter().zip(&o.slots).all(|(c, o)| slot_within(*c, *o, &mut ids))
        })
}

/// The same state, up to the numbering of lookups.
pub(crate) fn same(a: &State, b: &State) -> bool {
    within(a, b) && within(b, a)
}

/// A hash of the state that ignores the numbering of lookups, so [`same`] states have the same
/// fingerprint and most different ones do not.
pub(crate) fn fingerprint(state: &State) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = FastHasher(0);
    let value = |v: &Value, h: &mut FastHasher| match v {
        Value::MaybeNull { map, .. } => (5u8, map).hash(h),
        other => other.hash(h),
    };
    for v in &state.regs {
        value(v, &mut h);
    }
    for f in &state.frames {
        (f.function, f.return_pc).hash(&mut h);
        for v in &f.saved {
            value(v, &mut h);
        }
        for s in &f.slots {
            match s {
                Slot::Spill(v) => value(v, &mut h),
                Slot::Bytes { init, frag } => (*init, *frag).hash(&mut h),
            }
        }
    }
    h.finish()
}

fn value_within(cur: Value, old: Value, ids: &mut IdMap) -> bool {
    match (cur, old) {
        (_, Value::Uninit) => true,
        (Value::Scalar(c), Value::Scalar(o)) => c.within(o),
        (Value::Pointer { region: rc, off: oc }, Value::Pointer { region: ro, off: oo }) => {
            rc == ro && oc.within(oo)
        }
        (Value::MapRef(a), Value::MapRef(b)) => a == b,
        (Value::MaybeNull { map: a, id: x }, Value::MaybeNull { map: b, id: y }) => {
            a == b && ids.pair(x, y)
        }
        _ => false,
    }
}

fn slot_within(cur: Slot, old: Slot, ids: &mut IdMap) -> bool {
    match (cur, old) {
        (_, Slot::Bytes { init: 0, .. }) => true,
        (Slot::Spill(c), Slot::Spill(o)) => value_within(c, o, ids),
        // Data bytes read as unknown numbers, which any spilled number is within.
        (Slot::Spill(c), Slot::Bytes { .. }) => matches!(c, Value::Scalar(_)),
        (Slot::Bytes { init: ci, .. }, Slot::Bytes { init: oi, .. }) => ci & oi == oi,
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

/// A state holding both (by [`within`]), when they are in the same calls: numbers and offsets
/// become intervals holding both, and whatever the two disagree on otherwise becomes unreadable
/// (a register uninitialised, a stack byte unwritten), which a path from the result may then not
/// read.
pub(crate) fn join(a: &State, b: &State) -> Option<State> {
    if a.frames.len() != b.frames.len() {
        return None;
    }
    let mut out = a.clone();
    for (o, v) in out.regs.iter_mut().zip(&b.regs) {
        *o = join_value(*o, *v);
    }
    for (fo, fb) in out.frames.iter_mut().zip(&b.frames) {
        if (fo.function, fo.return_pc) != (fb.function, fb.return_pc) {
            return None;
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
    Some(out)
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
