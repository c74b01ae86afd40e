//! Conditional jumps: each side's state, with numbers narrowed to what the condition says and
//! lookups' results settled by their null check.

use crate::Reg;
use crate::instruction::{JmpCond, Operand, Width};
use crate::verifier::Violation;
use crate::verifier::error::{Fail, fail};
use crate::verifier::explore::Explorer;
use crate::verifier::scalar::Scalar;
use crate::verifier::state::{Region, State, Value};

impl Explorer<'_> {
    /// The states on each side of a conditional jump (`None` for a side that cannot happen).
    pub(super) fn branch(
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
}
