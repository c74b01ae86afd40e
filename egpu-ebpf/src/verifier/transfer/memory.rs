//! Loads, stores and atomics: the region an address reaches, its bounds, permissions and
//! alignment, and the stack bytes read and written.

use crate::instruction::{AluOp, Width};
use crate::verifier::Violation;
use crate::verifier::error::{Fail, fail};
use crate::verifier::explore::Explorer;
use crate::verifier::facts::{Access, AccessRegion};
use crate::verifier::scalar::Scalar;
use crate::verifier::state::{Frame, Region, Slot, State, Value};
use crate::{Program, Reg};

impl Explorer<'_> {
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
        let attach = self.program.attach_point();
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
    pub(super) fn bounds(
        &mut self,
        state: &State,
        region: Region,
        start: Scalar,
        len: u64,
    ) -> Result<(), Fail> {
        let attach = self.program.attach_point();
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

    pub(super) fn load(
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

    pub(super) fn store(
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

    pub(super) fn atomic(
        &mut self,
        state: &mut State,
        base: Reg,
        off: i16,
        size: u32,
    ) -> Result<(), Fail> {
        let (region, start) = self.target(state, base, off, size, true, true)?;
        if let Region::Stack(d) = region {
            let frame = &mut state.frames[usize::from(d)];
            read_stack(frame, start, u64::from(size), false)?;
            write_stack(frame, start, size, Value::Scalar(Scalar::loaded(size, false)))?;
        }
        Ok(())
    }
}

/// Reads `size` bytes of a stack frame at `start` (an offset from `r10`).
pub(super) fn read_stack(
    frame: &Frame,
    start: Scalar,
    size: u64,
    signed: bool,
) -> Result<Value, Fail> {
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
