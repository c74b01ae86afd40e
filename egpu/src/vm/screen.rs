//! The memory screen: which programs the JIT may run before the verifier exists.
//!
//! rbpf's JIT checks no memory access, so it only runs programs whose every load, store and
//! atomic provably stays inside the current stack frame or the context. The screen proves that by
//! a small abstract interpretation over each function, joined over every path. It tracks, for
//! each register, an interval of values and whether it is a scalar, `r10 + offset` (a pointer into
//! the current frame) or the entry value of `r1 + offset` (a pointer into the context), through a
//! few operations whose intervals are easy to get right: moves, 64-bit addition and subtraction,
//! masks, shifts by constants and zero-extending loads. Anything else makes a register unknown,
//! and any access through an unknown register, or outside its region, keeps the program on the
//! interpreter, which checks every access. Registers spilled to 8-byte stack slots are tracked
//! through the spill and the reload (every write into the frame goes through a tracked pointer, so
//! the screen sees each one). Loops widen to unknown after a few rounds. The verifier will replace
//! this screen with its full analysis.

use egpu_ebpf::{AluOp, AtomicOp, Instruction, Operand, Program, Reg, Size, Width};

/// What a register is known to hold: a kind and an inclusive interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Val {
    /// A number in `lo..=hi` (signed).
    Scalar(i64, i64),
    /// `r10 + offset` of the current frame, for an offset in `lo..=hi`.
    Frame(i64, i64),
    /// The context pointer + an offset in `lo..=hi`.
    Ctx(i64, i64),
    /// Anything.
    Unknown,
}

/// Registers, then the 64 eight-byte slots of the frame (`r10-8` is slot 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct State {
    regs: [Val; 11],
    slots: [Val; SLOTS],
}

const SLOTS: usize = Program::STACK_SIZE / 8;

/// Visits of one instruction after which changing intervals widen to unknown.
const WIDEN_AFTER: u32 = 16;

/// The screen's verdict on a program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Screen {
    /// Every access stays in the frame or in the first `ctx_len` bytes of the context.
    StackAndContext {
        /// Bytes of context the program may touch.
        ctx_len: usize,
    },
    /// An access the screen cannot prove safe.
    Unproven {
        /// The instruction.
        pc: usize,
        /// Why.
        reason: String,
    },
}

/// Screens `program`, whose context has `ctx_size` bytes.
pub(crate) fn screen(program: &Program, ctx_size: usize) -> Screen {
    let mut ctx_len = 0usize;
    for (i, f) in program.functions().iter().enumerate() {
        let decoded: Vec<_> =
            program.decoded().iter().filter(|d| (f.start..f.end).contains(&d.pc)).collect();
        let index_of = |pc: usize| decoded.binary_search_by_key(&pc, |d| d.pc).ok();
        let mut entry = State { regs: [Val::Unknown; 11], slots: [Val::Unknown; SLOTS] };
        entry.regs[10] = Val::Frame(0, 0);
        if i == 0 {
            entry.regs[1] = Val::Ctx(0, 0);
        }
        let mut states: Vec<Option<State>> = vec![None; decoded.len()];
        let mut visits = vec![0u32; decoded.len()];
        states[0] = Some(entry);
        let mut work = vec![0usize];
        while let Some(k) = work.pop() {
            let Some(mut s) = states[k] else { continue };
            let d = decoded[k];
            if let Some((base, off, size)) = access_of(&d.insn) {
                match check_access(s.regs[usize::from(base.index())], off, size, ctx_size) {
                    Ok(end) => ctx_len = ctx_len.max(end),
                    Err(why) => {
                        let reason = match why {
                            Some(why) => why,
                            None => format!(
                                "access through {base}, which is not a known stack or context \
                                 pointer"
                            ),
                        };
                        return Screen::Unproven { pc: d.pc, reason };
                    }
                }
            }
            step(&d.insn, &mut s);
            let mut flow_to = |pc: usize| {
                let Some(j) = index_of(pc) else { return };
                let merged = match states[j] {
                    None => s,
                    Some(old) => {
                        visits[j] += 1;
                        join(&old, &s, visits[j] > WIDEN_AFTER)
                    }
                };
                if states[j] != Some(merged) {
                    states[j] = Some(merged);
                    work.push(j);
                }
            };
            if !d.insn.ends_block() {
                flow_to(d.pc + d.insn.slots());
            }
            if let Some(t) = d.insn.jump_target(d.pc) {
                flow_to(t as usize);
            }
        }
    }
    Screen::StackAndContext { ctx_len }
}

/// `Ok(end of the context bytes touched)` when the access is inside its region; else the reason,
/// or `None` when the base register is not a known pointer.
fn check_access(base: Val, off: i16, size: i64, ctx_size: usize) -> Result<usize, Option<String>> {
    let span = |lo: i64, hi: i64| (lo + i64::from(off), hi + i64::from(off) + size);
    match base {
        Val::Frame(lo, hi) => {
            let (start, end) = span(lo, hi);
            if start >= -(Program::STACK_SIZE as i64) && end <= 0 {
                Ok(0)
            } else {
                Err(Some(format!(
                    "{size}-byte access at r10{start:+}..r10{end:+} may leave the 512-byte frame"
                )))
            }
        }
        Val::Ctx(lo, hi) => {
            let (start, end) = span(lo, hi);
            if start >= 0 && end <= ctx_size as i64 {
                Ok(end as usize)
            } else {
                Err(Some(format!(
                    "{size}-byte access at context bytes {start}..{end} may leave the \
                     {ctx_size}-byte context"
                )))
            }
        }
        Val::Scalar(..) | Val::Unknown => Err(None),
    }
}

/// The base register, offset and size of a memory access.
fn access_of(insn: &Instruction) -> Option<(Reg, i16, i64)> {
    match *insn {
        Instruction::Load { size, base, off, .. }
        | Instruction::Store { size, base, off, .. }
        | Instruction::Atomic { size, base, off, .. } => Some((base, off, size.bytes().into())),
        _ => None,
    }
}

fn step(insn: &Instruction, s: &mut State) {
    let get = |s: &State, r: Reg| s.regs[usize::from(r.index())];
    let value = |s: &State, src: Operand, width: Width| match (src, width) {
        (Operand::Reg(r), _) => get(s, r),
        (Operand::Imm(k), Width::W64) => Val::Scalar(k.into(), k.into()),
        (Operand::Imm(k), Width::W32) => Val::Scalar((k as u32).into(), (k as u32).into()),
    };
    // The frame bytes an access may touch, as offsets from r10, when its base is a frame pointer.
    let frame_span = |s: &State, base: Reg, off: i16, size: Size| match get(s, base) {
        Val::Frame(lo, hi) => {
            Some((lo + i64::from(off), hi + i64::from(off) + i64::from(size.bytes())))
        }
        _ => None,
    };
    // The slot an aligned 8-byte access at exactly one place uses.
    let exact_slot = |span: Option<(i64, i64)>, size: Size| match span {
        Some((start, end)) if size == Size::DW && end - start == 8 && start % 8 == 0 => {
            usize::try_from(-start / 8 - 1).ok().filter(|&i| i < SLOTS)
        }
        _ => None,
    };
    let result = match *insn {
        Instruction::Alu { op, width, dst, src } => {
            let (a, b) = (get(s, dst), value(s, src, width));
            Some((dst, alu(op, width, a, b)))
        }
        Instruction::Load { size, signed: false, dst, base, off } => {
            let spilled = exact_slot(frame_span(s, base, off, size), size).map(|i| s.slots[i]);
            let v = match size {
                Size::B => Val::Scalar(0, u8::MAX.into()),
                Size::H => Val::Scalar(0, u16::MAX.into()),
                Size::W => Val::Scalar(0, u32::MAX.into()),
                Size::DW => spilled.unwrap_or(Val::Unknown),
            };
            Some((dst, v))
        }
        Instruction::Store { size, base, off, src } => {
            let span = frame_span(s, base, off, size);
            match exact_slot(span, size) {
                Some(i) => s.slots[i] = value(s, src, Width::W64),
                None => forget(s, span),
            }
            None
        }
        Instruction::Atomic { op, fetch, size, base, off, src } => {
            forget(s, frame_span(s, base, off, size));
            match op {
                AtomicOp::CmpXchg => Some((Reg::R0, Val::Unknown)),
                _ if fetch => Some((src, Val::Unknown)),
                _ => None,
            }
        }
        Instruction::Call(_) => {
            for r in &mut s.regs[0..=5] {
                *r = Val::Unknown;
            }
            None
        }
        ref other => other.written_reg().map(|r| (r, Val::Unknown)),
    };
    if let Some((r, v)) = result {
        s.regs[usize::from(r.index())] = v;
    }
}

/// Forgets the slots that frame bytes `start..end` (offsets from r10) overlap.
fn forget(s: &mut State, span: Option<(i64, i64)>) {
    let Some((start, end)) = span else { return };
    for (i, slot) in s.slots.iter_mut().enumerate() {
        let slot_start = -8 * (i as i64 + 1);
        if start < slot_start + 8 && slot_start < end {
            *slot = Val::Unknown;
        }
    }
}

/// The interval of `a op b`, for the operations the screen follows.
fn alu(op: AluOp, width: Width, a: Val, b: Val) -> Val {
    use Val::{Ctx, Frame, Scalar, Unknown};
    let interval = |lo: Option<i64>, hi: Option<i64>, make: fn(i64, i64) -> Val| match (lo, hi) {
        (Some(lo), Some(hi)) => make(lo, hi),
        _ => Unknown,
    };
    match (width, op, a, b) {
        (Width::W64, AluOp::Mov, _, b) => b,
        (Width::W32, AluOp::Mov, _, Scalar(lo, hi)) if lo >= 0 && hi <= u32::MAX.into() => b,
        (_, AluOp::Add, Scalar(al, ah), Scalar(bl, bh)) if width == Width::W64 => {
            interval(al.checked_add(bl), ah.checked_add(bh), Scalar)
        }
        (Width::W64, AluOp::Add, Frame(pl, ph), Scalar(sl, sh))
        | (Width::W64, AluOp::Add, Scalar(sl, sh), Frame(pl, ph)) => {
            interval(pl.checked_add(sl), ph.checked_add(sh), Frame)
        }
        (Width::W64, AluOp::Add, Ctx(pl, ph), Scalar(sl, sh))
        | (Width::W64, AluOp::Add, Scalar(sl, sh), Ctx(pl, ph)) => {
            interval(pl.checked_add(sl), ph.checked_add(sh), Ctx)
        }
        (Width::W64, AluOp::Sub, Scalar(al, ah), Scalar(bl, bh)) => {
            interval(al.checked_sub(bh), ah.checked_sub(bl), Scalar)
        }
        (Width::W64, AluOp::Sub, Frame(pl, ph), Scalar(sl, sh)) => {
            interval(pl.checked_sub(sh), ph.checked_sub(sl), Frame)
        }
        (Width::W64, AluOp::Sub, Ctx(pl, ph), Scalar(sl, sh)) => {
            interval(pl.checked_sub(sh), ph.checked_sub(sl), Ctx)
        }
        // x & m lies in 0..=m for any x when m >= 0 (its bits are a subset of m's).
        (_, AluOp::And, Scalar(..) | Unknown, Scalar(ml, mh)) if ml >= 0 => match (width, a) {
            (Width::W64, Scalar(al, ah)) if al == ah && ml == mh => Scalar(al & ml, al & ml),
            (Width::W32, Scalar(al, ah)) if al == ah && ml == mh => {
                let v = i64::from((al & ml) as u32);
                Scalar(v, v)
            }
            (Width::W64, _) => Scalar(0, mh),
            (Width::W32, _) => Scalar(0, mh.min(u32::MAX.into())),
        },
        (Width::W64, AluOp::Lsh, Scalar(lo, hi), Scalar(k, k2))
            if k == k2 && (0..64).contains(&k) =>
        {
            if lo >= 0 && hi.leading_zeros() as i64 > k {
                Scalar(lo << k, hi << k)
            } else {
                Unknown
            }
        }
        (Width::W64, AluOp::Rsh, Scalar(lo, hi), Scalar(k, k2))
            if k == k2 && (0..64).contains(&k) =>
        {
            if lo >= 0 {
                Scalar(lo >> k, hi >> k)
            } else if k > 0 {
                Scalar(0, (u64::MAX >> k) as i64)
            } else {
                a
            }
        }
        _ => Unknown,
    }
}

fn join(a: &State, b: &State, widen: bool) -> State {
    State {
        regs: std::array::from_fn(|i| join_val(a.regs[i], b.regs[i], widen)),
        slots: std::array::from_fn(|i| join_val(a.slots[i], b.slots[i], widen)),
    }
}

fn join_val(a: Val, b: Val, widen: bool) -> Val {
    let merged = match (a, b) {
        (x, y) if x == y => return x,
        (Val::Scalar(l1, h1), Val::Scalar(l2, h2)) => Val::Scalar(l1.min(l2), h1.max(h2)),
        (Val::Frame(l1, h1), Val::Frame(l2, h2)) => Val::Frame(l1.min(l2), h1.max(h2)),
        (Val::Ctx(l1, h1), Val::Ctx(l2, h2)) => Val::Ctx(l1.min(l2), h1.max(h2)),
        _ => Val::Unknown,
    };
    if widen { Val::Unknown } else { merged }
}
