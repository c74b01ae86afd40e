//! ALU operations on the abstract state: on numbers, and the few that may move a pointer.

use super::MAX_OFFSET;
use crate::Reg;
use crate::instruction::{AluOp, ByteOrder, Width};
use crate::verifier::Violation;
use crate::verifier::error::{Fail, fail};
use crate::verifier::explore::Explorer;
use crate::verifier::scalar::Scalar;
use crate::verifier::state::{Region, State, Value};

impl Explorer<'_> {
    /// A register that must hold a number, for operations only numbers allow.
    pub(super) fn number(&self, state: &State, reg: Reg, what: &str) -> Result<Scalar, Fail> {
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

    pub(super) fn alu(&self, op: AluOp, width: Width, a: Value, b: Value) -> Result<Value, Fail> {
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
}

pub(super) fn endian(x: Scalar, order: ByteOrder, bits: u8) -> Scalar {
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
