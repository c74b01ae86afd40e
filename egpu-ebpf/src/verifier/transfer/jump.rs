//! Conditional jumps: each side's state, with numbers narrowed to what the condition says and
//! lookups' results settled by their null check.

use crate::Reg;
use crate::instruction::{JmpCond, Operand, Width};
use crate::verifier::Violation;
use crate::verifier::error::{Fail, fail};
use crate::verifier::explore::Explorer;
use crate::verifier::scalar::Scalar;
use crate::verifier::state::{Region, State, Value};

/// What one side of a conditional jump changes in the state of the path.
pub(super) enum Edit {
    /// Nothing: the side learns nothing new.
    Keep,
    /// The compared numbers narrowed: `dst`, then `src` when it is a register.
    Narrow { dst: Reg, x: Scalar, src: Option<(Reg, Scalar)> },
    /// A lookup's result, and its copies, settled by a null check to this value.
    Settle { id: u32, value: Value },
}

impl Edit {
    /// Applies the change to `state`.
    pub(super) fn apply(self, state: &mut State) {
        match self {
            Edit::Keep => {}
            Edit::Narrow { dst, x, src } => {
                state.regs[usize::from(dst.index())] = Value::Scalar(x);
                if let Some((r, y)) = src {
                    state.regs[usize::from(r.index())] = Value::Scalar(y);
                }
            }
            Edit::Settle { id, value } => {
                state.each_value_mut(|slot| {
                    if matches!(*slot, Value::MaybeNull { id: i, .. } if i == id) {
                        *slot = value;
                    }
                });
            }
        }
    }
}

impl Explorer<'_> {
    /// What each side of a conditional jump changes in the state (`None` for a side that cannot
    /// happen): the caller applies them, copying the state only when both sides happen.
    pub(super) fn branch(
        &mut self,
        state: &State,
        cond: JmpCond,
        width: Width,
        dst: Reg,
        src: Operand,
    ) -> Result<(Option<Edit>, Option<Edit>), Fail> {
        let a = self.read(state, dst)?;
        let b = self.operand(state, src)?;
        let zero = |v: Value| matches!(v, Value::Scalar(s) if s.as_constant() == Some(0));
        let eq_ne = matches!(cond, JmpCond::Eq | JmpCond::Ne) && width == Width::W64;
        match (a, b) {
            (Value::Scalar(x), Value::Scalar(y)) => {
                let side = |holds| {
                    Scalar::refine(x, y, cond, width, holds).map(|(x, y)| Edit::Narrow {
                        dst,
                        x,
                        src: match src {
                            Operand::Reg(r) => Some((r, y)),
                            Operand::Imm(_) => None,
                        },
                    })
                };
                Ok((side(true), side(false)))
            }
            (Value::MaybeNull { map, id }, z) if eq_ne && zero(z) => {
                let null = Edit::Settle { id, value: Value::Scalar(Scalar::constant(0)) };
                let value = Edit::Settle {
                    id,
                    value: Value::Pointer {
                        region: Region::MapValue(map),
                        off: Scalar::constant(0),
                    },
                };
                Ok(if cond == JmpCond::Eq {
                    (Some(null), Some(value))
                } else {
                    (Some(value), Some(null))
                })
            }
            // A checked pointer is never null.
            (Value::Pointer { .. }, z) if eq_ne && zero(z) => Ok(if cond == JmpCond::Eq {
                (None, Some(Edit::Keep))
            } else {
                (Some(Edit::Keep), None)
            }),
            (Value::Pointer { region: r, .. }, Value::Pointer { region: s, .. })
                if r == s && width == Width::W64 && !matches!(r, Region::MapValue(_)) =>
            {
                Ok((Some(Edit::Keep), Some(Edit::Keep)))
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
